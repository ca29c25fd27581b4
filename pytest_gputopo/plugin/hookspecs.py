"""Hookspecs other plugins can implement (registered by pytest-gputopo's ``pytest_addhooks``)."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_gputopo_probe(config, needs):
    """Return the machine's ``pytest_gputopo.model.Topology``, or None to let the next source try.

    ``needs``: the facts the run's questions need (``"nvml"``, ``"cuda"``, ``"torch"``); facts beyond
    them may stay unknown. pytest-gputopo's own implementation runs last: a recorded machine when one
    is named, else this host. Called once per run, when something first needs the machine: at
    start-up where an option asks (a run gate, a check, a report, a named machine), else after
    collection where a selected test uses a gputopo marker or fixture; never in a run that asks
    nothing. The processes of an xdist run call it once between them."""


def pytest_gputopo_topology(config, topology):
    """Called in the process that learned the topology, right after ``pytest_gputopo_probe``, before
    any run gate is checked or test judged; for plugins that want to log it or derive their own facts."""
