"""Learning this host: NVML's facts from a child process (never CUDA in this process), then only
what a run needs of CUDA's view (libcuda) and torch's versions, from this boot's record where it has
them for this very setup, else from a child that asks (and the record keeps them)."""

from __future__ import annotations

import dataclasses

from ..core import model
from ..runtime import environ as runtime
from .cuda_numbering import as_cuda_sees_it
from .learned import BootRecord, Learned


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


def learn_this_host(needs: frozenset, boot_record: BootRecord | None) -> Learned:
    """NVML's facts from a child (never CUDA), then what else ``needs`` names: CUDA's view and torch's
    versions from this boot's record where it has them for this very setup, else from a child that
    asks them (and the record keeps them). Each optional source that fails leaves only its own facts
    unknown, with a warning; NVML's GPUs stay."""
    if _nvml_library_missing():
        return Learned(model.Topology(source=model.Source("nvml"), hostname=runtime.hostname(),
                                      problem="NVML library not found (libnvidia-ml.so.1): no NVIDIA driver installed"))
    from .cuda_driver import CUDA_UNKNOWN, CudaView
    from .host import ask_child

    topology = ask_child({model.NVML}).topology
    notes = ["NVML probed"]
    if not topology.gpus:
        return Learned(as_cuda_sees_it(topology, None), tuple(notes))
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
    cuda_problem = None
    if missing:
        answer = ask_child(missing)
        view = view or answer.cuda
        versions = versions if versions is not None else answer.torch
        warnings += answer.warnings
        if model.CUDA in missing and view is None:  # CUDA did not start, or its child failed: why, in words
            why = [w for w in answer.warnings if w.startswith((CUDA_UNKNOWN, "the probe of this host"))]
            cuda_problem = why[0].removeprefix(CUDA_UNKNOWN) if why else "CUDA's view could not be had"
        if key and (answer.cuda is not None or answer.torch is not None):
            boot_record.put(key, {**kept, **({"cuda": answer.cuda.to_json()} if answer.cuda is not None else {}),
                                  **({"torch": answer.torch} if answer.torch is not None else {})})
    words = {model.CUDA: "CUDA's view", model.TORCH: "torch's versions"}
    notes += [f"{words[f]} probed" for f in sorted(missing)] + [f"{words[f]} from this boot's record" for f in sorted(had)]
    if model.TORCH in wanted and versions == {}:
        warnings.append("torch's CUDA and NCCL versions are unknown: torch is not installed")
    topology = with_cuda_facts(topology, view, versions or {})
    topology = dataclasses.replace(topology, cuda_problem=cuda_problem,
                                   cuda_devices=len(view.bus_ids) if view is not None else None)
    return Learned(as_cuda_sees_it(dataclasses.replace(topology, warnings=tuple(warnings)), view), tuple(notes))


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
    import json

    from ..runtime.software import installed

    boot = runtime.boot_id()
    if boot is None:
        return None
    facts = [boot, topology.driver_version, [g.uuid for g in topology.gpus], runtime.cuda_environment(),
             installed("torch"), installed("pytest-gputopo")]
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]


def _is_versions(value) -> bool:
    return isinstance(value, dict) and all(k in ("cuda_runtime_version", "nccl_version") and (
        v is None or isinstance(v, str) and len(v) < 40) for k, v in value.items())


def with_cuda_facts(topology: model.Topology, view, versions: dict) -> model.Topology:
    """NVML's topology with each GPU's multicast support as CUDA gave it (joined by bus id; a GPU CUDA
    did not answer for stays unknown) and torch's CUDA and NCCL versions."""
    multicast = view.multicast if view is not None else {}
    gpus = tuple(dataclasses.replace(g, multicast=multicast.get((g.pci_bus_id or "").upper())) for g in topology.gpus)
    return dataclasses.replace(topology, gpus=gpus, **versions)

