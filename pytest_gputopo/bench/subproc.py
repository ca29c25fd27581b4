"""Run a GPU copy benchmark in a child process under a deadline.

A copy that hangs (a broken P2P path, an IOMMU fault) cannot be interrupted inside the process
that issued it; in a child process it can (``procs.run_child``), and the run goes on with a reason.
"""

from __future__ import annotations

import json
import sys

from ..core import keys, model
from ..runtime.procs import run_child, tail


def run_copy_benchmark(key: keys.Copy | keys.HostCopy, topology: model.Topology, *, budget_s: float,
                       timeout_s: float) -> dict:
    """The child's measurement (``Measurement.to_json()``), or an exception with the reason."""
    cpu_affinity = topology.gpus[key.gpu].cpu_affinity if isinstance(key, keys.HostCopy) else None
    request = {"key": key.to_list(), "budget_s": budget_s, "cpu_affinity": cpu_affinity}
    status, output = run_child([sys.executable, "-m", "pytest_gputopo.bench.copies", json.dumps(request)],
                               timeout_s=timeout_s)
    if status != 0:
        raise RuntimeError(f"the copy benchmark exited with status {status}: {tail(output, 3)}")
    for line in reversed(output.splitlines()):  # stderr is mixed in: the result is the last JSON line
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    raise RuntimeError(f"the copy benchmark printed no result: {tail(output, 3)}")
