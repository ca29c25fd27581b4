"""What the NVML child of the probe costs alone, as the plugin starts it, against a bare interpreter's
start with and without ``site``; with ``--before DIR``, also another checkout's child (DIR holds its
``pytest_gputopo``, started as that checkout starts it, ``python -m pytest_gputopo.probe.host nvml``).
Medians of wall and CPU time (the child's user + system), the runs interleaved.

Here, without a GPU, the installed ``pynvml`` is imported and its ``nvmlInit`` is refused by an empty
``libnvidia-ml.so.1`` (the emulated host's), so the figure is the child's start and imports; on a GPU
host run it as it is, and NVML answers.

    .venv/bin/python tools/perf/bench_probe_child.py 30 [--before DIR]
"""

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))


def timed(argv: list, env: dict) -> tuple[float, float]:
    start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    end = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - start, end.ru_utime + end.ru_stime - cpu.ru_utime - cpu.ru_stime


def main(runs: int, before: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        gpu = shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
        if not gpu:
            from emulated import build_libs

            libs = build_libs(Path(tmp))
            env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(libs), env.get("LD_LIBRARY_PATH")]))
            print("no GPU here: NVML refused by an empty libnvidia-ml.so.1; the child's start and imports")
        ask = "from pytest_gputopo.probe.host import _argv; import json; print(json.dumps(_argv(['nvml'])))"
        cases = {
            "the NVML child": (json.loads(subprocess.check_output([sys.executable, "-c", ask], env=env)), env),
            "python -c pass": ([sys.executable, "-c", "pass"], env),
            "python -S -c pass": ([sys.executable, "-S", "-c", "pass"], env),
        }
        if before:
            old = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [before, env.get("PYTHONPATH")]))}
            cases["the NVML child, before"] = ([sys.executable, "-m", "pytest_gputopo.probe.host", "nvml"], old)
        took = {name: [] for name in cases}
        for i in range(runs):
            for name in list(cases) if i % 2 else list(cases)[::-1]:
                took[name].append(timed(*cases[name]))
        for name, figures in took.items():
            print(
                f"  {name}: wall {statistics.median(w for w, _ in figures) * 1e3:.1f} ms, "
                f"CPU {statistics.median(c for _, c in figures) * 1e3:.1f} ms"
            )


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 20,
        sys.argv[sys.argv.index("--before") + 1] if "--before" in sys.argv else None,
    )
