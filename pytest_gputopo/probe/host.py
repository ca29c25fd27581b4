"""This host's facts, learned in a short child process under a deadline.

Why a child: CUDA's own view (``torch.cuda.get_device_properties``, ``can_device_access_peer``)
initialises CUDA (``torch.cuda._lazy_init``), after which any test that forks and uses CUDA fails
with "Cannot re-initialize CUDA in forked subprocess" -- the plugin must never do that to the
user's process. And a driver that hangs in an NVML call must not hang pytest: past the deadline the
child's process group is killed and the run goes on with the reason.

``python -m pytest_gputopo.probe.host [--no-torch]`` prints one JSON line: the topology NVML gives
(``schema.to_dict``) with what CUDA's driver adds (multicast) and the versions torch was built with,
and, where torch with CUDA is installed, CUDA's view of it. ``--no-torch``: NVML alone, CUDA untouched.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from ..core import model, schema

# A healthy probe takes well under a second for NVML and a few seconds for CUDA's start-up; a
# minute is far beyond both, and short enough that a hung driver is noticed at once.
PROBE_TIMEOUT_S = 60.0


def probe_in_child(use_torch: bool = True, timeout_s: float = PROBE_TIMEOUT_S):
    """(topology, CudaView or None) from the child; a child that hangs, dies or answers nonsense
    gives a topology whose ``problem`` says why (no GPU facts: unknown, never assumed)."""
    from ..runtime.procs import BenchTimeout, run_child, tail
    from .torch_cuda import CudaView

    argv = [sys.executable, "-m", "pytest_gputopo.probe.host"] + ([] if use_torch else ["--no-torch"])
    try:
        status, output = run_child(argv, timeout_s=timeout_s)
    except (BenchTimeout, OSError) as exc:
        return _failed(f"the NVML probe of this host failed: {exc}"), None
    answer = None
    for line in reversed(output.splitlines()):  # a library may write to stderr: the answer is the last JSON line
        if line.startswith("{"):
            try:
                answer = json.loads(line)
                break
            except ValueError:
                pass
    if status != 0 or answer is None:
        return _failed(f"the NVML probe of this host exited with status {status}: {tail(output, 3)}"), None
    try:
        topology = schema.from_dict(answer["topology"])
    except (KeyError, schema.SchemaError) as exc:
        return _failed(f"the NVML probe of this host answered what cannot be read: {exc}"), None
    cuda = answer.get("cuda")
    view = None
    if cuda is not None:
        view = CudaView(tuple(cuda["bus_ids"]), {(a, b): peer for a, b, peer in cuda["peer"]})
    return topology, view


def _failed(problem: str) -> model.Topology:
    from ..runtime import environ as runtime

    return model.Topology(source=model.Source("nvml"), hostname=runtime.hostname(), problem=problem)


def with_cuda_facts(topology: model.Topology, multicast: dict, versions: dict) -> model.Topology:
    """NVML's topology with each GPU's multicast support (joined by bus id; a GPU CUDA did not answer
    for stays unknown) and torch's CUDA and NCCL versions."""
    gpus = tuple(dataclasses.replace(g, multicast=multicast.get((g.pci_bus_id or "").upper())) for g in topology.gpus)
    return dataclasses.replace(topology, gpus=gpus, **versions)


def main(argv: list[str]) -> int:
    from . import _probe_nvml_here

    topology = _probe_nvml_here()
    view = None
    if topology.gpus and "--no-torch" not in argv:
        from .cuda_driver import multicast_by_bus
        from .torch_cuda import cuda_view, torch_versions

        try:
            topology = with_cuda_facts(topology, multicast_by_bus(), torch_versions())
        except Exception as exc:  # optional facts: NVML's stand without them, and the warning says why
            topology = dataclasses.replace(topology, warnings=topology.warnings + (
                f"multicast support and torch's CUDA/NCCL versions are unknown: {type(exc).__name__}: {exc}",))
        view = cuda_view()  # initialises CUDA: in this child only
    answer = {"topology": schema.to_dict(topology), "cuda": None}
    if view is not None:
        answer["cuda"] = {"bus_ids": list(view.bus_ids),
                          "peer": [[a, b, peer] for (a, b), peer in sorted(view.peer.items())]}
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
