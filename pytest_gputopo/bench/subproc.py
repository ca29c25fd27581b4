"""Run a GPU copy benchmark in a child process under a deadline.

A copy that hangs (a broken P2P path, an IOMMU fault) cannot be interrupted inside the process
that issued it; in a child process it can: on timeout the child's whole process group is killed,
and the run goes on with a reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from .. import model


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_copy_benchmark(key: tuple, topology: model.Topology, *, budget_s: float, timeout_s: float) -> dict:
    """The child's measurement (``Measurement.to_json()``), or an exception with the reason."""
    gpu_affinity = None
    if key[0] == "h2d":
        gpu_affinity = topology.gpus[key[1]].cpu_affinity
    request = {"key": list(key), "budget_s": budget_s, "cpu_affinity": gpu_affinity}
    proc = subprocess.Popen([sys.executable, "-m", "pytest_gputopo.bench.copies", json.dumps(request)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise TimeoutError(f"the copy benchmark did not finish in {timeout_s:.0f} s; its processes were killed") from None
    finally:
        if proc.poll() is None:
            _kill_group(proc)
    if proc.returncode != 0:
        tail = (err or out).strip().splitlines()[-3:]
        raise RuntimeError(f"the copy benchmark exited with status {proc.returncode}: {' | '.join(tail)}")
    return json.loads(out.strip().splitlines()[-1])
