"""What loading pytest-gputopo adds to a pytest run on a machine without GPUs, as a user gets it.

Installs the plugin from this checkout as a wheel (not editable: pytest then rewrites the asserts of
every module of a ``pytest11`` distribution, as it does for users) into a fresh venv under a
temporary folder, then times ``pytest -q`` on a 100-test suite with the plugin and with ``-p
no:gputopo``, paired and interleaved (the order inside each pair alternates), in two settings:
bytecode cached as usual, and ``PYTHONDONTWRITEBYTECODE=1`` (common in CI images: pytest then
rewrites the plugin's modules again on every run). Prints the median of the paired differences
with its interquartile range, and which heavy modules loading the plugin imports (should be none).
pytest-timeout and pytest-xdist, installed beside it from PyPI as wheels too, are measured the same
way (each against the same run without it), so the figures compare on this machine's own noise.

    .venv/bin/python tools/perf/bench_plugin_load.py [pairs]
"""

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


PERF = shutil.which("perf")


def timed(python: str, args: list, cwd: str, env: dict, cpu: bool = False) -> float:
    """The run's wall time, or (``cpu``) the CPU time it used, as ``perf stat``'s task-clock counts it
    (to the nanosecond; the kernel's own per-process accounting ticks every 4 ms): on a shared VM
    whose share of the host drifts, CPU time is the steadier measure of what the plugin costs."""
    argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    if cpu:
        done = subprocess.run(
            [PERF, "stat", "-x,", "-e", "task-clock", "--", *argv],
            cwd=cwd,
            check=False,
            capture_output=True,
            text=True,
            env=env,
        )
        line = [ln for ln in done.stderr.splitlines() if "task-clock" in ln][-1]
        return float(line.split(",")[0]) / 1e3  # msec -> s
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=False, capture_output=True, env=env)
    return time.perf_counter() - start


IMPORT = """
import time
import pytest, _pytest.main, _pytest.terminal, _pytest.python, _pytest.fixtures, _pytest.tmpdir, _pytest.junitxml
import dataclasses, inspect, json, shutil, tempfile
start = time.perf_counter()
import pytest_gputopo.plugin.entry
print((time.perf_counter() - start) * 1e3)
"""
HOOKS = """
import functools, inspect, time
import pytest
import pytest_gputopo.plugin.entry as hooks
spent = [0.0]
def timed(fn):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start
    return call
for name, fn in list(vars(hooks).items()):
    if name.startswith("pytest_") and inspect.isfunction(fn) and fn.__module__ == hooks.__name__ \\
            and not inspect.isgeneratorfunction(fn):
        setattr(hooks, name, timed(fn))
pytest.main(["-q", "-p", "no:cacheprovider"])
print(spent[0] * 1e3)
"""


def main(pairs: int = 40) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        subprocess.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                str(ROOT),
                "pytest-timeout",
                "pytest-xdist",
            ],
            check=True,
        )
        suite = Path(tmp, "suite")
        suite.mkdir()
        # 100 plain tests, as issue 45 measured it: per-test hooks count too
        (suite / "test_many.py").write_text("".join(f"def test_{i}():\n    pass\n" for i in range(100)))
        base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        no_bytecode = {**base, "PYTHONDONTWRITEBYTECODE": "1"}
        for setting, env in (("bytecode cached", base), ("PYTHONDONTWRITEBYTECODE=1", no_bytecode)):
            for _ in range(2):  # warm the file cache (and, when allowed, pytest's rewritten bytecode)
                timed(python, [], str(suite), env)
            for plugin in ("gputopo", "timeout", "xdist"):
                for measure in ("wall", "cpu") if PERF else ("wall",):
                    added = []
                    for i in range(pairs):
                        runs = [("with", []), ("without", ["-p", f"no:{plugin}"])]
                        took = {
                            name: timed(python, args, str(suite), env, measure == "cpu")
                            for name, args in (runs if i % 2 else runs[::-1])
                        }
                        added.append(took["with"] - took["without"])
                    q1, med, q3 = statistics.quantiles(added, n=4)
                    print(
                        f"{setting}: {plugin} adds {med * 1e3:.1f} ms {measure} time (median of {pairs} paired runs; "
                        f"interquartile {q1 * 1e3:.1f} to {q3 * 1e3:.1f} ms) [measured on this host]"
                    )
        # In one process, where the machine's drift matters less: importing the plugin after the
        # modules every pytest run has loaded already, and the time spent in its hooks during a run.
        imports = sorted(
            float(subprocess.run([python, "-c", IMPORT], capture_output=True, text=True, env=base, check=True).stdout)
            for _ in range(pairs)
        )
        hooks = sorted(
            float(
                subprocess.run(
                    [python, "-c", HOOKS], capture_output=True, text=True, env=base, cwd=str(suite), check=True
                ).stdout.splitlines()[-1]
            )
            for _ in range(pairs)
        )
        print(
            f"in one process: importing the plugin {statistics.median(imports):.1f} ms, its hooks in a 100-test run "
            f"{statistics.median(hooks):.1f} ms (medians of {pairs}) [measured on this host]"
        )
        code = (
            "import sys, importlib.metadata as md\n"
            "[e for e in md.entry_points(group='pytest11') if e.name == 'gputopo'][0].load()\n"
            "print(','.join(m for m in ('torch', 'pynvml') if m in sys.modules) or 'none')"
        )
        out = subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip()
        print(f"heavy modules imported by loading the plugin: {out}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
