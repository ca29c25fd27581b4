"""One suite run in place and on leases, and what a user sees of each run, for comparison (issue 40:
"a leased test behaves exactly as it would in place"): outcomes, the ``-r`` summary, JUnit's test
cases, the figures of ``--gputopo-json`` and what the tests themselves noted (``SUITE_NOTES``).

Times, timestamps and a lease's own fields (its process's pid in a figure's detail) are left out;
so are a report's order (xdist's and a lease's are their own) and JUnit's properties (a worker's
progress lines travel in them, under ``-n`` in place too: ``progress.relay``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from emulated import make_host

# A failing, a skipping and an xfailing GPU test, for the end of a suite that defines ``GPU``.
OUTCOMES = """

@GPU
def test_fails():
    assert 1 == 2, "a plain failure"


@GPU
def test_skips():
    pytest.skip("skipped on purpose")


@GPU
@pytest.mark.xfail(reason="known")
def test_xfails():
    assert False
"""

SUMMARY_LINE = re.compile(r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS|RERUN) ")


@dataclass(frozen=True)
class Seen:
    """What a user sees of one run."""

    status: int
    counts: str  # the last line's counts, without the time
    summary: tuple[str, ...]  # the -r summary's lines, sorted
    junit: tuple[tuple[str, str, str, str], ...] = ()  # (class, name, outcome, message), sorted
    figures: tuple[str, ...] = ()  # each figure of --gputopo-json, as JSON without its times and pid
    notes: dict = field(default_factory=dict)  # what each test noted (SUITE_NOTES), by file name


def host_env(root: Path, libs: Path, machine: str) -> dict[str, str]:
    """The environment of a run entered on the emulated ``machine`` (as a user's run enters it), its
    temporary folder under ``root``."""
    _, host = make_host(root / "host", libs, machine)
    drop = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTEST_ADDOPTS", "RANK", "WORLD_SIZE", "SLURM_PROCID")
    # A temporary folder of its own: pytest keeps a user's three newest pytest-<n> folders, and the
    # runs of other tests at once would remove these runs' tests' tmp_path.
    temp = root / "temp"
    temp.mkdir(exist_ok=True)
    return {k: v for k, v in os.environ.items() if k not in drop} | host | {"TMPDIR": str(temp)}


def lease_args(locks: Path) -> list[str]:
    return ["--gputopo-lease", f"--gputopo-lease-dir={locks}"]


def run(python: str, folder: Path, env: dict, args: list[str], stdin: str | None = None) -> Seen:
    """Run pytest in ``folder`` with ``args``; what it showed, wrote (``junit.xml``, ``run.json``
    where asked) and its tests noted (the folder ``notes``, emptied first)."""
    notes = folder / "notes"
    notes.mkdir(exist_ok=True)
    for old in notes.iterdir():
        old.unlink()
    for report in ("junit.xml", "run.json"):
        (folder / report).unlink(missing_ok=True)
    done = subprocess.run(
        [python, "-m", "pytest", *args],
        cwd=folder,
        env=env | {"SUITE_NOTES": str(notes)},
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    text = done.stdout
    assert "INTERNALERROR" not in text + done.stderr, text[-4000:] + done.stderr[-2000:]
    lines = text.strip().splitlines() or [""]
    return Seen(
        status=done.returncode,
        counts=re.sub(r" in [0-9.]+s.*", "", lines[-1]).strip("= "),
        summary=tuple(sorted(ln for ln in lines if SUMMARY_LINE.match(ln))),
        junit=_junit(folder / "junit.xml"),
        figures=_figures(folder / "run.json"),
        notes={p.name: p.read_text() for p in sorted(notes.iterdir())},
    )


def _junit(path: Path) -> tuple:
    if not path.exists():
        return ()
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        ends = [child for child in case if child.tag in ("failure", "error", "skipped")]
        outcome = ",".join(child.tag for child in ends) or "passed"
        message = ",".join(child.get("message", "") for child in ends)
        cases.append((case.get("classname", ""), case.get("name", ""), outcome, message))
    return tuple(sorted(cases))


def _figures(path: Path) -> tuple:
    if not path.exists():
        return ()
    doc = json.loads(path.read_text())
    figures = []
    for figure in doc["measurements"]:
        detail = {k: v for k, v in (figure.get("detail") or {}).items() if k not in ("worker_pid", "wall_s")}
        for row in detail.get("rows", []) + [detail.get("judged") or {}]:
            row.pop("wall_s", None)
        figures.append(json.dumps(figure | {"detail": detail}, sort_keys=True))
    return tuple(sorted(figures))
