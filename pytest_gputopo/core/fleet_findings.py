"""What the fleet view found, as every output draws it: each finding (one cause, one line), each group of
nodes with what it agreed on and could not judge, the documents superseded, and the fleet. Records
only: the judgement that makes them is ``core.fleet``'s (and ``core.fleet_roster``'s, which documents
are which node), so a reporter reads these and imports no judge."""

from __future__ import annotations

from dataclasses import dataclass, field

from .fleet_facts import Node, listed

FAULT, SPLIT, IDENTITY = "fault", "split", "identity"


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
    # figure class a finding names -> node -> (its lowest figure of the class in GB/s, how many it has):
    # what the outputs draw of the nodes' figures, which the judged nodes no longer hold
    lowest: dict[str, dict[str, tuple[float, int]]] = field(default_factory=dict)

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
            out.append(f"{listed(missing)}: unknown in its document")
        return out


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


@dataclass(frozen=True)
class Superseded:
    """A document of a node judged by a newer one of it: not judged, and no error."""

    path: str
    node: str  # the node's name as judged
    by: str  # the document judged
    why: str
