"""What a marked run costs in the pytest process itself and in the probe's child, apart: on the emulated
host of the test suite (``tests/emulated.py``, serving ``dgx-a100``), a 20-test suite whose one marked
test asks NVML's facts (``requires_gpus(8, min_memory_gb=80)``, met), run by a wrapper that reports the
pytest process's own CPU time (``RUSAGE_SELF``) and its children's (``RUSAGE_CHILDREN``: the NVML
child). Medians over interleaved runs of:

- marked: the plugin, the marked suite;
- unmarked: the plugin, the same suite without the marker (loaded, nothing asked);
- no plugin: the marked suite with ``-p no:gputopo``;
- before (``--before DIR``): the marked suite with another checkout's plugin (DIR holds its
  ``pytest_gputopo``, put first on PYTHONPATH), so that a change's before and after meet the same
  moments of a noisy machine.

The figures are of that emulation on this machine, not of a real GPU host: label them so.

    git archive HEAD~1 pytest_gputopo | tar -x -C /tmp/before
    .venv/bin/python tools/perf/bench_marked_parent.py 20 --before /tmp/before
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

PLAIN = "".join(f"def test_{i}():\n    assert {i} + 1 > {i}\n" for i in range(19))
MARKED = "import pytest\n@pytest.mark.requires_gpus(8, min_memory_gb=80)\ndef test_19():\n    pass\n"
UNMARKED = "def test_19():\n    pass\n"
WRAPPER = (
    "import resource, sys, pytest\n"
    "status = pytest.main(sys.argv[1:])\n"
    "own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print('CPU', own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime)\n"
    "sys.exit(status)\n"
)


def timed(args: list, cwd: Path, env: dict) -> tuple[float, float, float]:
    """(wall, the pytest process's own CPU, its children's CPU) seconds of one run."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, "-q", "-p", "no:randomly", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"pytest failed in {cwd}:\n{done.stdout[-2000:]}")
    own, children = (float(v) for v in done.stdout.strip().splitlines()[-1].split()[1:])
    return wall, own, children


def main(runs: int = 20, before: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        libs = build_libs(Path(tmp, "libs"))
        _, host_env = make_host(Path(tmp, "host"), libs, "dgx-a100", torch="2.13.0", torch_import_s=2.0)
        env = {**os.environ, **host_env}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        suites = {}
        for name, last in (("marked", MARKED), ("unmarked", UNMARKED)):
            suites[name] = Path(tmp, name)
            suites[name].mkdir()
            (suites[name] / "test_plain.py").write_text(PLAIN)
            (suites[name] / "test_last.py").write_text(last)
        cases = {
            "marked": (suites["marked"], [], env),
            "unmarked": (suites["unmarked"], [], env),
            "no plugin": (suites["marked"], ["-p", "no:gputopo"], env),
        }
        if before:
            cases["before"] = (
                suites["marked"],
                [],
                {**env, "PYTHONPATH": os.pathsep.join(filter(None, [before, env.get("PYTHONPATH")]))},
            )
        for cwd, args, case_env in cases.values():  # warm: bytecode, the file cache
            for _ in range(2):
                timed(args, cwd, case_env)
        took = {name: [] for name in cases}
        for i in range(runs):
            for name in list(cases) if i % 2 else list(cases)[::-1]:
                cwd, args, case_env = cases[name]
                took[name].append(timed(args, cwd, case_env))
        load = os.getloadavg()
        print(
            f"emulated GPU host (dgx-a100), {runs} interleaved runs per case [simulated host, measured on this "
            f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end]"
        )
        for name, figures in took.items():
            wall, own, children = (statistics.median(f[n] for f in figures) * 1e3 for n in range(3))
            print(
                f"  {name:9}: wall {wall:6.0f} ms, pytest's process {own:5.0f} ms CPU, "
                f"its children {children:5.0f} ms CPU"
            )
        for name in [n for n in ("marked", "before") if n in took]:
            for base in ("no plugin", "unmarked"):
                added = [(a[1] - b[1]) * 1e3 for a, b in zip(took[name], took[base], strict=True)]
                print(
                    f"  {name} - {base}, pytest's process CPU: median {statistics.median(added):+.0f} ms "
                    f"(interquartile {statistics.quantiles(added, n=4)[0]:+.0f} to "
                    f"{statistics.quantiles(added, n=4)[2]:+.0f})"
                )


if __name__ == "__main__":
    main(
        *(int(a) for a in sys.argv[1:2] if a.isdigit()),
        before=sys.argv[sys.argv.index("--before") + 1] if "--before" in sys.argv else None,
    )
