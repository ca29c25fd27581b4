"""How a run with ``--gputopo-check`` shows the check: as the check, apart from the user's tests.

Its items keep their outcomes -- a failed item fails the run (exit status 1), and JUnit XML holds
every item, one not judged as a skipped test case -- but pytest counts them in categories of their
own (``checks failed``, ``checks passed``, ``checks skipped``), so that the user's counts are the
user's tests and neither FAILURES nor ``-rf``/``-rs`` lists them. The section "gputopo check" says
the failures first, one line per cause (``check_causes``: the run gate's rule, ``core.causes``: the
machine when every pair or GPU fails, a GPU in all its pairs' failures, across kinds of item; a cause
of one item is that item's line: the item, what it checks, its message), then one line per reason
items were not judged, then the check's counts. The items run before the user's tests (``hooks``), and
``-x`` stops after the whole check. Registered only when the option is given (never on xdist workers).
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from ..core.causes import Finding, Group, causes
from ..core.units import counted
from ..render.escape import terminal
from .properties import CHECK_PROPERTY
from .run import run_of

NODEID = "gputopo-check"  # the collector's node id: every check item's id starts with it
# What a check item's report carries (user_properties: from xdist workers too, and in JUnit XML): its
# outcome and message (JSON: ``properties.CHECK_PROPERTY``, the JSON report's ``checks``), and the two below.
WHY_PROPERTY = "gputopo_check_why"  # a skipped item's reason without its subject, to say it once
FINDING_PROPERTY = "gputopo_check_finding"  # a failed item's GPUs and problem without them: its cause
CATEGORIES = {outcome: f"checks {outcome}" for outcome in ("failed", "passed", "skipped")}
_LETTER = {"failed": "F", "passed": ".", "skipped": "s"}
_COLOUR = {"failed": "red", "passed": "green", "skipped": "yellow"}
_LISTED = 3  # up to this many items of one kind are named in a reason's line; more are counted


def is_check(report) -> bool:
    return report.nodeid.startswith(f"{NODEID}::")


class CheckReport:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.maxfail: int | None = None  # the run's --maxfail, held (None: not) while the check's items run

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        """``-x`` (``--maxfail``) stops after the check, not within it: a failed item lets the check's
        other items run (its causes are named from all of them), and the user's tests after it do not.
        In the process that runs the items: pytest's session counts failures against ``maxfail``,
        which is held at 0 (none) while the check's items run and given back after its last one.
        Under xdist the controller counts them and stops handing out items (docs/options.md)."""
        option = item.config.option
        if not is_check(item):
            return (yield)
        if self.maxfail is None:  # the first item of the check (or of a run of them, if a plugin reordered)
            self.maxfail = getattr(option, "maxfail", 0) or 0
            option.maxfail = 0
        try:
            return (yield)
        finally:
            if nextitem is None or not is_check(nextitem):  # the check's last item: -x counts from here
                maxfail, self.maxfail = self.maxfail, None
                option.maxfail, failed = maxfail, item.session.testsfailed
                if maxfail and failed >= maxfail:
                    item.session.shouldfail = f"stopping after the gputopo check: {failed} of its items failed"

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report):
        """A check item's outcome in the check's own category; under ``-v`` its line carries its
        message (a skipped one's pytest adds, as for any skip)."""
        if report.when != "call" or not is_check(report) or report.outcome not in _LETTER:
            return None
        word = report.outcome.upper()
        if report.outcome != "skipped":
            word += f" ({terminal(_message(report))})"
        return CATEGORIES[report.outcome], _LETTER[report.outcome], (word, {_COLOUR[report.outcome]: True})

    @pytest.hookimpl(tryfirst=True)  # right after pytest's FAILURES, before its short summary
    def pytest_terminal_summary(self, terminalreporter) -> None:
        reports = [rep for category in CATEGORIES.values() for rep in terminalreporter.stats.get(category, ())]
        if not reports or not run_of(self.config).speaks:
            return

        terminalreporter.write_sep("-", "gputopo check")
        for text, colour in summary(reports, check_causes(self.config, reports)):
            terminalreporter.write_line(terminal(text), **({colour: True} if colour else {}))
        if terminalreporter.stats.get(CATEGORIES["failed"]):
            # A failed check fails the run: pytest draws its last line red only where its stats hold
            # "failed" (an empty list adds no count to the user's tests).
            terminalreporter.stats.setdefault("failed", [])


def summary(reports, causes: list) -> list[tuple[str, str | None]]:
    """(line, colour) of the section: one line per cause of the failed items (``check_causes``), one
    line per reason items were not judged, and the counts."""
    names = [_name(rep) for rep in reports]
    kinds = Counter(_kind(name) for name in names)  # how many items of each kind the check has
    by_name = dict(zip(names, reports, strict=True))
    lines: list[tuple[str, str | None]] = []
    for cause in causes:  # a cause of one item: that item's own line; of several: the cause, once
        if len(cause.findings) == 1 and cause.findings[0] in by_name:
            name = cause.findings[0]
            lines.append((f"FAILED {name}{_against(by_name[name], name)}: {_message(by_name[name])}", "red"))
        else:
            lines.append((f"FAILED {cause.headline}", "red"))
    by_why: dict[str, list[str]] = {}
    for rep, name in zip(reports, names, strict=True):
        if rep.outcome == "skipped":
            by_why.setdefault(_why(rep), []).append(name)
    for why, skipped in by_why.items():
        lines.append((f"SKIPPED {_items(skipped, kinds)}: {why}", "yellow"))
    counts = Counter(rep.outcome for rep in reports)
    said = ", ".join(f"{counts[o]} {o}" for o in ("failed", "passed", "skipped") if counts[o])
    if len(causes) < counts["failed"]:  # the failed items are fewer causes: "28 failed (1 cause)"
        n = counts["failed"]
        said = said.replace(f"{n} failed", f"{n} failed ({counted(len(causes), 'cause')})", 1)
    lines.append((f"gputopo check: {said}", "red" if counts["failed"] else None))
    return lines


_ORDER = (
    "topology",
    "cuda",
    "pcie",
    "nvlink",
    "p2p_status",
    "p2p_bw",
    "p2p_bidir_bw",
    "h2d_bw",
    "h2d_pageable_bw",
    "d2h_bw",
    "allreduce_bw",
)  # the items' order (``checks._checks``), whatever order reports came in


def _in_order(name: str) -> tuple:
    kind = _kind(name)
    return (
        _ORDER.index(kind) if kind in _ORDER else len(_ORDER),
        kind,
        [int(n) for n in re.findall(r"\d+", name.removeprefix(kind))],
    )


def check_causes(config: pytest.Config, reports=None) -> list:
    """The causes (``core.causes.Cause``) of the check's failed items, by the rule the run gate uses:
    each kind of item is a ``Group`` over the machine's GPUs, its failed items the findings (a pair's,
    a GPU's, or, for an item about neither, one standing alone), so that P2P, NVLink, PCIe and figure
    items failed for one GPU, or for the whole machine, are one cause. ``reports``: the check's
    reports (default: the terminal reporter's), in any order (xdist's); each cause's ``findings`` are
    the names of its items."""
    if reports is None:
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        stats = terminal.stats if terminal is not None else {}
        reports = [rep for rep in stats.get(CATEGORIES["failed"], ())]
    failed = sorted(
        ((_name(rep), rep) for rep in reports if rep.outcome == "failed" and is_check(rep)),
        key=lambda nr: _in_order(nr[0]),
    )
    if not failed:
        return []

    groups: dict[str, list] = {}
    loose: list[Finding] = []
    for name, rep in failed:
        found = json.loads(_properties(rep).get(FINDING_PROPERTY) or "{}")  # none: an item that raised
        finding = Finding(_message(rep), tuple(found.get("gpus", ())), found.get("what", ""), name)
        (groups.setdefault(_kind(name), []) if finding.gpus else loose).append(finding)
    gpus = tuple(f"GPU{g.index}" for g in run_of(config).topology.gpus)
    return causes([Group(kind, gpus, tuple(found)) for kind, found in groups.items()], loose)


def document_causes(config: pytest.Config) -> list[dict]:
    """The check's causes as the report document holds them (``check_causes``): each cause's id, its
    headline, the items' messages that show it and the items' names."""
    return [
        {"cause": c.name, "headline": c.headline, "evidence": list(c.evidence), "checks": list(c.findings)}
        for c in check_causes(config)
    ]


def _items(names: list[str], kinds: Counter) -> str:
    """The items of one reason: named where few of a kind, else counted against the kind's items."""
    of_kind: dict[str, list[str]]
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
