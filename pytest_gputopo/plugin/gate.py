"""An unmet run gate (``--gputopo-require``, ``--gputopo-expect``) as pytest's own outcome: the run's
items are one failing test per cause (``gputopo-gate::GPU5``) instead of the user's tests, so that a
JUnit report, ``-r`` and any plugin that reads reports show the gate red, cause by cause. The
hooks run them and end the run with exit status 8."""

from __future__ import annotations

import pytest

from ..render.escape import terminal, terminal_lines

NODEID = "gputopo-gate"


class GateItem(pytest.Item):
    """One cause of an unmet run gate: fails with the cause and its evidence."""

    def __init__(self, *, text: str, **kwargs):
        super().__init__(**kwargs)
        self._text = text

    def runtest(self) -> None:
        pytest.fail(self._text, pytrace=False)

    def repr_failure(self, excinfo, style=None):
        return str(excinfo.value)

    def reportinfo(self):
        return NODEID, None, f"{NODEID} {self.name}"


class GateCollector(pytest.Collector):
    def __init__(self, *, causes: list, **kwargs):
        super().__init__(**kwargs)
        self.causes = causes

    def collect(self):
        for cause in self.causes:  # names and findings come from profiles: each line escaped
            yield GateItem.from_parent(
                self, name=terminal(cause.name), text="\n".join(terminal_lines(cause.lines(limit=None)))
            )


def gate_items(session: pytest.Session, causes: list) -> list[pytest.Item]:
    """One item per cause (``core.causes.Cause``), named by it, its message the cause's headline and
    all its evidence."""
    collector = GateCollector.from_parent(session, name=NODEID, nodeid=NODEID, causes=causes)
    # Collected through pytest's own hooks, so that the items are counted and reported like any others.
    rep = session.ihook.pytest_make_collect_report(collector=collector)
    session.ihook.pytest_collectreport(report=rep)
    return [item for item in rep.result if isinstance(item, pytest.Item)]
