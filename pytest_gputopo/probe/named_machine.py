"""A machine the user named instead of this host: a recorded profile, read through the NVML code
path over the fake ``pynvml`` (so that it is learned as a real host is), or ``nvidia-smi topo -m``
text. ``pynvml`` and the parsers are imported only when such a machine is read."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ..core import model
from ..runtime import files
from .learned import MachineError


def probe_recorded(name_or_path: str) -> model.Topology:
    """A recorded machine, read through the NVML code path via the fake ``pynvml``."""
    from . import nvml
    from .fake_nvml import make_fake_pynvml
    from .recorded import ProfileError, load_profile

    try:
        profile = load_profile(name_or_path)
    except ProfileError as exc:
        raise MachineError(str(exc)) from None
    recorded = profile.topology
    source = model.Source("recorded", profile.name, profile.path)
    init_error = _init_error_for(recorded.problem, nvml) if not recorded.gpus else None
    fake = make_fake_pynvml(recorded, init_error=init_error)
    nvml_of = _nvml_order(recorded)
    try:
        topology = _as_recorded(recorded, nvml.probe(fake, source=source), nvml_of)
    except fake.NVMLError as exc:
        topology = model.Topology(source=source, problem=nvml.unavailable_reason(exc))
    published = model.renumber_figures(recorded.published, nvml_of)  # into NVML's order
    return dataclasses.replace(topology, hostname=recorded.hostname, nics=recorded.nics, published=published,
                               driver_version=recorded.driver_version,
                               cuda_driver_version=recorded.cuda_driver_version,
                               cuda_runtime_version=recorded.cuda_runtime_version,
                               nccl_version=recorded.nccl_version)


def _nvml_order(recorded: model.Topology) -> dict[int, int]:
    """The recording's GPU index -> its place in the fake's NVML order: by nvml_index, a GPU
    without one keeps its place by index (as ``fake_nvml`` enumerates them)."""
    order = sorted(range(len(recorded.gpus)), key=lambda p: (
        recorded.gpus[p].nvml_index if recorded.gpus[p].nvml_index is not None else recorded.gpus[p].index, p))
    return {recorded.gpus[p].index: k for k, p in enumerate(order)}


def _as_recorded(recorded: model.Topology, probed: model.Topology, nvml_of: dict[int, int]) -> model.Topology:
    """The probe of a recording with the recording's own facts where NVML cannot carry them: no
    per-link NVLink facts where it lists none (the fake synthesizes links to give the pairs' counts;
    they are not facts), CUDA's answers (``cuda_peer``, ``multicast``), which NVML does not know, and
    a pair's NVLink count where its GPUs' links say their states but not where they lead (``nvidia-smi
    nvlink -s`` beside ``topo -m``: NVML would leave such a count unknown)."""
    if len(probed.gpus) != len(recorded.gpus):
        return probed
    at = {k: p for p, k in nvml_of.items()}
    gpus = tuple(dataclasses.replace(g, multicast=recorded.gpus[at[k]].multicast,
                                     nvlinks=g.nvlinks if recorded.gpus[at[k]].nvlinks else ())
                 for k, g in enumerate(probed.gpus))
    was = {tuple(sorted((nvml_of[ln.a], nvml_of[ln.b]))): ln for ln in recorded.links}
    links = []
    for ln in probed.links:
        before = was.get((ln.a, ln.b))
        count = ln.nvlinks if ln.nvlinks is not None or before is None else before.nvlinks
        links.append(dataclasses.replace(ln, cuda_peer=before.cuda_peer if before else None, nvlinks=count))
    return dataclasses.replace(probed, gpus=gpus, links=tuple(links))


def _init_error_for(problem: str | None, nvml) -> str | None:
    """The ``nvmlInit`` error whose reason a recorded machine's ``problem`` states, so that the
    fake reproduces it (a machine recorded without a driver, without permission, ...)."""
    if not problem:
        return None
    import pynvml

    for name in ("LibraryNotFound", "DriverNotLoaded", "NoPermission"):
        if nvml.unavailable_reason(getattr(pynvml, "NVMLError_" + name)()) == problem:
            return name
    return "Unknown"


def is_text(machine: str) -> bool:
    # Whatever the path is (a FIFO, a symlink loop): reading it says what it is.
    return Path(machine).suffix.lower() in (".txt", ".log", ".out") and os.path.lexists(machine)


def from_smi_file(path: str) -> model.Topology:
    """``nvidia-smi topo -m`` text as a machine, made where all tool text becomes one
    (``parse.text_machine``)."""
    from ..parse import smi_topo
    from ..parse.text_machine import TextMachine

    try:
        smi = smi_topo.parse_topo_matrix(files.read_text(path))
    except (OSError, smi_topo.SmiParseError) as exc:
        raise MachineError(f"{path}: {exc}") from None
    return TextMachine(smi, name=path).finish()
