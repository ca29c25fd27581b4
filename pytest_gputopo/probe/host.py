"""This host's facts, learned in a short child process under a deadline, each only when asked.

Why a child: CUDA's own view (``cuInit``, then peer access and multicast) initialises CUDA, after which
any test that forks and uses CUDA fails with "Cannot re-initialize CUDA in forked subprocess" -- the
plugin must never do that to the user's process; importing torch for its versions costs seconds. And
a driver that hangs in an NVML call must not hang pytest: past the deadline the child's process group
is killed and the run goes on with the reason.

The child (``main``, given FACT...: ``nvml``, ``cuda``, ``torch``) prints one line, its ``Answer``
(``ANSWERS``: the one message of this channel, written and read there), holding each fact asked:
``topology`` (NVML's, ``schema.to_dict``), ``cuda`` (CUDA's view, ``CudaView.to_json``), ``torch``
(the versions torch was built with), and ``warnings``: an optional source that fails leaves its facts
out and says why, never taking NVML's GPUs with it. The parent reads it as untrusted: an answer that
is not one (a field missing, unknown or of another type) is the probe's failure, saying why.

It is started on every run that asks, so it starts lean (``_argv``): without ``site`` and the working
folder, importing only the plugin's modules it uses and ``pynvml``, from where this process finds them.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core import model, schema
from ..runtime.messages import Channel, MessageError, codec

if TYPE_CHECKING:
    from .cuda_driver import CudaView

# A healthy probe takes well under a second for NVML and a few seconds for CUDA's start-up; a
# minute is far beyond both, and short enough that a hung driver is noticed at once.
PROBE_TIMEOUT_S = 60.0
FACTS = (model.NVML, model.HEALTH, model.CUDA, model.TORCH)  # HEALTH: with NVML's, where asked

# The lean child's start: `pytest_gputopo` and `pynvml` are imported from the folders this process
# would import them from (argv 1 and 2; "-": not asked), and every other module as Python alone finds it.
_LEAN_START = """import sys
from importlib.machinery import PathFinder
where = dict(zip(("pytest_gputopo", "pynvml"), sys.argv[1:3]))
class Where:
    find_spec = staticmethod(lambda name, path=None, target=None:
                             PathFinder.find_spec(name, [where[name]]) if where.get(name, "-") != "-" else None)
sys.meta_path.insert(0, Where)
from pytest_gputopo.probe.host import main
sys.exit(main(sys.argv[3:]))
"""


def _cuda_view(data: Any) -> CudaView:
    from .cuda_driver import CudaView  # CUDA's view, where the child was asked it: not on NVML's facts alone

    return CudaView.from_json(data)


@dataclass(frozen=True)
class Answer:
    """What the child learned: each part None where it was not asked or could not be had."""

    topology: model.Topology | None = field(default=None, metadata=codec(schema.to_dict, schema.from_dict))
    cuda: CudaView | None = field(default=None, metadata=codec(lambda view: view.to_json(), _cuda_view))
    torch: dict[str, str | None] | None = None  # torch_cuda.torch_versions: {} where torch is not installed
    warnings: tuple[str, ...] = ()

    def invalid(self) -> str | None:
        unknown = sorted(set(self.torch or ()) - {"cuda_runtime_version", "nccl_version"})
        return f"torch's versions name {unknown[0]!r}, which torch_versions does not" if unknown else None


ANSWERS = Channel("the probe of this host", Answer)


def ask_child(facts, timeout_s: float = PROBE_TIMEOUT_S) -> Answer:
    """The facts asked, from the child. A child that hangs, dies or answers nonsense gives, where NVML
    was asked, a topology whose ``problem`` says why (no GPU facts: unknown, never assumed), and a
    warning for the rest."""
    from ..runtime.procs import BenchTimeout, run_child, tail

    asked = [f for f in FACTS if f in facts]
    try:
        status, output = run_child(_argv(asked), timeout_s=timeout_s)
    except (BenchTimeout, OSError) as exc:
        return _failed(asked, f"the probe of this host ({', '.join(asked)}) failed: {exc}")
    answer, refused = _answer(output)
    if status == 0 and answer is not None and model.NVML in asked and answer.topology is None:
        answer, refused = None, "no NVML topology, which it was asked"
    if status == 0 and answer is None and refused:
        return _failed(asked, f"the probe of this host answered what cannot be read: {refused}")
    if status != 0 or answer is None:
        return _failed(
            asked, f"the probe of this host ({', '.join(asked)}) exited with status {status}: {tail(output, 3)}"
        )
    return answer


def _answer(output: str) -> tuple[Answer | None, str]:
    """The child's answer (the last line that is one: a library may write to stderr), or None and why
    the last line that looked like one is not."""
    refused = ""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                return ANSWERS.decode(line, "its output"), ""
            except MessageError as exc:
                refused = refused or str(exc)
    return None, refused


def _argv(asked: list) -> list[str]:
    """How the child starts. Python's ``site`` (-S: the scan of site-packages, every .pth file run)
    is most of its start in a large environment, and the working folder (-P) could shadow the
    standard library; so the child starts without both, and finds the plugin and ``pynvml`` where
    this process does. Not -E (or -I): PYTHONHOME may be how this interpreter finds its standard
    library. torch needs its whole environment: a child asked for its versions starts as usual."""
    plugin, pynvml = _folder_of("pytest_gputopo"), _folder_of("pynvml") if model.NVML in asked else "-"
    if model.TORCH in asked or not plugin or not pynvml:  # or a module this process cannot place: Python looks
        return [sys.executable, "-m", "pytest_gputopo.probe.host", *asked]
    return [sys.executable, "-S", "-P", "-c", _LEAN_START, plugin, pynvml, *asked]


def _folder_of(name: str) -> str:
    """The folder this process imports (or would import) the top-level module ``name`` from, ''
    where it has none."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # ValueError: a module in sys.modules without a spec
        return ""
    if spec is None or not spec.has_location or not spec.origin:
        return ""
    folder = os.path.dirname(spec.origin)
    return os.path.dirname(folder) if spec.submodule_search_locations is not None else folder


def _failed(asked: list, problem: str) -> Answer:
    if model.NVML not in asked:
        return Answer(warnings=(problem,))
    from ..runtime import environ as runtime  # NVML's answer only: CUDA's child never loads the environment's reader

    return Answer(model.Topology(source=model.Source("nvml"), hostname=runtime.hostname(), problem=problem))


def main(argv: list[str]) -> int:
    asked = [a for a in argv if a in FACTS]
    topology = _nvml_facts(model.HEALTH in asked) if model.NVML in asked else None
    cuda, versions, warnings = None, None, []
    if model.CUDA in asked:
        from .cuda_driver import CUDA_UNKNOWN, CudaError, cuda_view

        try:
            cuda = cuda_view()  # initialises CUDA: in this child only
        except Exception as exc:  # an optional source, as torch below
            why = exc if isinstance(exc, CudaError) else f"{type(exc).__name__}: {exc}"
            warnings.append(f"{CUDA_UNKNOWN}{why}")
    if model.TORCH in asked:
        from .torch_cuda import torch_versions

        try:
            versions = torch_versions()
        except Exception as exc:  # an optional source: its facts stay unknown, and the warning says why
            warnings.append(f"torch's CUDA and NCCL versions are unknown: {type(exc).__name__}: {exc}")
    print(ANSWERS.encode(Answer(topology, cuda, versions, tuple(warnings))), flush=True)
    return 0


def _nvml_facts(with_health: bool) -> model.Topology:
    """NVML's facts, asked in this process (the child), or why NVML cannot give them; ``with_health``:
    the node's health too (each GPU's, the PCI bus, the kernel log), else left unknown."""
    try:
        import pynvml
    except ImportError as exc:
        why = "is not installed" if exc.name == "pynvml" else f"cannot be imported: {exc}"
        return model.Topology(source=model.Source("nvml"), problem=f"nvidia-ml-py (module pynvml) {why}")
    from . import nvml

    try:
        topology = nvml.probe(pynvml, health=with_health)
    except pynvml.NVMLError as exc:
        from ..runtime.environ import hostname  # (as in _failed)

        topology = model.Topology(
            source=model.Source("nvml"), hostname=hostname(), problem=nvml.unavailable_reason(exc)
        )
    return _node_facts(topology) if with_health else topology


def _node_facts(topology: model.Topology) -> model.Topology:
    """The node's facts beside NVML's: the GPUs on the PCI bus NVML does not list, and the XIDs of this
    boot's kernel log (``core.health`` judges both)."""
    from ..core import health, xid  # the node's health: in the child, where a run asks it
    from . import kernel_log, pci_bus

    on_bus = health.unlisted_on_bus(pci_bus.nvidia_gpus(), [g.pci_bus_id for g in topology.gpus])
    log = kernel_log.read_log()
    xids = None if log is None else tuple(xid.xid_events(log)[-xid.MAX_XIDS :])
    return dataclasses.replace(topology, pci_unlisted=on_bus, xids=xids)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
