"""``nvidia-smi`` text for a machine, as nvidia-smi writes it: ``topo -m`` and ``topo -p2p`` (the
inverse of ``parse.smi_topo``, which reads both back)."""

from __future__ import annotations

from ..core import model
from ..parse.smi_table import UNKNOWN

LEGEND = """Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""

P2P_LEGEND = """Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  DR   = Disabled by regkey
  U    = Unknown
"""


def render_topo_matrix(topology: model.Topology) -> str:
    """``nvidia-smi topo -m`` text (tab-separated, current legend) for the GPUs of ``topology``.
    A pair with no known label is written "?", which reads back as unknown."""
    n = len(topology.gpus)
    lines = ["\t" + "".join(f"GPU{i}\t" for i in range(n)) + "CPU Affinity\tNUMA Affinity"]
    for a, gpu in enumerate(topology.gpus):
        cells = []
        for b in range(n):
            label = topology.link(a, b).label if a != b else None
            cells.append(" X " if a == b else str(label) if label else UNKNOWN)
        numa = "N/A" if gpu.numa_node is None else str(gpu.numa_node)
        lines.append("\t".join([f"GPU{a}", *cells, gpu.cpu_affinity or "", numa]))
    return "\n".join(lines) + "\n\n" + LEGEND


def render_p2p_matrix(topology: model.Topology, cap: str = "read") -> str:
    """``nvidia-smi topo -p2p`` text for one capability ("read", "write", "nvlink", "atomics")."""
    if cap not in model.P2P_CAPS:
        raise ValueError(f"unknown P2P capability {cap!r} (expected one of {model.P2P_CAPS})")
    n = len(topology.gpus)
    lines = [" \t" + "".join(f"GPU{i}\t" for i in range(n))]
    for a in range(n):
        cells = ["X" if a == b else getattr(topology.link(a, b).p2p, cap).value for b in range(n)]
        lines.append(f" GPU{a}\t" + "".join(f"{c}\t" for c in cells))
    return "\n".join(lines) + "\n\n" + P2P_LEGEND
