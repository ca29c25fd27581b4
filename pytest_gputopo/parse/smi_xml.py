"""Read ``nvidia-smi -q -x`` (``--query --xml-format``): the ``<nvidia_smi_log>`` document.

Its shape is nvidia-smi's (``nvsmi_device_v*.dtd``; NVIDIA's nvidia-ml-py sample that reproduces it,
gpuopenanalytics/pynvml ``nvidia_smi.py`` @ 41dbc20ae91bde30ba1c5ecc90fa04aee0807e28, ``XmlDeviceQuery``):
``driver_version``, ``cuda_version`` (drivers from 410 on) and ``attached_gpus`` under the root, then
one ``<gpu id="<bus id>">`` per GPU in NVML index order, each with ``product_name``, ``uuid``,
``pci/pci_bus_id``, ``pci/pci_gpu_link_info/pcie_gen/{current,max}_link_gen``,
``.../link_widths/{current,max}_link_width`` (``16x``), ``fb_memory_usage/total`` (``81559 MiB``),
``mig_mode/current_mig``, each ``mig_devices/mig_device`` (``index``, ``gpu_instance_id``,
``compute_instance_id``, ``fb_memory_usage/total``), ``compute_mode`` and, from drivers that print it,
``fabric`` (``state``, ``status``, ``cliqueId``, ``clusterUuid``: the GPU's registration with a
multi-node NVLink fabric, as NVML's ``nvmlGpuFabricInfo`` gives it, NVML API Reference "Fabric
definitions"), and the GPU's health at rest (``model.GpuHealth``, as NVML's reader holds it;
``HEALTH_PATHS``, read by the rules ``parse.smi_q`` gives for -q's lines):

- ``ecc_errors/{volatile,aggregate}``' uncorrectable errors, summed: ``sram_uncorrectable_parity`` +
  ``sram_uncorrectable_secded`` + ``dram_uncorrectable`` (drivers 550+; the H200's 580 in
  tests/captured), ``sram_uncorrectable`` + ``dram_uncorrectable`` (470-545), or
  ``double_bit/total`` (Volta and older: NVML's total, as nvidia-ml-py's ``nvidia_smi.py`` writes it);
- ``remapped_rows/remapped_row_pending`` and ``remapped_row_failure`` (Yes/No);
- ``retired_pages/pending_retirement`` and ``pending_blacklist`` (Yes/No: 580 writes both, of one NVML
  call; two that disagree are a note, the fact unknown);
- ``clocks_event_reasons/clocks_event_reason_*`` (before 535 ``clocks_throttle_reasons/
  clocks_throttle_reason_*``): the nine reasons, Active or Not Active, as NVML's mask where all are read;
- ``persistence_mode`` (Enabled/Disabled), ``vbios_version``, ``inforom_version/img_version``.

``N/A`` and the like are unknown. With ``-i`` some GPUs are listed and ``attached_gpus`` still counts
every one: such GPUs are told by UUID or bus id only.

The text is untrusted: it is read by expat with no entity of its own. nvidia-smi's external
``<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">`` is allowed (expat never fetches it); an
internal DTD subset, an entity declaration or reference (the "billion laughs" and external-entity
attacks) is refused, as is nesting deeper or elements more numerous than any nvidia-smi document."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any, NoReturn
from xml.parsers import expat

from ..core.limits import MAX_GPUS, MAX_MIG_DEVICES, MAX_PCIE_GEN, MAX_PCIE_WIDTH
from ..core.model import COMPUTE_MODES, MigDevice
from ..core.units import counted
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
from .which_tool import refusal

TOOL = "nvidia-smi -q -x"
MAX_DEPTH = 32  # nvidia-smi nests about 6 deep
MAX_ELEMENTS = 200_000  # a 72-GPU NVL72 document has about 50,000

_INT_RE = re.compile(r"[0-9]{1,12}")
_UUID_RE = re.compile(r"GPU-[0-9A-Fa-f-]{8,64}")
_VERSION_RE = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}")
# nvmlGpuFabricState_t as nvidia-smi prints it (NVML_GPU_FABRIC_STATE_NOT_SUPPORTED .. _COMPLETED).
FABRIC_STATES = ("Not Supported", "Not Started", "In Progress", "Completed")
_FABRIC_STATUS_RE = re.compile(r"[A-Za-z][A-Za-z0-9 ,._'-]{0,79}")  # "Success", "Insufficient Resources"
_CLUSTER_UUID_RE = re.compile(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
# The clocks-event section and its elements' prefix, by the name drivers from 535 give it, then the older.
_CLOCKS_SECTIONS = (
    ("clocks_event_reasons", "clocks_event_reason_"),
    ("clocks_throttle_reasons", "clocks_throttle_reason_"),
)
# Where -q -x writes each health fact (the module docstring says which shape is which driver's).
HEALTH_PATHS = HealthPaths(
    volatile="ecc_errors/volatile",
    aggregate="ecc_errors/aggregate",
    ecc_shapes=(
        ("double_bit/total",),
        ("sram_uncorrectable_parity", "sram_uncorrectable_secded", "dram_uncorrectable"),
        ("sram_uncorrectable", "dram_uncorrectable"),
    ),
    remapped_pending="remapped_rows/remapped_row_pending",
    remapping_failed="remapped_rows/remapped_row_failure",
    retired_pending=("retired_pages/pending_retirement", "retired_pages/pending_blacklist"),
    persistence="persistence_mode",
    vbios="vbios_version",
    inforom="inforom_version/img_version",
    clocks=tuple(
        tuple((f"{section}/{prefix}{tag}",) for _, tag, _ in CLOCKS_EVENT_BITS) for section, prefix in _CLOCKS_SECTIONS
    ),
)


class SmiXmlParseError(ValueError):
    """Text that is not nvidia-smi -q -x output, or XML refused as unsafe; the message says why."""


def _refuse(why: str) -> NoReturn:
    raise SmiXmlParseError(why)


def _tree(text: str) -> ET.Element:
    """The element tree, built by expat with every entity and internal DTD refused."""
    builder = ET.TreeBuilder()
    parser = expat.ParserCreate("utf-8")  # the text is already decoded: its declared encoding is moot
    depth = count = 0

    def start(tag: str, attrs: dict[str, str]) -> None:
        nonlocal depth, count
        depth, count = depth + 1, count + 1
        if depth > MAX_DEPTH or count > MAX_ELEMENTS:
            _refuse(f"elements nested deeper than {MAX_DEPTH} or more than {MAX_ELEMENTS}: not an nvidia-smi document")
        builder.start(tag, attrs)

    def end(tag: str) -> None:
        nonlocal depth
        depth -= 1
        builder.end(tag)

    def doctype(name: str, system_id: str | None, public_id: str | None, has_internal_subset: bool) -> None:
        if has_internal_subset:
            _refuse(
                "a DOCTYPE with declarations of its own (nvidia-smi writes none): refused, as entities could "
                "expand without bound"
            )

    parser.StartDoctypeDeclHandler = doctype
    parser.EntityDeclHandler = lambda *a: _refuse("an entity declaration: refused (nvidia-smi writes none)")
    parser.UnparsedEntityDeclHandler = lambda *a: _refuse("an entity declaration: refused (nvidia-smi writes none)")
    parser.ExternalEntityRefHandler = lambda *a: _refuse("an external entity: refused (nvidia-smi writes none)")
    parser.SkippedEntityHandler = lambda *a: _refuse("an entity reference: refused (nvidia-smi writes none)")
    parser.StartElementHandler, parser.EndElementHandler = start, end
    parser.CharacterDataHandler = builder.data
    try:
        parser.Parse(text.lstrip("\ufeff"), True)
    except expat.ExpatError as exc:
        raise SmiXmlParseError(f"not well-formed XML: {exc}") from None
    return builder.close()


def _text(node: ET.Element, path: str) -> str | None:
    found = node.find(path)
    value = (found.text or "").strip() if found is not None else ""
    return (
        None if not value or value.upper() in ("N/A", "[N/A]") or value.startswith(("[", "Not ", "Unknown")) else value
    )


def _int(
    node: ET.Element, path: str, high: int, notes: list[str], where: str, suffix: str = "", zero: bool = False
) -> int | None:
    raw = _text(node, path)
    if raw is None:
        return None
    digits = raw[: -len(suffix)] if suffix and raw.endswith(suffix) else raw
    low = 0 if zero else 1
    if not _INT_RE.fullmatch(digits) or not low <= int(digits) <= high:
        notes.append(f"{where}: {path.rsplit('/', 1)[-1]} {raw[:20]!r} is not from {low} to {high}{suffix}; not read")
        return None
    return int(digits)


def _gpu(node: ET.Element, index: int | None, notes: list[str]) -> SmiGpu:
    where = f"<gpu id={node.get('id', '?')[:20]!r}>"
    facts: dict[str, Any] = {"index": index, "name": _text(node, "product_name")}
    uuid = _text(node, "uuid")
    if uuid is not None and not _UUID_RE.fullmatch(uuid):
        notes.append(f"{where}: uuid {uuid[:48]!r} is not a GPU UUID; not read")
        uuid = None
    bus = _text(node, "pci/pci_bus_id") or node.get("id")
    if bus is not None and bus_key(bus) is None:
        notes.append(f"{where}: pci_bus_id {bus[:20]!r} is not a PCI bus id; not read")
        bus = None
    link = "pci/pci_gpu_link_info/"
    facts.update(
        uuid=uuid,
        pci_bus_id=bus,
        pcie_gen_current=_int(node, link + "pcie_gen/current_link_gen", MAX_PCIE_GEN, notes, where),
        pcie_gen_max=_int(node, link + "pcie_gen/max_link_gen", MAX_PCIE_GEN, notes, where),
        pcie_width_current=_int(node, link + "link_widths/current_link_width", MAX_PCIE_WIDTH, notes, where, "x"),
        pcie_width_max=_int(node, link + "link_widths/max_link_width", MAX_PCIE_WIDTH, notes, where, "x"),
    )
    memory = _text(node, "fb_memory_usage/total")
    facts["memory_total_bytes"] = mib_bytes(memory)
    if memory is not None and facts["memory_total_bytes"] is None:
        notes.append(f"{where}: fb_memory_usage total {memory[:20]!r} is not a number of MiB; not read")
    mig = _text(node, "mig_mode/current_mig")
    if mig in ("Enabled", "Disabled"):
        facts["mig"] = mig == "Enabled"
    mode = _text(node, "compute_mode")
    if mode in COMPUTE_MODES:
        facts["compute_mode"] = mode
    elif mode is not None:
        notes.append(f"{where}: compute_mode {mode[:20]!r} is not one of {', '.join(COMPUTE_MODES)}; not read")
    facts["fabric"] = _fabric(node, notes, where)
    facts["health"] = read_health(_look(node, where), HEALTH_PATHS, notes)
    facts["mig_devices"] = _mig_devices(node, notes, where)
    return SmiGpu(**facts)


def _look(node: ET.Element, where: str) -> Look:
    """The ``<gpu>``'s lookup for ``read_health``: an element's text by its path, the element named
    (its own text: "Not Active" is a value here, not ``_text``'s "not known")."""

    def look(path: str) -> Said | None:
        found = node.find(path)
        if found is None:
            return None
        value = (found.text or "").strip()
        return Said(None if not value or NOT_KNOWN_RE.fullmatch(value) else value, f"{where}: {path}")

    return look


def _mig_devices(node: ET.Element, notes: list[str], where: str) -> tuple[MigDevice, ...]:
    """``<mig_devices>``' ``<mig_device>`` each: index, GPU and compute instance ids, memory total
    (``None`` inside ``<mig_devices>`` where MIG is off)."""
    found = node.findall("mig_devices/mig_device")
    if len(found) > MAX_MIG_DEVICES:
        notes.append(f"{where}: {len(found)} <mig_device> elements, more than any GPU holds; not read")
        return ()
    devices = []
    for device in found:
        devices.append(
            MigDevice(
                index=_int(device, "index", MAX_MIG_DEVICES - 1, notes, where, zero=True),
                gpu_instance_id=_int(device, "gpu_instance_id", 2**31 - 1, notes, where, zero=True),
                compute_instance_id=_int(device, "compute_instance_id", 2**31 - 1, notes, where, zero=True),
                memory_total_bytes=mib_bytes(_text(device, "fb_memory_usage/total")),
            )
        )
    return tuple(devices)


def _fabric(node: ET.Element, notes: list[str], where: str) -> SmiFabric | None:
    """``<fabric>``'s state, status, clique and cluster; None where it says nothing (every field N/A,
    or no such element: a GPU on no multi-node NVLink fabric, or an older driver)."""
    fabric = node.find("fabric")
    if fabric is None:
        return None
    raw: dict[str, str | None] = {
        tag: (fabric.findtext(tag) or "").strip() for tag in ("state", "status", "cliqueId", "clusterUuid")
    }
    raw = {tag: None if value in ("", "N/A", "[N/A]") else value for tag, value in raw.items()}
    state, status, clique, cluster = raw["state"], raw["status"], raw["cliqueId"], raw["clusterUuid"]
    if state is not None and state not in FABRIC_STATES:
        notes.append(f"{where}: fabric state {state[:20]!r} is not one of {', '.join(FABRIC_STATES)}; not read")
        state = None
    if status is not None and not _FABRIC_STATUS_RE.fullmatch(status):
        notes.append(f"{where}: fabric status {status[:20]!r} is not a status nvidia-smi prints; not read")
        status = None
    if clique is not None and not _INT_RE.fullmatch(clique):
        notes.append(f"{where}: fabric cliqueId {clique[:20]!r} is not a number; not read")
        clique = None
    if cluster is not None and not _CLUSTER_UUID_RE.fullmatch(cluster):
        notes.append(f"{where}: fabric clusterUuid {cluster[:40]!r} is not a UUID; not read")
        cluster = None
    if (state, status, clique, cluster) == (None, None, None, None):
        return None
    return SmiFabric(state, status, int(clique) if clique is not None else None, cluster)


def parse_smi_xml(text: str) -> SmiGpus:
    """The GPUs and versions of ``nvidia-smi -q -x`` output (see the module docstring)."""
    if not isinstance(text, str):
        raise SmiXmlParseError(f"expected the text of {TOOL}, got {type(text).__name__}")
    if not text.strip():
        raise SmiXmlParseError(f"empty text: no <nvidia_smi_log> of {TOOL}")
    if why := refusal(text, "smi-xml"):
        raise SmiXmlParseError(why)
    root = _tree(text.strip())
    if root.tag != "nvidia_smi_log":
        raise SmiXmlParseError(f"the root element is <{root.tag[:40]}>, not <nvidia_smi_log>: not {TOOL} output")
    notes: list[str] = []
    nodes = root.findall("gpu")
    if not nodes:
        raise SmiXmlParseError(f"no <gpu> element under <nvidia_smi_log>: {TOOL} of no GPU")
    if len(nodes) > MAX_GPUS:
        raise SmiXmlParseError(f"{len(nodes)} <gpu> elements: more than any machine has")
    attached = _text(root, "attached_gpus")
    count = int(attached) if attached and _INT_RE.fullmatch(attached) and 0 < int(attached) <= MAX_GPUS else None
    if attached is not None and count is None:
        notes.append(f"attached_gpus {attached[:20]!r} is not a GPU count; not read")
    if count is not None and count < len(nodes):
        raise SmiXmlParseError(f"{len(nodes)} <gpu> elements and attached_gpus {count}: not one {TOOL} output")
    if count is not None and count > len(nodes):  # -i picked some, or a capture cut (and closed again)
        notes.append(
            f"attached_gpus {count} and {counted(len(nodes), '<gpu> element')}: some GPUs only (nvidia-smi "
            f"-i, or a cut capture); what it says of the others is unknown"
        )
    every = count == len(nodes)  # every GPU listed, in NVML index order: its place is its index
    versions = {}
    for key, path in (("driver_version", "driver_version"), ("cuda_driver_version", "cuda_version")):
        value = _text(root, path)
        if value is not None and not _VERSION_RE.fullmatch(value):
            notes.append(f"{path} {value[:20]!r} is not a version; not read")
            value = None
        versions[key] = value
    gpus = tuple(_gpu(node, i if every else None, notes) for i, node in enumerate(nodes))
    for key in ("uuid", "pci_bus_id"):
        values = [getattr(g, key) for g in gpus if getattr(g, key)]
        if len(set(values)) != len(values):
            raise SmiXmlParseError(f"two <gpu> elements with one {key}: not one {TOOL} output (documents joined?)")
    return SmiGpus(TOOL, gpus, attached=count, warnings=tuple(dict.fromkeys(notes)), **versions)
