"""One node of a fleet as the fleet view compares it: its kind (the GPU model), its facts (a link class,
a width, a version: one string each, ``None`` where its document does not say) and its measured figures,
each filed under the class of thing it measured so that peers' figures of the same class compare.

A fleet holds thousands of nodes, whose fact names ("GPU3 PCIe max"), values ("NV18"), figure names and
classes repeat from node to node: each is kept once (``_shared``), and so are the tuples of them that
nodes of one shape have alike (``_one``): a node keeps its figures' GB/s (8 bytes each), its GPUs' UUIDs
and references, about 2 KB for a node of 8 GPUs and 165 figures (docs/performance.md, "The fleet view");
nothing of its document is kept but what the judge reads. What nodes of one topology have alike (their
facts, each pair's expected copy figure, each figure's class) is found once while a fleet is read
(``Shapes``)."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, overload

from . import keys, model, spec
from .faults import Fault, check_fault, figure_fault, topology_faults
from .units import counted, size_text

UNKNOWN_MODEL = "unknown GPU"
LISTED = 5  # names a line lists before "and N more" (the JSON lists them all)

_T = TypeVar("_T")
# One copy of each tuple or set that nodes of one shape have alike (fact names, their values, figures'
# names and classes), and what is derived from one; bounded, so hostile documents of many shapes keep
# them small.
_ONE: dict[Any, Any] = {}
_INDEXES: dict[tuple[str, ...], dict[str, int]] = {}  # fact names -> each one's position
_CLASSES: dict[tuple[tuple[str, str], ...], dict[str, tuple[int, ...]]] = {}  # figures -> each class's
_MOST_SHAPES = 4096


@overload
def _shared(text: str) -> str: ...
@overload
def _shared(text: str | None) -> str | None: ...
def _shared(text: str | None) -> str | None:
    """One copy of a string that repeats across nodes (a fact's name or value, a figure's class)."""
    return sys.intern(text) if type(text) is str else text


def _one(value: _T) -> _T:
    """One copy of a hashable value (a tuple, a frozenset) that many nodes hold alike."""
    if len(_ONE) > _MOST_SHAPES:
        _ONE.clear()
    return _ONE.setdefault(value, value)  # type: ignore[no-any-return]  # the value itself, or its equal


def listed(names: Iterable[str]) -> str:
    """The first ``LISTED`` names, and how many more."""
    names = list(names)
    more = len(names) - LISTED
    return ", ".join(names[:LISTED]) + (f" and {more} more" if more > 0 else "")


class Facts(Mapping[str, str | None]):
    """A node's facts (fact -> value), in the order ``node_of`` gives them. The names are one tuple (and
    one index) for every node of a shape, the values one tuple for every node alike: a node keeps two
    references, where a dict of its own would be 5 KB."""

    __slots__ = ("_index", "_values")

    def __init__(self, facts: Mapping[str, str | None]) -> None:
        names = _one(tuple(facts))
        index = _INDEXES.get(names)
        if index is None:
            if len(_INDEXES) > _MOST_SHAPES:
                _INDEXES.clear()
            index = _INDEXES.setdefault(names, {name: i for i, name in enumerate(names)})
        self._index = index
        self._values: tuple[str | None, ...] = _one(tuple(facts.values()))

    def __getitem__(self, name: str) -> str | None:
        return self._values[self._index[name]]

    def get(self, name: str, default: Any = None) -> Any:  # the judge's lookup: no KeyError raised and caught
        i = self._index.get(name)
        return default if i is None else self._values[i]

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Facts({dict(self)!r})"


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured figure: what it measured (``what``), the class it is compared within
    (``cls``: the figure kind and what bounds it, "P2P copy over NV18")."""

    what: str
    cls: str
    gbps: float


class Figures:
    """A node's measured figures, in its document's order: what each measured and its class (``layout``,
    one tuple for every node measured alike) and their GB/s (``gbps``, 8 bytes each, no float object)."""

    __slots__ = ("layout", "gbps", "_classes")

    def __init__(self, layout: Iterable[tuple[str, str]] = (), gbps: Iterable[float] = ()) -> None:
        self.layout: tuple[tuple[str, str], ...] = _one(tuple(layout))
        self.gbps = array("d", gbps)
        if len(self.layout) != len(self.gbps):
            raise ValueError(f"{len(self.layout)} figures named, {len(self.gbps)} figures given")
        self._classes: dict[str, tuple[int, ...]] | None = None

    def __len__(self) -> int:
        return len(self.layout)

    def __iter__(self) -> Iterator[Figure]:
        return (Figure(what, cls, gbps) for (what, cls), gbps in zip(self.layout, self.gbps, strict=True))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Figures) and self.layout == other.layout and self.gbps == other.gbps

    def __hash__(self) -> int:
        return hash((self.layout, self.gbps.tobytes()))

    def __repr__(self) -> str:
        return f"Figures({list(self)!r})"

    def classes(self) -> dict[str, tuple[int, ...]]:
        """Each class's figures (their positions), classes in the order of their first figure; one dict
        for every node measured alike."""
        if self._classes is not None:
            return self._classes
        found = _CLASSES.get(self.layout)
        if found is None:
            if len(_CLASSES) > _MOST_SHAPES:
                _CLASSES.clear()
            by: dict[str, list[int]] = {}
            for i, (_, cls) in enumerate(self.layout):
                by.setdefault(cls, []).append(i)
            found = _CLASSES.setdefault(self.layout, {cls: tuple(at) for cls, at in by.items()})
        self._classes = found
        return found


NO_FIGURES = Figures()


class Uuids(Sequence[str | None]):
    """A node's GPUs' UUIDs, in its GPUs' order: one string of them where each is a string with no line
    break (8 GPUs' keep 0.4 KB, where a tuple of 8 strings is 0.8 KB), else the tuple itself."""

    __slots__ = ("_held",)

    def __init__(self, uuids: Iterable[str | None] = ()) -> None:
        given = tuple(uuids)
        one = bool(given) and all(type(u) is str and "\n" not in u for u in given)
        self._held: str | tuple[str | None, ...] = "\n".join(given) if one else given  # type: ignore[arg-type]

    def _all(self) -> tuple[str | None, ...]:
        return tuple(self._held.split("\n")) if isinstance(self._held, str) else self._held

    @overload
    def __getitem__(self, i: int) -> str | None: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[str | None, ...]: ...
    def __getitem__(self, i: int | slice) -> str | None | tuple[str | None, ...]:
        return self._all()[i]

    def __iter__(self) -> Iterator[str | None]:
        return iter(self._all())

    def __len__(self) -> int:
        return self._held.count("\n") + 1 if isinstance(self._held, str) else len(self._held)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (tuple, Uuids)) and self._all() == tuple(other)

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return repr(self._all())


@dataclass(frozen=True, slots=True)
class Node:
    name: str  # the host name its document gives, else the document's file name
    path: str  # the document it was read from
    kind: str  # the GPU model ("8x" is a fact, so a node that lost a GPU stays among its peers)
    facts: Mapping[str, str | None]
    figures: Figures = NO_FIGURES
    when: str | None = None  # when the document was written, as it says
    notes: tuple[str, ...] = ()  # what its document does not let the fleet view judge
    per_gpu: frozenset[str] = field(default_factory=frozenset)  # the facts that name a GPU or a pair
    uuids: Sequence[str | None] = ()  # its GPUs': which node a document is of (a node is its GPUs)
    faults: tuple[Fault, ...] = ()  # what is wrong by its own facts, whatever its peers hold (core.faults)
    judged_because: str = ""  # why this document is the node's judged one (core.fleet_roster.roster)


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


def _topology_facts(topology: model.Topology) -> tuple[dict[str, str | None], frozenset[str]]:
    """The facts of a node's topology, and which of them name a GPU or a pair (compared only among
    nodes of as many GPUs)."""
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
    ):
        facts[fact] = _shared(value)
    return facts, _one(frozenset(per_gpu))


def _facts(shape: _Shape, software: dict[str, Any] | None) -> Facts:
    """The node's facts: its topology's, then the versions its run's document records."""
    facts = dict(shape.facts)
    for fact in ("torch", "pytest-gputopo"):
        value = (software or {}).get(fact)
        facts[fact] = _shared(value) if isinstance(value, str) else None
    return Facts(facts)


@dataclass
class _Shape:
    """What every node of one topology has alike, whatever its host name and GPU UUIDs: its facts, its
    GPU model, and what a figure of each key is and is held to (each pair's expected copy figure), found
    once for a fleet of such nodes rather than once a node."""

    facts: dict[str, str | None]
    per_gpu: frozenset[str]
    kind: str
    pairs: dict[tuple[int, int], spec.Figure | None] = field(default_factory=dict)
    figures: dict[keys.Key, tuple[str, str | None]] = field(default_factory=dict)  # key -> (what, class)


class Shapes:
    """The shapes of the topologies of the documents read so far, each found once: a fleet's nodes are of
    a few (a GPU model or two, and the odd degraded node). Kept while the fleet's documents are read
    (``cli.fleet_documents``), no longer: ``most`` of them (0.1 MB each, and more of the reading's memory
    kept from reuse: two cost 0.4 MB over 1,000 nodes), the one least recently found let go for a new one."""

    def __init__(self, most: int = 2) -> None:
        self._found: dict[str, _Shape] = {}
        self._most = most

    def of(self, topology: model.Topology) -> _Shape:
        """The shape found for an equal topology but for its host name and GPU UUIDs (which no
        expectation, fact or class reads), else a new one."""
        # Its repr: every field of the model, a field added to it too, and no object of the document
        # held (holding the topology itself kept half a megabyte of the reading from being reused).
        key = repr(replace(topology, hostname=None, gpus=tuple(replace(g, uuid=None) for g in topology.gpus)))
        found = self._found.get(key)
        if found is None:
            if len(self._found) >= self._most:
                del self._found[next(iter(self._found))]  # the one least recently found
            found = _shape(topology)
        else:
            del self._found[key]
        self._found[key] = found  # the most recently found last
        return found


_MOST_KEYS = 4096  # figure keys a shape keeps (a hostile document may give many all-reduce sizes)


def _shape(topology: model.Topology) -> _Shape:
    models = sorted({g.name or UNKNOWN_MODEL for g in topology.gpus})
    facts, per_gpu = _topology_facts(topology)
    return _Shape(facts, per_gpu, _shared(" + ".join(models)) if models else "no GPU")


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


def _measured(
    topology: model.Topology,
    shape: _Shape,
    figures: Iterable[tuple[Any, ...]],
    faults: dict[str, Fault],
    skipped: list[str],
) -> Figures:
    """The figures measured on the node, each with its class; a figure under its floor (or with data come
    back wrong) added to ``faults``, one not measured here said in ``skipped``."""
    # (key, GB/s, origin, backend, error, nvls) of each, the last three None where not given
    given = [(*figure, None, None, None)[:6] for figure in figures]
    staged = {  # each P2P copy's staged twin with good data, which the run's rule sets beside it
        key: gbps
        for key, gbps, origin, _, error, _ in given
        if key.kind == "p2p_staged" and origin == "measured" and gbps is not None and not error
    }
    layout: list[tuple[str, str]] = []
    values: list[float] = []
    for key, gbps, origin, backend, error, nvls in given:
        what, cls = shape.figures.get(key) or _figure_of(shape, key, topology)
        if cls is None or gbps is None:
            continue
        if backend:  # how it was measured, where that changes the figure: gloo's CPUs, NCCL's GPUs
            cls = _shared(f"{cls}, {backend}")
        if origin != "measured":
            skipped.append(_shared(f"{what}: {origin}, not measured on this node: not compared"))
            continue
        fault = figure_fault(
            topology,
            key,
            float(gbps),
            what,
            error=error,
            backend=backend,
            nvls=nvls,
            pairs=shape.pairs,
            staged_gbps=staged.get(key.staged()) if isinstance(key, keys.Copy) else None,
        )
        if fault is not None:
            faults.setdefault(fault.name, fault)
        layout.append((what, cls))
        values.append(float(gbps))
    return Figures(layout, values) if layout else NO_FIGURES


def _figure_of(shape: _Shape, key: keys.Key, topology: model.Topology) -> tuple[str, str | None]:
    """What a figure of ``key`` measured and its class, kept with the shape."""
    cls = _figure_class(key, topology)
    found = (_shared(key.describe()), None if cls is None else _shared(cls))
    if len(shape.figures) < _MOST_KEYS:
        shape.figures[key] = found
    return found


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
    shapes: Shapes | None = None,
) -> Node:
    """``figures``: (key, GB/s, origin[, how[, error[, nvls]]]) of the document's measurements, ``how``
    the backend of an all-reduce, ``error`` what was wrong with its data, ``nvls`` whether NCCL took
    NVLink SHARP; only measured ones are compared (a recorded figure is another machine's, published).
    ``software``: the installed versions a run's document records (torch, pytest-gputopo).
    ``failed_checks``: (item, message) of each check item the document marks failed. ``identified``:
    whether its GPUs' UUIDs are the node's own (NVML's on it), not a recording's: only those say which
    node a document is of. ``shapes``: the topologies of a fleet's nodes read so far, so that what nodes
    of one have alike is found once."""
    shape = shapes.of(topology) if shapes is not None else _shape(topology)
    faults = {f.name: f for f in topology_faults(topology)}
    skipped = list(notes)
    read = _measured(topology, shape, figures, faults, skipped)
    for item, message in failed_checks:  # the document's own verdicts; one already found here is one fault
        faults.setdefault(item, check_fault(item, message))
    return Node(
        name=name,
        path=path,
        kind=shape.kind,
        facts=_facts(shape, software),
        figures=read,
        when=_shared(when),
        notes=_one(tuple(dict.fromkeys(skipped))),
        per_gpu=shape.per_gpu,
        uuids=Uuids(g.uuid for g in topology.gpus) if identified else (),
        faults=tuple(faults.values()),
    )
