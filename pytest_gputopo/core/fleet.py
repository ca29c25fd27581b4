"""The fleet view's judgement: each node judged twice over, among the nodes of its GPU model (which
documents are which node, and which of them is judged, is ``core.fleet_roster``'s).

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

import math
import re
import statistics
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from . import causes as causes_
from .fleet_facts import NO_FIGURES, Figures, Node, listed
from .fleet_findings import FAULT, IDENTITY, SPLIT, Finding, Fleet, Group, Superseded
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
# A fact's split: (fact, sides), each side (its values, its nodes), as Finding.sides holds them.
Split = tuple[str, tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]]

_NONE: frozenset[str] = frozenset()  # what a node without a fault explains: one set for them all
_SUBJECT = re.compile(r"(GPU\d+-GPU\d+|GPU\d+) ")


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
    if not node.faults:
        return []
    items = []
    classes = dict(node.figures.layout)  # a figure's fault goes in its class's column
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
                f"{values[0]} on {counted(len(nodes), 'node')} ({listed(nodes)})" for values, nodes in sides
            )
        else:
            where = f"{len(facts)} facts ({listed(facts)}): the group is split the same way on each"
            said = "; ".join(
                f"{counted(len(nodes), 'node')} ({listed(nodes)}) with {listed(dict.fromkeys(values))}"
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


def _median(values: array[float], sorted_below: int = 4096) -> float:
    """``statistics.median(values)``, exactly, without a float object per value: the values of the
    middle ranks are found by sorting only those near them (``_ranked``)."""
    n = len(values)
    if n < sorted_below:
        return statistics.median(values)
    half = n // 2
    if n % 2:
        return _ranked(values, half, half)[0]
    low, high = _ranked(values, half - 1, half)
    return (low + high) / 2


def _ranked(values: array[float], first: int, last: int) -> list[float]:
    """``sorted(values)[first : last + 1]``, exactly. A sample of the values bounds those ranks; the
    values below the bounds are counted, those between them sorted (a few hundred, where sorting them
    all would make a float object of each), and where the sample misled (or a NaN is there) all are."""
    n = len(values)
    sample = sorted(values[:: max(1, n // 4096)])
    m = len(sample)
    margin = 4 * math.isqrt(m)  # four times the spread of a sample's rank about the true one
    lo = sample[max(0, first * m // n - margin)]
    hi = sample[min(m - 1, last * m // n + margin)]
    below = above = 0
    between = []
    for v in values:
        if v < lo:
            below += 1
        elif v <= hi:
            between.append(v)
        elif v > hi:
            above += 1
    if below + len(between) + above == n and below <= first and last < below + len(between):
        between.sort()  # the values of ranks below .. below + len(between) - 1
        return between[first - below : last - below + 1]
    return sorted(values)[first : last + 1]


# A class's figures on each node: the node's figures and the positions of those of the class judged.
ClassFigures = dict[str, tuple[Figures, tuple[int, ...]]]


def _judge_class(
    cls: str,
    figures: ClassFigures,
    findings: list[Finding],
    medians: dict[str, tuple[float, float, int]],
    unjudged: list[str],
    splits: list[Split],
) -> None:
    if len(figures) < MIN_FIGURE_PEERS:
        unjudged.append(f"{cls}: figures from {counted(len(figures), 'node')}; {MIN_FIGURE_PEERS} needed")
        return
    # 8 bytes a figure while the class is judged, not a float object each: a class holds a figure of
    # every pair of every node
    values = array("d", (figs.gbps[i] for figs, at in figures.values() for i in at))
    median = _median(values)
    if median <= 0:
        unjudged.append(f"{cls}: the group's median is 0 GB/s")
        return
    for i, v in enumerate(values):  # each figure's deviation, in place of the figure
        values[i] = abs(v - median)
    sigma = MAD_TO_SIGMA * _median(values)
    del values
    drop = min(max(SPREAD_K * sigma / median, MIN_DROP), MAX_DROP)
    medians[cls] = (median, drop, len(figures))
    for node, (figs, at) in figures.items():
        low = sorted((figs.gbps[i], figs.layout[i][0]) for i in at if figs.gbps[i] < median * (1 - drop))
        if low:
            gbps, what = low[0]
            also = (
                f" ({len(low)} of its {len(at)} figures of the class {'is' if len(low) == 1 else 'are'}, "
                f"this the lowest)"
                if len(low) > 1
                else f" (the only one of its {len(at)} figures of the class)"
                if len(at) > 1
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
    high = median * (1 + drop)
    above = [node for node, (figs, at) in figures.items() if statistics.median(figs.gbps[i] for i in at) > high]
    if len(above) >= max(2, 0.1 * len(figures)):
        rest = tuple(n for n in figures if n not in above)
        findings.append(
            Finding(
                SPLIT,
                cls,
                f"{cls}: {counted(len(above), 'node')} ({listed(above)}) measure over "
                f"{drop:.0%} above the median of {median:.1f} GB/s: the group is split, and its "
                f"median may be the degraded side",
                column=cls,
                items=(cls,),
                sides=((("at the median",), rest), ((f"over {drop:.0%} above the median",), tuple(above))),
            )
        )


def _judged_figures(node: Node, explained: frozenset[str]) -> dict[str, tuple[int, ...]]:
    """The positions of each class's figures the node is compared on, classes in the order of the first
    such figure: a figure under its floor is a fault already, not compared. Nodes measured alike share
    one dict where none is (no copy per node: a fleet holds a figure of every pair of every node)."""
    classes = node.figures.classes()
    if not explained or not any(what in explained for what, _ in node.figures.layout):
        return classes
    kept = {cls: tuple(i for i in at if node.figures.layout[i][0] not in explained) for cls, at in classes.items()}
    return dict(sorted(((cls, at) for cls, at in kept.items() if at), key=lambda item: item[1][0]))


def judge_group(kind: str, nodes: list[Node]) -> Group:
    """Each node's faults, whatever its peers hold; then, with enough peers, what sets it apart."""
    peer: list[Finding] = []
    reference: dict[str, str] = {}
    medians: dict[str, tuple[float, float, int]] = {}
    unjudged: list[str] = []
    splits: list[Split] = []
    explained = {n.name: frozenset(e for f in n.faults for e in f.explains) if n.faults else _NONE for n in nodes}
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
        judged = {n.name: _judged_figures(n, explained[n.name]) for n in nodes}
        for cls in dict.fromkeys(cls for classes in judged.values() for cls in classes):
            figures = {n.name: (n.figures, at) for n in nodes if (at := judged[n.name].get(cls))}
            _judge_class(cls, figures, peer, medians, unjudged, splits)
    by_node: dict[str, list[Finding]] = {}
    for f in peer:
        if f.node is not None:
            by_node.setdefault(f.node, []).append(f)
    findings: list[Finding] = []
    for n in nodes:
        findings += _fault_findings(n) + _peer_findings(n, by_node.get(n.name, []))
    findings += _split_findings(splits) + [f for f in peer if f.node is None]
    lowest = {c: _lowest(nodes, c) for c in dict.fromkeys(f.column or f.fact for f in findings) if c in medians}
    # The nodes as judged, their figures let go: what the outputs draw of them is in ``lowest``, and a
    # fleet's figures are most of what its nodes hold while its outputs are written.
    kept = tuple(replace(n, figures=NO_FIGURES) for n in nodes)
    return Group(kind, kept, reference, medians, tuple(findings), tuple(unjudged), compared, lowest)


def _lowest(nodes: list[Node], cls: str) -> dict[str, tuple[float, int]]:
    """Each node's lowest figure of a class and how many it has of it (a figure under its floor too)."""
    out = {}
    for n in nodes:
        at = n.figures.classes().get(cls)
        if at:
            out[n.name] = (min(n.figures.gbps[i] for i in at), len(at))
    return out


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
