"""Which documents are which node, and which of a node's documents the fleet view judges (``roster``).

**A node is its GPUs.** Documents are of one node where their GPUs' UUIDs (NVML's facts on it) are
mostly the same -- they share more than half of either's: the same set, a GPU lost, one replaced in
place -- whatever host name they give; never through one GPU. Of a node's documents the newest by its
written time is judged and the older are superseded (listed, no error). A document stamped later than
the collection by more than ``FUTURE_SKEW_S`` (a clock once ahead, or a planted document) ranks below
every other: it never supersedes one, and the node is named for it. A document whose GPUs are also
another node's newest (a GPU moved between nodes, one document holding a UUID of each) is taken apart,
the newer of the two: a node of its own, named for it, superseding neither. A node whose documents give
other host names, or that has fewer GPUs than its older document, is named for it. Nodes that share a
host name but not their GPUs are told apart by a digest of their UUIDs in every output (never by which
was read first). A document of recorded facts (a bundled machine's UUIDs, not a node's) is a node of
its own. What this finds is a ``core.faults.Fault`` of the node, judged with its others (``core.fleet``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

from .faults import Fault
from .fleet_facts import Node, listed
from .fleet_findings import Superseded
from .units import counted

FUTURE_SKEW_S = 300.0  # a document stamped later than the collection by more: a clock ahead, or planted
DIGEST = 8  # hex digits of a node's GPU-set digest shown beside a host name other nodes share


def _stamp(when: str | None) -> float | None:
    """A document's written time (ISO 8601, UTC where it names no zone) as seconds; None where it says none."""
    try:
        t = datetime.fromisoformat(when.replace("Z", "+00:00")) if isinstance(when, str) else None
    except ValueError:
        return None
    return None if t is None else (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def digest(uuids: Iterable[str]) -> str:
    """A short digest of a set of GPU UUIDs: what tells apart nodes that share a host name."""
    import hashlib  # OpenSSL, 3.6 MB resident: only where nodes share a host name

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

    # Only documents that share a GPU are compared (``_one_node`` on their GPUs themselves): the
    # documents of each GPU's hash, one int where it is in one (nearly every GPU of a fleet: a list, or
    # its UUID, per GPU would be most of what judging a fleet holds).
    holders: dict[int, int | list[int]] = {}
    for i, node in enumerate(nodes):
        gpus = _gpu_set(node)
        for j in dict.fromkeys(j for uuid in sorted(gpus) for j in _held(holders.get(hash(uuid)))):
            if _one_node(gpus, _gpu_set(nodes[j])):
                parent[root(i)] = root(j)
        for uuid in gpus:
            _hold(holders, hash(uuid), i)
    clusters: dict[int, list[int]] = defaultdict(list)
    for i in range(len(nodes)):
        clusters[root(i)].append(i)
    return list(clusters.values())


def _held(holders: int | list[int] | None) -> list[int]:
    return [] if holders is None else [holders] if isinstance(holders, int) else holders


def _hold(holders: dict[int, int | list[int]], key: int, i: int) -> None:
    held = holders.setdefault(key, i)
    if isinstance(held, list):
        held.append(i)
    elif held != i:
        holders[key] = [held, i]


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
    holders: dict[int, int | list[int]] = {}  # by each GPU's hash, as _clusters keeps them
    for i in newest:
        for uuid in sorted(_gpu_set(nodes[i])):  # sorted: the same pair first whatever the hash seed
            first = next((j for j in _held(holders.get(hash(uuid))) if uuid in _gpu_set(nodes[j])), None)
            if first is not None and first != i:
                return first, i
            _hold(holders, hash(uuid), i)
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
        f"its GPUs are also another node's: {listed(shared)} in {other.path} ({other.name}, written "
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
            f"{listed(f'{n.path} (written {n.when})' for n in future)}: stamped later than this collection "
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
            f"({listed(names)}): one node, two names (a renamed host, or a document not its own)"
        )
        out.append(Fault("identity", line, (), "identity", ()))
    lost = set().union(*(_gpu_set(o) for o in older)) - _gpu_set(newest)
    biggest = max(older, key=lambda o: len(o.uuids))
    if len(biggest.uuids) > len(newest.uuids):
        line = (
            f"GPUs: {len(newest.uuids)}, where its older document {biggest.path} (written "
            f"{biggest.when or 'when it does not say'}) had {len(biggest.uuids)}: "
            f"{listed(sorted(lost))} no longer seen"
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
