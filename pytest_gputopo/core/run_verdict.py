"""A run's verdict, decided once from its record: PASSED, FAILED or INCOMPLETE, each cause of a failure
(what failed, where, what was found against what was wanted), the tests not run for an unmet
requirement, and the checks that could not judge, each shared reason said once.

The verdict is gputopo's own: its run gate, its check items and its requirements under strict. A
test of the user's that failed for its own reasons is pytest's to report. The run's record decides it
(``plugin.run_record``) and the report document carries it (``"verdict"``); every medium (the HTML
banner, the job summary, its annotations) draws that one verdict and decides nothing.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple

from .units import counted

FAILED, PASSED, INCOMPLETE = "FAILED", "PASSED", "INCOMPLETE"
WORDS = (FAILED, PASSED, INCOMPLETE)
FAILURES = ("failed", "error")  # a check item's outcome that fails the run (pytest's "error": its setup failed)
GATE, CHECK, REQUIREMENT = "run gate", "check", "requirement"  # what a cause is of
_SUBJECT = re.compile(r"^(?P<what>[^\[]+)\[(?P<where>.+)\]$")  # nvlink[GPU5], p2p_bw[GPU0->GPU1]
_GPUS = re.compile(r"\bGPU\d+(?:(?:<->|->|-)GPU\d+)?")


class Cause(NamedTuple):  # not a dataclass: cheaper to define, and a marked run's summary loads it
    """One row of the verdict: ``outcome`` (failed, skipped), ``what`` failed (a check, a requirement,
    the run gate), ``where`` (a GPU, a pair, the tests), ``found`` (what it has against what it needs);
    ``kind`` (GATE, CHECK, REQUIREMENT) and ``name``, the cause as the run named it ("nvlink[GPU5]",
    "machine", "requires_gpus(8)"); ``evidence``: the findings a cause of several explains."""

    outcome: str
    what: str
    where: str
    found: str
    kind: str
    name: str
    evidence: tuple[str, ...] = ()

    def document(self) -> dict[str, Any]:
        return {**self._asdict(), "evidence": list(self.evidence)}


class RunVerdict(NamedTuple):
    word: str
    counts: tuple[str, ...] = ()  # "1 of 45 checks failed", ...
    causes: tuple[Cause, ...] = ()  # failures first, then tests not run
    not_judged: tuple[tuple[tuple[str, ...], str], ...] = ()  # (checks, their one reason)
    complete: bool = True

    @property
    def failed(self) -> list[Cause]:
        return [c for c in self.causes if c.outcome in FAILURES]

    def document(self) -> dict[str, Any]:
        return {
            "word": self.word,
            "complete": self.complete,
            "counts": list(self.counts),
            "causes": [c.document() for c in self.causes],
            "not_judged": [
                {"checks": list(names), "kinds": check_kinds(names), "reason": reason}
                for names, reason in self.not_judged
            ],
        }


def check_kinds(names: Sequence[str]) -> str:
    """Check items by kind, counted: "p2p_bw x28, h2d_bw x8, allreduce_bw"."""
    kinds = Counter(m["what"] if (m := _SUBJECT.match(n)) else n for n in names)
    return ", ".join(k if n == 1 else f"{k} x{n}" for k, n in kinds.items())


def _named(text: str) -> str:
    """The GPUs and pairs a message names, in order, each once (``GPU5``, ``GPU0-GPU5``)."""
    return ", ".join(dict.fromkeys(_GPUS.findall(text)))


def _reason(message: str) -> str:
    """A check's message less its subject ("GPU0->GPU1 copy, P2P: no figure: X" -> "no figure: X"): what
    checks skipped alike have in common."""
    subject, sep, rest = str(message).partition(": ")
    return rest if sep and rest else str(message)


def decide(
    checks: Sequence[dict[str, Any]],
    unmet: Sequence[dict[str, Any]],
    gate_causes: Sequence[dict[str, Any]],
    gate: Sequence[str],
    check_causes: Sequence[dict[str, Any]] | None,
    complete: bool,
) -> RunVerdict:
    """The run's verdict from its record: the run gate's causes (``gate_causes``: {cause, headline,
    evidence}; or, without them, its unmet terms ``gate``), the check items ({check, outcome, message})
    by the causes the run found (``check_causes``), and the tests not run for an unmet requirement
    ({test, outcome, requirement, reason})."""
    causes = _gate_causes(gate_causes, gate) + _check_causes(checks, check_causes) + _not_run(unmet)
    failures = [c for c in causes if c.outcome in FAILURES]
    word = FAILED if failures else (PASSED if complete else INCOMPLETE)
    reasons: dict[str, list[str]] = {}
    for c in checks:
        if c.get("outcome") == "skipped":
            reasons.setdefault(_reason(c.get("message", "")), []).append(str(c.get("check", "")))
    not_judged = sorted(((tuple(names), reason) for reason, names in reasons.items()), key=lambda g: -len(g[0]))
    return RunVerdict(word, _counts(checks, unmet, gate_causes, gate), tuple(causes), tuple(not_judged), complete)


def _gate_causes(gate_causes: Sequence[dict[str, Any]], gate: Sequence[str]) -> list[Cause]:
    causes = []
    for cause in gate_causes:  # {"cause": "GPU5", "headline": "GPU5: all 7 of its pairs fail ..."}
        subject = "this machine" if cause["cause"] == "machine" else cause["cause"]
        found = cause["headline"].removeprefix(f"{cause['cause']}: ").removeprefix("the machine: ")
        evidence = tuple(str(e) for e in cause.get("evidence") or ())
        causes.append(Cause("failed", GATE, subject, found, GATE, str(cause["cause"]), evidence))
    for problem in [] if gate_causes else gate:  # a record without its causes
        term, sep, found = str(problem).partition(": ")  # "requires_link('NV12'): GPU5-GPU6 are linked by NODE"
        what = f"{GATE} {term}" if sep else GATE
        causes.append(Cause("failed", what, _named(found) or "this machine", found if sep else term, GATE, term))
    return causes


def _check_causes(checks: Sequence[dict[str, Any]], decided: Sequence[dict[str, Any]] | None) -> list[Cause]:
    """A row per cause of the failed checks, as the run decided them (``check_causes``: the items of one
    cause, the machine or a GPU, are one row); a cause of one item is that item's row. Without them
    (a failed item the causes do not name), a row per failed item."""
    failed = {str(c.get("check", "")): c for c in checks if c.get("outcome") in FAILURES}
    decided = list(decided or [])
    covered = {str(n) for cause in decided for n in cause.get("checks") or []}
    decided += [{"cause": name, "checks": [name]} for name in failed if name not in covered]
    rows = []
    for cause in decided:
        names = [str(n) for n in cause.get("checks") or []]
        if len(names) == 1 and names[0] in failed:
            c = failed[names[0]]
            m = _SUBJECT.match(names[0])
            what, where = (f"check {m['what']}", m["where"]) if m else (f"check {names[0]}", "the machine")
            rows.append(Cause(str(c["outcome"]), what, where, str(c.get("message", "")), CHECK, names[0]))
            continue
        name = str(cause.get("cause", ""))
        subject = "this machine" if name == "machine" else name
        found = str(cause.get("headline", "")).removeprefix(f"{name}: ").removeprefix("the machine: ")
        evidence = tuple(str(e) for e in cause.get("evidence") or ())
        rows.append(Cause("failed", f"check {check_kinds(names)}", subject, found, CHECK, name, evidence))
    return rows


def _not_run(unmet: Sequence[dict[str, Any]]) -> list[Cause]:
    """Tests not run for one requirement and one reason: one row, naming the tests; failures first."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for u in unmet:
        outcome = "failed" if u.get("outcome") in FAILURES else "skipped"
        key = (outcome, str(u.get("requirement", "")), str(u.get("reason", "")))
        groups.setdefault(key, []).append(str(u.get("test", "")))
    rows = [
        Cause(outcome, requirement, ", ".join(tests), reason.removeprefix(f"{requirement}: "), REQUIREMENT, requirement)
        for (outcome, requirement, reason), tests in groups.items()
    ]
    return [c for c in rows if c.outcome == "failed"] + [c for c in rows if c.outcome != "failed"]


def _counts(
    checks: Sequence[dict[str, Any]], unmet: Sequence[dict[str, Any]], gate_causes: Sequence[Any], gate: Sequence[str]
) -> tuple[str, ...]:
    counts = []
    if gate_causes:
        counts.append(f"the run gate stopped the run ({counted(len(gate_causes), 'cause')})")
    elif gate:
        counts.append(f"the run gate stopped the run ({counted(len(gate), 'unmet term')})")
    if checks:
        tally = Counter("failed" if c.get("outcome") in FAILURES else c.get("outcome") for c in checks)
        parts = [f"{tally[o]} {o}" for o in ("failed", "passed") if tally[o]]
        parts += [f"{tally['skipped']} not judged"] if tally["skipped"] else []
        counts.append(f"{counted(len(checks), 'health check')}: {', '.join(parts) or 'no outcome'}")
    if unmet:
        n_failed = sum(1 for u in unmet if u.get("outcome") in FAILURES)
        counts.append(
            f"{counted(len(unmet), 'test')} not run for an unmet requirement"
            + (f" ({n_failed} failed under strict)" if n_failed else "")
        )
    return tuple(counts)
