"""A GPU's health at rest, judged by its own facts (issue 44): what DCGM's first level, Meta's GCM and
NVIDIA's NVSentinel look at, from NVML alone. Each finding has a stable code and an action (``CODES``,
the table of docs/health.md); a ``fault`` fails the check's ``health[GPU<i>]`` item and is one of the
fleet's absolute faults (``core.faults``), however many nodes share it; a ``warning`` is said and fails
nothing. A fact NVML did not give is never a finding and never healthy: it is said as not reported.

The rules, each from NVML's own words (nvml.h, NVIDIA/go-nvml gen/nvml/nvml.h):

- uncorrectable ECC errors since the driver loaded (``NVML_VOLATILE_ECC``) are a fault; in the GPU's
  life only (``NVML_AGGREGATE_ECC``, the volatile count 0) a warning: row remapping or page retirement
  has dealt with them, and the rules below judge whether it did;
- a row remapping pending ("A reset will be required to actually remap the row") or one that ever
  failed ("failureOccurred ... if a row remapping ever failed in the past"); pages pending retirement
  ("need a reboot to fully retire");
- clocks held down at rest by the hardware (``nvmlClocksThrottleReasonHwSlowdown``, its thermal and
  power-brake causes: "reducing the core clocks by a factor of 2 or more"); the software thermal
  slowdown a warning. nvml.h says hardware slowdown "may be also reported during PState or clock
  change": the probe reads the reasons again before it keeps one (``probe.nvml``);
- persistence mode off, a warning (DCGM's deployment check says it alike): the driver's state is torn
  down when its last client leaves, and each CI job pays the start again;
- a VBIOS or InfoROM image other than the one most GPUs of its model in the node have (GCM's
  ``vbios_mismatch``), a warning: GPUs of one model take one firmware bundle;
- the node's own (``node_findings``): a GPU on the PCI bus that NVML does not list (``unlisted_on_bus``),
  an XID of this boot that NVIDIA's catalog makes the node's (``core.xid``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from . import xid
from .model import Gpu, GpuHealth, Topology
from .units import counted

FAULT, WARNING = "fault", "warning"


@dataclass(frozen=True)
class Code:
    """What one finding code means: how grave, in a few words, and what an operator does about it."""

    severity: str
    title: str
    action: str


RESET = "reset the GPU (nvidia-smi -r, or reboot the node)"
RESET_NODE = "reboot the node"
DRAIN = "drain the node"
CODES: dict[str, Code] = {
    "ecc_uncorrected": Code(
        FAULT, "uncorrectable ECC errors since the driver loaded", f"{RESET}; {DRAIN} if they come back"
    ),
    "ecc_uncorrected_lifetime": Code(
        WARNING, "uncorrectable ECC errors in the GPU's life", "watch the count; replace the GPU if it grows"
    ),
    "row_remap_pending": Code(FAULT, "a row remapping waits for a GPU reset", RESET),
    "row_remap_failed": Code(FAULT, "a row remapping has failed", f"{DRAIN}; replace the GPU"),
    "page_retire_pending": Code(FAULT, "retired pages wait for a GPU reset", RESET),
    "clocks_hw_slowdown": Code(
        FAULT, "hardware slowdown holds the clocks down at rest", f"check the cooling and the power supply; {DRAIN}"
    ),
    "clocks_hw_thermal": Code(
        FAULT, "hardware thermal slowdown at rest: the GPU is too hot", f"check the cooling; {DRAIN}"
    ),
    "clocks_power_brake": Code(
        FAULT, "the power brake holds the clocks down at rest", f"check the power supply; {DRAIN}"
    ),
    "clocks_sw_thermal": Code(WARNING, "software thermal slowdown at rest: the GPU runs hot", "check the cooling"),
    "persistence_off": Code(WARNING, "persistence mode off", "enable it: nvidia-persistenced, or nvidia-smi -pm 1"),
    "vbios_mismatch": Code(
        WARNING, "a VBIOS other than its model's in this node", "flash one firmware bundle to every GPU of the model"
    ),
    "inforom_mismatch": Code(
        WARNING,
        "an InfoROM image other than its model's in this node",
        "flash one firmware bundle to every GPU of the model",
    ),
    "gpu_off_bus": Code(
        FAULT, "a GPU on the PCI bus that NVML does not list", f"{RESET_NODE}; {DRAIN} until it is listed again"
    ),
    "xid": Code(
        FAULT,
        "an XID in this boot's kernel log that NVIDIA's catalog makes the node's",
        f"as NVIDIA's resolution for it says (RESET_GPU: reset the GPU; RESTART_BM: {RESET_NODE}; WORKFLOW_*: "
        f"NVIDIA's workflow for it); {DRAIN} until then",
    ),
}

# nvmlClocksEventReason* bits (nvml.h; pynvml 13.615.71 l.2190-2199)
HW_SLOWDOWN, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE = 0x8, 0x20, 0x40, 0x80
JUDGED_REASONS = HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a GPU: ``code`` (a key of ``CODES``), ``what`` the problem with its
    figures, without its subject."""

    code: str
    gpu: int | None  # None: the node's (the PCI bus, the kernel log)
    what: str

    @property
    def severity(self) -> str:
        return CODES[self.code].severity

    @property
    def action(self) -> str:
        return CODES[self.code].action

    def text(self) -> str:
        """``2 uncorrectable ECC errors since the driver loaded [ecc_uncorrected: reset the GPU ...]``."""
        return f"{self.what} [{self.code}: {self.action}]"


def unlisted_on_bus(on_bus: tuple[str, ...] | None, listed: list[str | None]) -> tuple[str, ...] | None:
    """The GPUs on the PCI bus (``probe.pci_bus``) whose bus id NVML does not list; None where unknown:
    the bus was not read, or it shows none of the GPUs NVML lists (this process sees another view of
    it than NVML does: a virtual machine's, a container's)."""
    if on_bus is None:
        return None
    known = {bus.upper() for bus in listed if bus}
    if known and not known & set(on_bus):
        return None
    return tuple(bus for bus in on_bus if bus not in known)


def node_findings(topology: Topology) -> list[Finding]:
    """The node's own: a GPU on the bus NVML does not list, an XID that is the node's to act on (each
    XID and GPU once, with how often it was logged)."""
    out = [
        Finding(
            "gpu_off_bus",
            None,
            f"an NVIDIA GPU at PCI {bus} is on the bus, bound to the nvidia driver, and NVML does not list it",
        )
        for bus in topology.pci_unlisted or ()
    ]
    events: dict[tuple[int, str], list[xid.XidEvent]] = {}
    for event in xid.node_faults(list(topology.xids or ())):
        events.setdefault((event.xid, event.pci), []).append(event)
    for first, *more in events.values():
        out.append(Finding("xid", None, first.describe() + (f", {len(more) + 1} times" if more else "")))
    return out


def findings(topology: Topology, gpu: Gpu) -> list[Finding]:
    """What is wrong with the GPU by its health facts, faults first; [] where nothing is or none is known."""
    h = gpu.health or GpuHealth()
    out = [Finding(code, gpu.index, what) for code, what in _memory(h) + _clocks(h.clocks_event_reasons)]
    if h.persistence_mode is False:
        out.append(Finding("persistence_off", gpu.index, CODES["persistence_off"].title))
    for code, field, name in (
        ("vbios_mismatch", "vbios_version", "VBIOS"),
        ("inforom_mismatch", "inforom_version", "InfoROM image"),
    ):
        odd = _odd_version(topology, gpu, field)
        if odd:
            out.append(Finding(code, gpu.index, f"{name} {odd}"))
    return sorted(out, key=lambda f: f.severity != FAULT)


def _memory(h: GpuHealth) -> list[tuple[str, str]]:
    out = []
    if h.ecc_uncorrected_volatile:
        out.append(
            (
                "ecc_uncorrected",
                f"{counted(h.ecc_uncorrected_volatile, 'uncorrectable ECC error')} since the driver loaded",
            )
        )
    elif h.ecc_uncorrected_aggregate:
        out.append(
            (
                "ecc_uncorrected_lifetime",
                f"{counted(h.ecc_uncorrected_aggregate, 'uncorrectable ECC error')} in the GPU's life",
            )
        )
    if h.remapped_rows_pending:
        out.append(("row_remap_pending", CODES["row_remap_pending"].title))
    if h.remapping_failed:
        out.append(("row_remap_failed", CODES["row_remap_failed"].title))
    if h.retired_pages_pending:
        out.append(("page_retire_pending", CODES["page_retire_pending"].title))
    return out


def _clocks(reasons: int | None) -> list[tuple[str, str]]:
    """The clocks-event reasons judged: thermal and power brake by name, hardware slowdown where neither
    of its causes is set (nvml.h: it is their indicator), software thermal a warning."""
    if not reasons:
        return []
    out = [
        (code, CODES[code].title)
        for bit, code in ((HW_THERMAL, "clocks_hw_thermal"), (HW_POWER_BRAKE, "clocks_power_brake"))
        if reasons & bit
    ]
    if reasons & HW_SLOWDOWN and not out:
        out.append(("clocks_hw_slowdown", CODES["clocks_hw_slowdown"].title))
    if reasons & SW_THERMAL:
        out.append(("clocks_sw_thermal", CODES["clocks_sw_thermal"].title))
    return out


def _odd_version(topology: Topology, gpu: Gpu, field: str) -> str | None:
    """The GPU's firmware version where it is not the one most GPUs of its model in the node have (a
    tie names every side), in words; None where it is, or the version or model is unknown."""
    mine = getattr(gpu.health, field, None)
    if mine is None or gpu.name is None:
        return None
    counts = Counter(getattr(g.health, field, None) for g in topology.gpus if g.name == gpu.name)
    counts.pop(None, None)
    top = max(counts.values())
    if counts[mine] == top and list(counts.values()).count(top) == 1:
        return None
    others = [(v, n) for v, n in counts.most_common() if v != mine]
    have = others[0][0] if len(others) == 1 else ", ".join(f"{v} ({n})" for v, n in others)
    return f"{mine} where {counted(sum(n for _, n in others), 'other GPU')} of its model ({gpu.name}) have {have}"


PASSED_WORDS = (
    (("ecc_uncorrected_volatile",), "no uncorrectable ECC error since the driver loaded"),
    (("remapped_rows_pending", "remapping_failed"), "no row remapping pending or failed"),
    (("retired_pages_pending",), "no page pending retirement"),
    (("clocks_event_reasons",), "no slowdown at rest"),
    (("persistence_mode",), "persistence mode on"),
)


def judged_facts(h: GpuHealth) -> list[str]:
    """The health facts NVML gave that found nothing wrong, in words, for the item's message."""
    return [
        words for fields, words in PASSED_WORDS if all(getattr(h, f) is not None and not _flagged(h, f) for f in fields)
    ]


def _flagged(h: GpuHealth, field: str) -> bool:
    value = getattr(h, field)
    if field == "clocks_event_reasons":
        return bool(value & JUDGED_REASONS)
    if field == "persistence_mode":
        return value is False
    return bool(value)


NOT_REPORTED = {
    "ecc_uncorrected_volatile": "ECC errors",
    "remapped_rows_pending": "row remapping",
    "retired_pages_pending": "page retirement",
    "clocks_event_reasons": "clocks-event reasons",
    "persistence_mode": "persistence mode",
}


def not_reported(h: GpuHealth) -> list[str]:
    """The health facts NVML did not give (unknown: not judged, never healthy). A GPU repairs its memory
    by one of two means, page retirement before Ampere and row remapping from it: where one is
    reported, the other's absence is its generation's, not unknown."""
    unknown = [field for field in NOT_REPORTED if getattr(h, field) is None]
    repair = {"remapped_rows_pending", "retired_pages_pending"}
    if len(repair & set(unknown)) == 1:
        unknown = [field for field in unknown if field not in repair]
    return [NOT_REPORTED[field] for field in unknown]
