"""The code passes ruff (pyproject.toml's ``[tool.ruff]``: pyflakes, pycodestyle, bugbear, isort,
pyupgrade) and is as ruff's formatter writes it, so the README's test command, and CI with it, lints
and format-checks the package, the tests and the tools."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff() -> list[str]:
    """ruff from this environment (dev/setup installs it), else from PATH."""
    beside = Path(sys.executable).with_name("ruff")
    found = str(beside) if beside.exists() else shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (requirements-dev.txt)")
    return [found]


def test_ruff_finds_nothing():
    done = subprocess.run(
        [*ruff(), "check", "--no-cache", "--output-format", "concise", "pytest_gputopo", "tests", "tools"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_ruff_format_changes_nothing():
    """``ruff format pytest_gputopo tests tools`` writes what a change needs."""
    done = subprocess.run(
        [*ruff(), "format", "--check", "--no-cache", "pytest_gputopo", "tests", "tools"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
