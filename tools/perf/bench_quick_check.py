"""How long the quick check takes on an 8-GPU host, health items included (issue 44: at most 10 s),
measured on the emulated host of the test suite (``tests/emulated.py``: real ``libnvidia-ml.so.1`` /
``libcuda.so.1`` shared objects, the fake NVML serving ``dgx-a100``, with a healthy GPU's health facts).
The figures are of that emulation, not of a real GPU host (whose NVML calls and ``cuInit`` take
longer): say so with them.

Each run is ``gputopo check`` (the quick level: topology, cuda, pci, xid, and per GPU pcie, nvlink,
fabric, health, per pair p2p_status), from start to exit, as a user types it; the median and the
range of ``runs`` runs are printed, with the load.

    .venv/bin/python tools/perf/bench_quick_check.py [runs]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from emulated import build_libs, make_host  # noqa: E402


def main(runs: int = 5) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        libs = build_libs(Path(tmp, "libs"))
        _, host_env = make_host(Path(tmp, "host"), libs, "dgx-a100", torch="2.13.0")
        env = {**os.environ, **host_env}
        gputopo = [sys.executable, "-m", "pytest_gputopo.cli"]
        times, status = [], None
        for _ in range(runs):
            start = time.perf_counter()
            done = subprocess.run([*gputopo, "check"], cwd=tmp, env=env, capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            status = done.returncode
            last = done.stdout.strip().splitlines()[-1:] or done.stderr.strip().splitlines()[-1:]
    print(f"gputopo check (quick), emulated dgx-a100 (8 GPUs), {runs} runs, load {os.getloadavg()[0]:.1f}:")
    print(f"  median {statistics.median(times):.2f} s, from {min(times):.2f} to {max(times):.2f} s; exit {status}")
    print(f"  last line: {last[0] if last else '(none)'}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
