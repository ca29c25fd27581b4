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
    if view is None:
        vis = runtime.visible_gpus(topology.gpus)
        topology = topology.restrict(vis.order)
        return dataclasses.replace(topology, warnings=tuple(warnings + list(vis.warnings)))
    placed = [_nvml_gpu(topology.gpus, view, c) for c in range(len(view.bus_ids))]
    lost = _unlisted(topology, placed)
    topology = dataclasses.replace(topology, cuda_unlisted=lost)
    warnings += [model.unlisted_line(lost) + ": no CUDA process can use it"] if lost else []
    for c, at in enumerate(placed):
        if at is None:
            warnings.append(
                f"CUDA device {c} (PCI {view.bus_ids[c]}) is no GPU NVML lists: its facts are unknown, "
                f"and it keeps its number cuda:{c} (the GPUs after it are not renumbered)"
            )
    topology = _numbered(topology, placed, view)
    links = []
    for ln in topology.links:
        peer = view.peer.get((ln.a, ln.b))  # the GPUs' indices are CUDA's ordinals now
        if peer is not None and ln.p2p.read_write is not None and peer != ln.p2p.read_write:
            warnings.append(
                f"{ln.name}: NVML says P2P is {'OK' if ln.p2p.read_write else 'refused'}, "
                f"CUDA says peer access is {'possible' if peer else 'impossible'}"
            )
        links.append(dataclasses.replace(ln, cuda_peer=peer))
    return dataclasses.replace(topology, links=tuple(links), warnings=tuple(warnings))


def _unlisted(topology: model.Topology, placed: list) -> tuple[model.UnlistedGpu, ...] | None:
    """The GPUs NVML lists, the environment leaves visible and CUDA does not enumerate
    (``model.cuda_unlisted``; issue 39 item 3: 8 GPUs do not become 7 without a word)."""
    visible = runtime.cuda_environment()["CUDA_VISIBLE_DEVICES"]
    by_index = visible is not None and any(e.strip().lstrip("-").isdigit() for e in visible.split(","))
    return model.cuda_unlisted(topology.gpus, runtime.visible_gpus(topology.gpus).order, placed, by_index)


def _nvml_gpu(gpus, view, ordinal: int) -> int | None:
    """The NVML GPU that is CUDA's device ``ordinal``: by UUID where both gave one, else by PCI bus id;
    None where none is (NVML could not read that GPU, or does not list it)."""
    uuid = view.uuids[ordinal] if view.uuids else None
    if uuid:
        hits = [i for i, g in enumerate(gpus) if (g.uuid or "").lower() == uuid.lower()]
        if hits:
            return hits[0]
    hits = [i for i, g in enumerate(gpus) if (g.pci_bus_id or "").upper() == view.bus_ids[ordinal]]
    return hits[0] if hits else None


def _numbered(topology: model.Topology, placed: list, view) -> model.Topology:
    """The GPUs at CUDA's ordinals: each NVML placed at its own, and a device NVML could not place kept
    at its ordinal with nothing known but what CUDA said (its bus id, UUID), its links unknown, so
    that no GPU after it takes another's number."""
    order = [at for at in placed if at is not None]
    known = topology.restrict(order)  # the placed GPUs, 0..k-1 in CUDA's order
    if len(order) == len(placed):
        return known
    ordinal = [c for c, at in enumerate(placed) if at is not None]  # known's index -> CUDA ordinal
    gpus = {ordinal[i]: dataclasses.replace(g, index=ordinal[i]) for i, g in enumerate(known.gpus)}
    for c, at in enumerate(placed):
        if at is None:
            gpus[c] = model.Gpu(c, uuid=view.uuids[c] if view.uuids else None, pci_bus_id=view.bus_ids[c])
    by_pair = {
        (ordinal[ln.a], ordinal[ln.b]): dataclasses.replace(ln, a=ordinal[ln.a], b=ordinal[ln.b]) for ln in known.links
    }
    n = len(placed)
    links = [
        by_pair.get((a, b)) or model.Link(a, b, pcie=None, nvlinks=None) for a in range(n) for b in range(a + 1, n)
    ]
    return dataclasses.replace(
        known,
        gpus=tuple(gpus[c] for c in range(n)),
        links=tuple(links),
        published=model.renumber_figures(known.published, dict(enumerate(ordinal))),
    )
