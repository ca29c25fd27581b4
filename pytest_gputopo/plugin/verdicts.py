"""From a requirement to its verdict: the one place a marker, a run gate and a health-check item
are judged.

- ``evaluate``: a marker's requirement, once per run, the same on every rank.
- ``judge``: a requirement on facts beyond the topology (measurements, NCCL's account).
- ``judge_figure``: a figure, measured once, against the one threshold rule (``core.judgement``; the
  run's lookups for it are ``_Rule``'s); ``judgement_of``: a figure at hand; ``run_judgements``: every
  figure of the run at the run's own threshold, as the report shows it.
- ``gate_causes``: what ``--gputopo-require`` and ``--gputopo-expect`` find unmet, and why.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from ..core import fact_requirements as facts, requirements as reqs
from ..core.causes import MACHINE, Finding, Group, causes
from ..core.requirements import Outcome
from ..render import report
from ..runtime import environ
from .run import GputopoRun

if TYPE_CHECKING:
    from ..core import keys
    from ..core.judgement import Judgement, Threshold
    from ..core.spec import Figure

# A marker judged on the topology (``requires_gpus``, ``requires_p2p``, ...) needs none of the
# judges, the benchmarks, NCCL's view or the run gates: each function below imports those it uses,
# the boundaries the load budget names (docs/performance.md, docs/architecture.md).

# What a test's gputopo requirements make of it: ``hooks.pytest_runtest_setup`` acts on it, a plan
# (``plan``) shows it. The first unmet requirement, in the order they are read, decides.
RUN, SKIP, FAIL, BROKEN = "run", "skip", "fail", "broken"


def unmet_verdict(run: GputopoRun, outcome: Outcome, strict: bool | None) -> str:
    """What an unmet requirement does to its test: BROKEN (a benchmark returned wrong data: a failure
    even when not strict), FAIL (strict: the marker's ``strict=``, else the run's), else SKIP."""
    if outcome.broken:
        return BROKEN
    return FAIL if (run.settings.strict if strict is None else strict) else SKIP


def evaluate(run: GputopoRun, requirement: reqs.Requirement) -> Outcome:
    """A marker's requirement, judged once per run. On topology facts it is judged on the combined
    view of every node (the same decision on every rank); on measurements, on each rank's own node
    and then agreed (unmet anywhere: unmet everywhere, naming the rank)."""
    found = run.state.verdicts.get(requirement)
    if found is None:
        found = run.state.verdicts[requirement] = _evaluate(run, requirement)
    return found


def _evaluate(run: GputopoRun, requirement: reqs.Requirement) -> Outcome:
    if isinstance(requirement, facts.FactRequirement):
        verdict = judge(run, requirement)  # measures lazily, once per run
        mine: dict[str, Any] = {
            "reason": None if verdict.ok else verdict.reason,
            "broken": verdict.broken,
            "unknown": not verdict.ok and verdict.unknown,
        }
        gathered = run.all_ranks(f"verdict/{requirement}", mine)
        if len(gathered) == 1:
            return Outcome(mine["reason"], mine["broken"], verdict.recorded, unknown=mine["unknown"])
        unmet = [(r, d) for r, d in enumerate(gathered) if d["reason"]]
        if not unmet:  # met everywhere: each rank says what its own verdict rests on
            return Outcome(None, recorded=verdict.recorded)
        rank, first = unmet[0]  # unknown only where no rank knows it falls short
        return Outcome(
            f"rank {rank}: {first['reason']}",
            any(d["broken"] for _, d in unmet),
            unknown=all(d.get("unknown", False) for _, d in unmet),
        )
    short = [
        (view, topology, verdict)
        for view, topology in run.nodes()
        if not (verdict := requirement.evaluate(topology)).ok
    ]
    if not short:
        return Outcome(None)
    view, topology, verdict = short[0]  # the first node's reason; unknown only where no node falls short
    # A node's view comes with ranks (a launch)
    where = f"on {view.where}: " if view is not None and len(run.ranks.views) > 1 else ""  # type: ignore[union-attr]
    group = _group(requirement, topology, view.where if where else "", str(requirement))
    blamed = tuple(c.subject for c in causes([group]) if c.evidence)  # not a finding alone
    return Outcome(
        f"{where}{verdict.reason} [{report.source_text(topology)}]",
        causes=blamed,
        unknown=all(v.unknown for _, _, v in short),
    )


def judge(
    run: GputopoRun, requirement: facts.FactRequirement, max_items: int | None = reqs.REASON_PAIRS
) -> reqs.Verdict:
    """The verdict of a requirement judged on facts beyond the topology, its reason naming the
    source (``max_items=None``: name every failing pair, as a run gate does)."""
    if isinstance(requirement, facts.BandwidthRequirement):
        return judge_bandwidth(run, requirement, max_items)
    from . import measurements  # the benchmarks and NCCL's view, for requirements on facts
    from .nccl_view import nccl_view

    topology = run.topology
    view = nccl_view(run, observe=True)
    # What the verdict rests on: NCCL's run, and for no-fallback the P2P copies measured so far.
    transport = isinstance(requirement, facts.TransportRequirement)
    wrong = measurements.wrong_data(run, ("nccl_transports",) if transport else ("nccl_transports", "p2p"))
    if wrong:  # the facts rest on runs whose data came back wrong: a broken node, never a skip
        reason = f"{requirement}: {'; '.join(wrong)} [{report.source_text(topology)}; {view.origin}]"
        return reqs.Verdict(False, reason, tuple(wrong), broken=True)
    # judge() is a TransportRequirement's (transport) or a NoFallbackRequirement's, not FactRequirement's
    if transport:
        verdict = requirement.judge(topology, view.pairs(), view.account, max_items)  # type: ignore[attr-defined]
    else:
        verdict = requirement.judge(view.fallbacks(measurements.measured_p2p(run)), max_items)  # type: ignore[attr-defined]
    if verdict.ok:
        return verdict
    return dataclasses.replace(verdict, reason=f"{verdict.reason} [{report.source_text(topology)}; {view.origin}]")


class _Rule:
    """The one threshold rule (``core.judgement.threshold``) with the run's lookups it needs: the run's
    floors (option / ini / env, else the defaults) and the GPU model, looked up once; what the link
    should give is its caller's (``measurements.expected``), so that judging figures calls no run back.
    ``gbps`` and ``floor`` are a marker's own arguments (None for a check item and the report)."""

    def __init__(self, run: GputopoRun) -> None:
        self.floors, self.explicit = run.settings.floors()
        gpus = run.topology.gpus
        self.gpu_name = gpus[0].name if gpus else None
        # Under a launcher the suite's all-reduce spans every rank: on one node, or across nodes
        # (where no node's published floor applies).
        self.one_node = run.ranks is None or len(run.nodes()) == 1

    def __call__(
        self,
        key: keys.Key,
        expected: tuple[Figure | None, str],
        size_bytes: int | None,
        gbps: float | None,
        floor: float | None,
        nvls: bool | None,
    ) -> Threshold:
        from ..core import judgement  # the judges (see above)

        return judgement.threshold(
            key,
            *expected,
            self.floors,
            self.explicit,
            self.gpu_name,
            size_bytes=size_bytes,
            nvls=nvls,
            gbps=gbps,
            floor=floor,
            one_node=self.one_node,
        )

    def judgement(
        self,
        result,
        expected: tuple[Figure | None, str],
        staged=None,
        gbps: float | None = None,
        floor: float | None = None,
    ) -> Judgement:
        """A result at hand against its threshold; ``staged``: its P2P copy's twin through the host."""
        from ..core.judgement import Judgement, Measured  # the judges (see above)

        th = self(result.key, expected, taken_at(result), gbps, floor, result.detail.get("nvls"))
        measured = Measured(result.gbps, result.origin, result.what, result.source, result.error, result.interval_gbps)
        twin = staged.gbps if staged is not None and staged.error is None else None
        return Judgement(measured, th, twin)


def taken_at(result) -> int | None:
    """The size an all-reduce figure was taken at (a recorded figure says; else the key's)."""
    from ..core import keys  # the benchmarks' (see above)

    key = result.key
    return result.detail.get("size_bytes", key.size_bytes) if isinstance(key, keys.AllReduce) else None


def judgement_of(
    run: GputopoRun, result, staged=None, gbps: float | None = None, floor: float | None = None
) -> Judgement:
    """A benchmark's result at hand against its threshold (nothing is measured for it); ``staged``:
    the same P2P copy staged through the host, where it was measured (a copy slower than staging is
    no P2P)."""
    from . import measurements  # the benchmarks (see above)

    return _Rule(run).judgement(result, measurements.expected(run, result.key), staged, gbps, floor)


def run_judgements(run: GputopoRun, results: dict) -> dict:
    """Each figure of ``results`` (key -> result) against the run's own threshold -- the check
    items' rule, no marker's arguments -- as the report shows it: a P2P copy beside its staged twin
    where that was measured. A key is judged where the threshold rule has a floor for it (NCCL's
    account is no bandwidth). Nothing is measured for it. Each figure is judged once for what it rests
    on (its result, its staged twin's): the run's interim reports judge only what changed."""
    from . import measurements  # the benchmarks (see above)

    judged = [key for key in results if getattr(key, "floor", None) is not None]
    kept = run.state.figure_judgements

    def grounds(key) -> tuple:
        return results[key], results.get(key.staged()) if key.kind == "p2p" else None

    new = [key for key in judged if key not in kept or kept[key][0] != grounds(key)]
    if new:
        rule = _Rule(run)
        expected = measurements.expectations(run, new)  # one call for all: nothing after it calls the run back
        for key in new:
            result, staged = grounds(key)
            kept[key] = (result, staged), rule.judgement(result, expected[key], staged)
    return {key: kept[key][1] for key in judged}


def judge_figure(run: GputopoRun, key: keys.Key, gbps: float | None = None, floor: float | None = None):
    """A benchmark's result (measured once per run) and its ``core.judgement.Judgement`` under the
    one threshold rule: the same for a marker (``gbps``, ``floor``: its own arguments), a health-check
    item and the run's report. A P2P copy that meets its threshold is set beside the same copy staged
    through the host (measured for it): slower than staging is no P2P."""
    from ..core.judgement import MET  # the judges and the benchmarks (see above)
    from . import measurements

    s = measurements.suite(run)
    result = s.get(key)
    verdict = judgement_of(run, result, None, gbps, floor)
    if key.kind == "p2p" and verdict.state == MET:
        verdict = judgement_of(run, result, s.get(key.staged()), gbps, floor)  # type: ignore[union-attr]  # a Copy
    return result, verdict


def judge_bandwidth(
    run: GputopoRun, requirement: facts.BandwidthRequirement, max_items: int | None = reqs.REASON_PAIRS
) -> reqs.Verdict:
    """The verdict of a ``min_*_bw`` marker, its reason naming the source."""
    from . import measurements  # the benchmarks (see above)

    topology = run.topology
    needed = requirement.measurements(topology, measurements.suite(run).allreduce_key)
    judgements = [judge_figure(run, key, requirement.gbps, requirement.floor)[1] for key in needed]
    # Each figure as this requirement judged it, at its own threshold: the report's verdicts carry it.
    run.state.judged[requirement] = tuple(zip(needed, judgements, strict=True))
    verdict = requirement.judge(topology, judgements, max_items)
    if verdict.ok:
        if verdict.recorded:
            return dataclasses.replace(verdict, recorded=f"{verdict.recorded} [{report.source_text(topology)}]")
        return verdict
    return dataclasses.replace(verdict, reason=f"{verdict.reason} [{report.source_text(topology)}]")


# ---------------------------------------------------------------------------------------------
# Run gates


class GateError(ValueError):
    """A run gate cannot be read (a bad expression, a reference machine that cannot be used); the
    message names the option."""


def gate_causes(run: GputopoRun) -> tuple[list[str], list]:
    """Everything ``--gputopo-require`` and ``--gputopo-expect`` find unmet, on every node (the same
    on every rank): each finding's line, every failing pair named, and their causes
    (``core.causes``: a GPU in all its pairs' failures, the machine itself, or a finding alone)."""
    from ..core.expressions import parse_expression  # the run gates (see above)
    from ..core.regressions import compared
    from ..probe import MachineError, reference

    settings = run.settings
    groups, loose = [], []
    nodes = run.nodes()
    if settings.require is not None:
        try:
            terms = parse_expression(settings.require)
        except reqs.RequirementError as exc:
            raise GateError(f"{settings.require_from}: {exc}") from None
        for view, topo in nodes:
            prefix = f"{view.where}: " if view is not None else ""
            for term in terms:
                if isinstance(term, facts.FactRequirement):
                    continue  # judged below, on this rank's own facts
                group = _group(term, topo, _node(view), f"{prefix}{term}")
                if group.findings:
                    groups.append(group)
        loose += _fact_gate_findings(run, [t for t in terms if isinstance(t, facts.FactRequirement)])
    if settings.expect is not None:
        try:
            ref = reference(settings.expect)
        except MachineError as exc:
            raise GateError(f"{settings.expect_from}: {exc}") from None
        everything = environ.all_gpus_visible()
        for view, topo in nodes:
            prefix = f"{view.where}: " if view is not None else ""
            names, found = compared(ref, topo, everything)
            if found:
                groups.append(
                    Group(
                        f"the comparison with {ref.source.name}",
                        names,
                        tuple(f.under(f"{prefix}expected as {ref.source.name}") for f in found),
                        _node(view),
                    )
                )
    problems = [f.line for g in groups for f in g.findings] + [f.line for f in loose]
    return problems, causes(groups, loose)


def _group(requirement: reqs.Requirement, topology, node: str, scope: str) -> Group:
    """A requirement's findings on ``topology``, each line under ``scope``, over the GPUs it judges."""
    found = tuple(f.under(scope) for f in requirement.findings(topology))
    names = tuple(f"GPU{i}" for i in topology.chosen(requirement.gpus))
    whole = MACHINE if len(names) == len(topology.gpus) else " and ".join([", ".join(names[:-1]), *names[-1:]])
    return Group(str(requirement), names, found, node, whole)


def _node(view) -> str:
    return view.where if view is not None else ""


def _fact_gate_findings(run: GputopoRun, terms: list) -> list[Finding]:
    """Gate terms judged on facts (no-fallback): on each rank's own node, then shared by all ranks."""
    mine = [
        (str(t), ("broken node: " if verdict.broken else "") + verdict.reason)
        for t, verdict in ((t, judge(run, t, max_items=None)) for t in terms)
        if not verdict.ok
    ]
    gathered = run.all_ranks("gate", {"problems": [p for _, p in mine]})
    if len(gathered) == 1:
        return [Finding(p, name=name) for name, p in mine]
    return [Finding(f"rank {r}: {p}", name=f"rank {r}") for r, d in enumerate(gathered) for p in d["problems"]]


UNKNOWN = "unknown"  # a requirement's verdict in the report when not judged (``requirements.Outcome.word``: the others)


def report_entries(run: GputopoRun, found: list, stop: int) -> list[str]:
    """Every requirement of a gated test with its verdict -- met, unmet, unknown, broken -- and why, for
    the report (JSON, each a ``gputopo_verdict`` property). ``found``: the test's (requirement, strict)
    pairs; ``stop``: the index of the first unmet one, which decided (``len(found)``: none). A
    requirement after it is judged where that is pure (on the topology); one judged on measurements is
    ``unknown``: nothing is measured for a test not run."""
    entries = []
    for index, (requirement, _) in enumerate(found):
        entry: dict[str, Any]
        if index > stop and isinstance(requirement, facts.FactRequirement):
            entry = {"verdict": UNKNOWN, "reason": f"not judged: the test did not run for {found[stop][0]}"}
            entry["recorded"] = False
        else:
            outcome = evaluate(run, requirement)  # judged once per run: this is the verdict the test had
            judged = run.state.judged.get(requirement, ())  # the figures, at this requirement's own threshold
            entry = {
                "verdict": outcome.word,
                "reason": outcome.reason or outcome.recorded or None,
                "recorded": bool(outcome.recorded),
                **({"figures": [_judged_figure(key, j) for key, j in judged]} if judged else {}),
            }
        entries.append(json.dumps({"requirement": str(requirement), **entry}))
    return entries


def _judged_figure(key, judgement) -> dict:
    """A figure a requirement was judged on, as its verdict's ``figures`` hold it (``run_record`` reads
    it back as a ``JudgedFigure``): its state and the threshold it had to reach there."""
    return {"key": key.to_list(), "state": judgement.state, "needed_gbps": judgement.needed_gbps}
