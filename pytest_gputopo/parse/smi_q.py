"""Read ``nvidia-smi -q`` (``--query``, also ``-a``): the text report, by its own rules.

nvidia-smi prints a ``==============NVSMI LOG==============`` banner, then ``Key : Value`` lines at
the left margin (``Timestamp``, ``Driver Version``, ``CUDA Version``, ``Attached GPUs``), then one
section per GPU headed ``GPU <bus id>`` (in NVML index order, as ``-q -x``'s ``<gpu>`` elements are).
Inside it, nesting is indentation, four spaces a level: a line with no ``:`` opens a section (``PCI``,
``GPU Link Info``), a ``Key : Value`` line is a fact of the section it is in (the key padded with spaces
to one column); lines indented under a fact are a section named by its key (``HW Slowdown``'s causes).
The facts read: ``Product Name``, ``GPU UUID``, ``PCI/Bus Id``,
``PCI/GPU Link Info/PCIe Generation/{Max,Current}`` (``Max`` is NVML's max link generation, the
link's; drivers 550+ also print the GPU's ``Device Max`` and the slot's ``Host Max``, not read),
``.../Link Width/{Max,Current}`` (``16x``),
``FB Memory Usage/Total`` (``81559 MiB``), ``MIG Mode/Current``, each ``MIG Devices/MIG Device``
(``Index``, ``GPU Instance ID``, ``Compute Instance ID``, ``FB Memory Usage/Total``: the text form of
``-q -x``'s ``<mig_device>``, nvidia-ml-py's ``nvidia_smi.py`` sample), ``Compute Mode`` and
``Fabric/{State,Status,CliqueId,ClusterUUID}`` (``-q -x``'s ``<fabric>``, recorded alike), and the
GPU's health at rest (``model.GpuHealth``, as NVML's reader holds it; ``HEALTH_PATHS``):

- ``ECC Errors/{Volatile,Aggregate}``' uncorrectable errors, summed as the driver splits them: drivers
  550+ print ``SRAM Uncorrectable Parity`` + ``SRAM Uncorrectable SEC-DED`` + ``DRAM Uncorrectable``
  (H100 565, A10 550), 470-545 on Ampere and later ``SRAM Uncorrectable`` + ``DRAM Uncorrectable``
  (A16 470, H100 545), Volta and older the ``Double Bit`` section's ``Total`` (NVML's total
  uncorrected count; V100 470); ``Aggregate Uncorrectable SRAM Sources`` is a breakdown of the
  aggregate SRAM count, not read. A counter N/A (ECC off, RTX 4090) or missing leaves the sum unknown;
- ``Remapped Rows/Pending`` and ``.../Remapping Failure Occurred`` (Yes/No; ``Remapped Rows : N/A``
  where the GPU has no row remapper);
- ``Retired Pages/Pending Page Blacklist`` (or ``Pending Page Retirement``, or the oldest drivers'
  ``Pending``; Yes/No);
- ``Clocks Event Reasons`` (before driver 535 ``Clocks Throttle Reasons``): each of the nine reasons
  ``Active`` or ``Not Active``, ``HW Thermal Slowdown`` and ``HW Power Brake Slowdown`` indented under
  ``HW Slowdown``, read as NVML's mask (``CLOCKS_EVENT_BITS``) where all nine are read; the report's
  moment's reading, kept as it is;
- ``Persistence Mode`` (Enabled/Disabled), ``VBIOS Version``, ``Inforom Version/Image Version``.

A value nvidia-smi prints for "not known" (``N/A``, ``Not Found``, ``Not Supported``, ...) is unknown:
``CUDA Version : Not Found`` on a vGPU host driver is no error. A fact is looked up by its full path,
so ``vGPU Software Licensed Product/Product Name`` is never the GPU's name.

With ``-i`` nvidia-smi prints some GPUs and ``Attached GPUs`` still counts every one (as in
``tests/smi_q/a16-vgpu-host-470-i0.txt``): such GPUs are read without an index, told apart by UUID or
bus id where they join a machine, and the listing says so in a warning (``Minor Number`` is the
``/dev/nvidia`` node, not the index). A paste cut short gives the facts before the cut; a line a paste
put for lines it left out (``...``, ``[...]``) is a warning, and nothing after it is read until the
next GPU section: the lines left out may have held a section's title or the next GPU's header, so a
fact after it could be another GPU's. nvidia-smi's line for a GPU NVML cannot reach ("Unable to
determine the device handle for GPU ...", on stderr) is a warning where a report comes with it, and
then no GPU is given an index by its place; alone, it is refused saying what it means. Another tool's
text (``-q -x``'s XML, ``-L``, a topo matrix, the summary table) is refused naming it
(``parse.which_tool``). Real samples, with their sources: ``tests/smi_q/SOURCES.md``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.limits import MAX_GPUS, MAX_MIG_DEVICES, MAX_PCIE_GEN, MAX_PCIE_WIDTH
from ..core.model import COMPUTE_MODES, MigDevice
from .cells import BadCell, cell_int
from .smi_gpus import (
    CLOCKS_EVENT_BITS,
    NOT_KNOWN_RE,
    HealthPaths,
    Look,
    Said,
    SmiFabric,
    SmiGpu,
    SmiGpus,
    bus_key,
    mib_bytes,
    read_health,
)
from .smi_xml import FABRIC_STATES
from .which_tool import refusal

TOOL = "nvidia-smi -q"
BANNER = "==============NVSMI LOG=============="
MAX_LINES = 2_000_000  # about 200 lines a GPU; a 72-GPU report has 20,000
GPU_RE = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
_FACT_RE = re.compile(r"([^:]*?\S) *: ?(.*)")  # the first colon ends the key: values hold colons (times, bus ids)
_UUID_RE = re.compile(r"GPU-[0-9A-Fa-f-]{8,64}")
_VERSION_RE = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}")
# What nvidia-smi prints, in place of a report, for a GPU NVML cannot reach (fallen off the bus, lost,
# or NVML failing): "Unable to determine the device handle for GPU 0000:09:00.0: Unknown Error" (the
# whole output of `nvidia-smi -a -i 0` in NVIDIA/nvidia-docker#1553), "... for GPU0000:07:00.0: ...",
# "... for GPU1: 0000:34:00.0: ...", "...: GPU is lost.  Reboot the system to recover this GPU".
LOST_RE = re.compile(r"Unable to (?:determine|detect) the device handle for .{1,200}")
# A line a paste put for lines it left out ("...", "[...]", "…"): nvidia-smi prints none of these.
_ELISION_RE = re.compile(r"\[?(?:\.{3,}|\u2026)\]?")
# A fabric's status and cluster as -q -x's <fabric> is read (parse.smi_xml): "Success", "Insufficient Resources".
_FABRIC_STATUS_RE = re.compile(r"[A-Za-z][A-Za-z0-9 ,._'-]{0,79}")
_CLUSTER_UUID_RE = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
_UNKNOWN_RE = re.compile(r"N/A|\[N/A\]|Not Found|Not Supported|Not Available|Unknown.*|Requested functionality.*")
_CLOCKS_SECTIONS = ("Clocks Event Reasons", "Clocks Throttle Reasons")  # the older name before driver 535
# Where -q prints each health fact (the module docstring says which shape is which driver's).
HEALTH_PATHS = HealthPaths(
    volatile="ECC Errors/Volatile",
    aggregate="ECC Errors/Aggregate",
    ecc_shapes=(
        ("Double Bit/Total",),
        ("SRAM Uncorrectable Parity", "SRAM Uncorrectable SEC-DED", "DRAM Uncorrectable"),
        ("SRAM Uncorrectable", "DRAM Uncorrectable"),
    ),
    remapped_pending="Remapped Rows/Pending",
    remapping_failed="Remapped Rows/Remapping Failure Occurred",
    retired_pending=tuple(
        f"Retired Pages/{key}" for key in ("Pending Page Blacklist", "Pending Page Retirement", "Pending")
    ),
    persistence="Persistence Mode",
    vbios="VBIOS Version",
    inforom="Inforom Version/Image Version",
    clocks=tuple(
        tuple((f"{section}/{line}", f"{section}/HW Slowdown/{line}") for line, _, _ in CLOCKS_EVENT_BITS)
        for section in _CLOCKS_SECTIONS
    ),
)


class SmiQParseError(ValueError):
    """Text that is not nvidia-smi -q output; the message says why."""


@dataclass
class _Section:
    """A section of the report: its facts and subsections in order, each with its line number."""

    name: str
    line: int
    facts: list[tuple[str, str, int]] = field(default_factory=list)
    sections: list[_Section] = field(default_factory=list)
    # Where a fact's section is kept once a line is indented under the fact (None: kept, or never).
    owner: _Section | None = field(default=None, repr=False, compare=False)

    def find(self, path: str) -> tuple[str, int] | None:
        """The value and line of ``Section/.../Key``: the first one, where a section repeats."""
        *heads, key = path.split("/")
        node = self
        for head in heads:
            found = next((s for s in node.sections if s.name == head), None)
            if found is None:
                return None
            node = found
        return next(((value, line) for name, value, line in node.facts if name == key), None)

    def all(self, path: str) -> list[_Section]:
        """Every section at ``A/B`` (a repeated one, as MIG Device)."""
        *heads, last = path.split("/")
        nodes = [self]
        for head in heads:
            nodes = [s for n in nodes for s in n.sections if s.name == head]
        return [s for n in nodes for s in n.sections if s.name == last]


def _tree(lines: list[str], first: int, base: int) -> tuple[_Section, list[_Section], list[str]]:
    """The report's top facts and its GPU sections, read by indentation from line ``first``."""
    top = _Section("", 0)
    gpus: list[_Section] = []
    notes: list[str] = []
    stack: list[tuple[int, _Section]] = [(-1, top)]
    elided = False  # after an elision, until the next GPU section: which section a line is in is unknown
    for number in range(first, len(lines) + 1):
        raw = lines[number - 1].rstrip()
        if not raw.strip() or raw.strip() == BANNER:
            continue
        if LOST_RE.fullmatch(raw.strip()):  # on stderr, so anywhere in a `2>&1` capture: no section's line
            notes.append(
                f"line {number}: nvidia-smi says {raw.strip()[:160]!r}: that GPU is not in the report "
                f"(lost, or NVML failed on it)"
            )
            continue
        if _ELISION_RE.fullmatch(raw.strip()):
            # The lines left out may hold a section's title or another GPU's header: a fact after the
            # elision could land on the wrong GPU or section, so none is read until the next GPU header.
            where = f"GPU {gpus[-1].name}" if gpus else "the report's header"
            notes.append(
                f"line {number}: {raw.strip()!r}: the paste leaves lines out here; the rest of "
                f"{where} is not read (unknown)"
            )
            elided = True
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            notes.append(f"line {number}: indented with a tab (nvidia-smi indents with spaces); not read")
            continue
        indent = len(raw) - len(raw.lstrip(" ")) - base
        text = raw.strip()
        if indent < 0:
            raise SmiQParseError(
                f"line {number}: left of the report's margin: {text[:40]!r} is not part of one {TOOL} output"
            )
        if indent == 0 and (m := GPU_RE.fullmatch(text)):
            gpu = _Section(m.group(1), number)
            gpus.append(gpu)
            stack = [(-1, top), (0, gpu)]
            if len(gpus) > MAX_GPUS:
                raise SmiQParseError(f"line {number}: more than {MAX_GPUS} GPU sections: more than any machine has")
            elided = False
            continue
        if elided:
            continue
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if indent == 0 and gpus:
            raise SmiQParseError(
                f"line {number}: {text[:40]!r} at the left margin after a GPU section: "
                f"{TOOL} prints nothing there (outputs joined?)"
            )
        if parent.owner is not None:  # the first line under a fact: its section is kept (HW Slowdown's causes)
            parent.owner.sections.append(parent)
            parent.owner = None
        if m := _FACT_RE.fullmatch(text):
            parent.facts.append((m.group(1), m.group(2).strip(), number))
            stack.append((indent, _Section(m.group(1), number, owner=parent)))
        else:
            section = _Section(text, number)
            parent.sections.append(section)
            stack.append((indent, section))
    return top, gpus, notes


def _value(node: _Section, path: str) -> tuple[str | None, int]:
    found = node.find(path)
    if found is None:
        return None, 0
    value, line = found
    return (None if not value or _UNKNOWN_RE.fullmatch(value) else value), line


class _Reader:
    """Facts of one section, each read strictly: a value of another kind is a note naming its line."""

    def __init__(self, node: _Section, notes: list[str]) -> None:
        self.node, self.notes = node, notes

    def text(self, path: str) -> str | None:
        return _value(self.node, path)[0]

    def number(self, path: str, low: int, high: int, suffix: str = "") -> int | None:
        raw, line = _value(self.node, path)
        if raw is None:
            return None
        try:
            value = cell_int(raw[: -len(suffix)] if suffix and raw.endswith(suffix) else raw)
        except BadCell:
            value = None
        if value is None or not low <= value <= high:
            self.notes.append(f"line {line}: {path} {raw[:20]!r} is not from {low} to {high}{suffix}; not read")
            return None
        return value

    def checked(self, path: str, ok: Callable[[str], object], what: str) -> str | None:
        raw, line = _value(self.node, path)
        if raw is not None and not ok(raw):
            self.notes.append(f"line {line}: {path} {raw[:48]!r} is not {what}; not read")
            return None
        return raw

    def mib(self, path: str) -> int | None:
        return mib_bytes(self.checked(path, mib_bytes, "a number of MiB"))


def _mig_devices(gpu: _Section, notes: list[str]) -> tuple[MigDevice, ...]:
    found = gpu.all("MIG Devices/MIG Device")
    if len(found) > MAX_MIG_DEVICES:
        notes.append(f"line {found[0].line}: {len(found)} MIG devices, more than any GPU holds; not read")
        return ()
    devices = []
    for node in found:
        r = _Reader(node, notes)
        devices.append(
            MigDevice(
                index=r.number("Index", 0, MAX_MIG_DEVICES - 1),
                gpu_instance_id=r.number("GPU Instance ID", 0, 2**31 - 1),
                compute_instance_id=r.number("Compute Instance ID", 0, 2**31 - 1),
                memory_total_bytes=r.mib("FB Memory Usage/Total"),
            )
        )
    return tuple(devices)


def _fabric(gpu: _Section, notes: list[str]) -> SmiFabric | None:
    """``Fabric``'s ``State``, ``Status``, ``CliqueId`` and ``ClusterUUID``, the text form of -q -x's
    ``<fabric>`` (read alike); None where it says nothing (all N/A: a GPU on no multi-node fabric)."""
    r = _Reader(gpu, notes)
    state = r.checked("Fabric/State", FABRIC_STATES.__contains__, f"one of {', '.join(FABRIC_STATES)}")
    status = r.checked("Fabric/Status", _FABRIC_STATUS_RE.fullmatch, "a status nvidia-smi prints")
    clique = r.number("Fabric/CliqueId", 0, 2**32 - 1)
    cluster = r.checked("Fabric/ClusterUUID", _CLUSTER_UUID_RE.fullmatch, "a UUID")
    if (state, status, clique, cluster) == (None, None, None, None):
        return None
    return SmiFabric(state, status, clique, cluster)


def _look(gpu: _Section) -> Look:
    """The GPU section's lookup for ``read_health``: a value by its path, its line named."""

    def look(path: str) -> Said | None:
        found = gpu.find(path)
        if found is None:
            return None
        value, line = found
        return Said(None if not value or NOT_KNOWN_RE.fullmatch(value) else value, f"line {line}: {path}")

    return look


def _gpu(node: _Section, index: int | None, notes: list[str]) -> SmiGpu:
    r = _Reader(node, notes)
    bus = r.checked("PCI/Bus Id", lambda v: bus_key(v) is not None, "a PCI bus id") or node.name
    if bus_key(bus) != bus_key(node.name):
        notes.append(f"line {node.line}: GPU {node.name}'s PCI Bus Id is {bus[:20]}; the section's is kept")
        bus = node.name
    mig = r.checked("MIG Mode/Current", lambda v: v in ("Enabled", "Disabled"), "Enabled or Disabled")
    link = "PCI/GPU Link Info/"
    return SmiGpu(
        index=index,
        name=r.text("Product Name"),
        uuid=r.checked("GPU UUID", _UUID_RE.fullmatch, "a GPU UUID"),
        pci_bus_id=bus,
        memory_total_bytes=r.mib("FB Memory Usage/Total"),
        pcie_gen_current=r.number(link + "PCIe Generation/Current", 1, MAX_PCIE_GEN),
        pcie_gen_max=r.number(link + "PCIe Generation/Max", 1, MAX_PCIE_GEN),
        pcie_width_current=r.number(link + "Link Width/Current", 1, MAX_PCIE_WIDTH, "x"),
        pcie_width_max=r.number(link + "Link Width/Max", 1, MAX_PCIE_WIDTH, "x"),
        mig=None if mig is None else mig == "Enabled",
        compute_mode=r.checked("Compute Mode", lambda v: v in COMPUTE_MODES, f"one of {', '.join(COMPUTE_MODES)}"),
        mig_devices=_mig_devices(node, notes),
        fabric=_fabric(node, notes),
        health=read_health(_look(node), HEALTH_PATHS, notes),
    )


def parse_smi_q(text: str) -> SmiGpus:
    """The GPUs and versions of ``nvidia-smi -q`` output (see the module docstring)."""
    if not isinstance(text, str):
        raise SmiQParseError(f"expected the text of {TOOL}, got {type(text).__name__}")
    lines = text.lstrip("\ufeff").splitlines()
    if len(lines) > MAX_LINES:
        raise SmiQParseError(f"{len(lines)} lines: more than any {TOOL} output")
    if why := refusal(text, "smi-q"):
        raise SmiQParseError(why)
    # The report starts at its banner, or (a paste without it) at its first "Key : Value" or GPU line;
    # its left margin is that line's indent (a paste indented whole, as in a Markdown list, reads the same).
    first = next((n for n, line in enumerate(lines, 1) if line.strip() == BANNER), None)
    if first is None:
        first = next(
            (
                n
                for n, line in enumerate(lines, 1)
                if GPU_RE.fullmatch(line.strip()) or line.strip().startswith("Attached GPUs")
            ),
            None,
        )
    if first is None:
        lost = next(((n, line.strip()) for n, line in enumerate(lines, 1) if LOST_RE.fullmatch(line.strip())), None)
        if lost is not None:
            raise SmiQParseError(
                f"line {lost[0]}: nvidia-smi printed no report, only {lost[1][:160]!r}: a GPU NVML "
                f"cannot reach (fallen off the bus, lost, or NVML failing): nothing to read"
            )
        raise SmiQParseError(f"no '{BANNER}' banner and no 'GPU <bus id>' section: not {TOOL} output")
    base = len(lines[first - 1]) - len(lines[first - 1].lstrip(" "))
    top, nodes, notes = _tree(lines, first, base)
    if not nodes:
        raise SmiQParseError(f"no 'GPU <bus id>' section: {TOOL} of no GPU (or a paste cut before the first GPU)")
    reader = _Reader(top, notes)
    attached = reader.number("Attached GPUs", 1, MAX_GPUS)
    if attached is not None and attached < len(nodes):
        raise SmiQParseError(f"{len(nodes)} GPU sections and Attached GPUs {attached}: not one {TOOL} output")
    if top.find("Attached GPUs") is None:
        notes.append(
            "no 'Attached GPUs' line (a paste without the report's header?): whether every GPU is "
            "listed, and which index each has, are unknown"
        )
    if attached is not None and attached > len(nodes):
        notes.append(
            f"Attached GPUs {attached} and {len(nodes)} GPU section{'s' if len(nodes) != 1 else ''}: some "
            f"GPUs only (nvidia-smi -i, or a cut paste); which index each has, and the others, are unknown"
        )
    if attached is not None and any(LOST_RE.fullmatch(line.strip()) for line in lines):
        # Whether Attached GPUs counts a GPU nvidia-smi could not reach, and so which section is which
        # index, is unknown: the listing is one that may list some GPUs only (attached None).
        notes.append(
            f"Attached GPUs {attached}, and a GPU nvidia-smi could not reach: which index each GPU "
            f"listed has is unknown"
        )
        attached = None
    every = attached == len(nodes)  # every GPU listed, in NVML index order: its place is its index
    gpus = tuple(_gpu(node, i if every else None, notes) for i, node in enumerate(nodes))
    for key in ("uuid", "pci_bus_id"):
        values = [bus_key(v) if key == "pci_bus_id" else v for g in gpus if (v := getattr(g, key))]
        if len(set(values)) != len(values):
            raise SmiQParseError(f"two GPU sections with one {key}: not one {TOOL} output (outputs joined?)")
    versions = {
        key: reader.checked(path, _VERSION_RE.fullmatch, "a version")
        for key, path in (("driver_version", "Driver Version"), ("cuda_driver_version", "CUDA Version"))
    }
    return SmiGpus(TOOL, gpus, attached=attached, warnings=tuple(dict.fromkeys(notes)), **versions)
