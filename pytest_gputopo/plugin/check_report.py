"""How a run with ``--gputopo-check`` shows the check: as the check, apart from the user's tests.

Its items keep their outcomes -- a failed item fails the run (exit status 1), and JUnit XML holds
every item, one not judged as a skipped test case -- but pytest counts them in categories of their
own (``checks failed``, ``checks passed``, ``checks skipped``), so that the user's counts are the
user's tests and neither FAILURES nor ``-rf``/``-rs`` lists them. The section "gputopo check" says
the failures first (the item, what it checks, its message), then one line per reason items were
not judged, then the check's counts. Registered only when the option is given; loads no judge.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from .reporter import CHECK_PROPERTY
from .run import run_of

NODEID = "gputopo-check"  # the collector's node id: every check item's id starts with it
WHY_PROPERTY = "gputopo_check_why"  # a skipped item's reason without its subject, to say it once
CATEGORIES = {outcome: f"checks {outcome}" for outcome in ("failed", "passed", "skipped")}
_LETTER = {"failed": "F", "passed": ".", "skipped": "s"}
_COLOUR = {"failed": "red", "passed": "green", "skipped": "yellow"}
_LISTED = 3  # up to this many items of one kind are named in a reason's line; more are counted


def is_check(report) -> bool:
    return report.nodeid.startswith(f"{NODEID}::")


class CheckReport:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report):
        """A check item's outcome in the check's own category; under ``-v`` its line carries its
        message (a skipped one's pytest adds, as for any skip)."""
        if report.when != "call" or not is_check(report) or report.outcome not in _LETTER:
            return None
        word = report.outcome.upper()
        if report.outcome != "skipped":
            from ..render.escape import terminal

            word += f" ({terminal(_message(report))})"
        return CATEGORIES[report.outcome], _LETTER[report.outcome], (word, {_COLOUR[report.outcome]: True})

    @pytest.hookimpl(tryfirst=True)  # right after pytest's FAILURES, before its short summary
    def pytest_terminal_summary(self, terminalreporter) -> None:
        reports = [rep for category in CATEGORIES.values() for rep in terminalreporter.stats.get(category, ())]
        if not reports or not run_of(self.config).speaks:
            return
        from ..render.escape import terminal

        terminalreporter.write_sep("-", "gputopo check")
        for text, colour in summary(reports):
            terminalreporter.write_line(terminal(text), **({colour: True} if colour else {}))
        if terminalreporter.stats.get(CATEGORIES["failed"]):
            # A failed check fails the run: pytest draws its last line red only where its stats hold
            # "failed" (an empty list adds no count to the user's tests).
            terminalreporter.stats.setdefault("failed", [])


def summary(reports) -> list[tuple[str, str | None]]:
    """(line, colour) of the section: each failed item, one line per reason items were not judged,
    and the counts."""
    names = [_name(rep) for rep in reports]
    kinds = Counter(_kind(name) for name in names)  # how many items of each kind the check has
    lines = [(f"FAILED {name}{_against(rep, name)}: {_message(rep)}", "red")
             for rep, name in zip(reports, names) if rep.outcome == "failed"]
    by_why: dict[str, list[str]] = {}
    for rep, name in zip(reports, names):
        if rep.outcome == "skipped":
            by_why.setdefault(_why(rep), []).append(name)
    for why, skipped in by_why.items():
        lines.append((f"SKIPPED {_items(skipped, kinds)}: {why}", "yellow"))
    counts = Counter(rep.outcome for rep in reports)
    said = ", ".join(f"{counts[o]} {o}" for o in ("failed", "passed", "skipped") if counts[o])
    lines.append((f"gputopo check: {said}", "red" if counts["failed"] else None))
    return lines


def _items(names: list[str], kinds: Counter) -> str:
    """The items of one reason: named where few of a kind, else counted against the kind's items."""
    parts, of_kind = [], {}
    for name in names:
        of_kind.setdefault(_kind(name), []).append(name)
    for kind, members in of_kind.items():
        if len(members) <= _LISTED:
            parts += members
        elif len(members) == kinds[kind]:
            parts.append(f"{kind} (all {len(members)})")
        else:
            parts.append(f"{kind} ({len(members)} of {kinds[kind]})")
    return ", ".join(parts)


def _name(report) -> str:
    return report.nodeid.removeprefix(f"{NODEID}::")


def _kind(name: str) -> str:
    return name.split("[", 1)[0]


def _properties(report) -> dict:
    return dict(getattr(report, "user_properties", ()))


def _message(report) -> str:
    """The item's message (as the JSON report has it); an item that crashed says what it raised."""
    found = _properties(report).get(CHECK_PROPERTY)
    if found is not None:
        return json.loads(found)["message"]
    crash = getattr(report.longrepr, "reprcrash", None)
    return crash.message if crash is not None else str(report.longrepr)


def _why(report) -> str:
    """Why a skipped item was not judged, without its subject (its line names the items)."""
    return _properties(report).get(WHY_PROPERTY) or _message(report)


def _against(report, name: str) -> str:
    """What the item checks, in parentheses (its docstring, in its report's location)."""
    what = report.location[2].removeprefix(f"{NODEID} {name}:").strip()
    return f" ({what})" if what else ""
