"""What is wrong with a node by its own facts alone, whatever its peers hold: the findings with an
inherent healthy value. The fleet view names a node for each of these however many of its peers share
it, even all of them (``core.fleet``); only facts with no healthy value of their own (versions, figures
above their floor, the NUMA layout) are left to the comparison with peers.

Pure. Each rule is the one the node's own health check applies, called here, not restated:

- NVLinks down: ``core.nvlinks.nvlink_lost`` (against the GPU's own link count);
- the NVLink fabric not up where the GPU has one (``fabric_down``: NVML's GPU fabric state Not Started
  or In Progress, or a completed registration whose status is an error), or up and unhealthy by its
  health mask (``core.fabric_health``);
- a GPU NVML lists that CUDA does not enumerate (``Topology.cuda_unlisted``: the cuda item's);
- PCIe narrower than the GPU's own maximum width (``core.regressions.pcie_trained_down`` words it);
- P2P refused where the GPU model and chipset allow it (``p2p_refused``: NVML's GNS and CNS are cards
  and chipsets without P2P, no fault);
- a figure under the floor the plugin's threshold rule sets for that GPU and link
  (``core.judgement.threshold`` with the default floors), or whose data came back wrong;
- a GPU's health at rest (``core.health``'s faults: ECC, row remapping, page retirement, clocks held down);
- a check item the node's own document marks failed.

A GPU with MIG enabled has no NVLink or P2P fact a process sees: those are not judged on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import collectives, fabric_health, health, keys, spec
from .judgement import BELOW, BROKEN, STAGED, Judgement, Measured, threshold
from .model import Gpu, Link, P2PStatus, Topology, unlisted_line
from .nvlinks import nvlink_lost
from .regressions import pcie_trained_down
from .requirements import mig_enabled
from .thresholds import DEFAULT_FLOORS

NOT_A_FAULT = frozenset({P2PStatus.OK, P2PStatus.UNKNOWN, P2PStatus.GPU_NOT_SUPPORTED, P2PStatus.CHIPSET_NOT_SUPPORTED})
# What a refusal usually means, where NVML's one word does not say it (nvidia-smi topo -p2p's legend
# gives only the words): TNS, "topology not supported", is the PCIe path refusing peer traffic.
P2P_MEANS = {
    P2PStatus.TOPOLOGY_NOT_SUPPORTED: "the PCIe path between them refuses peer traffic: usually ACS "
    "on a PCIe switch or root port, or the IOMMU, redirecting it",
    P2PStatus.DISABLED_BY_REGKEY: "turned off by a driver registry key",
}
_GPU = re.compile(r"GPU\d+")


@dataclass(frozen=True)
class Fault:
    """One thing wrong with a node by its own facts. ``name``: as the check item that judges it is
    named ("nvlink[GPU5]", "p2p_status[GPU0-GPU1]"), so a document's failed item and the same fault
    found here are one; ``line``: the fault in one line, its subject first; ``gpus``: the GPUs it is
    about (a pair, one GPU, or none); ``what``: the problem without its subject, to count alike faults;
    ``explains``: the node's facts (``core.fleet_facts``) and figures (their ``what``) it accounts for,
    which are then not compared with its peers' (the node is named for them already)."""

    name: str
    line: str
    gpus: tuple[str, ...] = ()
    what: str = ""
    explains: tuple[str, ...] = ()


def p2p_refused(link: Link) -> str | None:
    """NVML's refusal of P2P on a pair where its GPU model and chipset allow P2P, in words (with what it
    usually means); None when nothing is refused, the status is unknown, or the card or chipset has no
    P2P (GNS, CNS: GeForce cards report either)."""
    statuses = {link.p2p.read, link.p2p.write}
    if statuses <= NOT_A_FAULT:
        return None
    refused = sorted((s for s in statuses if s not in (P2PStatus.OK, P2PStatus.UNKNOWN)), key=lambda s: s.value)
    return ", ".join(f"{s.value} ({s.description}" + (f": {P2P_MEANS[s]})" if s in P2P_MEANS else ")") for s in refused)


def fabric_down(gpu: Gpu) -> str | None:
    """Why the GPU's NVLink fabric is not up, where it has one (``model.Fabric.up`` is False), or not
    healthy by NVML's health mask (``fabric_health.problem``: bandwidth degraded, a route unhealthy,
    ...); None when it is up and nothing in its mask is a fault, the GPU has none (Not Supported) or no
    source said (unknown is never a fault)."""
    if gpu.fabric is None:
        return None
    return gpu.fabric.problem or (fabric_health.problem(gpu.fabric.health_mask) if gpu.fabric.up else None)


def topology_faults(topology: Topology) -> list[Fault]:
    """The faults the node's facts show: NVLinks down, the NVLink fabric not up, PCIe trained down,
    P2P refused."""
    out = []
    if topology.cuda_unlisted:  # the cuda item's: one item, every GPU it lacks (issue 39 item 3)
        what = unlisted_line(topology.cuda_unlisted)
        out.append(Fault("cuda", what, (), "CUDA does not enumerate a GPU NVML lists", ("GPUs",)))
    for gpu in topology.gpus:
        name = f"GPU{gpu.index}"
        down = fabric_down(gpu)
        if down:
            out.append(Fault(f"fabric[{name}]", f"{name}: {down}", (name,), down))
        width, full = gpu.pcie_width_current, gpu.pcie_width_max
        if width is not None and full is not None and width < full:
            what = pcie_trained_down(gpu, full, "its maximum width")
            out.append(Fault(f"pcie[{name}]", f"{name} {what}", (name,), what, (f"{name} PCIe width now",)))
        if gpu.nvlinks and not mig_enabled(topology, [gpu.index]):
            lost = nvlink_lost(topology, gpu)
            if lost:
                pairs = [ln for ln in topology.pairs() if gpu.index in (ln.a, ln.b)]
                explains = (f"{name} NVLinks up",) + tuple(f"{ln.name} link" for ln in pairs)
                out.append(Fault(f"nvlink[{name}]", f"{name}: {lost}", (name,), lost, explains))
    out.extend(health_faults(topology))
    for link in topology.pairs():
        if mig_enabled(topology, [link.a, link.b]):
            continue
        refused = p2p_refused(link)
        if refused:
            label = link.label or "unknown link"
            what = f"refused by NVML: {refused}"
            out.append(
                Fault(
                    f"p2p_status[{link.name}]",
                    f"{link.name} ({label}): P2P {what}",
                    (f"GPU{link.a}", f"GPU{link.b}"),
                    what,
                    (f"{link.name} P2P",),
                )
            )
    return out


def health_faults(topology: Topology) -> list[Fault]:
    """Each GPU's health faults (``core.health``: the check's ``health[GPU<i>]`` item), one per GPU, and
    the node's (its ``pci`` and ``xid`` items); warnings are no fault."""
    out = []
    for gpu in topology.gpus:
        found = [f for f in health.findings(topology, gpu) if f.severity == health.FAULT]
        if found:
            name = f"GPU{gpu.index}"
            line = f"{name}: " + "; ".join(f.text() for f in found)
            kinds = "; ".join(f"{health.CODES[f.code].title} ({f.code})" for f in found)  # alike on every node
            out.append(Fault(f"health[{name}]", line, (name,), kinds))
    node = health.node_findings(topology)
    for item, code in NODE_ITEMS.items():  # one fault per check item, as the check says it
        found = [f for f in node if f.code == code]
        if found:
            out.append(Fault(item, "; ".join(f.text() for f in found), (), f"{health.CODES[code].title} ({code})"))
    return out


NODE_ITEMS = {"pci": "gpu_off_bus", "xid": "xid"}  # the check's node health items and their codes


def expected(
    topology: Topology,
    key: keys.Key,
    backend: str | None = None,
    pairs: dict[tuple[int, int], spec.Figure | None] | None = None,
) -> tuple[spec.Figure | None, str]:
    """What the link should give for a figure (a ``spec.Figure`` or None) and what that rests on, as a
    run looks it up for its own figures; ``backend``: an all-reduce's ("gloo": CPUs, no link);
    ``pairs``: a pair's figure already looked up on this topology, by (src, dst), filled as it goes."""
    if isinstance(key, keys.Copy) and key.floor is None:  # the staged twin: a reference, no floor of its own
        return None, key.judged_against
    if isinstance(key, keys.Copy):
        pair = (key.src, key.dst)
        if pairs is None or pair not in pairs:  # one pair's copies (one way, both ways) share the lookup
            fig = spec.p2p_expected(topology, key.src, key.dst)
            if pairs is not None:
                pairs[pair] = fig
        fig = pairs[pair] if pairs is not None else fig
        if fig is not None and key.kind == "p2p_bidir":
            fig = spec.Figure(2 * fig.gbps, fig.source, f"2 x {fig.label or 'the link'} (both directions)")
        return fig, (fig.label if fig else "no figure for the link")
    if isinstance(key, keys.HostCopy):
        fig = spec.h2d_expected(topology.gpus[key.gpu], key.pinned)
        return fig, (fig.label if fig else "an unknown PCIe link")
    if isinstance(key, keys.AllReduce) and backend != "gloo":
        fig = collectives.allreduce_expected_busbw(topology, key.ranks, key.devices)
        return fig, (fig.label if fig else "no figure for the links")
    return None, "no link to judge it by"


def _gpus_of(key: keys.Key) -> tuple[str, ...]:
    if isinstance(key, keys.Copy):
        return (f"GPU{key.src}", f"GPU{key.dst}")
    if isinstance(key, keys.HostCopy):
        return (f"GPU{key.gpu}",)
    return ()


def _item(key: keys.Key) -> str:
    """The check item that judges the figure, as ``gputopo check --level full`` names it."""
    if isinstance(key, keys.Copy):
        arrow = "<->" if key.kind == "p2p_bidir" else "->"
        return f"{key.kind}_bw[GPU{key.src}{arrow}GPU{key.dst}]"
    if isinstance(key, keys.HostCopy):
        name = "h2d_bw" if key.pinned and key.kind == "h2d" else "h2d_pageable_bw" if key.kind == "h2d" else "d2h_bw"
        return f"{name}[GPU{key.gpu}]"
    return "allreduce_bw"


def figure_fault(
    topology: Topology,
    key: keys.Key,
    gbps: float,
    what: str,
    *,
    error: str | None = None,
    backend: str | None = None,
    nvls: bool | None = None,
    pairs: dict[tuple[int, int], spec.Figure | None] | None = None,
    staged_gbps: float | None = None,
) -> Fault | None:
    """A measured figure under the floor the one threshold rule sets for its GPU and link (the default
    floors: the fleet has no run's settings), whose data came back wrong, or a P2P copy slower than
    its ``staged_gbps`` twin through the host; None otherwise, for a figure nothing says what it should
    reach (unknown is never a fault, nor "assumed OK"), and for one the run does not judge (no floor
    of its own: the staged twin, ``keys.Copy.floor``): the fleet judges a figure only where the run does."""
    if getattr(key, "floor", None) is None:
        return None
    if isinstance(key, (keys.Copy, keys.HostCopy)) and max(keys.gpus_of(key)) >= len(topology.gpus):
        return None
    fig, basis = expected(topology, key, backend, pairs)
    gpu_name = topology.gpus[0].name if topology.gpus else None
    rule = threshold(
        key,
        fig,
        basis,
        DEFAULT_FLOORS,
        (),
        gpu_name,
        size_bytes=key.size_bytes if isinstance(key, keys.AllReduce) else None,
        nvls=nvls,
        one_node=not isinstance(key, keys.AllReduce) or key.ranks <= len(topology.gpus),
    )
    twin = staged_gbps if isinstance(key, keys.Copy) and key.kind == "p2p" else None
    judged = Judgement(Measured(gbps, "measured", what, error=error), rule, twin)
    state = judged.state
    if state == BROKEN:
        problem, kind = f"data came back wrong ({error})", "data came back wrong"
    elif state == BELOW:
        problem, kind = judged.describe(), "under its floor"
    elif state == STAGED:
        problem = f"{judged.describe()}; slower than the same copy staged through the host ({twin:g} GB/s): not P2P"
        kind = "slower than staging through the host"
    else:
        return None
    return Fault(_item(key), f"{what}: {problem}", _gpus_of(key), kind, (what,))


def check_fault(name: str, message: str) -> Fault:
    """A check item the node's document marks failed: ``name`` as the check names it
    ("nvlink[GPU5]", "topology"), ``message`` what it said."""
    inside = name[name.index("[") + 1 :] if "[" in name else ""
    gpus = tuple(dict.fromkeys(_GPU.findall(inside)))[:2]
    return Fault(name, f"check {name} failed: {message}", gpus, f"check {name.split('[')[0]} failed")
