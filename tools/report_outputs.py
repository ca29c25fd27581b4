"""Every output a run writes about itself -- the terminal, the JSON report, JUnit XML, the step
summary (Markdown, with its annotations in the terminal) and the HTML report -- for each bundled
machine (``pytest_gputopo/machines/``) on one representative suite: ``examples/`` and a file of
bandwidth and NCCL markers, with the quick health check. Run before and after a change to the
reporters, then ``--compare`` the two folders: what differs is what the change changed.

    .venv/bin/python tools/report_outputs.py /tmp/before
    .venv/bin/python tools/report_outputs.py /tmp/after
    .venv/bin/python tools/report_outputs.py --compare /tmp/before /tmp/after

``--tree DIR`` runs the package found in DIR (``git archive HEAD | tar -x -C DIR``) instead of this
checkout's: a steady "before" while others change the working tree.

What varies from run to run and means nothing (the time a document was written, pytest's
durations, the temporary folder) is replaced by a fixed word before the outputs are saved.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MACHINES = ROOT / "pytest_gputopo" / "machines"

# Beside examples/: a figure two tests are skipped over (one needing more than the link's line rate
# at floor 0.99, one 10,000 GB/s), one met at the run's own threshold, a host copy, an all-reduce,
# NCCL's transport and a test that passes.
BANDWIDTH = """import pytest


@pytest.mark.min_p2p_bw(floor=0.99, gpus=[0, 1])
def test_pair_near_line_rate():
    pass


@pytest.mark.min_p2p_bw(10000, gpus=[0, 1])
def test_pair_impossibly_fast():
    pass


@pytest.mark.min_p2p_bw(gpus=[0, 1])
def test_pair_at_the_run_floor():
    pass


@pytest.mark.min_h2d_bw()
def test_host_copy():
    pass


@pytest.mark.min_allreduce_bw(50)
def test_allreduce():
    pass


@pytest.mark.requires_nccl_transport("P2P", gpus=2)
def test_nccl_p2p():
    pass


@pytest.mark.requires_gpus(1)
@pytest.mark.min_p2p_bw(floor=0.99, gpus=[0, 1])
def test_two_requirements():
    pass
"""

_VARYING = [
    (re.compile(r'"written": "[^"]*"'), '"written": "WHEN"'),
    (re.compile(r'timestamp="[^"]*"'), 'timestamp="WHEN"'),
    (re.compile(r'time="[0-9.]+"'), 'time="T"'),
    (re.compile(r'hostname="[^"]*"'), 'hostname="HOST"'),
    (re.compile(r"in [0-9.]+s( \([0-9:]+\))?"), "in Ts"),
    (re.compile(r"rootdir: .*"), "rootdir: ROOT"),
    (re.compile(r"^(platform|cachedir|plugins|configfile|hypothesis profile).*$", re.M), r"\1 ..."),
]


def _steady(text: str, work: str, tree: Path) -> str:
    text = text.replace(work, "WORK").replace(str(tree), "TREE")  # where the bundled profiles were read
    for pattern, word in _VARYING:
        text = pattern.sub(word, text)
    return text


def outputs(machine: str, into: Path, tree: Path | None = None) -> None:
    """One run of the suite on ``machine``: its five outputs under ``into/machine``."""
    with tempfile.TemporaryDirectory() as work:
        suite = Path(work) / "suite"
        shutil.copytree(ROOT / "examples", suite)
        (suite / "test_bandwidth_examples.py").write_text(BANDWIDTH)
        out = Path(work) / "out"
        out.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_"))}
        env["GITHUB_STEP_SUMMARY"] = str(out / "summary.md")
        if tree is not None:  # before the editable install's finder, which comes last on sys.meta_path
            env["PYTHONPATH"] = str(tree)
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "-rA",
            "--gputopo-machine",
            machine,
            "--gputopo-check",
            "quick",
            "--gputopo-json",
            str(out / "report.json"),
            "--gputopo-html",
            str(out / "report.html"),
            "--junitxml",
            str(out / "junit.xml"),
            str(suite),
        ]
        done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        target = into / machine
        target.mkdir(parents=True, exist_ok=True)
        said = f"exit {done.returncode}\n{done.stdout}{done.stderr}"
        (target / "terminal.txt").write_text(_steady(said, work, tree or ROOT))
        for name in ("report.json", "report.html", "junit.xml", "summary.md"):
            path = out / name
            text = path.read_text() if path.exists() else "(not written)\n"
            (target / name).write_text(_steady(text, work, tree or ROOT))


_JUNIT_FIGURES = re.compile(r", &quot;figures&quot;: \[.*?\]\}\" />")


def _without_figures(path: Path, text: str) -> str:
    """The output less what a verdict's figures add (``--figures``): the JSON report's
    ``verdicts[].figures`` and the same in JUnit's ``gputopo_verdict`` properties."""
    if path.name == "report.json" and text.startswith("{"):
        doc = json.loads(text)
        for verdict in doc.get("verdicts") or []:
            verdict.pop("figures", None)
        return json.dumps(doc, indent=1) + "\n"
    if path.name == "junit.xml":
        return _JUNIT_FIGURES.sub('}" />', text)
    return text


def compare(before: Path, after: Path, figures: bool = False) -> int:
    """Each output that differs, as a unified diff (``figures``: leaving out the verdicts' figures);
    the exit status is the number of them."""
    differ = 0
    for old in sorted(before.rglob("*")):
        if not old.is_file():
            continue
        new = after / old.relative_to(before)
        a, b = old.read_text(), new.read_text() if new.exists() else ""
        if figures:
            a, b = _without_figures(old, a), _without_figures(new, b)
        if a != b:
            differ += 1
            sys.stdout.writelines(
                difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True), str(old), str(new), n=1)
            )
    print(f"{differ} output(s) differ")
    return min(differ, 100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, nargs="+", help="where to write (or, with --compare, two folders)")
    parser.add_argument("--compare", action="store_true")
    parser.add_argument(
        "--figures",
        action="store_true",
        help="with --compare: leave out the verdicts' figures (JSON, JUnit), which a record adds",
    )
    parser.add_argument("--machine", action="append", help="only these bundled machines")
    parser.add_argument("--tree", type=Path, help="the package's folder's parent to run instead of this checkout")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.folder, figures=args.figures)
    names = args.machine or sorted(p.stem for p in MACHINES.glob("*.json"))
    for name in names:
        outputs(name, args.folder[0], args.tree)
        print(name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
