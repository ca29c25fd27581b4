"""A run's verdict, read from its report document (``--gputopo-json``): PASSED, FAILED or INCOMPLETE,
each cause of a failure (what failed, where, what was found against what was wanted), the tests not
run for an unmet requirement, and the checks that could not judge, each shared reason said once.

The verdict is gputopo's own: its run gate, its check items and its requirements under strict. A
test of the user's that failed for its own reasons is pytest's to report, not in the document.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from ..core import keys
from ..core.units import counted

FAILED, PASSED, INCOMPLETE = "FAILED", "PASSED", "INCOMPLETE"
_FAILURES = ("failed", "error")
_SUBJECT = re.compile(r"^(?P<what>[^\[]+)\[(?P<where>.+)\]$")  # nvlink[GPU5], p2p_bw[GPU0->GPU1]


@dataclass(frozen=True)
class Cause:
    """One row of the verdict: ``outcome`` (failed, skipped), ``what`` failed (a check, a requirement,
    the run gate), ``where`` (a GPU, a pair, the tests), ``found`` (the message: what it has against
    what it needs)."""

    outcome: str
    what: str
    where: str
    found: str


@dataclass
class Verdict:
    word: str
    counts: list[str] = field(default_factory=list)  # "1 of 45 checks failed", ...
    causes: list[Cause] = field(default_factory=list)  # failures first, then tests not run
    not_judged: list[tuple[list[str], str]] = field(default_factory=list)  # (checks, their one reason)
    complete: bool = True

    @property
    def failed(self) -> list[Cause]:
        return [c for c in self.causes if c.outcome in _FAILURES]


def has_verdict(doc: dict) -> bool:
    """A run's document (checks, requirements or a gate); a sweep's (``gputopo bench``) has none."""
    return any(key in doc for key in ("checks", "unmet", "gate"))


def _reason(message: str) -> str:
    """A check's message less its subject ("GPU0->GPU1 copy, P2P: no figure: X" -> "no figure: X"): what
    checks skipped alike have in common."""
    subject, sep, rest = str(message).partition(": ")
    return rest if sep and rest else str(message)


_GPUS = re.compile(r"\bGPU\d+(?:(?:<->|->|-)GPU\d+)?")


def _named(text: str) -> str:
    """The GPUs and pairs a message names, in order, each once (``GPU5``, ``GPU0-GPU5``)."""
    return ", ".join(dict.fromkeys(_GPUS.findall(text)))


def check_kinds(names: list[str]) -> str:
    """Check items by kind, counted: "p2p_bw x28, h2d_bw x8, allreduce_bw"."""
    kinds = Counter(_SUBJECT.match(n)["what"] if _SUBJECT.match(n) else n for n in names)  # type: ignore[index]  # matched
    return ", ".join(k if n == 1 else f"{k} x{n}" for k, n in kinds.items())


def verdict(doc: dict) -> Verdict:
    complete = doc.get("complete", True) is not False
    checks = [c for c in doc.get("checks") or [] if isinstance(c, dict)]
    unmet = [u for u in doc.get("unmet") or [] if isinstance(u, dict)]
    causes = []
    for cause in doc.get("gate_causes") or []:  # {"cause": "GPU5", "headline": "GPU5: all 7 of its pairs fail ..."}
        subject = "this machine" if cause["cause"] == "machine" else cause["cause"]
        found = cause["headline"].removeprefix(f"{cause['cause']}: ").removeprefix("the machine: ")
        causes.append(Cause("failed", "run gate", subject, found))
    for problem in [] if doc.get("gate_causes") else doc.get("gate") or []:  # a document without its causes
        term, sep, found = str(problem).partition(": ")  # "requires_link('NV12'): GPU5-GPU6 are linked by NODE"
        causes.append(
            Cause(
                "failed",
                f"run gate {term}" if sep else "run gate",
                _named(found) or "this machine",
                found if sep else term,
            )
        )
    causes += _check_causes(doc, checks)
    # Tests not run for one requirement and one reason: one row, naming the tests.
    groups: dict[tuple, list[str]] = {}
    for u in unmet:
        outcome = "failed" if u.get("outcome") in _FAILURES else "skipped"
        groups.setdefault((outcome, str(u.get("requirement", "")), str(u.get("reason", ""))), []).append(
            str(u.get("test", ""))
        )
    not_run = [
        Cause(outcome, requirement, ", ".join(tests), reason.removeprefix(f"{requirement}: "))
        for (outcome, requirement, reason), tests in groups.items()
    ]
    causes += [c for c in not_run if c.outcome == "failed"] + [c for c in not_run if c.outcome != "failed"]

    skipped = [c for c in checks if c.get("outcome") == "skipped"]
    reasons: dict[str, list[str]] = {}
    for c in skipped:
        reasons.setdefault(_reason(c.get("message", "")), []).append(str(c.get("check", "")))
    not_judged = sorted(((names, reason) for reason, names in reasons.items()), key=lambda g: -len(g[0]))

    failures = [c for c in causes if c.outcome in _FAILURES]
    word = FAILED if failures else (PASSED if complete else INCOMPLETE)
    counts = []
    if doc.get("gate_causes"):
        counts.append(f"the run gate stopped the run ({counted(len(doc['gate_causes']), 'cause')})")
    elif doc.get("gate"):
        counts.append(f"the run gate stopped the run ({counted(len(doc['gate']), 'unmet term')})")
    if checks:
        tally = Counter("failed" if c.get("outcome") in _FAILURES else c.get("outcome") for c in checks)
        parts = [f"{tally[o]} {o}" for o in ("failed", "passed") if tally[o]]
        parts += [f"{tally['skipped']} not judged"] if tally["skipped"] else []
        counts.append(f"{counted(len(checks), 'health check')}: {', '.join(parts) or 'no outcome'}")
    if unmet:
        n_failed = sum(1 for u in unmet if u.get("outcome") in _FAILURES)
        counts.append(
            f"{counted(len(unmet), 'test')} not run for an unmet requirement"
            + (f" ({n_failed} failed under strict)" if n_failed else "")
        )
    return Verdict(word, counts, causes, not_judged, complete)


def _check_causes(doc: dict, checks: list[dict]) -> list[Cause]:
    """A row per cause of the failed checks, as the run decided them (``check_causes``: the items of one
    cause, the machine or a GPU, are one row); a cause of one item is that item's row. A document
    without them (written before they were) has a row per failed check."""
    failed = {str(c.get("check", "")): c for c in checks if c.get("outcome") in _FAILURES}
    decided = [c for c in doc.get("check_causes") or [] if isinstance(c, dict)]
    if not decided:
        decided = [{"cause": name, "checks": [name]} for name in failed]
    rows = []
    for cause in decided:
        names = [str(n) for n in cause.get("checks") or []]
        if len(names) == 1 and names[0] in failed:
            c = failed[names[0]]
            m = _SUBJECT.match(names[0])
            rows.append(
                Cause(
                    str(c["outcome"]),
                    f"check {m['what'] if m else names[0]}",
                    m["where"] if m else "the machine",
                    str(c.get("message", "")),
                )
            )
            continue
        subject = "this machine" if cause.get("cause") == "machine" else str(cause.get("cause", ""))
        headline = str(cause.get("headline", ""))
        found = headline.removeprefix(f"{cause.get('cause')}: ").removeprefix("the machine: ")
        rows.append(Cause("failed", f"check {check_kinds(names)}", subject, found))
    return rows


_KIND_WORDS = {
    "p2p": "P2P cop{}",
    "p2p_bidir": "P2P cop{} both ways at once",
    "p2p_staged": "cop{} staged through the host",
    "h2d": "host -> device cop{}",
    "d2h": "device -> host cop{}",
    "allreduce": "all-reduce{}",
}


def _kind(kind: str, n: int) -> str:
    words = _KIND_WORDS.get(kind)
    if words is None:
        return f"{n} {kind}"
    return f"{n} " + words.format(("y" if n == 1 else "ies") if "cop{}" in words else ("" if n == 1 else "s"))


_FLOORLESS = frozenset(kind for kind in keys.COPY_KINDS if keys.Copy(kind, 0, 1).floor is None)


def floorless(m: dict) -> str | None:
    """What a measurement of a kind with no floor of its own is held to (``core.keys``: the staged
    twin, the host path a P2P copy must beat): never judged, so shown as such; None for the others."""
    kind = (m.get("key") or [None])[0]
    return keys.JUDGED_AGAINST[kind] if kind in _FLOORLESS else None


def no_figures(doc: dict) -> list[tuple[str, str]]:
    """The measurements without a figure, by their reason, each reason once with what it left without
    a figure: [("28 P2P copies, 8 device -> host copies", "none published for ...")]."""
    reasons: dict[str, Counter] = {}
    for m in doc.get("measurements") or []:
        if m.get("gbps") is None and isinstance(m.get("key"), list) and m["key"]:
            reasons.setdefault(str(m.get("error") or "no reason given"), Counter())[m["key"][0]] += 1
    return [(", ".join(_kind(kind, n) for kind, n in kinds.items()), reason) for reason, kinds in reasons.items()]
