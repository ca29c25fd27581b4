"""Whether a GPU's NVLinks that are down are a fault of the node: one rule, used by the ``nvlink[GPUn]``
check item and by the reports that colour a GPU's NVLink count."""

from __future__ import annotations

from .model import Gpu, Topology


def nvlink_faults(topology: Topology) -> dict[str, str]:
    """Each GPU whose NVLinks down are a fault (``nvlink_lost``), by its index as text: what a report
    document carries beside its topology, so that a report colours the links as the check judged them."""
    found = {str(g.index): nvlink_lost(topology, g) for g in topology.gpus}
    return {index: fault for index, fault in found.items() if fault}


def nvlink_lost(topology: Topology, gpu: Gpu) -> str | None:
    """What is wrong with ``gpu``'s NVLinks, in words; None when nothing is. Each GPU is judged alone:

    - some links up and some down: a fault (a lost link, or a card missing one of its several bridges);
    - every link up: none;
    - none up: a GPU without NVLink (NVLink-capable PCIe cards without a bridge, A100/H100 PCIe and RTX
      A6000, list every link, all down), even beside a bridged pair of its model; a fault only where
      evidence says it had links: a pair of it carries NV# in the link matrix (``nvidia-smi topo -m``
      counted links now down), or another GPU of its model (same name) reaches an NVSwitch or more
      than one device over NVLink: a bridge joins two cards only, so that model sits on a board or
      fabric (HGX, DGX, GB200) that every GPU of it is on.

    A GPU with fewer active links than a healthy node's is the reference's to catch: ``--gputopo-expect``
    compares each physical GPU's active links in the run gate, before any check runs
    (``core.regressions``). Two bridged cards that both lost the bridge have no such evidence here."""
    down = [ln.link for ln in gpu.nvlinks if not ln.active]
    fault = f"NVLinks {down} are down ({gpu.active_nvlinks}/{len(gpu.nvlinks)} up)"
    if not down:
        return None
    if gpu.active_nvlinks:
        return fault
    if any(ln.nvlinks for ln in topology.links if gpu.index in (ln.a, ln.b)):
        return fault
    for peer in topology.gpus:
        if peer.index == gpu.index or peer.name != gpu.name or not peer.active_nvlinks:
            continue
        active = [ln for ln in peer.nvlinks if ln.active]
        ends = len({ln.remote_bus_id.lower() for ln in active if ln.remote_bus_id})
        nv_pairs = sum(1 for ln in topology.links if peer.index in (ln.a, ln.b) and ln.nvlinks)
        if any(ln.remote_type == "SWITCH" for ln in active) or max(ends, nv_pairs) > 1:
            return fault
    return None
