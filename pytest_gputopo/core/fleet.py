"""The fleet view's judgement: nodes of one kind compared with each other, their peers the reference.

No rule file and no baseline: a fact (a pair's link class, a GPU's width, the driver) is named on a node
where at least ``MAJORITY`` of the peers that know it agree on another value; where no value has that
share, the group is split, and that is the group's finding, charged to no node (the majority is not
made the reference, and the minority is not called healthy for being fewer). A figure is named where it
lies under the median of its class across the group by more than the group's own robust spread allows
(``SPREAD_K`` median absolute deviations, as a standard deviation), never less than ``MIN_DROP`` and
always at ``MAX_DROP``: noise of a few percent never names a node, a loss of a fifth always does."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass

from .fleet_facts import Node
from .units import counted

MAJORITY = 0.75
MIN_FACT_PEERS = 3  # nodes that must know a fact before its majority means anything
MIN_FIGURE_PEERS = 5  # nodes with figures of a class before their median and spread are trusted
SPREAD_K = 3.5
MIN_DROP, MAX_DROP = 0.10, 0.15
MAD_TO_SIGMA = 1.4826  # the median absolute deviation of a normal distribution, as its standard deviation
VERSION_FACTS = frozenset({"driver", "CUDA (driver)", "CUDA runtime (torch)", "NCCL (torch)", "torch",
                           "pytest-gputopo"})
LISTED = 5  # node names a split finding lists before "and N more"


@dataclass(frozen=True)
class Finding:
    """One thing the fleet view names. ``node`` None: the group's own finding (a split)."""

    kind: str  # "topology", "version", "figure" or "split"
    fact: str  # the fact, or the figure class
    says: str  # one line: the node's value and its peers', with how many peers
    node: str | None = None
    value: str | None = None  # a fact's value on the node, and the value its peers agree on
    reference: str | None = None


@dataclass(frozen=True)
class Group:
    kind: str  # the GPU model
    nodes: tuple[Node, ...]
    reference: dict[str, str]  # fact -> the value the group agrees on
    medians: dict[str, tuple[float, float, int]]  # figure class -> (median GB/s, allowed drop, nodes)
    findings: tuple[Finding, ...]
    unjudged: tuple[str, ...]  # what the group as a whole could not judge, and why

    def __post_init__(self) -> None:  # each node's findings, indexed once: every output asks per node
        by_node: dict[str | None, list[Finding]] = {}
        for f in self.findings:
            by_node.setdefault(f.node, []).append(f)
        object.__setattr__(self, "_by_node", by_node)

    def of(self, node: str) -> list[Finding]:
        return self._by_node.get(node, [])

    def unjudged_of(self, node: Node) -> list[str]:
        """What this node's document does not let the group judge, and why."""
        out = list(node.notes)
        if self.reference.get("GPUs", node.facts["GPUs"]) != node.facts["GPUs"]:
            out.append(f"its GPUs and pairs: {node.facts['GPUs']} GPUs where its peers have "
                       f"{self.reference['GPUs']}, so they cannot be matched to its peers'")
        missing = [f for f in self.reference if node.facts.get(f) is None and f in node.facts]
        if missing:
            out.append(f"{_listed(missing)}: unknown in its document")
        return out


@dataclass(frozen=True)
class Fleet:
    groups: tuple[Group, ...]

    @property
    def named(self) -> list[str]:
        """The nodes with a finding of their own, in the order they were read."""
        return [n.name for g in self.groups for n in g.nodes if g.of(n.name)]

    @property
    def splits(self) -> list[Finding]:
        return [f for g in self.groups for f in g.findings if f.kind == "split"]

    @property
    def healthy(self) -> bool:
        return not self.named and not self.splits


def _listed(names: list[str]) -> str:
    more = len(names) - LISTED
    return ", ".join(names[:LISTED]) + (f" and {more} more" if more > 0 else "")


def _judge_fact(fact: str, values: dict[str, str], findings: list, reference: dict, unjudged: list) -> None:
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
                findings.append(Finding(kind, fact, f"{fact}: {value}, where {top_count} of the "
                                        f"{len(values)} nodes that say have {top}", node, value, top))
        return
    sides = "; ".join(f"{value} on {counted(n, 'node')} ({_listed([k for k, v in values.items() if v == value])})"
                      for value, n in counts.most_common())
    findings.append(Finding("split", fact, f"{fact}: the group is split, no value is held by {MAJORITY:.0%} "
                            f"of its nodes: {sides}"))


def _judge_class(cls: str, figures: dict[str, list], findings: list, medians: dict, unjudged: list) -> None:
    """``figures``: node -> its (what, GB/s) of the class."""
    if len(figures) < MIN_FIGURE_PEERS:
        unjudged.append(f"{cls}: figures from {counted(len(figures), 'node')}; {MIN_FIGURE_PEERS} needed")
        return
    values = [gbps for items in figures.values() for _, gbps in items]
    median = statistics.median(values)
    if median <= 0:
        unjudged.append(f"{cls}: the group's median is 0 GB/s")
        return
    sigma = MAD_TO_SIGMA * statistics.median(abs(v - median) for v in values)
    drop = min(max(SPREAD_K * sigma / median, MIN_DROP), MAX_DROP)
    medians[cls] = (median, drop, len(figures))
    for node, items in figures.items():
        low = sorted((gbps, what) for what, gbps in items if gbps < median * (1 - drop))
        if low:
            gbps, what = low[0]
            also = f" ({len(low)} of its {len(items)} figures of the class are)" if len(items) > 1 else ""
            findings.append(Finding("figure", cls, f"{what}: {gbps:.1f} GB/s, {1 - gbps / median:.0%} under the "
                                    f"median of {counted(len(figures), 'node')} ({median:.1f} GB/s; their spread "
                                    f"allows {drop:.0%}){also}", node))
    above = [node for node, items in figures.items() if statistics.median(g for _, g in items) > median * (1 + drop)]
    if len(above) >= max(2, 0.1 * len(figures)):
        findings.append(Finding("split", cls, f"{cls}: {counted(len(above), 'node')} ({_listed(above)}) measure over "
                                f"{drop:.0%} above the median of {median:.1f} GB/s: the group is split, and its "
                                f"median may be the degraded side"))


def judge_group(kind: str, nodes: list[Node]) -> Group:
    findings: list[Finding] = []
    reference: dict[str, str] = {}
    medians: dict = {}
    unjudged: list[str] = []
    if len(nodes) < MIN_FACT_PEERS:
        unjudged.append(f"{counted(len(nodes), 'node')} of this kind: too few to judge by its peers "
                        f"({MIN_FACT_PEERS} needed)")
        return Group(kind, tuple(nodes), reference, medians, (), tuple(unjudged))
    _judge_fact("GPUs", {n.name: n.facts["GPUs"] for n in nodes}, findings, reference, unjudged)
    # A node with another GPU count cannot have its GPUs matched to its peers': only the count is named.
    comparable = [n for n in nodes if n.facts["GPUs"] == reference.get("GPUs", n.facts["GPUs"])]
    facts = dict.fromkeys(f for n in nodes for f in n.facts if f != "GPUs")
    per_gpu = frozenset().union(*(n.per_gpu for n in nodes))
    for fact in facts:
        among = comparable if fact in per_gpu else nodes
        values = {n.name: n.facts[fact] for n in among if n.facts.get(fact) is not None}
        if values:
            _judge_fact(fact, values, findings, reference, unjudged)
    by_class: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for n in nodes:
        for fig in n.figures:
            by_class[fig.cls][n.name].append((fig.what, fig.gbps))
    for cls, figures in by_class.items():
        _judge_class(cls, figures, findings, medians, unjudged)
    return Group(kind, tuple(nodes), reference, medians, tuple(findings), tuple(unjudged))


def judge(nodes: list[Node]) -> Fleet:
    """Group the nodes by GPU model (in the order first read) and judge each group by its peers."""
    groups: dict[str, list[Node]] = {}
    for node in nodes:
        groups.setdefault(node.kind, []).append(node)
    return Fleet(tuple(judge_group(kind, members) for kind, members in groups.items()))
