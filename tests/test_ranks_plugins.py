"""``ranks(n)`` tests x the pytest plugins people install, in their own environment (``.venv-plugins``,
``requirements-plugins.txt``, with torch): coverage of what a rank's body runs (pytest-cov), a
``ranks`` test over its ``@pytest.mark.timeout`` (pytest-timeout), and one rerun (pytest-rerunfailures),
with ranks of their own and with the warm pool, with and without ``-n``.

Before: under ``--cov`` the lines a rank's body ran were not counted (a module called only from a
``ranks(2)`` body: 50 % where the same call in place gave 100 %): each rank is a process torch spawns,
which no coverage measured. Now a rank measures as the run does (``coverage.Coverage.current()`` in the
pytest process: its data file, config, source, branch), in a parallel data file beside the run's, which
pytest-cov combines at its end (``pytest_cov/engine.py``: ``Central.finish`` and ``DistMaster.finish``
call ``Coverage.combine()``, which takes every ``.coverage.*`` file beside the data file).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import pytest

from ci_endings import alive

PLUGINS_PYTHON = Path(__file__).resolve().parents[1] / ".venv-plugins" / "bin" / "python"


@functools.cache
def _has_torch() -> bool:
    if not PLUGINS_PYTHON.exists():
        return False
    done = subprocess.run([str(PLUGINS_PYTHON), "-c", "import torch"], capture_output=True, timeout=120)
    return done.returncode == 0


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not PLUGINS_PYTHON.exists(), reason="no .venv-plugins here: dev/setup makes it"),
]

MOD = """
def branch(x):
    if x:
        return "ranks"
    return "in place"


def ranks_only():
    return 3
"""

SUITE = """
import os
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import mod

NOTES = Path(os.environ["SUITE_NOTES"])


@pytest.mark.ranks(2{pool})
def test_in_ranks(gputopo_rank):
    t = torch.ones(1)
    dist.all_reduce(t)
    assert mod.branch(True) == "ranks" and mod.ranks_only() == 3


def test_in_place():
    assert mod.branch(False) == "in place"


@pytest.mark.timeout(20)  # a hang guard: the ranks start and note their pids long before
@pytest.mark.ranks(2, timeout=300{pool})
def test_over_its_timeout(gputopo_rank):
    (NOTES / f"pid{{gputopo_rank.rank}}").write_text(str(os.getpid()))
    time.sleep(600)


@pytest.mark.flaky(reruns=1)
@pytest.mark.ranks(2{pool})
def test_passes_the_second_time(gputopo_rank):
    tried = NOTES / f"tried{{gputopo_rank.rank}}"
    first = not tried.exists()
    tried.write_text("once")
    assert not first, "fails the first time"
"""


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess:
    notes = folder / "notes"
    notes.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "COV_CORE_SOURCE")}
    return subprocess.run(
        [str(PLUGINS_PYTHON), "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "-rA", *args],
        cwd=folder,
        env=env | {"SUITE_NOTES": str(notes)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("pool", [False, True], ids=["own ranks", "warm pool"])
@pytest.mark.parametrize("workers", [["-n", "0"], ["-n", "2"]], ids=["one process", "xdist"])
def test_a_ranks_bodys_lines_are_covered_a_timeout_ends_its_ranks_and_a_rerun_passes(tmp_path, pool, workers):
    if not _has_torch():
        pytest.skip(".venv-plugins has no torch (dev/setup installs it from requirements-plugins.txt)")
    (tmp_path / "mod.py").write_text(MOD)
    (tmp_path / "test_suite.py").write_text(SUITE.format(pool=", pool=True" if pool else ""))
    done = _run(tmp_path, *workers, "--cov=mod", "--cov-report=json:cov.json")
    text = done.stdout + done.stderr
    assert "INTERNALERROR" not in text, text[-4000:]
    last = done.stdout.strip().splitlines()[-1]
    assert all(count in last for count in ("1 failed", "3 passed", "1 rerun")), text[-4000:]
    assert "FAILED test_suite.py::test_over_its_timeout - Failed: Timeout" in text, text[-4000:]
    covered = json.loads((tmp_path / "cov.json").read_text())["files"]["mod.py"]
    assert covered["missing_lines"] == [] and covered["summary"]["percent_covered"] == 100.0, covered
    assert list(tmp_path.glob(".coverage.*")) == [], "a rank's data file left uncombined"
    ranks = [int(p.read_text()) for p in (tmp_path / "notes").glob("pid*")]
    assert len(ranks) == 2 and not [pid for pid in ranks if alive(pid)]
