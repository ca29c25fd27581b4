"""Where the run object goes while the last report is written: a pytest plugin (``-p tools.run_climbs``,
from the repository root) that traces ``plugin.reporter.write_reports(run, complete=True)`` and prints,
at the end, each function of the package that was handed the run (an argument named ``run``, or a
method of an object whose ``run`` it is), its module, and the counts:

- stays: the calls in a row within one module, counted once per module entered;
- rooms: the distinct modules;
- climbs back up: a call into a module ranked above the caller's in the package's import graph
  (a module's rank is the longest chain of imports below it, after merging any cycle into one
  node, so a callee that imports its caller, directly or not, is above it);
- returns: entering a module the trace had already left.

    .venv/bin/python -m pytest -p tools.run_climbs --gputopo-machine hgx-h100 --gputopo-json /tmp/r.json ...
"""

from __future__ import annotations

import sys
from functools import lru_cache

import pytest

from tests.test_layers import cycles, import_graph


@lru_cache(maxsize=1)
def _ranks() -> dict[str, int]:
    graph = import_graph()
    merged = {m: min(group) for group in cycles(graph) for m in group}
    node = {m: merged.get(m, m) for m in graph}
    below: dict[str, set[str]] = {}
    for a, edges in graph.items():
        below.setdefault(node[a], set()).update(node[b] for b in edges if node[b] != node[a])
    rank: dict[str, int] = {}

    def of(n: str) -> int:
        if n not in rank:
            rank[n] = 0
            rank[n] = 1 + max((of(b) for b in below.get(n, ())), default=-1)
        return rank[n]

    return {m: of(node[m]) for m in graph}


def _holds_run(frame) -> bool:
    code = frame.f_code
    args = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    if "run" in args:
        return True
    owner = frame.f_locals.get("self") if "self" in args else None
    return owner is not None and hasattr(owner, "run") and type(owner).__module__.startswith("pytest_gputopo")


def trace(write, *args, **kwargs):
    calls: list[tuple[str, str]] = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_globals.get("__name__", "").startswith("pytest_gputopo") and _holds_run(frame):
            calls.append((frame.f_globals["__name__"], frame.f_code.co_name))

    sys.setprofile(profile)
    try:
        return write(*args, **kwargs)
    finally:
        sys.setprofile(None)
        _say(calls)


def _say(calls: list[tuple[str, str]]) -> None:
    ranks = _ranks()
    stays, left, climbs, returns = [], set(), 0, 0
    for module, function in calls:
        if stays and stays[-1][0] == module:
            stays[-1][1].append(function)
            continue
        if stays:
            left.add(stays[-1][0])
            climbs += ranks.get(module, 0) > ranks.get(stays[-1][0], 0)
            returns += module in left
        stays.append((module, [function]))
    for module, functions in stays:
        print(f"run_climbs: {module} (rank {ranks.get(module)}): {', '.join(functions)}", file=sys.stderr)
    print(
        f"run_climbs: {len(stays)} stays in {len({m for m, _ in stays})} rooms, {climbs} climbs back up, "
        f"{returns} returns to rooms already left",
        file=sys.stderr,
    )


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    from pytest_gputopo.plugin import reporter

    original = reporter.write_reports

    def write_reports(run, complete, changed=False):
        if not complete:
            return original(run, complete, changed)
        return trace(original, run, complete, changed)

    reporter.write_reports = write_reports
