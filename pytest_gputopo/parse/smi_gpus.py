"""What nvidia-smi lists about each GPU (``--query-gpu=... --format=csv``, ``-L``, ``-q -x``): one
GPU as a listing prints it (``SmiGpu``, None where it does not say), a listing (``SmiGpus``), and PCI
bus ids compared as addresses. ``parse.text_machine`` joins listings to a machine read from text.

A GPU's health facts (``model.GpuHealth``, as the NVML reader holds them) are read by one set of rules
from ``-q`` and ``-q -x`` (``read_health``), each format naming its own lines or elements
(``HealthPaths``); the rules, and which lines each format's reader reads, are in ``parse.smi_q`` and
``parse.smi_xml``."""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.limits import MAX_MEMORY_BYTES
from ..core.model import Fabric, GpuHealth, MigDevice

# The per-GPU facts a listing can give, as ``model.Gpu`` names them, and how a warning says them.
FACTS = {
    "name": "name",
    "uuid": "UUID",
    "pci_bus_id": "PCI bus id",
    "memory_total_bytes": "memory",
    "compute_capability": "compute capability",
    "pcie_gen_current": "PCIe generation (current)",
    "pcie_gen_max": "PCIe generation (max)",
    "pcie_width_current": "PCIe width (current)",
    "pcie_width_max": "PCIe width (max)",
    "mig": "MIG mode",
    "compute_mode": "compute mode",
}


@dataclass(frozen=True)
class SmiFabric:
    """A GPU's registration with its NVLink fabric as ``nvidia-smi -q -x`` prints it (``<fabric>``: GB200
    and other multi-node NVLink systems; NVML's ``nvmlGpuFabricInfo``): ``state`` Not Supported, Not
    Started, In Progress or Completed; ``status`` (meaningful once Completed) Success or the error;
    the clique and cluster a completed GPU belongs to. Shown by ``gputopo parse smi-xml`` and, as the
    model holds NVML's answer (``fact``), recorded."""

    state: str | None = None
    status: str | None = None
    clique_id: int | None = None
    cluster_uuid: str | None = None

    def fact(self) -> Fabric | None:
        """The model's ``Fabric`` as the NVML reader (``probe.nvml._fabric``) makes it of the struct
        nvidia-smi printed (nvidia-ml-py 13.615.71 ``c_nvmlGpuFabricInfo_v2_t``: clusterUuid, status,
        cliqueId, state): the state alone before Completed (nvml.h: the status is read only once
        Completed); once Completed its status, clique and cluster, the all-zero cluster (what a GPU of
        no multi-node fabric prints) being none. None where the state is unknown, or Completed with no
        status read: NVML's struct always has one, and a recording would read a missing one as
        Success (``probe.named_machine``), so it is not recorded."""
        if self.state is None:
            return None
        if self.state != "Completed":
            return Fabric(self.state)
        if self.status is None:
            return None
        cluster = None
        if self.cluster_uuid is not None:
            try:
                cluster = uuid.UUID(self.cluster_uuid)
            except ValueError:
                cluster = None
        return Fabric(
            self.state, self.status, self.clique_id, str(cluster) if cluster is not None and cluster.int else None
        )

    def text(self) -> str:
        said = [self.state or "state ?"] + ([self.status] if self.status else [])
        if self.clique_id is not None or self.cluster_uuid:
            said.append(
                f"clique {'?' if self.clique_id is None else self.clique_id} of cluster {self.cluster_uuid or '?'}"
            )
        return ", ".join(said)


def health_text(health: GpuHealth) -> str:
    """``ECC uncorrectable 0 volatile/0 aggregate, ...``: what a report said of a GPU's health, '?' where
    it did not."""

    def said(value: object) -> str:
        if value is None:
            return "?"
        return ("yes" if value else "no") if isinstance(value, bool) else str(value)

    clocks = "?" if health.clocks_event_reasons is None else hex(health.clocks_event_reasons)
    persistence = {None: "?", True: "on", False: "off"}[health.persistence_mode]
    return (
        f"ECC uncorrectable {said(health.ecc_uncorrected_volatile)} volatile/"
        f"{said(health.ecc_uncorrected_aggregate)} aggregate, row remap pending "
        f"{said(health.remapped_rows_pending)} failed {said(health.remapping_failed)}, page retirement pending "
        f"{said(health.retired_pages_pending)}, clocks events {clocks}, persistence {persistence}, "
        f"VBIOS {health.vbios_version or '?'}, InfoROM {health.inforom_version or '?'}"
    )


# nvmlClocksEventReason* (nvml.h), each by the line -q prints under "Clocks Event Reasons" (drivers
# before 535: "Clocks Throttle Reasons") and the tag -q -x writes after "clocks_event_reason_"
# ("clocks_throttle_reason_"). A mask is read only where all nine are: a reason not read is unknown.
CLOCKS_EVENT_BITS = (
    ("Idle", "gpu_idle", 0x1),
    ("Applications Clocks Setting", "applications_clocks_setting", 0x2),
    ("SW Power Cap", "sw_power_cap", 0x4),
    ("HW Slowdown", "hw_slowdown", 0x8),
    ("Sync Boost", "sync_boost", 0x10),
    ("SW Thermal Slowdown", "sw_thermal_slowdown", 0x20),
    ("HW Thermal Slowdown", "hw_thermal_slowdown", 0x40),
    ("HW Power Brake Slowdown", "hw_power_brake_slowdown", 0x80),
    ("Display Clock Setting", "display_clocks_setting", 0x100),
)
# What nvidia-smi prints where NVML gave no value: N/A, or the error's words (nvmlErrorString), in
# brackets or not ("[N/A]", "[Not Supported]", "Unknown Error", "[Insufficient Permissions]").
NOT_KNOWN_RE = re.compile(
    r"\[?(?:N/A|Not Found|Not Supported|Not Available|Unknown[^\]]{0,80}|Requested functionality[^\]]{0,80}"
    r"|Insufficient Permissions|No Permission|GPU is lost|Timeout|GPU access blocked[^\]]{0,80})\]?"
)
_COUNT_RE = re.compile(r"[0-9]{1,20}")
MAX_COUNT = 2**64 - 1  # NVML's counts are unsigned long long
# A firmware version as NVML gives it ("96.00.74.00.01", "G520.0200.00.05"): printable, 1 to 64 characters.
_FIRMWARE_RE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,62}[\x21-\x7e])?")
_YES_NO = {"Yes": True, "No": False}
_ENABLED = {"Enabled": True, "Disabled": False}
_ACTIVE = {"Active": True, "Not Active": False}


@dataclass(frozen=True)
class Said:
    """One value as a report printed it: ``value`` None where nvidia-smi printed its word for unknown
    (``NOT_KNOWN_RE``) or nothing; ``where`` names the line or element for a note."""

    value: str | None
    where: str


# A format's lookup: the value at one of its paths, None where the report prints no such line or element.
Look = Callable[[str], Said | None]


@dataclass(frozen=True)
class HealthPaths:
    """Where one format prints each health fact, as its ``Look`` takes paths. ``ecc_shapes``: the
    uncorrectable counters under ``volatile`` and ``aggregate`` in each shape drivers have printed,
    summed (the report's shape is the first whose first counter it prints); ``retired_pending``
    every name of the pending-retirement flag; ``clocks`` per section name, per ``CLOCKS_EVENT_BITS``
    reason, the paths its line may have."""

    volatile: str
    aggregate: str
    ecc_shapes: tuple[tuple[str, ...], ...]
    remapped_pending: str
    remapping_failed: str
    retired_pending: tuple[str, ...]
    persistence: str
    vbios: str
    inforom: str
    clocks: tuple[tuple[tuple[str, ...], ...], ...]


def read_health(look: Look, paths: HealthPaths, notes: list[str]) -> GpuHealth | None:
    """A GPU's health facts by ``look``; None where the report says none. A value of another kind is
    a note naming its line or element (the fact unknown), never an error."""
    health = GpuHealth(
        ecc_uncorrected_volatile=_ecc(look, paths.volatile, paths.ecc_shapes, notes),
        ecc_uncorrected_aggregate=_ecc(look, paths.aggregate, paths.ecc_shapes, notes),
        remapped_rows_pending=_word(look(paths.remapped_pending), _YES_NO, notes),
        remapping_failed=_word(look(paths.remapping_failed), _YES_NO, notes),
        retired_pages_pending=_retired(look, paths.retired_pending, notes),
        clocks_event_reasons=_clocks(look, paths.clocks, notes),
        persistence_mode=_word(look(paths.persistence), _ENABLED, notes),
        vbios_version=_firmware(look(paths.vbios), notes),
        inforom_version=_firmware(look(paths.inforom), notes),
    )
    return health if health.known else None


def _word(said: Said | None, words: dict[str, bool], notes: list[str]) -> bool | None:
    if said is None or said.value is None:
        return None
    if said.value in words:
        return words[said.value]
    notes.append(f"{said.where} {said.value[:48]!r} is not {' or '.join(words)}; not read")
    return None


def _count(said: Said | None, notes: list[str]) -> int | None:
    if said is None or said.value is None:
        return None
    if _COUNT_RE.fullmatch(said.value) and int(said.value) <= MAX_COUNT:
        return int(said.value)
    notes.append(f"{said.where} {said.value[:48]!r} is not a count of errors; not read")
    return None


def _ecc(look: Look, section: str, shapes: tuple[tuple[str, ...], ...], notes: list[str]) -> int | None:
    """The uncorrectable errors of ``section`` (volatile or aggregate): the sum of the report's shape's
    counters, as NVML's total is theirs; unknown where any of them is (N/A, missing, not read)."""
    for shape in shapes:
        said = [look(f"{section}/{key}") for key in shape]
        if said[0] is None:  # its first counter names the shape: DRAM Uncorrectable is in two
            continue
        counts = [_count(s, notes) for s in said]  # each read, so each bad one is noted
        if None in counts:
            return None
        total = sum(c for c in counts if c is not None)
        if total > MAX_COUNT:
            notes.append(f"{said[0].where} and the counters beside it sum past {MAX_COUNT}; not read")
            return None
        return total
    return None


def _retired(look: Look, paths: tuple[str, ...], notes: list[str]) -> bool | None:
    """Pages pending retirement, by each name the report prints it under (-q -x 580 prints two, of one
    NVML call); two that disagree are a note, the fact unknown."""
    said = [s for s in map(look, paths) if s is not None]
    read = [v for v in (_word(s, _YES_NO, notes) for s in said) if v is not None]
    if len(set(read)) > 1:
        notes.append(f"{said[0].where} and its other names disagree on pages pending retirement; not read")
        return None
    return read[0] if read else None


def _clocks(look: Look, sections: tuple[tuple[tuple[str, ...], ...], ...], notes: list[str]) -> int | None:
    """NVML's clocks-event mask of the report's section (its reading at the moment it was taken): known
    only where every reason's line is read, Active or Not Active."""
    for reasons in sections:
        said = [next((s for s in map(look, candidates) if s is not None), None) for candidates in reasons]
        if all(s is None for s in said):
            continue
        active = [_word(s, _ACTIVE, notes) for s in said]
        if None in active:
            return None
        return sum(bit for on, (_, _, bit) in zip(active, CLOCKS_EVENT_BITS, strict=True) if on)
    return None


def _firmware(said: Said | None, notes: list[str]) -> str | None:
    if said is None or said.value is None:
        return None
    if _FIRMWARE_RE.fullmatch(said.value):
        return said.value
    notes.append(f"{said.where} {said.value[:48]!r} is not a version (1 to 64 printable characters); not read")
    return None


@dataclass(frozen=True)
class SmiGpu:
    """One GPU as a listing prints it; None where it does not say."""

    index: int | None = None  # nvidia-smi's index (NVML's); None where the listing does not print it
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None  # as printed, "00000000:07:00.0"
    memory_total_bytes: int | None = None
    compute_capability: str | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    mig: bool | None = None
    compute_mode: str | None = None
    fabric: SmiFabric | None = None  # -q -x only; None where it says nothing (N/A) of a fabric
    health: GpuHealth | None = None  # -q and -q -x only; None where it says nothing of the GPU's health
    mig_devices: tuple[MigDevice, ...] = ()  # the MIG devices listed under it (-L, -q -x, -q)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if (v is not None and v != ()) or k == "index"}


@dataclass(frozen=True)
class SmiGpus:
    """A listing of GPUs by ``tool``. ``attached`` is how many GPUs nvidia-smi saw where the listing
    says (every GPU listed, or -q -x's ``attached_gpus``); None where it may list some only."""

    tool: str
    gpus: tuple[SmiGpu, ...]
    attached: int | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "attached_gpus": self.attached,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "gpus": [g.to_json() for g in self.gpus],
            "warnings": list(self.warnings),
        }

    def lines(self) -> list[str]:
        """One line per GPU: what the listing says of it ('?' where it does not say)."""
        out = []
        for g in self.gpus:
            memory = f"{g.memory_total_bytes / 2**20:g} MiB" if g.memory_total_bytes else "?"
            pcie = (
                f", PCIe Gen{g.pcie_gen_current or '?'}/{g.pcie_gen_max or '?'} "
                f"x{g.pcie_width_current or '?'}/{g.pcie_width_max or '?'}"
                if any(
                    v is not None for v in (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max)
                )
                else ""
            )
            out.append(
                f"GPU{'?' if g.index is None else g.index}: {g.name or '?'} ({g.uuid or 'UUID ?'}), "
                f"bus {g.pci_bus_id or '?'}, {memory}, compute capability {g.compute_capability or '?'}{pcie}"
                + (", MIG enabled" if g.mig else "")
                + _mig_text(g.mig_devices)
                + (f", fabric {g.fabric.text()}" if g.fabric else "")
                + (f", health: {health_text(g.health)}" if g.health else "")
            )
        versions = [
            f"driver {self.driver_version}" if self.driver_version else "",
            f"CUDA {self.cuda_driver_version}" if self.cuda_driver_version else "",
        ]
        if any(versions):
            out.append(", ".join(v for v in versions if v))
        return out + [f"warning: {w}" for w in self.warnings]


def _mig_text(devices: tuple[MigDevice, ...]) -> str:
    """``, MIG devices 0 (1g.10gb, GI 1, CI 0), 1 (...)``: each listed device by what was said of it."""

    def one(d: MigDevice) -> str:
        said = [
            d.profile,
            None if d.gpu_instance_id is None else f"GI {d.gpu_instance_id}",
            None if d.compute_instance_id is None else f"CI {d.compute_instance_id}",
            None if d.memory_total_bytes is None else f"{d.memory_total_bytes / 2**20:g} MiB",
        ]
        shown = [s for s in said if s]
        return ("?" if d.index is None else str(d.index)) + (f" ({', '.join(shown)})" if shown else "")

    return f", MIG devices {', '.join(one(d) for d in devices)}" if devices else ""


_MIB_RE = re.compile(r"([0-9]{1,12}) MiB")


def mib_bytes(text: str | None) -> int | None:
    """``81559 MiB`` (how nvidia-smi prints memory) in bytes; None where it is not that, or no memory
    a GPU has (0, above ``limits.MAX_MEMORY_BYTES``)."""
    m = _MIB_RE.fullmatch(text or "")
    return int(m.group(1)) * 2**20 if m and 0 < int(m.group(1)) * 2**20 <= MAX_MEMORY_BYTES else None


_BUS_RE = re.compile(r"(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")


def bus_key(bus: str) -> tuple[int, str] | None:
    """A PCI bus id compared as an address: NVML's "00000000:07:00.0" and lspci's "0000:07:00.0" are
    the same, (0, "07:00.0"); None where it is no bus id."""
    m = _BUS_RE.fullmatch(bus.strip())
    return (int(m.group(1) or "0", 16), m.group(2).upper()) if m else None
