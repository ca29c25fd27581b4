"""The machine as this process's CUDA numbers it: ``cuda:0..n-1``, the GPUs CUDA_VISIBLE_DEVICES
leaves, in CUDA's order, with CUDA's own peer-access answers joined where it gave them."""

from __future__ import annotations

import dataclasses

from ..core import model
from ..runtime import environ as runtime


def as_cuda_sees_it(topology: model.Topology, view) -> model.Topology:
    """Reorder to CUDA's numbering (CUDA's own answer when there is one, else the environment's
    CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES), and join CUDA's peer-access answers."""
    warnings = list(topology.warnings)
    if view is not None and runtime.mig_visible():
        # CUDA reports a MIG instance with its parent GPU's bus id: joined by bus id, the instance
        # would inherit the whole GPU's NVLinks and P2P. It is not mapped to a GPU at all (as below).
        view = None
    if view is not None:
        by_bus = {(g.pci_bus_id or "").upper(): i for i, g in enumerate(topology.gpus)}
        ordinals = [c for c, b in enumerate(view.bus_ids) if b in by_bus]  # CUDA's devices NVML lists
        order = [by_bus[view.bus_ids[c]] for c in ordinals]
        if len(order) != len(view.bus_ids):
            warnings.append("CUDA sees devices NVML does not list; they are left out")
    else:
        vis = runtime.visible_gpus(topology.gpus)
        order, warnings = list(vis.order), warnings + list(vis.warnings)
    topology = topology.restrict(order)
    if view is not None:
        links = []
        for ln in topology.links:
            peer = view.peer.get((ordinals[ln.a], ordinals[ln.b]))
            if peer is not None and ln.p2p.read_write is not None and peer != ln.p2p.read_write:
                warnings.append(f"{ln.name}: NVML says P2P is {'OK' if ln.p2p.read_write else 'refused'}, "
                                f"CUDA says peer access is {'possible' if peer else 'impossible'}")
            links.append(dataclasses.replace(ln, cuda_peer=peer))
        topology = dataclasses.replace(topology, links=tuple(links))
    return dataclasses.replace(topology, warnings=tuple(warnings))
