"""The package passes mypy (pyproject.toml's ``[tool.mypy]``: strict on ``core/`` and ``parse/``, mypy's
defaults elsewhere), so the README's test command, and CI with it, type-checks it. mypy keeps its cache
in .mypy_cache: a run over an unchanged tree reads it and takes about a second, one without it about
ten (docs/testing.md)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_nothing():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (requirements-dev.txt)")
    # The files and every setting come from pyproject.toml.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
