"""Leases x the pytest plugins people install (issue 40 item 5), each used as its docs show, in the
environment of its own ``dev/setup`` makes (``.venv-plugins``, ``requirements-plugins.txt``): the
same suite with and without leases, with and without ``-n``, gives the same outcomes.

So far pytest-timeout. pytest-rerunfailures and pytest-cov still break a leased test (its process
poses as an xdist worker no controller configured: ``KeyError: 'sock_port'``, ``'cov_master_host'``)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from emulated import emulated_libs, make_host, needs_compiler  # noqa: F401  (a fixture)

PLUGINS_PYTHON = Path(__file__).resolve().parents[1] / ".venv-plugins" / "bin" / "python"

pytestmark = [
    pytest.mark.slow,
    needs_compiler,
    pytest.mark.skipif(not PLUGINS_PYTHON.exists(), reason="no .venv-plugins here: dev/setup makes it"),
]

TIMEOUT_SUITE = """
import time, pytest

@pytest.mark.timeout(1)
@pytest.mark.requires_gpus(1)
def test_over_its_timeout():
    time.sleep(30)

@pytest.mark.timeout(30)
@pytest.mark.requires_gpus(1)
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
    lease = ["--gputopo-lease", f"--gputopo-lease-dir={tmp_path / 'locks'}"]
    seen = []
    for leased in (lease, []):
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
