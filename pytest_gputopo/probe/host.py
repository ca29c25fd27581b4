"""This host's facts, learned in a short child process under a deadline, each only when asked.

Why a child: CUDA's own view (``cuInit``, then peer access and multicast) initialises CUDA, after which
any test that forks and uses CUDA fails with "Cannot re-initialize CUDA in forked subprocess" -- the
plugin must never do that to the user's process; importing torch for its versions costs seconds. And
a driver that hangs in an NVML call must not hang pytest: past the deadline the child's process group
is killed and the run goes on with the reason.

``python -m pytest_gputopo.probe.host FACT...`` (FACT: ``nvml``, ``cuda``, ``torch``) prints one JSON
line holding each fact asked: ``topology`` (NVML's, ``schema.to_dict``), ``cuda`` (CUDA's view,
``CudaView.to_json``), ``torch`` (the versions torch was built with), and ``warnings``: an optional
source that fails leaves its facts out and says why, never taking NVML's GPUs with it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass

from ..core import model, schema

# A healthy probe takes well under a second for NVML and a few seconds for CUDA's start-up; a
# minute is far beyond both, and short enough that a hung driver is noticed at once.
PROBE_TIMEOUT_S = 60.0
FACTS = (model.NVML, model.CUDA, model.TORCH)


@dataclass(frozen=True)
class Answer:
    """What the child learned: each part None where it was not asked or could not be had."""

    topology: model.Topology | None = None
    cuda: object = None  # a cuda_driver.CudaView
    torch: dict | None = None
    warnings: tuple[str, ...] = ()


def ask_child(facts, timeout_s: float = PROBE_TIMEOUT_S) -> Answer:
    """The facts asked, from the child. A child that hangs, dies or answers nonsense gives, where NVML
    was asked, a topology whose ``problem`` says why (no GPU facts: unknown, never assumed), and a
    warning for the rest."""
    from ..runtime.procs import BenchTimeout, run_child, tail
    from .cuda_driver import CudaView

    asked = [f for f in FACTS if f in facts]
    argv = [sys.executable, "-m", "pytest_gputopo.probe.host", *asked]
    try:
        status, output = run_child(argv, timeout_s=timeout_s)
    except (BenchTimeout, OSError) as exc:
        return _failed(asked, f"the probe of this host ({', '.join(asked)}) failed: {exc}")
    answer = None
    for line in reversed(output.splitlines()):  # a library may write to stderr: the answer is the last JSON line
        if line.startswith("{"):
            try:
                answer = json.loads(line)
                break
            except ValueError:
                pass
    if status != 0 or not isinstance(answer, dict):
        return _failed(asked, f"the probe of this host ({', '.join(asked)}) exited with status {status}: "
                              f"{tail(output, 3)}")
    try:
        topology = schema.from_dict(answer["topology"]) if model.NVML in asked else None
        cuda = CudaView.from_json(answer["cuda"]) if answer.get("cuda") is not None else None
        versions = answer.get("torch")
        if versions is not None and not (isinstance(versions, dict) and all(
                k in ("cuda_runtime_version", "nccl_version") and (v is None or isinstance(v, str))
                for k, v in versions.items())):
            raise ValueError("torch's versions are not version strings")
        warnings = tuple(str(w) for w in answer.get("warnings", ()))
    except (KeyError, TypeError, ValueError, schema.SchemaError) as exc:
        return _failed(asked, f"the probe of this host answered what cannot be read: {exc}")
    return Answer(topology, cuda, versions, warnings)


def _failed(asked: list, problem: str) -> Answer:
    if model.NVML not in asked:
        return Answer(warnings=(problem,))
    from ..runtime import environ as runtime

    return Answer(model.Topology(source=model.Source("nvml"), hostname=runtime.hostname(), problem=problem))


def main(argv: list[str]) -> int:
    asked = [a for a in argv if a in FACTS]
    answer: dict = {"warnings": []}
    if model.NVML in asked:
        from .this_host import probe_nvml_here

        answer["topology"] = schema.to_dict(probe_nvml_here())
    if model.CUDA in asked:
        from .cuda_driver import CudaError, cuda_view

        try:
            answer["cuda"] = cuda_view().to_json()  # initialises CUDA: in this child only
        except Exception as exc:  # an optional source, as torch below
            why = exc if isinstance(exc, CudaError) else f"{type(exc).__name__}: {exc}"
            answer["warnings"].append(f"CUDA's view (device order, peer access, multicast) is unknown: {why}")
    if model.TORCH in asked:
        from .torch_cuda import torch_versions

        try:
            answer["torch"] = torch_versions()
        except Exception as exc:  # an optional source: its facts stay unknown, and the warning says why
            answer["warnings"].append(f"torch's CUDA and NCCL versions are unknown: {type(exc).__name__}: {exc}")
    print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
