"""What a leased test costs (docs/parallel.md): five one-GPU tests that do nothing, on the emulated
8-GPU host, without leases and with them, in one module (one process for the five: they keep the
lease) and in five modules (a process each), and the same with each module importing torch (this
environment's CPU build: its import is the usual heavy one). Prints the median wall time of REPEAT
runs of each, and what a leased test adds.

    .venv/bin/python tools/perf/bench_lease_cost.py [REPEAT]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from emulated import INSTALLED_TORCH, build_libs, make_host  # noqa: E402

TEST = "@pytest.mark.requires_gpus(1)\ndef test_{n}(gputopo_gpus):\n    pass\n"


def suite(folder: Path, modules: int, heavy: bool) -> None:
    head = "import pytest\n" + ("import torch\n" if heavy else "")
    for m in range(modules):
        tests = [TEST.format(n=n) for n in range(5) if n % modules == m]
        (folder / f"test_m{m}.py").write_text(head + "\n".join(tests))


def wall(folder: Path, env: dict, args: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *args],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
        )
        times.append(time.monotonic() - start)
        if out.returncode != 0:
            sys.exit(out.stdout[-3000:] + out.stderr[-2000:])
    return statistics.median(times)


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        _, env = make_host(base / "host", build_libs(base / "libs"), "dgx-a100", torch=INSTALLED_TORCH)
        env = {**os.environ, **env}
        print(f"five one-GPU tests doing nothing, emulated dgx-a100; median of {repeat} runs")
        print("| tests | without leases | --gputopo-lease | per leased test |")
        print("|---|---|---|---|")
        for modules, heavy in ((1, False), (5, False), (1, True), (5, True)):
            folder = base / f"suite-{modules}-{heavy}"
            folder.mkdir()
            suite(folder, modules, heavy)
            plain = wall(folder, env, [], repeat)
            leased = wall(folder, env, ["--gputopo-lease", f"--gputopo-lease-dir={base / 'locks'}"], repeat)
            what = f"{'one module' if modules == 1 else 'five modules'}{', each importing torch' if heavy else ''}"
            print(f"| {what} | {plain:.1f} s | {leased:.1f} s | +{(leased - plain) / 5:.2f} s |")


if __name__ == "__main__":
    main()
