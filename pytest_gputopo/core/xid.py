"""XID errors: the NVIDIA driver's fault events in the kernel log, read from its lines and judged by
NVIDIA's own resolution for each (issue 44: the node check names each by number and meaning).

The driver logs one line per event, ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the
bus.`` (the PCI address without ``PCI:`` on older drivers: ``NVRM: Xid (0000:01:00): 3, C 00000005 ...``),
behind a dmesg or journal prefix. NVIDIA's Xid catalog gives each XID a mnemonic and an immediate
resolution bucket (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html; the same buckets as
NVIDIA NVSentinel's ``xiderrorsmapping.csv``): ``RESTART_APP`` and ``IGNORE`` are the application's or
nothing, every other bucket (reset the GPU, restart the machine, a workflow for ECC or NVLink) is the
node's. Only the XIDs a node check acts on are listed; another number is named as unlisted, judged
by nothing but its presence. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

APP_BUCKETS = frozenset({"RESTART_APP", "IGNORE"})  # the catalog's buckets that are not the node's fault


@dataclass(frozen=True)
class XidKind:
    """What the catalog says of one XID: its meaning in a few words and NVIDIA's immediate resolution."""

    meaning: str
    resolution: str

    @property
    def node_fault(self) -> bool:
        return self.resolution not in APP_BUCKETS


# number -> (meaning, NVIDIA's immediate resolution bucket)
CATALOG: dict[int, XidKind] = {
    13: XidKind("graphics engine exception (the application's)", "RESTART_APP"),
    31: XidKind("GPU memory page fault (an application's illegal access)", "RESTART_APP"),
    43: XidKind("a channel was reset after an application fault", "IGNORE"),
    45: XidKind("preemptive cleanup after a previous error", "WORKFLOW_XID_45"),
    46: XidKind("GPU stopped processing (timeout)", "RESET_GPU"),
    48: XidKind("double-bit ECC error (uncorrectable memory error)", "WORKFLOW_XID_48"),
    62: XidKind("internal micro-controller (PMU) halt", "RESET_GPU"),
    63: XidKind("ECC page retirement or row remapping recorded", "IGNORE"),
    64: XidKind("ECC page retirement or row remapping failed", "RESET_GPU"),
    74: XidKind("NVLink error", "WORKFLOW_NVLINK_ERR"),
    79: XidKind("GPU has fallen off the bus", "RESTART_BM"),
    92: XidKind("high single-bit ECC error rate", "IGNORE"),
    94: XidKind("contained memory error (the affected application ended)", "RESTART_APP"),
    95: XidKind("uncontained memory error", "RESET_GPU"),
    109: XidKind("context switch timeout", "RESET_GPU"),
    119: XidKind("GSP RPC timeout", "RESET_GPU"),
    120: XidKind("GSP error", "RESET_GPU"),
    136: XidKind("NVLink link training failed", "RESET_GPU"),
    140: XidKind("unrecoverable ECC error escaped containment", "RESET_GPU"),
    143: XidKind("GPU initialization failed", "RESET_GPU"),
    155: XidKind("NVLink software-defined error", "RESET_GPU"),
    158: XidKind("GPU fatal timeout", "RESET_GPU"),
}
for _xid in range(144, 151):  # NVLink 5 errors (SAW, RLW, TLW, TREX, NVLPW, NETIR, MSE)
    CATALOG[_xid] = XidKind("NVLink 5 error", "WORKFLOW_NVLINK5_ERR")

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=..." and the older "NVRM: Xid (0000:01:00): 3, C 0000..."
_PCI = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
PCI_ADDRESS = re.compile(_PCI)
_LINE = re.compile(rf"NVRM: Xid \((?:PCI:)?(?P<pci>{_PCI})\): (?P<xid>\d{{1,4}})\b(?P<rest>.*)")
MAX_LINE = 4096  # longer kernel log lines are cut before they are read
MAX_XIDS = 256  # the events a node keeps: the last ones (a driver in a loop logs thousands)


@dataclass(frozen=True)
class XidEvent:
    """One XID line: the GPU's PCI address as the driver wrote it, the number, and the line's text after it."""

    pci: str
    xid: int
    text: str

    @property
    def kind(self) -> XidKind | None:
        return CATALOG.get(self.xid)

    def describe(self) -> str:
        """``Xid 79 (GPU has fallen off the bus; NVIDIA: RESTART_BM) on PCI 0000:3b:00``."""
        kind = self.kind
        said = f"{kind.meaning}; NVIDIA: {kind.resolution}" if kind else "not in the plugin's list of XIDs"
        return f"Xid {self.xid} ({said}) on PCI {self.pci}"


def xid_events(log: str) -> list[XidEvent]:
    """Every XID line of a kernel log (dmesg, journalctl -k, /dev/kmsg records), in order."""
    events = []
    for line in log.splitlines():
        found = _LINE.search(line[:MAX_LINE])
        if found:
            rest = found["rest"].lstrip(",").strip()
            events.append(XidEvent(found["pci"].lower(), int(found["xid"]), rest))
    return events


def node_faults(events: list[XidEvent]) -> list[XidEvent]:
    """The events that are the node's to act on: a listed XID whose resolution is not the application's,
    or an XID the list does not hold (unknown is never passed as healthy)."""
    return [e for e in events if e.kind is None or e.kind.node_fault]
