"""Learning this host: NVML's facts from a child process (never CUDA in this process), then only
what a run needs of CUDA's view (libcuda) and torch's versions, from this boot's record where it has
them for this very setup, else from a child that asks (and the record keeps them)."""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import sys

from ..core import model
from ..runtime import environ as runtime
from .cuda_numbering import as_cuda_sees_it
from .learned import BootRecord, Learned
from .libcuda_file import loaded_identity


def _nvml_library_missing() -> bool:
    """Whether libnvidia-ml cannot be loaded: the check ``pynvml.nvmlInit`` starts with, done here
    first so that a host without a driver does not pay for importing pynvml."""
    if not sys.platform.startswith("linux"):
        return False  # pynvml searches other places on Windows; let it
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return True
    return False


def learn_this_host(needs: frozenset, boot_record: BootRecord | None, fresh: frozenset = frozenset()) -> Learned:
    """NVML's facts from a child (never CUDA), then what else ``needs`` names: CUDA's view and torch's
    versions from this boot's record where it has them for this very setup (but the ``fresh`` facts:
    asked again, as a health check asks CUDA), else from a child that asks them (and the record keeps
    them). Each optional source that fails leaves only its own facts unknown, with a warning; NVML's
    GPUs stay."""
    if _nvml_library_missing():
        return Learned(
            model.Topology(source=model.Source("nvml"), hostname=runtime.hostname(), problem=model.NO_DRIVER)
        )
    from .host import ask_child

    # NVML asked: a topology
    topology: model.Topology = ask_child({model.NVML} | (needs & {model.HEALTH})).topology  # type: ignore[assignment]
    notes = ["NVML probed"]
    if not topology.gpus:
        return Learned(as_cuda_sees_it(topology, None), tuple(notes))
    wanted = set(needs) & {model.CUDA, model.TORCH}
    if not _cuda_order_known(topology):  # which GPU is cuda:0 only CUDA can say
        wanted.add(model.CUDA)
    key = _boot_key(topology) if boot_record is not None else None
    kept = (boot_record.get(key) if key else None) or {}  # type: ignore[union-attr]  # a key: a record
    kept = {k: v for k, v in kept.items() if k not in fresh}  # the record's keys are the facts' names
    if isinstance(kept.get("cuda"), dict):
        # CUDA's own order where this boot's record has it, even where NVML's alone would do: no CUDA
        # document says how FASTEST_FIRST orders identical GPUs (_cuda_order_known)
        wanted.add(model.CUDA)
    view, versions, warnings = None, None, list(topology.warnings)
    if model.CUDA in wanted and isinstance(kept.get("cuda"), dict):
        from .cuda_driver import CudaView  # CUDA's view, where the run needs it: not on NVML's facts alone

        try:
            view = CudaView.from_json(kept["cuda"])
        except ValueError:
            kept = {}  # not what this plugin wrote: ask again
        if view is not None and _contradicts(view, topology):  # kept before something changed: ask again
            view, kept = None, {k: v for k, v in kept.items() if k != "cuda"}
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
            from .cuda_driver import CUDA_UNKNOWN

            why = [w for w in answer.warnings if w.startswith((CUDA_UNKNOWN, "the probe of this host"))]
            cuda_problem = why[0].removeprefix(CUDA_UNKNOWN) if why else "CUDA's view could not be had"
        # a fact asked anew and not had is dropped from the record: the next run asks it again
        if key and (answer.cuda is not None or answer.torch is not None or fresh & missing):
            boot_record.put(  # type: ignore[union-attr]  # a key: a record
                key,
                {
                    **kept,
                    **({"cuda": answer.cuda.to_json()} if answer.cuda is not None else {}),
                    **({"torch": answer.torch} if answer.torch is not None else {}),
                },
            )
    words = {model.CUDA: "CUDA's view", model.TORCH: "torch's versions"}
    notes += [f"{words[f]} probed" for f in sorted(missing)] + [
        f"{words[f]} from this boot's record" for f in sorted(had)
    ]
    if model.TORCH in wanted and versions == {}:
        warnings.append("torch's CUDA and NCCL versions are unknown: torch is not installed")
    topology = with_cuda_facts(topology, view, versions or {})
    topology = dataclasses.replace(
        topology, cuda_problem=cuda_problem, cuda_devices=len(view.bus_ids) if view is not None else None
    )
    return Learned(as_cuda_sees_it(dataclasses.replace(topology, warnings=tuple(warnings)), view), tuple(notes))


def _contradicts(view, topology: model.Topology) -> bool:
    """Whether a recorded CUDA view disagrees with this run's NVML: a device at a bus id no GPU of NVML's
    has, or a peer-access answer where NVML's P2P status now says the other (a record kept from before
    a change the key cannot see is asked again; a disagreement that stays is warned as it is found)."""
    by_bus = {g.pci_bus_id.upper(): g.index for g in topology.gpus if g.pci_bus_id}
    if any(bus not in by_bus for bus in view.bus_ids):
        return True
    for (a, b), peer in view.peer.items():
        nvml = topology.link(by_bus[view.bus_ids[a]], by_bus[view.bus_ids[b]]).p2p.read_write
        if nvml is not None and nvml != peer:
            return True
    return False


def _cuda_order_known(topology: model.Topology) -> bool:
    """Whether CUDA's numbering follows from NVML and the environment alone: by PCI bus id when
    CUDA_DEVICE_ORDER says so, and, taken as known, under FASTEST_FIRST when every GPU is the same
    model. The CUDA Programming Guide says only that FASTEST_FIRST orders "fastest to slowest using a
    simple heuristic" and PCI_BUS_ID "by PCI bus ID in ascending order"; that identical GPUs come in
    bus order is what drivers do, not what any document promises. So this boot's record of CUDA's own
    order, where there is one, is taken before this (``learn_this_host``); on a host of mixed models
    only CUDA knows which one it ranks fastest."""
    if (runtime.cuda_environment()["CUDA_DEVICE_ORDER"] or "").strip().upper() == "PCI_BUS_ID":
        return True
    return len({(g.name, g.compute_capability) for g in topology.gpus}) == 1


def _boot_key(topology: model.Topology) -> str | None:
    """What can change CUDA's view or torch's versions within a boot: the driver and this load of it,
    the GPUs (UUIDs, MIG modes), the CUDA environment, the ``libcuda.so.1`` a child would load (the
    file itself, not only its path), torch's and this plugin's versions. None without a boot id."""
    from ..runtime.software import installed

    boot = runtime.boot_id()
    if boot is None:
        return None
    # Within a boot CUDA's view changes with the driver loaded (a reload at the same version, other
    # module parameters), the GPUs and their MIG modes, the CUDA environment, and which libcuda.so.1
    # the loader finds first (LD_LIBRARY_PATH) and which file that is (a driver updated in place).
    facts = [
        boot,
        topology.driver_version,
        runtime.nvidia_driver_load(),
        [(g.uuid, g.mig) for g in topology.gpus],
        runtime.cuda_environment(),
        runtime.library_path(),
        loaded_identity(),
        installed("torch"),
        installed("pytest-gputopo"),
    ]
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]


def _is_versions(value) -> bool:
    return isinstance(value, dict) and all(
        k in ("cuda_runtime_version", "nccl_version") and (v is None or isinstance(v, str) and len(v) < 40)
        for k, v in value.items()
    )


def with_cuda_facts(topology: model.Topology, view, versions: dict) -> model.Topology:
    """NVML's topology with each GPU's multicast support as CUDA gave it (joined by bus id; a GPU CUDA
    did not answer for stays unknown) and torch's CUDA and NCCL versions."""
    multicast = view.multicast if view is not None else {}
    gpus = tuple(dataclasses.replace(g, multicast=multicast.get((g.pci_bus_id or "").upper())) for g in topology.gpus)
    return dataclasses.replace(topology, gpus=gpus, **versions)
