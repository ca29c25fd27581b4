"""What loading pytest-gputopo adds to a pytest run on a machine without GPUs.

Times `pytest --collect-only -q` on a one-test suite, with the plugin (`-p gputopo` via its entry
point, probing this host) and without (`-p no:gputopo`), alternating runs; prints medians.
Also prints which of torch/pynvml the plugin module imports when loaded (should be none).

    .venv/bin/python tools/perf/bench_plugin_load.py [runs]
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


# pytest rewrites the asserts of every module of a pytest11 distribution and caches the result
# next to its bytecode; PYTHONDONTWRITEBYTECODE (set on some CI machines) would make every run
# redo it, which is not what a user's machine does.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(args, cwd):
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=cwd,
                   check=False, capture_output=True, env=ENV)
    return time.perf_counter() - t


def main(runs: int = 15) -> None:
    # Byte-compile the package first, as `pip install` does for a wheel (an editable install
    # does not, and with PYTHONDONTWRITEBYTECODE set every run would recompile the sources).
    import compileall
    import pytest_gputopo

    compileall.compile_dir(str(Path(pytest_gputopo.__file__).parent), quiet=1)
    with tempfile.TemporaryDirectory() as d:
        Path(d, "test_one.py").write_text("def test_one():\n    pass\n")
        with_plugin, without = [], []
        timed([], d)  # warm the file cache
        for _ in range(runs):
            with_plugin.append(timed([], d))
            without.append(timed(["-p", "no:gputopo"], d))
    for name, pick in (("median", statistics.median), ("minimum", min)):
        w, wo = pick(with_plugin), pick(without)
        print(f"pytest run, 1 test, {name} of {runs}: without plugin {wo * 1e3:.1f} ms, "
              f"with plugin {w * 1e3:.1f} ms, added {(w - wo) * 1e3:.1f} ms (measured on this host)")
    code = ("import sys, importlib.metadata as md\n"
            "[e for e in md.entry_points(group='pytest11') if e.name == 'gputopo'][0].load()\n"
            "print(','.join(m for m in ('torch', 'pynvml') if m in sys.modules) or 'none')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    print(f"heavy modules imported by loading the plugin: {out}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
