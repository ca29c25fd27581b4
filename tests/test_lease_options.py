"""Leases x every option that reads state or reports (issue 40, "how to keep it from coming back"):
one suite (passing, failing, skipping, xfailing and xpassing tests, a test that prints, one that
uses ``tmp_path``, one that measures a P2P figure, one run in place) run on the emulated host (two
GPUs: the pair a lease holds is the pair measured in place) with
and without ``--gputopo-lease``, for each option of pytest, xdist and this plugin that reads the
cache, the base temporary folder, standard input or a worker's input, or reports: the outcomes,
the ``-r`` summary's lines, JUnit's test cases, the JSON's figures and what the tests noted are the
same (``lease_comparison``). The options that read the cache run after a run that left two
failures, one of them since fixed."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from emulated import emulated_libs, needs_compiler  # noqa: F401  (a fixture)
from lease_comparison import OUTCOMES, host_env, lease_args, run
from pytest_gputopo.runtime.environ import TEST_FAULTS

pytestmark = [pytest.mark.slow, needs_compiler]

SUITE = (
    """
import os
from pathlib import Path

import pytest

GPU = pytest.mark.requires_gpus(1)


def note(name, value):
    (Path(os.environ["SUITE_NOTES"]) / name).write_text(value)


@GPU
def test_passes():
    pass


@GPU
def test_fails_until_fixed():
    fixed = os.environ.get("FIXED")  # (the message would show the environment, each run's own)
    assert fixed == "1", "not fixed yet"


@GPU
@pytest.mark.xfail(reason="fixed upstream")
def test_xpasses():
    pass


@GPU
def test_prints():
    print("printed by a GPU test")


@GPU
def test_tmp_path(tmp_path):
    (tmp_path / "left.txt").write_text("kept")
    note("tmp_path", str(tmp_path))


@pytest.mark.min_p2p_bw(100, gpus=2)
def test_p2p():
    pass


def test_in_place():
    pass
"""
    + OUTCOMES
)

# (options of the run compared, whether it follows a run that left failures, one since fixed)
OPTIONS = {
    "-rA": (["-rA"], False),
    "-ra": (["-ra"], False),
    "-rs": (["-rs"], False),
    "-rfE": (["-rfE"], False),
    "--junitxml": (["-rA", "--junitxml=junit.xml"], False),
    "--gputopo-json": (["-rA", "--gputopo-json=run.json"], False),
    "-n 2 --junitxml --gputopo-json": (["-rA", "-n", "2", "--junitxml=junit.xml", "--gputopo-json=run.json"], False),
    "--basetemp": (["-rA", "--basetemp=bt"], False),
    "-s": (["-rA", "-s"], False),
    "--pdb": (["-rA", "--pdb"], False),
    "--lf": (["-rA", "--lf"], True),
    "--lf --lfnf=none": (["-rA", "--lf", "--lfnf=none"], True),
    "--ff": (["-rA", "--ff"], True),
    "--nf": (["-rA", "--nf"], True),
    "--sw": (["-rA", "--sw"], True),
    "--sw-skip": (["-rA", "--sw-skip"], True),
    "-n 2 --lf": (["-rA", "-n", "2", "--lf"], True),
}


@pytest.mark.parametrize("name", OPTIONS)
def test_a_leased_run_shows_what_the_same_run_in_place_shows(emulated_libs, tmp_path, name):
    options, after_failures = OPTIONS[name]
    env = host_env(tmp_path, emulated_libs, "2x-rtx3090-nvlink") | {TEST_FAULTS: '{"copy_gbps": 200.0}'}
    env.pop("FIXED", None)
    stdin = "c\n" * 20 if "--pdb" in options else None  # pdb's post-mortem prompts: continue each
    seen = {}
    for leased in (True, False):
        folder = tmp_path / ("leased" if leased else "in place")
        folder.mkdir()
        (folder / "test_suite.py").write_text(SUITE)
        lease = lease_args(tmp_path / "locks") if leased else []
        common = [*lease, "-p", "no:randomly"]
        if after_failures:
            run(sys.executable, folder, env, common)
        fixed = env | {"FIXED": "1"} if after_failures else env
        seen[leased] = run(sys.executable, folder, fixed, [*common, *options], stdin=stdin)
        seen[leased].notes["tmp_path"] = _kept(seen[leased].notes.get("tmp_path"), folder / "bt", options)
        shutil.rmtree(folder / ".pytest_cache", ignore_errors=True)
    assert seen[True] == seen[False]
    assert seen[False].summary, seen[False]  # the suite ran and reported


def _kept(path: str | None, basetemp: Path, options: list[str]) -> str | None:
    """A test's ``tmp_path`` as the comparison sees it: whether it is kept after the run, and where a
    ``--basetemp`` was given, whether it lies in it (a leased test's lies a folder deeper)."""
    if path is None:
        return None
    inside = Path(path).is_relative_to(basetemp.resolve()) or Path(path).is_relative_to(basetemp)
    given = any(o.startswith("--basetemp") for o in options)
    return f"kept: {Path(path, 'left.txt').exists()}" + (f", in --basetemp: {inside}" if given else "")
