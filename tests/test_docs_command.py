"""``gputopo docs``: the docs ``--help`` names, readable where pip installed the package (the wheel
carries them, ``setup.py``), not only in a checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pytest_gputopo.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_it_lists_the_docs_and_prints_one_by_name(capsys):
    assert main(["docs"]) == 0
    listed = capsys.readouterr().out
    assert "parallel" in listed and "Running GPU tests in parallel: leases" in listed
    assert main(["docs", "docs/parallel.md"]) == 0  # as --help writes it, too
    assert capsys.readouterr().out == (ROOT / "docs" / "parallel.md").read_text(encoding="utf-8")


def test_an_unknown_doc_is_bad_input_naming_the_ones_there(capsys):
    assert main(["docs", "nope"]) == 2
    assert "no doc named 'nope'; one of: architecture, " in capsys.readouterr().err


@pytest.mark.slow
def test_the_wheel_carries_every_doc(tmp_path):
    source = tmp_path / "source"  # a copy: a build leaves its build/ folder where it builds
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("pytest_gputopo", "docs"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)]
    subprocess.run([*pip, str(source)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("pytest_gputopo-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"pytest_gputopo/docs/{doc.name}" for doc in (ROOT / "docs").glob("*.md")} <= names
    assert not any(name.startswith("docs/") for name in names)  # inside the package, not site-packages/docs
