"""What loading pytest-gputopo adds to a pytest run on a machine without GPUs, as a user gets it.

Installs the plugin from this checkout as a wheel (not editable: pytest then rewrites the asserts of
every module of a ``pytest11`` distribution, as it does for users) into a fresh venv under a
temporary folder, then times ``pytest -q`` on a one-test suite with the plugin and with ``-p
no:gputopo``, paired and interleaved (the order inside each pair alternates), in two settings:
bytecode cached as usual, and ``PYTHONDONTWRITEBYTECODE=1`` (common in CI images: pytest then
rewrites the plugin's modules again on every run). Prints the median of the paired differences
with its interquartile range, and which heavy modules loading the plugin imports (should be none).

    .venv/bin/python tools/perf/bench_plugin_load.py [pairs]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def timed(python: str, args: list, cwd: str, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=cwd, check=False,
                   capture_output=True, env=env)
    return time.perf_counter() - start


def main(pairs: int = 40) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT)], check=True)
        suite = Path(tmp, "suite")
        suite.mkdir()
        (suite / "test_one.py").write_text("def test_one():\n    pass\n")
        base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        for setting, env in (("bytecode cached", base), ("PYTHONDONTWRITEBYTECODE=1", {**base, "PYTHONDONTWRITEBYTECODE": "1"})):
            for _ in range(2):  # warm the file cache (and, when allowed, pytest's rewritten bytecode)
                timed(python, [], str(suite), env)
            added = []
            for i in range(pairs):
                runs = [("with", []), ("without", ["-p", "no:gputopo"])]
                took = {name: timed(python, args, str(suite), env) for name, args in (runs if i % 2 else runs[::-1])}
                added.append(took["with"] - took["without"])
            q1, med, q3 = statistics.quantiles(added, n=4)
            print(f"{setting}: plugin adds {med * 1e3:.1f} ms (median of {pairs} paired runs; "
                  f"interquartile {q1 * 1e3:.1f} to {q3 * 1e3:.1f} ms) [measured on this host]")
        code = ("import sys, importlib.metadata as md\n"
                "[e for e in md.entry_points(group='pytest11') if e.name == 'gputopo'][0].load()\n"
                "print(','.join(m for m in ('torch', 'pynvml') if m in sys.modules) or 'none')")
        out = subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip()
        print(f"heavy modules imported by loading the plugin: {out}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
