"""Learn the machine once: an ordered chain of sources, then the CUDA view of it.

Sources: a machine the user named (a recorded profile driving the fake ``pynvml``, or
``nvidia-smi topo -m`` text), else this host: NVML through ``nvidia-ml-py``, then, only where a
question needs them, CUDA's view (libcuda) and torch's versions, each in a child process and kept
for the rest of the boot. The result is restricted and renumbered to the GPUs this process sees as
``cuda:0..n-1``. Backends are imported lazily: loading the plugin must not import ``pynvml`` or
``torch``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..runtime import files, environ as runtime
from ..core import model


class MachineError(Exception):
    """The machine the user named cannot be used (unknown name, malformed file)."""


@dataclass(frozen=True)
class Learned:
    """A topology and, in words, where its host facts came from this time (the header says it)."""

    topology: model.Topology
    notes: tuple[str, ...] = ()


class BootRecord(Protocol):
    """Where CUDA's view and torch's versions are kept for the rest of this boot (pytest's cache, in a
    pytest run): what was put under a key comes back from ``get`` as it was stored, or None."""

    def get(self, key: str) -> dict | None: ...

    def put(self, key: str, value: dict) -> None: ...


def probe(machine: str | None = None, *, needs=model.ALL_FACTS,
          boot_record: BootRecord | None = None) -> model.Topology:
    """The topology as this process sees it. ``machine``: a bundled name, a profile (.json) or
    ``nvidia-smi topo -m`` text file; None probes this host, learning only the facts ``needs`` names
    (``model.NVML``, ``CUDA``, ``TORCH``: the others stay unknown)."""
    return learn(machine, needs=needs, boot_record=boot_record).topology


def learn(machine: str | None = None, *, needs=model.ALL_FACTS, boot_record: BootRecord | None = None) -> Learned:
    """``probe``, with what was probed and what was taken from this boot's record."""
    if machine is None:
        return _learn_this_host(frozenset(needs), boot_record)
    if _is_text(machine):
        return Learned(_as_cuda_sees_it(_from_smi_file(machine), None))
    return Learned(_as_cuda_sees_it(probe_recorded(machine), None))


def reference(name_or_path: str) -> model.Topology:
    """A reference machine for ``--gputopo-expect`` (a bundled name, a profile, or ``nvidia-smi``
    text), whole and in nvidia-smi's numbering: CUDA_VISIBLE_DEVICES applies to the job, not to it."""
    if _is_text(name_or_path):
        return _from_smi_file(name_or_path)
    return probe_recorded(name_or_path)


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


def _nvml_library_missing() -> bool:
    """Whether libnvidia-ml cannot be loaded: the check ``pynvml.nvmlInit`` starts with, done here
    first so that a host without a driver does not pay for importing pynvml."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False  # pynvml searches other places on Windows; let it
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return True
    return False


def _learn_this_host(needs: frozenset, boot_record: BootRecord | None) -> Learned:
    """NVML's facts from a child (never CUDA), then what else ``needs`` names: CUDA's view and torch's
    versions from this boot's record where it has them for this very setup, else from a child that
    asks them (and the record keeps them). Each optional source that fails leaves only its own facts
    unknown, with a warning; NVML's GPUs stay."""
    if _nvml_library_missing():
        return Learned(model.Topology(source=model.Source("nvml"), hostname=runtime.hostname(),
                                      problem="NVML library not found (libnvidia-ml.so.1): no NVIDIA driver installed"))
    from .cuda_driver import CudaView
    from .host import ask_child

    topology = ask_child({model.NVML}).topology
    notes = ["NVML probed"]
    if not topology.gpus:
        return Learned(_as_cuda_sees_it(topology, None), tuple(notes))
    wanted = set(needs) & {model.CUDA, model.TORCH}
    if not _cuda_order_known(topology):  # which GPU is cuda:0 only CUDA can say
        wanted.add(model.CUDA)
    key = _boot_key(topology) if boot_record is not None else None
    kept = (boot_record.get(key) if key else None) or {}
    view, versions, warnings = None, None, list(topology.warnings)
    if model.CUDA in wanted and isinstance(kept.get("cuda"), dict):
        try:
            view = CudaView.from_json(kept["cuda"])
        except ValueError:
            kept = {}  # not what this plugin wrote: ask again
    if model.TORCH in wanted and _is_versions(kept.get("torch")):
        versions = kept["torch"]
    missing = {fact for fact, have in ((model.CUDA, view), (model.TORCH, versions)) if fact in wanted and have is None}
    had = wanted - missing
    if missing:
        answer = ask_child(missing)
        view = view or answer.cuda
        versions = versions if versions is not None else answer.torch
        warnings += answer.warnings
        if key and (answer.cuda is not None or answer.torch is not None):
            boot_record.put(key, {**kept, **({"cuda": answer.cuda.to_json()} if answer.cuda is not None else {}),
                                  **({"torch": answer.torch} if answer.torch is not None else {})})
    words = {model.CUDA: "CUDA's view", model.TORCH: "torch's versions"}
    notes += [f"{words[f]} probed" for f in sorted(missing)] + [f"{words[f]} from this boot's record" for f in sorted(had)]
    if model.TORCH in wanted and versions == {}:
        warnings.append("torch's CUDA and NCCL versions are unknown: torch is not installed")
    topology = _with_cuda_facts(topology, view, versions or {})
    return Learned(_as_cuda_sees_it(dataclasses.replace(topology, warnings=tuple(warnings)), view), tuple(notes))


def _cuda_order_known(topology: model.Topology) -> bool:
    """Whether CUDA's numbering follows from NVML and the environment alone: by PCI bus id when
    CUDA_DEVICE_ORDER says so, and under FASTEST_FIRST when every GPU is the same model (CUDA breaks
    ties by PCI bus id); on a host of mixed models only CUDA knows which one it ranks fastest."""
    if (runtime.cuda_environment()["CUDA_DEVICE_ORDER"] or "").strip().upper() == "PCI_BUS_ID":
        return True
    return len({(g.name, g.compute_capability) for g in topology.gpus}) == 1


def _boot_key(topology: model.Topology) -> str | None:
    """What can change CUDA's view or torch's versions within a boot: the driver, the GPUs (UUIDs),
    the CUDA environment, torch's and this plugin's versions. None without a boot id."""
    import hashlib
    import importlib.metadata
    import json

    boot = runtime.boot_id()
    if boot is None:
        return None

    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None
    facts = [boot, topology.driver_version, [g.uuid for g in topology.gpus], runtime.cuda_environment(),
             version("torch"), version("pytest-gputopo")]
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]


def _is_versions(value) -> bool:
    return isinstance(value, dict) and all(k in ("cuda_runtime_version", "nccl_version") and (
        v is None or isinstance(v, str) and len(v) < 40) for k, v in value.items())


def _with_cuda_facts(topology: model.Topology, view, versions: dict) -> model.Topology:
    """NVML's topology with each GPU's multicast support as CUDA gave it (joined by bus id; a GPU CUDA
    did not answer for stays unknown) and torch's CUDA and NCCL versions."""
    multicast = view.multicast if view is not None else {}
    gpus = tuple(dataclasses.replace(g, multicast=multicast.get((g.pci_bus_id or "").upper())) for g in topology.gpus)
    return dataclasses.replace(topology, gpus=gpus, **versions)


def _probe_nvml_here() -> model.Topology:
    """NVML in this process (the probe child's side of ``_probe_this_host``)."""
    try:
        import pynvml
    except ImportError:
        return model.Topology(source=model.Source("nvml"), problem="nvidia-ml-py (module pynvml) is not installed")
    from . import nvml

    try:
        return nvml.probe(pynvml)
    except pynvml.NVMLError as exc:
        return model.Topology(source=model.Source("nvml"), hostname=runtime.hostname(),
                              problem=nvml.unavailable_reason(exc))


def _is_text(machine: str) -> bool:
    # Whatever the path is (a FIFO, a symlink loop): reading it says what it is.
    return Path(machine).suffix.lower() in (".txt", ".log", ".out") and os.path.lexists(machine)


def _from_smi_file(path: str) -> model.Topology:
    """``nvidia-smi topo -m`` text as a machine."""
    from ..parse import smi_machine, smi_topo

    try:
        smi = smi_topo.parse_topo_matrix(files.read_text(path))
    except (OSError, smi_topo.SmiParseError) as exc:
        raise MachineError(f"{path}: {exc}") from None
    return smi_machine.to_topology(smi, {}, name=path)


def _as_cuda_sees_it(topology: model.Topology, view) -> model.Topology:
    """Reorder to CUDA's numbering (CUDA's own answer when there is one, else the environment's
    CUDA_DEVICE_ORDER and CUDA_VISIBLE_DEVICES), and join CUDA's peer-access answers."""
    warnings = list(topology.warnings)
    if view is not None and runtime.mig_visible():
        # CUDA reports a MIG instance with its parent GPU's bus id: joined by bus id, the instance
        # would inherit the whole GPU's NVLinks and P2P. It is not mapped to a GPU at all (as below).
        view = None
    if view is not None:
        by_bus = {(g.pci_bus_id or "").upper(): i for i, g in enumerate(topology.gpus)}
        ordinals = [c for c, b in enumerate(view.bus_ids) if b in by_bus]  # CUDA's devices NVML lists
        order = [by_bus[view.bus_ids[c]] for c in ordinals]
        if len(order) != len(view.bus_ids):
            warnings.append("CUDA sees devices NVML does not list; they are left out")
    else:
        vis = runtime.visible_gpus(topology.gpus)
        order, warnings = list(vis.order), warnings + list(vis.warnings)
    topology = topology.restrict(order)
    if view is not None:
        links = []
        for ln in topology.links:
            peer = view.peer.get((ordinals[ln.a], ordinals[ln.b]))
            if peer is not None and ln.p2p.read_write is not None and peer != ln.p2p.read_write:
                warnings.append(f"{ln.name}: NVML says P2P is {'OK' if ln.p2p.read_write else 'refused'}, "
                                f"CUDA says peer access is {'possible' if peer else 'impossible'}")
            links.append(dataclasses.replace(ln, cuda_peer=peer))
        topology = dataclasses.replace(topology, links=tuple(links))
    return dataclasses.replace(topology, warnings=tuple(warnings))
