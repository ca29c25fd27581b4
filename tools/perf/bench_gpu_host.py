"""What the plugin costs on a GPU host, by case, measured on the emulated host of the test suite
(``tests/emulated.py``: real ``libnvidia-ml.so.1`` / ``libcuda.so.1`` shared objects, the fake NVML
serving ``dgx-a100``, a torch whose import takes 2 s and a libcuda whose ``cuInit`` takes 1.5 s, as
on real hosts). The figures are of that emulation, not of a real GPU host: label them so.

Each case times ``pytest -q`` on a 20-test suite with the plugin and with ``-p no:gputopo``, paired
and interleaved, and prints the median of the paired differences:

- nothing asked: no test uses a gputopo marker or fixture;
- NVML facts: one test marked ``requires_gpus(8, min_memory_gb=80)`` (NVML is asked on every run);
- CUDA facts: one test marked ``requires_p2p``, first run of the boot (``--gputopo-reprobe``) and repeat;
- torch's versions: one test marked ``requires_versions(nccl=">=2.18")``, first run and repeat.

    .venv/bin/python tools/perf/bench_gpu_host.py [pairs]

With ``--here`` the same cases run on this host as it is (a real GPU host: its own NVML, libcuda
and torch), and the figures are labelled measured on that host.

    python3 tools/perf/bench_gpu_host.py 10 --here

``--only TEXT`` runs the cases whose name holds TEXT; ``--before DIR`` also times, interleaved in the
same pairs, the plugin of another checkout (DIR holds its ``pytest_gputopo``, put first on
PYTHONPATH), so that a change's before and after meet the same moments of a noisy machine:

    git archive HEAD~1 pytest_gputopo | tar -x -C /tmp/before
    .venv/bin/python tools/perf/bench_gpu_host.py 8 --only NVML --before /tmp/before
"""

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from emulated import build_libs, make_host  # noqa: E402

PLAIN = "".join(f"def test_{i}():\n    assert {i} + 1 > {i}\n" for i in range(19))
CASES = {
    "nothing asked": ("def test_19():\n    pass\n", []),
    "NVML facts (every run)": (
        "import pytest\n@pytest.mark.requires_gpus(8, min_memory_gb=80)\ndef test_19():\n    pass\n",
        [],
    ),
    "CUDA facts, first run of the boot": (
        "import pytest\n@pytest.mark.requires_p2p\ndef test_19():\n    pass\n",
        ["--gputopo-reprobe"],
    ),
    "CUDA facts, repeat": ("import pytest\n@pytest.mark.requires_p2p\ndef test_19():\n    pass\n", []),
    "torch's versions, first run of the boot": (
        "import pytest\n@pytest.mark.requires_versions(nccl='>=2.18')\ndef test_19():\n    pass\n",
        ["--gputopo-reprobe"],
    ),
    "torch's versions, repeat": (
        "import pytest\n@pytest.mark.requires_versions(nccl='>=2.18')\ndef test_19():\n    pass\n",
        [],
    ),
}


def timed(args: list, cwd: Path, env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of one pytest run and its children: CPU time (user + system) moves less
    than wall time where other work shares the cores."""
    start, cpu = time.perf_counter(), _children_cpu()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    took = time.perf_counter() - start, _children_cpu() - cpu
    if done.returncode != 0:
        raise SystemExit(f"pytest failed in {cwd}:\n{done.stdout[-2000:]}")
    return took


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def real_host() -> str:
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    return "; ".join(smi.stdout.strip().splitlines()) or f"nvidia-smi answered {smi.returncode}"


def main(pairs: int = 10, here: bool = False, only: str = "", before: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        if here:
            print(f"this host ({real_host()}), {pairs} paired runs per case [measured on a real GPU host]")
        else:
            libs = build_libs(Path(tmp, "libs"))
            _, host_env = make_host(Path(tmp, "host"), libs, "dgx-a100", torch="2.13.0", torch_import_s=2.0)
            env.update(host_env)
            cuda = Path(tmp, "host", "cuda.txt")
            cuda.write_text(cuda.read_text().replace("init 0 0", "init 0 1500"))
            print(
                f"emulated GPU host (dgx-a100, torch import 2 s, cuInit 1.5 s), {pairs} paired runs per case "
                f"[simulated host, measured on this machine]"
            )
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        envs = {"with": env, "without": env}
        if before:
            envs["before"] = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [before, env.get("PYTHONPATH")]))}
        for case, (marked, extra) in CASES.items():
            if only not in case:
                continue
            suite = Path(tmp, "suite-" + str(abs(hash(case))))
            suite.mkdir()
            (suite / "test_plain.py").write_text(PLAIN)
            (suite / "test_marked.py").write_text(marked)
            args = {"with": extra, "before": extra, "without": ["-p", "no:gputopo"]}
            for name in envs:  # warm: bytecode, the file cache, and (repeat cases) this boot's record
                for _ in range(2):
                    timed(args[name], suite, envs[name])
            took = {name: [] for name in envs}
            for i in range(pairs):
                for name in list(envs) if i % 2 else list(envs)[::-1]:
                    took[name].append(timed(args[name], suite, envs[name]))
            for n, what in enumerate(("wall", "CPU")):
                figures = {name: [t[n] for t in runs] for name, runs in took.items()}
                print(
                    f"  {case}, {what}: {_added(figures['with'], figures['without'])}; "
                    + (f"before: {_added(figures['before'], figures['without'])}; " if before else "")
                    + f"pytest alone {statistics.median(figures['without']) * 1e3:.0f} ms"
                )


def _added(runs: list, alone: list) -> str:
    """The median of the paired differences, with their interquartile range."""
    q1, med, q3 = statistics.quantiles([a - b for a, b in zip(runs, alone, strict=True)], n=4)
    return f"+{med * 1e3:.0f} ms (interquartile {q1 * 1e3:.0f} to {q3 * 1e3:.0f})"


if __name__ == "__main__":

    def value(flag: str):
        return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else None

    main(
        *(int(a) for a in sys.argv[1:2] if a.isdigit()),
        here="--here" in sys.argv,
        only=value("--only") or "",
        before=value("--before"),
    )
