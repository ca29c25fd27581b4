"""What failed, grouped by what made it fail: a degraded node is named first (a GPU, or the machine
itself), then the findings that show it.

Pure. A check that judges every pair (or every GPU) of a set of GPUs reports a ``Group`` of
``Finding``s, each about a pair, one GPU, or nothing in particular (a count, a version, a NIC, a
setting). ``causes`` turns the groups into ``Cause``s:

- every pair of three GPUs or more fails (or every GPU, for a check of each GPU), or most GPUs fail
  nearly all their pairs: the machine is the cause (or the GPUs judged, where a check names some);
- a GPU that is in all, or nearly all, of its pairs' failures, where most GPUs are not: that GPU is the
  cause, and its pairs are the evidence (one GPU that lost its NVLinks fails every pair it is in);
- a finding about one GPU names that GPU as its cause;
- anything else stands alone, as its own cause.

Causes with the same subject (the same GPU, or the machine, on the same node) are one cause, whatever
check found them. Each finding's own line is kept whole: a cause adds a headline, never rewords.

The run gate (``plugin/verdicts.gate_causes``) and the health check (``plugin/check_report.check_causes``:
each kind of check item a ``Group``, its failed items the findings) both say their failures this way,
so that one cause is one line wherever it is written: the terminal, an annotation, a summary row.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from .units import counted

MACHINE = "the machine"
EVIDENCE_LINES = 8  # shown under a cause before "and N more"


class Unknown(str):
    """A problem that is a fact no source reported (or a figure nothing says what it should reach),
    not something known to fall short: never met, and said as unknown wherever a verdict is written.
    Its type says so, whatever its wording: a ``Finding`` made of one is ``unknown``."""


@dataclass(frozen=True)
class Finding:
    """One thing found unmet. ``line``: as it is printed on its own; ``gpus``: the names of what it is
    about ("GPU0", "GPU5": a pair, one GPU, or none); ``what``: the problem without its subject, to
    count alike findings ("are linked by SYS"); ``name``: a short name of its own ("requires_p2p[GPU0-GPU1]");
    ``unknown``: the problem is a fact no source reported (``Unknown``), not a known shortfall."""

    line: str
    gpus: tuple[str, ...] = ()
    what: str = ""
    name: str = ""
    unknown: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.line, Unknown) or isinstance(self.what, Unknown):
            object.__setattr__(self, "unknown", True)

    def under(self, scope: str) -> Finding:
        """The finding as a check named ``scope`` reports it: ``scope: line``."""
        name = f"{scope}[{self.name}]" if self.name else scope
        return Finding(f"{scope}: {self.line}", self.gpus, self.what, name, self.unknown)


@dataclass(frozen=True)
class Group:
    """The findings of one check over ``gpus`` (every pair of them, or each of them, was judged):
    ``label`` says the check in a headline ("requires_link('NV12')"); ``node`` where it ran, for a
    run over several nodes (empty otherwise)."""

    label: str
    gpus: tuple[str, ...]
    findings: tuple[Finding, ...]
    node: str = ""
    whole: str = MACHINE  # what all of ``gpus`` are, when they all fail: the machine, or "GPU0 and GPU1"


@dataclass
class Cause:
    """``subject``: what failed ("GPU5", "the machine", or for a finding on its own its line);
    ``headline``: the cause in one line; ``evidence``: the findings' lines it explains (none for a
    finding on its own, whose line is the headline); ``name``: a short id ("GPU5", "machine");
    ``findings``: the short names (``Finding.name``) of the findings it explains, in order (a check's
    items: "p2p_status[GPU0-GPU1]", ...)."""

    subject: str
    headline: str
    evidence: list[str] = field(default_factory=list)
    name: str = ""
    findings: list[str] = field(default_factory=list)

    def lines(self, limit: int | None = EVIDENCE_LINES, indent: str = "  ") -> list[str]:
        """The headline, then the evidence (at most ``limit`` lines, then how many more)."""
        shown = self.evidence if limit is None else self.evidence[:limit]
        more = len(self.evidence) - len(shown)
        return [self.headline] + [indent + e for e in shown] + ([f"{indent}and {more} more"] if more else [])

    def text(self, limit: int | None = EVIDENCE_LINES) -> str:
        return "\n".join(self.lines(limit))


def _nearly_all(pairs: int) -> int:
    """How many of a GPU's ``pairs`` must fail for the GPU to be their cause: all of up to 3, then
    all but one in four (6 of 7 on an 8-GPU node)."""
    return max(2, math.ceil(0.75 * pairs))


def _tally(findings: list[Finding], noun: str) -> str:
    """How the findings fail, by problem, most common first: "are linked by SYS (16 pairs), ..."."""
    counts = Counter(f.what or f.line for f in findings)
    parts = [f"{what} ({counted(n, noun)})" for what, n in counts.most_common(3)]
    rest = len(counts) - len(parts)
    return ", ".join(parts) + (f", and {counted(rest, 'other problem')}" if rest else "")


def _of_group(group: Group) -> tuple[list[tuple[str, str, list[Finding]]], list[Finding]]:
    """(subject, headline part, findings) for each cause found in ``group``, and the findings that
    stand alone."""
    n = len(group.gpus)
    judged = set(group.gpus)  # a finding about a GPU outside them stands alone
    pairs = [f for f in group.findings if len(f.gpus) == 2 and judged >= set(f.gpus)]
    singles = [f for f in group.findings if len(f.gpus) == 1 and f.gpus[0] in judged]
    alone = [f for f in group.findings if f not in pairs and f not in singles]
    failing = {frozenset(f.gpus) for f in pairs}
    all_pairs = n * (n - 1) // 2
    machine = []
    if n >= 3 and len(failing) >= all_pairs:
        machine.append(f"all {all_pairs} pairs of the {n} GPUs fail {group.label}: {_tally(pairs, 'pair')}")
    if n >= 3 and {f.gpus[0] for f in singles} >= set(group.gpus):
        machine.insert(0, f"all {n} GPUs fail {group.label}: {_tally(singles, 'GPU')}")
    by_gpu = {g: [f for f in pairs if g in f.gpus] for g in group.gpus}
    blamed = [g for g in group.gpus if n >= 3 and len({frozenset(f.gpus) for f in by_gpu[g]}) >= _nearly_all(n - 1)]
    if len(blamed) > n // 2 and not machine:  # most GPUs fail nearly all their pairs: the machine, no one GPU
        machine.append(
            f"{len(failing)} of the {all_pairs} pairs of the {n} GPUs fail {group.label}: {_tally(pairs, 'pair')}"
        )
    if machine:
        return [(group.whole, "; ".join(machine), singles + pairs)], alone
    found = []
    explained: set[int] = set()
    for g in group.gpus:
        mine = [f for f in singles if f.gpus[0] == g]
        parts = [f.what or f.line for f in mine]
        if g in blamed:
            k = len({frozenset(f.gpus) for f in by_gpu[g]})
            count = f"all {n - 1} of its pairs" if k == n - 1 else f"{k} of its {n - 1} pairs"
            others = [frozenset(p) for p in _pairs(group.gpus) if not set(p) & set(blamed)]
            met = sum(1 for p in others if p not in failing)
            without = " or ".join(blamed)
            tail = (
                f"; the {counted(len(others), 'pair')} without {without} {'passes' if len(others) == 1 else 'pass'}"
                if met == len(others) and others
                else f"; {met} of the {counted(len(others), 'pair')} without {without} pass"
                if others
                else ""
            )
            parts.append(f"{count} fail {group.label}{tail}")
            mine = mine + by_gpu[g]
            explained.update(id(f) for f in by_gpu[g])
        if mine:
            found.append((g, "; ".join(parts), mine))
    alone += [f for f in pairs if id(f) not in explained]
    return found, alone


def _pairs(gpus: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(a, b) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]


def causes(groups: list[Group], loose: Sequence[Finding] = ()) -> list[Cause]:
    """The causes of everything the ``groups`` (and the ``loose`` findings, judged over no set of
    GPUs) found: the machine and GPUs first, merged across checks, then each finding that stands
    alone, in the order found."""
    merged: dict[tuple[str, str], Cause] = {}
    alone: list[Finding] = []
    for group in groups:
        found, rest = _of_group(group)
        alone += rest
        for subject, part, findings in found:
            key = (group.node, subject)
            cause = merged.get(key)
            if cause is None:
                where = f"{group.node}: " if group.node else ""
                short = "machine" if subject == MACHINE else subject  # an id: gputopo-gate::machine
                cause = merged[key] = Cause(
                    f"{where}{subject}",
                    f"{where}{subject}: {part}",
                    [],
                    f"{group.node}:{short}" if group.node else short,
                )
            elif part not in cause.headline:
                cause.headline += f"; {part}"
            cause.evidence += [f.line for f in findings if f.line not in cause.evidence]
            cause.findings += [f.name for f in findings if f.name and f.name not in cause.findings]
    wholes = {(g.node, g.whole) for g in groups}
    ordered = [c for key, c in sorted(merged.items(), key=lambda kc: kc[0] not in wholes)]  # the machine first
    names = set(c.name for c in ordered)
    for f in [*alone, *loose]:
        name = f.name or f.line
        base, k = name, 2
        while name in names:
            name, k = f"{base}#{k}", k + 1
        names.add(name)
        ordered.append(Cause(f.line, f.line, [], name, [f.name] if f.name else []))
    return ordered
