"""Hookspecs other plugins can implement (registered by pytest-gputopo's ``pytest_addhooks``)."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_gputopo_probe(config):
    """Return the machine's ``pytest_gputopo.model.Topology``, or None to let the next source try.

    pytest-gputopo's own implementation runs last: a recorded machine when one is named, else NVML.
    Called once per run, on the controller (xdist workers receive the result)."""


def pytest_gputopo_topology(config, topology):
    """Called once the topology is known (on the controller and every xdist worker), before any
    run gate is checked; for plugins that want to log it or derive their own facts."""
