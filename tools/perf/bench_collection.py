"""Collecting and gating 10,000 marked tests vs the same suite with plain `pytest.mark.skipif`.

Generates two suites of N tests (default 10,000) spread over 100 files: one where every test carries
a gputopo marker (a mix of requires_gpus / requires_p2p / requires_link / requires_nvlink), one
where every test carries an equivalent `skipif` on a module-level constant. Runs both against the
same recorded machine (so probing costs the same) with `-q -p no:cacheprovider`, alternating, and
prints medians. The gputopo suite evaluates each distinct requirement once per run.

    .venv/bin/python tools/perf/bench_collection.py [n_tests] [runs]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARKS = [
    "@pytest.mark.requires_gpus(4)",
    "@pytest.mark.requires_p2p(gpus=2)",
    '@pytest.mark.requires_link("PXB", gpus=4)',
    "@pytest.mark.requires_nvlink",
]
SKIPIFS = [
    '@pytest.mark.skipif(GPUS < 4, reason="needs 4 GPUs")',
    '@pytest.mark.skipif(not P2P, reason="needs P2P")',
    '@pytest.mark.skipif(not PXB, reason="needs PXB")',
    '@pytest.mark.skipif(not NVLINK, reason="needs NVLink")',
]


def write_suite(root: Path, marks, header: str, n: int, files: int = 100) -> None:
    root.mkdir()
    per_file = n // files
    for f in range(files):
        body = [header]
        for t in range(per_file):
            body += [marks[t % len(marks)], f"def test_{t}():", "    pass", ""]
        (root / f"test_{f:03d}.py").write_text("\n".join(body))


# As on a user's machine: bytecode (and pytest's rewritten test modules) cached between runs.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(root: Path) -> float:
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--gputopo-machine", "8x-l40s", str(root)],
        cwd=root,
        capture_output=True,
        check=False,
        env=ENV,
    )
    return time.perf_counter() - t


def main(n: int = 10_000, runs: int = 5) -> None:
    with tempfile.TemporaryDirectory() as d:
        gputopo, plain = Path(d, "gputopo"), Path(d, "skipif")
        write_suite(gputopo, MARKS, "import pytest\n", n)
        write_suite(plain, SKIPIFS, "import pytest\nGPUS, P2P, PXB, NVLINK = 8, True, False, False\n", n)
        timed(gputopo), timed(plain)  # first runs write the bytecode caches
        a, b = [], []
        for _ in range(runs):
            a.append(timed(gputopo))
            b.append(timed(plain))
    ma, mb = statistics.median(a), statistics.median(b)
    print(
        f"{n} tests, median of {runs} runs on recorded:8x-l40s: gputopo markers {ma:.2f} s, "
        f"plain skipif {mb:.2f} s, overhead {100 * (ma - mb) / mb:+.1f}%"
    )


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*args)
