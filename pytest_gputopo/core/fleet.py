"""The fleet view's judgement: which documents are which node, and each node judged twice over.

**A node is its GPUs.** Documents are of one node where their GPUs' UUIDs (NVML's facts on it) are
mostly the same -- they share more than half of either's: the same set, a GPU lost, one replaced in
place -- whatever host name they give (``roster``); never through one GPU. Of a node's documents the
newest by its written time is judged and the older are superseded (listed, no error). A document
stamped later than the collection by more than ``FUTURE_SKEW_S`` (a clock once ahead, or a planted
document) ranks below every other: it never supersedes one, and the node is named for it. A document
whose GPUs are also another node's newest (a GPU moved between nodes, one document holding a UUID of
each) is taken apart, the newer of the two: a node of its own, named for it, superseding neither. A
node whose documents give other host names, or that has fewer GPUs than its older document, is named
for it. Nodes that share a host name but not their GPUs are told apart by a digest of their UUIDs in
every output (never by which was read first). A document of recorded facts (a bundled machine's
UUIDs, not a node's) is a node of its own.

**Two kinds of finding, never confused.**

- A fault (``core.faults``): a fact with an inherent healthy value that the node does not have (NVLinks
  down, P2P refused where allowed, PCIe narrower than the GPU's maximum, a figure under its floor, wrong
  data, a check its document marks failed, GPUs missing). It names the node whatever share of its peers
  has it, even all of them; what it explains is not compared with the peers.
- A difference from the peers, for the facts with no healthy value of their own (a link class, the
  NUMA layout, versions, figures above their floor): a fact is named on a node where at least
  ``MAJORITY`` of the peers that know it agree on another value; where no value has that share, the
  group is split, and that is the group's finding, charged to no node: its sides are listed, the nodes
  outside the largest side shown as disagreeing, none called healthy for it. A figure is named where it
  lies under the median of its class across the group by more than the group's own robust spread
  allows (``SPREAD_K`` median absolute deviations, as a standard deviation), never less than
  ``MIN_DROP`` and always at ``MAX_DROP``.

**One cause, one line.** A node's findings of each kind are grouped by cause with the run gate's rule
(``core.causes``): a GPU in all its pairs' failures is one finding, the machine when every pair fails;
splits with the same sides are one finding.
"""

from __future__ import annotations

import hashlib
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from . import causes as causes_
from .faults import Fault
from .fleet_facts import Figure, Node
from .units import counted

MAJORITY = 0.75
MIN_FACT_PEERS = 3  # nodes that must know a fact before its majority means anything
MIN_FIGURE_PEERS = 5  # nodes with figures of a class before their median and spread are trusted
SPREAD_K = 3.5
MIN_DROP, MAX_DROP = 0.10, 0.15
MAD_TO_SIGMA = 1.4826  # the median absolute deviation of a normal distribution, as its standard deviation
VERSION_FACTS = frozenset(
    {"driver", "CUDA (driver)", "CUDA runtime (torch)", "NCCL (torch)", "torch", "pytest-gputopo"}
)
FUTURE_SKEW_S = 300.0  # a document stamped later than the collection by more: a clock ahead, or planted
LISTED = 5  # node names a line lists before "and N more" (the JSON lists them all)
DIGEST = 8  # hex digits of a node's GPU-set digest shown beside a host name other nodes share
FAULT, SPLIT, IDENTITY = "fault", "split", "identity"
# A fact's split: (fact, sides), each side (its values, its nodes), as Finding.sides holds them.
Split = tuple[str, tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]]

_SUBJECT = re.compile(r"(GPU\d+-GPU\d+|GPU\d+) ")


@dataclass(frozen=True)
class Finding:
    """One thing the fleet view names: one cause, one line (``says``). ``node`` None: the group's own
    finding (a split). ``kind``: "fault" (no healthy node has it, whatever its peers hold), "identity"
    (its documents disagree on what it is), "topology", "version" or "figure" (it differs from its
    peers), "split". ``fact``: the fact, figure class or cause subject ("GPU5", "the machine");
    ``column``: the kind of fact, for a table's column ("P2P", "link", a figure class); ``items``:
    the facts or check items the finding covers; ``evidence``: their lines, where it covers several;
    ``sides`` (a split): (values, nodes) per side, largest first, the values one per fact of ``items``."""

    kind: str
    fact: str
    says: str
    node: str | None = None
    value: str | None = None  # a fact's value on the node, and the value its peers agree on
    reference: str | None = None
    column: str = ""
    items: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    sides: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()

    @property
    def disagreeing(self) -> tuple[str, ...]:
        """A split's nodes outside its largest side (every side's, where the largest is tied)."""
        if len(self.sides) < 2:
            return ()
        tied = len(self.sides[0][1]) == len(self.sides[1][1])
        return tuple(n for _, nodes in (self.sides if tied else self.sides[1:]) for n in nodes)


@dataclass(frozen=True)
class Group:
    kind: str  # the GPU model
    nodes: tuple[Node, ...]
    reference: dict[str, str]  # fact -> the value the group agrees on
    medians: dict[str, tuple[float, float, int]]  # figure class -> (median GB/s, allowed drop, nodes)
    findings: tuple[Finding, ...]
    unjudged: tuple[str, ...]  # what the group as a whole could not judge, and why
    compared: bool = True  # False: too few nodes to judge them by their peers (faults still named)

    def __post_init__(self) -> None:  # each node's findings, indexed once: every output asks per node
        by_node: dict[str | None, list[Finding]] = {}
        split: dict[str, list[Finding]] = {}
        for f in self.findings:
            by_node.setdefault(f.node, []).append(f)
            for n in f.disagreeing:
                split.setdefault(n, []).append(f)
        object.__setattr__(self, "_by_node", by_node)
        object.__setattr__(self, "_split", split)

    def of(self, node: str) -> list[Finding]:
        return self._by_node.get(node, [])  # type: ignore[attr-defined, no-any-return]  # set in __post_init__

    def disagreeing(self, node: str) -> list[Finding]:
        """The splits that put ``node`` outside their largest side."""
        return self._split.get(node, [])  # type: ignore[attr-defined, no-any-return]  # set in __post_init__

    def unjudged_of(self, node: Node) -> list[str]:
        """What this node's document does not let the group judge, and why."""
        out = list(node.notes)
        if not self.compared:
            out.append("not compared with peers: too few nodes of its kind")
        if self.reference.get("GPUs", node.facts["GPUs"]) != node.facts["GPUs"]:
            out.append(
                f"its GPUs and pairs: {node.facts['GPUs']} GPUs where its peers have "
                f"{self.reference['GPUs']}, so they cannot be matched to its peers'"
            )
        missing = [f for f in self.reference if node.facts.get(f) is None and f in node.facts]
        if missing:
            out.append(f"{_listed(missing)}: unknown in its document")
        return out


@dataclass(frozen=True)
class Superseded:
    """A document of a node judged by a newer one of it: not judged, and no error."""

    path: str
    node: str  # the node's name as judged
    by: str  # the document judged
    why: str


@dataclass(frozen=True)
class Fleet:
    groups: tuple[Group, ...]
    superseded: tuple[Superseded, ...] = ()
    # documents not read by design, no error (the fleet view's own output, a link inside a folder): (path, why)
    set_aside: tuple[tuple[str, str], ...] = ()

    @property
    def named(self) -> list[str]:
        """The nodes with a finding of their own, in the order they were read."""
        return [n.name for g in self.groups for n in g.nodes if g.of(n.name)]

    @property
    def splits(self) -> list[Finding]:
        return [f for g in self.groups for f in g.findings if f.kind == SPLIT]

    @property
    def not_compared(self) -> list[Group]:
        """The groups of too few nodes to judge by their peers."""
        return [g for g in self.groups if not g.compared]

    @property
    def healthy(self) -> bool:
        """Every node judged by its peers, and none named nor in a split group."""
        return bool(self.groups) and not self.named and not self.splits and not self.not_compared


def _listed(names: Iterable[str]) -> str:
    names = list(names)
    more = len(names) - LISTED
    return ", ".join(names[:LISTED]) + (f" and {more} more" if more > 0 else "")


# --- which documents are which node ------------------------------------------------------------------


def _stamp(when: str | None) -> float | None:
    """A document's written time (ISO 8601, UTC where it names no zone) as seconds; None where it says none."""
    try:
        t = datetime.fromisoformat(when.replace("Z", "+00:00")) if isinstance(when, str) else None
    except ValueError:
        return None
    return None if t is None else (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def digest(uuids: Iterable[str]) -> str:
    """A short digest of a set of GPU UUIDs: what tells apart nodes that share a host name."""
    return hashlib.sha256("\n".join(sorted(uuids)).encode()).hexdigest()


def _known(node: Node) -> bool:
    return bool(node.uuids) and all(isinstance(u, str) and u for u in node.uuids)


def _gpu_set(node: Node) -> frozenset[str]:
    return frozenset(u for u in node.uuids if isinstance(u, str)) if _known(node) else frozenset()


def _one_node(a: frozenset[str], b: frozenset[str]) -> bool:
    """Two documents' GPUs are one node's where they share more than half of either's: the same set, a
    GPU lost, or one replaced in place; never through one GPU (moved between nodes, or planted)."""
    return bool(a and b) and 2 * len(a & b) > max(len(a), len(b))


def _clusters(nodes: list[Node]) -> list[list[int]]:
    """The documents of each node (by index, in the order read): joined where ``_one_node`` holds."""
    parent = list(range(len(nodes)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    sets = [_gpu_set(n) for n in nodes]
    holders: dict[str, list[int]] = defaultdict(list)  # only documents that share a GPU are compared
    for i, gpus in enumerate(sets):
        for j in dict.fromkeys(j for uuid in sorted(gpus) for j in holders[uuid]):
            if _one_node(gpus, sets[j]):
                parent[root(i)] = root(j)
        for uuid in gpus:
            holders[uuid].append(i)
    clusters: dict[int, list[int]] = defaultdict(list)
    for i in range(len(nodes)):
        clusters[root(i)].append(i)
    return list(clusters.values())


def _future(node: Node, now: float) -> bool:
    """Stamped later than the collection (``now``) by more than ``FUTURE_SKEW_S``: a clock once ahead,
    or a planted document."""
    t = _stamp(node.when)
    return t is not None and t > now + FUTURE_SKEW_S


def _age_order(nodes: list[Node], members: list[int], now: float) -> list[int]:
    """Oldest first by written time; the newest last. A document stamped in the future ranks below every
    other (it never supersedes one); without a time, or equally new, the path that sorts last is newer."""

    def rank(i: int) -> tuple[bool, bool, float, str, int]:
        t = _stamp(nodes[i].when)
        return (not _future(nodes[i], now), t is not None, t or 0.0, nodes[i].path, i)

    return sorted(members, key=rank)


def _overlapping(nodes: list[Node], clusters: list[list[int]], now: float) -> list[tuple[int, int]]:
    """Documents whose GPUs are also another node's, each with the node's newest document it shares a
    GPU with. Of two nodes' newest documents that share a GPU, the one taken out of its node (it
    supersedes none; the node's next newest is looked at again, until no two share one) is the one
    whose GPUs are the less its own (the larger share of them shared: a document holding a UUID of each
    node), else the one stamped in the future, else the newer (a GPU moved since the other was written)."""
    pulled: list[tuple[int, int]] = []
    members = [list(c) for c in clusters]
    while True:
        newest = sorted((_age_order(nodes, m, now)[-1] for m in members if m), key=lambda i: nodes[i].path)
        clash = _first_shared(newest, nodes)  # by path: the same clash first in whatever order they were read
        if clash is None:
            return pulled
        apart, other = _taken_apart(nodes, clash, now)
        pulled.append((apart, other))
        for m in members:
            if apart in m:
                m.remove(apart)


def _taken_apart(nodes: list[Node], pair: tuple[int, int], now: float) -> tuple[int, int]:
    """(the document taken apart, the other) of two that share a GPU (``_overlapping`` says which)."""
    a, b = pair
    shared = len(_gpu_set(nodes[a]) & _gpu_set(nodes[b]))
    age = _age_order(nodes, [a, b], now)
    apart = max(pair, key=lambda i: (shared / len(_gpu_set(nodes[i])), _future(nodes[i], now), age.index(i)))
    return apart, (b if apart == a else a)


def _first_shared(newest: list[int], nodes: list[Node]) -> tuple[int, int] | None:
    """Two of these documents that share a GPU, the first found; None where none do."""
    holder: dict[str, int] = {}
    for i in newest:
        for uuid in sorted(_gpu_set(nodes[i])):  # sorted: the same pair first whatever the hash seed
            if holder.setdefault(uuid, i) != i:
                return holder[uuid], i
    return None


def roster(nodes: list[Node], now: float) -> tuple[list[Node], list[Superseded]]:
    """The nodes to judge, one per node, each with a name no other shares, and the documents
    superseded. A node is its GPUs (``_clusters``); of its documents the newest by its written time is
    judged, never one stamped later than ``now`` (the collection's time, seconds since the epoch) beyond
    ``FUTURE_SKEW_S`` while another is at hand, and that one is named; a document whose GPUs are also
    another node's is a node of its own, named for it, and supersedes neither (``_overlapping``)."""
    clusters = _clusters(nodes)
    pulled = _overlapping(nodes, clusters, now)
    apart = {i for i, _ in pulled}
    kept: list[tuple[int, Node]] = []
    superseded: list[Superseded] = []
    for members in clusters:
        members = [i for i in members if i not in apart]
        if members:
            node, old = _judged_of(nodes, members, now)
            kept.append((min(members), node))
            superseded += old
    for i, other in pulled:
        alone, _ = _judged_of(nodes, [i], now)
        because = f"judged apart: its GPUs are also those of {nodes[other].name}'s {nodes[other].path}"
        faults = alone.faults + (_overlap_fault(nodes[i], nodes[other]),)
        kept.append((i, replace(alone, faults=faults, judged_because=because)))
    kept.sort(key=lambda item: item[0])
    return _named_apart([node for _, node in kept]), superseded


def _overlap_fault(node: Node, other: Node) -> Fault:
    shared = sorted(_gpu_set(node) & _gpu_set(other))
    line = (
        f"its GPUs are also another node's: {_listed(shared)} in {other.path} ({other.name}, written "
        f"{other.when or 'when it does not say'}): a GPU moved between nodes (an RMA swap), or a document not "
        "its own; judged apart, it supersedes neither"
    )
    return Fault("identity", line, (), "GPUs of two nodes", ())


def _judged_of(nodes: list[Node], members: list[int], now: float) -> tuple[Node, list[Superseded]]:
    """One node's documents: the one judged, with what they tell of it, and the others superseded."""
    order = _age_order(nodes, members, now)
    newest, older = nodes[order[-1]], [nodes[i] for i in order[:-1]]
    faults, notes = list(newest.faults), newest.notes
    future = [n for n in (newest, *older) if _future(n, now)]
    if future:
        line = (
            f"{_listed(f'{n.path} (written {n.when})' for n in future)}: stamped later than this collection "
            "(a clock once ahead, or a document not its own): never taken over another document"
        )
        faults.append(Fault("stamp", line, (), "a document stamped in the future", ()))
    if older:
        top = _stamp(newest.when)
        if top is None or any(_stamp(o.when) == top for o in older):
            notes += (
                f"{counted(len(members), 'document')} of this node and none newest by its written time: "
                f"{newest.path} judged (its path sorts last)",
            )
        faults += _history_faults(newest, older)
    old = [
        Superseded(
            o.path,
            newest.name,
            newest.path,
            f"{'a document stamped later than this collection' if _future(o, now) else 'an older document'} of "
            f"{o.name} (written {o.when or 'when it does not say'}; judged: {newest.path}, written "
            f"{newest.when or 'when it does not say'})",
        )
        for o in older
    ]
    return replace(newest, faults=tuple(faults), notes=notes, judged_because=_because(newest, older, now)), old


def _because(newest: Node, older: list[Node], now: float) -> str:
    """Why ``newest`` is the node's judged document, in words."""
    if not older:
        return "its only document" + (", stamped later than this collection" if _future(newest, now) else "")
    of = f"of {counted(len(older) + 1, 'document')} of this node"
    if _future(newest, now):
        return f"every document {of} is stamped later than this collection: the newest of them"
    ahead = sum(_future(o, now) for o in older)
    return f"the newest by its written time {of}" + (
        f", {ahead} stamped later than this collection set aside" if ahead else ""
    )


def _history_faults(newest: Node, older: list[Node]) -> list[Fault]:
    """What a node's older documents tell against its newest: another host name, GPUs no longer seen."""
    out = []
    names = sorted({o.name for o in older} - {newest.name})
    if names:
        line = (
            f"its GPUs are also in {counted(len(older), 'older document')} under another host name "
            f"({_listed(names)}): one node, two names (a renamed host, or a document not its own)"
        )
        out.append(Fault("identity", line, (), "identity", ()))
    lost = set().union(*(_gpu_set(o) for o in older)) - _gpu_set(newest)
    biggest = max(older, key=lambda o: len(o.uuids))
    if len(biggest.uuids) > len(newest.uuids):
        line = (
            f"GPUs: {len(newest.uuids)}, where its older document {biggest.path} (written "
            f"{biggest.when or 'when it does not say'}) had {len(biggest.uuids)}: "
            f"{_listed(sorted(lost))} no longer seen"
        )
        out.append(Fault("gpus", line, (), "GPUs missing", ("GPUs",)))
    return out


def _named_apart(judged: list[Node]) -> list[Node]:
    """Every node a name no other has: a host name several nodes give gets each one's GPU digest."""
    count = Counter(n.name for n in judged)
    out = []
    for node in judged:
        if count[node.name] > 1:  # every node of a shared name gets its digest: no one keeps it bare
            tag = (
                digest(node.uuids)[:DIGEST]  # type: ignore[arg-type]  # a known node's UUIDs are strings
                if _known(node)
                else f"document {node.path}"
            )
            node = replace(node, name=f"{node.name} [{tag}]")
        out.append(node)
    seen = Counter(n.name for n in out)
    return [n if seen[n.name] == 1 else replace(n, name=f"{n.name} ({n.path})") for n in out]


# --- one node's findings, one cause a line -----------------------------------------------------------


def _column(fact: str) -> str:
    """The kind of fact, as a table's column: "GPU0-GPU5 link" -> "link", "GPU2 PCIe width now" ->
    "PCIe width now"."""
    return _SUBJECT.sub("", fact, count=1) if _SUBJECT.match(fact) else fact


def _gpus(fact: str) -> tuple[str, ...]:
    m = _SUBJECT.match(fact)
    return tuple(m.group(1).split("-")) if m else ()


_FAULT_LABEL = {
    "p2p_status": "P2P",
    "nvlink": "NVLink",
    "pcie": "PCIe width",
    "identity": "identity",
    "gpus": "GPUs",
    "stamp": "written time",
}


def _label(name: str) -> str:
    base = name.split("[")[0]
    if base.endswith("_bw"):
        return "their floor"
    return _FAULT_LABEL.get(base, f"check {base}")


def _merged(
    node: Node,
    findings: Sequence[tuple[causes_.Finding, str, Finding | None]],
    kind: str,
    label_of: Callable[[causes_.Finding], str],
) -> list[Finding]:
    """The node's findings of one kind, one per cause (``core.causes``: the machine, a GPU in all its
    pairs' failures, else each on its own). ``findings``: (the finding as causes reads it, its column,
    the fleet finding it stands for where it is one)."""
    gpus = tuple(f"GPU{i}" for i in range(int(node.facts["GPUs"])))  # type: ignore[arg-type]  # always given
    by_label: dict[str, list[causes_.Finding]] = {}
    for f, _, _ in findings:
        by_label.setdefault(label_of(f), []).append(f)
    groups = [causes_.Group(label, gpus, tuple(fs)) for label, fs in by_label.items()]
    info = {f.line: (f, column, original) for f, column, original in findings}
    out = []
    for cause in causes_.causes(groups):
        lines = cause.evidence or [cause.headline]
        covered = [info[line] for line in lines if line in info]
        if len(covered) == 1 and covered[0][2] is not None:  # one finding: as it is
            out.append(replace(covered[0][2], node=node.name))
            continue
        columns = list(dict.fromkeys(column for _, column, _ in covered))
        says = cause.headline
        whats = Counter(f.what or f.line for f, _, _ in covered)
        if len(covered) > 1 and not any(w in says for w in whats):
            says += ": " + ", ".join(f"{w} ({n})" for w, n in whats.most_common(3))
        one = covered[0][2] if covered else None
        out.append(
            Finding(
                kind,
                cause.subject if len(covered) > 1 else (one.fact if one else cause.subject),
                says,
                node.name,
                column=columns[0] if len(columns) == 1 else "several",
                items=tuple(f.name for f, _, _ in covered),
                evidence=tuple(lines) if len(covered) > 1 else (),
            )
        )
    return out


def _fault_findings(node: Node) -> list[Finding]:
    items = []
    classes = {fig.what: fig.cls for fig in node.figures}  # a figure's fault goes in its class's column
    for fault in node.faults:
        fact = fault.explains[0] if fault.explains else fault.name
        column = classes.get(fact) or (_column(fact) if fault.explains else _label(fault.name))
        items.append(
            (
                causes_.Finding(fault.line, fault.gpus, fault.what, fault.name),
                column,
                Finding(FAULT, fact, fault.line, node.name, node.facts.get(fact), column=column, items=(fault.name,)),
            )
        )
    kinds = {f.name: (IDENTITY if f.name == "identity" else FAULT) for f in node.faults}
    out = _merged(node, items, FAULT, lambda f: _label(f.name))
    return [replace(f, kind=IDENTITY) if f.items and all(kinds.get(i) == IDENTITY for i in f.items) else f for f in out]


def _peer_findings(node: Node, findings: list[Finding]) -> list[Finding]:
    items = []
    for f in findings:
        subject = _gpus(f.fact)
        what = f.says[len(f.fact.split(" ")[0]) + 1 :] if subject else f.says
        items.append((causes_.Finding(f.says, subject, what, f.fact), f.column or _column(f.fact), f))
    merged = _merged(node, items, "topology", lambda f: "their peers' value")
    kinds = {f.fact: f.kind for f in findings}
    return [
        replace(m, kind=kinds[m.items[0]])
        if m.items and len({kinds.get(i) for i in m.items}) == 1 and m.items[0] in kinds
        else m
        for m in merged
    ]


# --- a group judged by its peers ---------------------------------------------------------------------


def _judge_fact(
    fact: str,
    values: dict[str, str],
    findings: list[Finding],
    reference: dict[str, str],
    unjudged: list[str],
    splits: list[Split],
) -> None:
    if len(values) < MIN_FACT_PEERS:
        unjudged.append(f"{fact}: said by {counted(len(values), 'node')}; {MIN_FACT_PEERS} needed to compare")
        return
    counts = Counter(values.values())
    top, top_count = counts.most_common(1)[0]
    kind = "version" if fact in VERSION_FACTS else "topology"
    if top_count / len(values) >= MAJORITY:
        reference[fact] = top
        for node, value in values.items():
            if value != top:
                findings.append(
                    Finding(
                        kind,
                        fact,
                        f"{fact}: {value}, where {top_count} of the {len(values)} nodes that say have {top}",
                        node,
                        value,
                        top,
                        column=_column(fact),
                        items=(fact,),
                    )
                )
        return
    sides = tuple(((value,), tuple(k for k, v in values.items() if v == value)) for value, _ in counts.most_common())
    splits.append((fact, sides))


def _split_findings(splits: list[Split]) -> list[Finding]:
    """The group's splits, one finding per way of splitting it: the facts split with the same sides
    (a GPU's NVLinks and all its pairs' links) are one finding."""
    by_sides: dict[tuple[frozenset[str], ...], list[Split]] = {}
    for fact, sides in splits:
        by_sides.setdefault(tuple(frozenset(nodes) for _, nodes in sides), []).append((fact, sides))
    out = []
    for same in by_sides.values():
        facts = tuple(f for f, _ in same)
        first = same[0][1]
        sides = tuple((tuple(s[i][0][0] for _, s in same), nodes) for i, (_, nodes) in enumerate(first))
        if len(facts) == 1:
            where = f"{facts[0]}: the group is split"
            said = "; ".join(
                f"{values[0]} on {counted(len(nodes), 'node')} ({_listed(nodes)})" for values, nodes in sides
            )
        else:
            where = f"{len(facts)} facts ({_listed(facts)}): the group is split the same way on each"
            said = "; ".join(
                f"{counted(len(nodes), 'node')} ({_listed(nodes)}) with {_listed(dict.fromkeys(values))}"
                for values, nodes in sides
            )
        columns = list(dict.fromkeys(_column(f) for f in facts))
        out.append(
            Finding(
                SPLIT,
                facts[0],
                f"{where}, no value is held by {MAJORITY:.0%} of its nodes: {said}",
                column=columns[0] if len(columns) == 1 else "several",
                items=facts,
                sides=sides,
            )
        )
    return out


def _judge_class(
    cls: str,
    figures: dict[str, list[Figure]],
    findings: list[Finding],
    medians: dict[str, tuple[float, float, int]],
    unjudged: list[str],
    splits: list[Split],
) -> None:
    """``figures``: node -> its figures of the class (``fleet_facts.Figure``)."""
    if len(figures) < MIN_FIGURE_PEERS:
        unjudged.append(f"{cls}: figures from {counted(len(figures), 'node')}; {MIN_FIGURE_PEERS} needed")
        return
    values = [fig.gbps for items in figures.values() for fig in items]
    median = statistics.median(values)
    if median <= 0:
        unjudged.append(f"{cls}: the group's median is 0 GB/s")
        return
    sigma = MAD_TO_SIGMA * statistics.median(abs(v - median) for v in values)
    drop = min(max(SPREAD_K * sigma / median, MIN_DROP), MAX_DROP)
    medians[cls] = (median, drop, len(figures))
    for node, items in figures.items():
        low = sorted((fig.gbps, fig.what) for fig in items if fig.gbps < median * (1 - drop))
        if low:
            gbps, what = low[0]
            also = (
                f" ({len(low)} of its {len(items)} figures of the class {'is' if len(low) == 1 else 'are'}, "
                f"this the lowest)"
                if len(low) > 1
                else f" (the only one of its {len(items)} figures of the class)"
                if len(items) > 1
                else ""
            )
            findings.append(
                Finding(
                    "figure",
                    cls,
                    f"{what}: {gbps:.1f} GB/s, {1 - gbps / median:.0%} under the "
                    f"median of {counted(len(figures), 'node')} ({median:.1f} GB/s; their spread "
                    f"allows {drop:.0%}){also}",
                    node,
                    column=cls,
                    items=(cls,),
                )
            )
    above = [node for node, items in figures.items() if statistics.median(f.gbps for f in items) > median * (1 + drop)]
    if len(above) >= max(2, 0.1 * len(figures)):
        rest = tuple(n for n in figures if n not in above)
        findings.append(
            Finding(
                SPLIT,
                cls,
                f"{cls}: {counted(len(above), 'node')} ({_listed(above)}) measure over "
                f"{drop:.0%} above the median of {median:.1f} GB/s: the group is split, and its "
                f"median may be the degraded side",
                column=cls,
                items=(cls,),
                sides=((("at the median",), rest), ((f"over {drop:.0%} above the median",), tuple(above))),
            )
        )


def judge_group(kind: str, nodes: list[Node]) -> Group:
    """Each node's faults, whatever its peers hold; then, with enough peers, what sets it apart."""
    peer: list[Finding] = []
    reference: dict[str, str] = {}
    medians: dict[str, tuple[float, float, int]] = {}
    unjudged: list[str] = []
    splits: list[Split] = []
    explained = {n.name: {e for f in n.faults for e in f.explains} for n in nodes}
    compared = len(nodes) >= MIN_FACT_PEERS
    if not compared:
        unjudged.append(
            f"{counted(len(nodes), 'node')} of this kind: too few to judge by its peers "
            f"({MIN_FACT_PEERS} needed); each node's own faults are still named"
        )
    else:
        counts = {
            n.name: count for n in nodes if "GPUs" not in explained[n.name] and (count := n.facts["GPUs"]) is not None
        }  # node_of always gives a count
        _judge_fact("GPUs", counts, peer, reference, unjudged, splits)
        # A node with another GPU count cannot have its GPUs matched to its peers': only the count is named.
        comparable = [n for n in nodes if n.facts["GPUs"] == reference.get("GPUs", n.facts["GPUs"])]
        facts = dict.fromkeys(f for n in nodes for f in n.facts if f != "GPUs")
        per_gpu = frozenset().union(*(n.per_gpu for n in nodes))
        for fact in facts:
            among = comparable if fact in per_gpu else nodes
            values = {
                n.name: said for n in among if (said := n.facts.get(fact)) is not None and fact not in explained[n.name]
            }
            if values:
                _judge_fact(fact, values, peer, reference, unjudged, splits)
        by_class: dict[str, dict[str, list[Figure]]] = defaultdict(lambda: defaultdict(list))
        for n in nodes:
            for fig in n.figures:
                if fig.what not in explained[n.name]:  # a figure under its floor is a fault already
                    by_class[fig.cls][n.name].append(fig)  # the node's own Figure: no copy per node (scale)
        for cls, figures in by_class.items():
            _judge_class(cls, figures, peer, medians, unjudged, splits)
    by_node: dict[str, list[Finding]] = {}
    for f in peer:
        if f.node is not None:
            by_node.setdefault(f.node, []).append(f)
    findings: list[Finding] = []
    for n in nodes:
        findings += _fault_findings(n) + _peer_findings(n, by_node.get(n.name, []))
    findings += _split_findings(splits) + [f for f in peer if f.node is None]
    return Group(kind, tuple(nodes), reference, medians, tuple(findings), tuple(unjudged), compared)


def judge(
    nodes: list[Node], superseded: tuple[Superseded, ...] = (), set_aside: tuple[tuple[str, str], ...] = ()
) -> Fleet:
    """Group the nodes by GPU model (in the order first read) and judge each group by its peers."""
    groups: dict[str, list[Node]] = {}
    for node in nodes:
        groups.setdefault(node.kind, []).append(node)
    return Fleet(
        tuple(judge_group(kind, members) for kind, members in groups.items()), tuple(superseded), tuple(set_aside)
    )
