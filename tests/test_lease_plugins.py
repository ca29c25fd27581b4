"""Leases x the pytest plugins people install (issue 40 item 5, and "how to keep it from coming
back"): the ten most-downloaded, each used as its docs show, in the environment of their own
``dev/setup`` makes (``.venv-plugins``, ``requirements-plugins.txt``): one suite run with and without
leases, with and without ``-n``, gives the same outcomes, ``-r`` summary, JUnit cases, coverage data,
HTML report and what its tests saw (``lease_comparison``).

Before: with pytest-rerunfailures installed every leased test failed and errored (``KeyError:
'sock_port'``: its process posed as an xdist worker no controller configured), with ``--cov`` every
leased test errored (``KeyError: 'cov_master_host'``) and its lines were lost (75 % -> 50 %), and a
leased test over its ``@pytest.mark.timeout`` ended the run with an INTERNALERROR.

Sources: pytest-rerunfailures reads ``workerinput["sock_port"]`` in a process with ``workerinput``
(``pytest_rerunfailures.py``, ``pytest_configure``) and puts it there in ``pytest_configure_node``;
pytest-randomly reads ``workerinput["randomly_seed"]`` likewise; pytest-cov's worker reads
``cov_master_host``/``cov_master_topdir`` (``pytest_cov/engine.py`` ``DistWorker.start``), which only
its ``DistMaster.configure_node`` gives, and its ``Central`` combines every parallel data file at its
end (``Central.finish``); pytest-html writes nowhere in a process with ``workerinput``
(``pytest_html/plugin.py``); pytest-benchmark turns itself off in an xdist worker
(``PYTEST_XDIST_WORKER``, ``pytest_benchmark/session.py``)."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from emulated import emulated_libs, make_host, needs_compiler  # noqa: F401  (a fixture)
from lease_comparison import OUTCOMES, host_env, lease_args, run

PLUGINS_PYTHON = Path(__file__).resolve().parents[1] / ".venv-plugins" / "bin" / "python"

pytestmark = [
    pytest.mark.slow,
    needs_compiler,
    pytest.mark.skipif(not PLUGINS_PYTHON.exists(), reason="no .venv-plugins here: dev/setup makes it"),
]

TIMEOUT_SUITE = """
import time, pytest

pytestmark = pytest.mark.requires_gpus(1)

@pytest.mark.timeout(5)  # (a leased test's time counts its process's start where none was started ahead)
def test_over_its_timeout():
    time.sleep(30)

@pytest.mark.timeout(30)
def test_within_its_timeout():
    pass
"""


def _summary(text: str) -> tuple[list[str], str]:
    """The short summary's lines and the last line's counts, without the time."""
    lines = [ln for ln in text.splitlines() if re.match(r"(FAILED|ERROR|PASSED|SKIPPED) ", ln)]
    last = re.sub(r" in [0-9.]+s.*", "", text.strip().splitlines()[-1]).strip("= ")
    return sorted(lines), last


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in one process", "xdist"])
def test_a_leased_test_over_its_timeout_fails_as_in_place(emulated_libs, tmp_path, workers):
    """pytest-timeout: a leased test over its ``@pytest.mark.timeout`` killed the whole run with an
    INTERNALERROR (the run's own alarm fired while it waited for the lease's process, and its
    ``pytest.fail`` escaped the relay). As in place: 1 passed, 1 failed "Timeout", exit 1."""
    _, host = make_host(tmp_path / "host", emulated_libs, "dgx-a100")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "PYTEST_ADDOPTS")} | host
    (tmp_path / "test_suite.py").write_text(TIMEOUT_SUITE)
    seen = []
    for leased in (lease_args(tmp_path / "locks"), []):
        done = subprocess.run(
            [str(PLUGINS_PYTHON), "-m", "pytest", "-p", "no:cacheprovider", "-rfE", *workers, *leased],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "INTERNALERROR" not in done.stdout + done.stderr, done.stdout[-3000:]
        seen.append((done.returncode, _summary(done.stdout)))
    assert seen[0] == seen[1], seen
    assert seen[0][0] == 1 and "Timeout" in " ".join(seen[0][1][0]), seen


PLUGIN_SUITE = {
    "pytest.ini": """
[pytest]
env =
    GPUTOPO_SUITE_ENV=from-pytest-env
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
""",
    "mod.py": """
def branch(x):
    if x:
        return "leased"
    return "in place"


def leased_only():
    return 3
""",
    "test_plugins.py": """
import asyncio, os, random, time
from pathlib import Path

import pytest

import mod

GPU = pytest.mark.requires_gpus(1)


def note(request, value):
    name = request.node.nodeid.replace("/", "_").replace(":", "_")
    (Path(os.environ["SUITE_NOTES"]) / name).write_text(repr(value))


@GPU
def test_coverage_of_a_leased_test():  # pytest-cov
    assert mod.branch(True) == "leased" and mod.leased_only() == 3


def test_coverage_in_place():
    assert mod.branch(False) == "in place"


@GPU
@pytest.mark.asyncio
async def test_asyncio(request):  # pytest-asyncio
    await asyncio.sleep(0)
    note(request, "awaited")


@GPU
def test_mock(mocker):  # pytest-mock
    patched = mocker.patch("mod.leased_only", return_value=7)
    assert mod.leased_only() == 7 and patched.call_count == 1


@GPU
@pytest.mark.timeout(3)  # (counting its process's start where none was started ahead)
def test_timeout_over():  # pytest-timeout
    time.sleep(30)


@GPU
@pytest.mark.flaky(reruns=2)
def test_rerun_passes_the_second_time(request):  # pytest-rerunfailures
    tried = Path(os.environ["SUITE_NOTES"]) / ("tried-" + request.node.name)
    if not tried.exists():
        tried.write_text("once")
        assert False, "fails the first time"


@GPU
def test_env():  # pytest-env
    assert os.environ["GPUTOPO_SUITE_ENV"] == "from-pytest-env"


@GPU
def test_benchmark(benchmark):  # pytest-benchmark
    assert benchmark(sum, range(100)) == 4950


@GPU
def test_repeat(request):  # pytest-repeat (--count)
    note(request, "repeated")


@GPU
def test_randomly(request):  # pytest-randomly: reseeded alike
    note(request, random.random())


@GPU
def test_html_extra(extras):  # pytest-html
    extras.append({"name": "note", "format_type": "text", "content": "an extra", "mime_type": "text/plain",
                   "extension": "txt"})
"""
    + OUTCOMES,
}

PLUGIN_OPTIONS = [
    "-rA",
    "--cov=mod",
    "--cov-report=json:cov.json",
    "--html=report.html",
    "--self-contained-html",
    "--junitxml=junit.xml",
    "--count=2",
    "--randomly-seed=3",
]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in one process", "xdist"])
def test_the_ten_most_downloaded_plugins_see_a_leased_test_as_in_place(emulated_libs, tmp_path, workers):
    env = host_env(tmp_path, emulated_libs, "dgx-a100")
    seen = {}
    for leased in (True, False):
        folder = tmp_path / ("leased" if leased else "in place")
        folder.mkdir()
        for name, text in PLUGIN_SUITE.items():
            (folder / name).write_text(text)
        lease = lease_args(tmp_path / "locks") if leased else []
        shown = run(str(PLUGINS_PYTHON), folder, env, ["-p", "no:cacheprovider", *PLUGIN_OPTIONS, *workers, *lease])
        seen[leased] = (shown, _coverage(folder / "cov.json"), _html(folder / "report.html"))
    assert seen[True] == seen[False]
    shown, coverage, _ = seen[True]
    assert "4 failed, 20 passed, 2 skipped, 2 xfailed, 2 rerun" == shown.counts, shown
    assert coverage["mod.py"] == [2, 3, 4, 5, 8, 9], coverage  # each line, the leased test's too


def _coverage(path: Path) -> dict:
    """pytest-cov's JSON report: the lines executed in each file."""
    files = json.loads(path.read_text())["files"]
    return {name: data["executed_lines"] for name, data in files.items()}


def _html(path: Path) -> dict:
    """pytest-html's report: each test's results and extras (its data, without durations)."""
    blob = re.search(r'data-jsonblob="([^"]*)"', path.read_text())
    tests = json.loads(html.unescape(blob.group(1)))["tests"]
    return {
        test: sorted((r["result"], json.dumps(r["extras"], sort_keys=True)) for r in results)
        for test, results in tests.items()
    }
