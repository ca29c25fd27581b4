"""One node of a fleet as the fleet view compares it: its kind (the GPU model), its facts (a link class,
a width, a version: one string each, ``None`` where its document does not say) and its measured figures,
each filed under the class of thing it measured so that peers' figures of the same class compare.

A fleet holds thousands of nodes, whose fact names ("GPU3 PCIe max"), values ("NV18"), figure names and
classes repeat from node to node: each is kept once (``_shared``), so a node of 8 GPUs costs about 10 KB
(docs/performance.md, "The fleet view"), and nothing of its document is kept but what the judge reads."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, overload

from . import keys, model
from .faults import Fault, check_fault, figure_fault, topology_faults
from .units import counted, size_text

UNKNOWN_MODEL = "unknown GPU"

_SETS: dict[frozenset[str], frozenset[str]] = {}


@overload
def _shared(text: str) -> str: ...
@overload
def _shared(text: str | None) -> str | None: ...
def _shared(text: str | None) -> str | None:
    """One copy of a string that repeats across nodes (a fact's name or value, a figure's class)."""
    return sys.intern(text) if type(text) is str else text


def _shared_set(names: frozenset[str]) -> frozenset[str]:
    """One copy of a set of fact names that nodes of one shape share (their per-GPU facts)."""
    if len(_SETS) > 1024:  # hostile documents of many shapes: the cache stays small
        _SETS.clear()
    return _SETS.setdefault(names, names)


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured figure: what it measured (``what``), the class it is compared within
    (``cls``: the figure kind and what bounds it, "P2P copy over NV18")."""

    what: str
    cls: str
    gbps: float


@dataclass(frozen=True, slots=True)
class Node:
    name: str  # the host name its document gives, else the document's file name
    path: str  # the document it was read from
    kind: str  # the GPU model ("8x" is a fact, so a node that lost a GPU stays among its peers)
    facts: dict[str, str | None]
    figures: tuple[Figure, ...] = ()
    when: str | None = None  # when the document was written, as it says
    notes: tuple[str, ...] = ()  # what its document does not let the fleet view judge
    per_gpu: frozenset[str] = field(default_factory=frozenset)  # the facts that name a GPU or a pair
    uuids: tuple[str | None, ...] = ()  # its GPUs': which node a document is of (a node is its GPUs)
    faults: tuple[Fault, ...] = ()  # what is wrong by its own facts, whatever its peers hold (core.faults)
    judged_because: str = ""  # why this document is the node's judged one (core.fleet.roster)


def _p2p_text(p2p: model.P2P) -> str:
    read, write = p2p.read.value, p2p.write.value
    return read if read == write else f"read {read}, write {write}"


def _pcie(gen: int | None, width: int | None) -> str | None:
    return None if gen is None or width is None else f"Gen{gen} x{width}"


def _gpu_facts(gpu: model.Gpu) -> dict[str, str | None]:
    name = f"GPU{gpu.index}"
    # The width now, not the generation: an idle GPU drops to Gen1 to save power (nvidia-smi -q:
    # "Link Gen Current"), so a node judged at rest must not be named for it; its maximum is compared.
    facts = {
        f"{name} PCIe width now": None if gpu.pcie_width_current is None else f"x{gpu.pcie_width_current}",
        f"{name} PCIe max": _pcie(gpu.pcie_gen_max, gpu.pcie_width_max),
        f"{name} NUMA node": None if gpu.numa_node is None else str(gpu.numa_node),
    }
    if gpu.nvlinks:
        facts[f"{name} NVLinks up"] = f"{gpu.active_nvlinks} of {len(gpu.nvlinks)}"
    return facts


def _figure_class(key: keys.Key, topology: model.Topology) -> str | None:
    """The class a figure is compared within: a copy by its pair's link class, a host copy by its GPU's
    PCIe capability (so a link trained down is compared with its peers' full ones), an all-reduce by its
    ranks and size. None for what is no bandwidth (NCCL's transports)."""
    if isinstance(key, keys.Copy):
        if max(key.src, key.dst) >= len(topology.gpus):
            return None
        label = topology.link(key.src, key.dst).label
        return f"{key.kind} copy over {label or 'an unknown link'}"
    if isinstance(key, keys.HostCopy):
        if key.gpu >= len(topology.gpus):
            return None
        gpu = topology.gpus[key.gpu]
        return (
            f"{key.kind} {'pinned' if key.pinned else 'pageable'} on "
            f"{_pcie(gpu.pcie_gen_max, gpu.pcie_width_max) or 'unknown PCIe'}"
        )
    if isinstance(key, keys.AllReduce):
        on = f" on GPUs {','.join(map(str, key.devices))}" if key.devices else ""
        return f"all-reduce busbw, {counted(key.ranks, 'rank')}{on}, {size_text(key.size_bytes)}"
    return None


def node_of(
    topology: model.Topology,
    *,
    name: str,
    path: str,
    figures: Iterable[tuple[Any, ...]] = (),
    when: str | None = None,
    notes: tuple[str, ...] = (),
    software: dict[str, Any] | None = None,
    failed_checks: Iterable[tuple[str, str]] = (),
    identified: bool = True,
) -> Node:
    """``figures``: (key, GB/s, origin[, how[, error[, nvls]]]) of the document's measurements, ``how``
    the backend of an all-reduce, ``error`` what was wrong with its data, ``nvls`` whether NCCL took
    NVLink SHARP; only measured ones are compared (a recorded figure is another machine's, published).
    ``software``: the installed versions a run's document records (torch, pytest-gputopo).
    ``failed_checks``: (item, message) of each check item the document marks failed. ``identified``:
    whether its GPUs' UUIDs are the node's own (NVML's on it), not a recording's: only those say which
    node a document is of."""
    models = sorted({g.name or UNKNOWN_MODEL for g in topology.gpus})
    facts: dict[str, str | None] = {"GPUs": _shared(str(len(topology.gpus)))}
    per_gpu: set[str] = set()
    for gpu in topology.gpus:
        for fact, value in _gpu_facts(gpu).items():
            facts[_shared(fact)] = _shared(value)
            per_gpu.add(fact)
    for link in topology.pairs():
        for fact, value in (
            (f"{link.name} link", None if link.label is None else str(link.label)),
            (f"{link.name} P2P", _p2p_text(link.p2p)),
        ):
            facts[_shared(fact)] = _shared(value)
            per_gpu.add(fact)
    facts["NICs"] = _shared(", ".join(sorted(topology.nics))) if topology.nics else None
    for fact, value in (
        ("driver", topology.driver_version),
        ("CUDA (driver)", topology.cuda_driver_version),
        ("CUDA runtime (torch)", topology.cuda_runtime_version),
        ("NCCL (torch)", topology.nccl_version),
        ("torch", (software or {}).get("torch")),
        ("pytest-gputopo", (software or {}).get("pytest-gputopo")),
    ):
        facts[fact] = _shared(value) if isinstance(value, str) or value is None else None
    read, skipped = [], list(notes)
    faults = {f.name: f for f in topology_faults(topology)}
    pairs: dict[Any, Any] = {}  # each pair's expected copy figure, looked up once
    # (key, GB/s, origin, backend, error, nvls) of each figure, the last three None where not given
    figures = [(*figure, None, None, None)[:6] for figure in figures]
    staged = {  # each P2P copy's staged twin with good data, which the run's rule sets beside it
        key: gbps
        for key, gbps, origin, _, error, _ in figures
        if key.kind == "p2p_staged" and origin == "measured" and gbps is not None and not error
    }
    for key, gbps, origin, *how in figures:
        cls = _figure_class(key, topology)
        if cls is None or gbps is None:
            continue
        if how[0]:  # how it was measured, where that changes the figure: gloo's CPUs, NCCL's GPUs
            cls = f"{cls}, {how[0]}"
        if origin != "measured":
            skipped.append(_shared(f"{key.describe()}: {origin}, not measured on this node: not compared"))
            continue
        fault = figure_fault(
            topology,
            key,
            float(gbps),
            key.describe(),
            error=how[1],
            backend=how[0],
            nvls=how[2],
            pairs=pairs,
            staged_gbps=staged.get(key.staged()) if isinstance(key, keys.Copy) else None,
        )
        if fault is not None:
            faults.setdefault(fault.name, fault)
        read.append(Figure(_shared(key.describe()), _shared(cls), float(gbps)))
    for item, message in failed_checks:  # the document's own verdicts; one already found here is one fault
        faults.setdefault(item, check_fault(item, message))
    return Node(
        name=name,
        path=path,
        kind=_shared(" + ".join(models)) if models else "no GPU",
        facts=facts,
        figures=tuple(read),
        when=_shared(when),
        notes=tuple(dict.fromkeys(skipped)),
        per_gpu=_shared_set(frozenset(per_gpu)),
        uuids=tuple(g.uuid for g in topology.gpus) if identified else (),
        faults=tuple(faults.values()),
    )
