"""A machine the user named instead of this host: a recorded profile, or ``nvidia-smi topo -m`` text,
read straight into the model (no ``pynvml``: a profile is read where no driver is installed). The
parsers are imported only when such a machine is read.

A profile's machine is the one NVML would report of it (``as_nvml_reads``): its GPUs in NVML's order,
each fact in the form NVML gives it, a pair's NVLink count as NVML counts the links its GPUs list,
and the recording's own answers where NVML has none (CUDA's ``cuda_peer``, ``multicast``, the versions,
the host name, the NICs, published figures). ``tests/test_recorded_reading.py`` holds it to the same
machine the NVML code path reads from the fake ``pynvml`` serving the profile (``tests/fake_nvml.py``, the test
double of ``nvml``)."""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from pathlib import Path
from typing import Any

from ..core import model
from ..core.cpus import cpu_mask
from ..runtime import files
from . import nvml
from .learned import MachineError
from .recorded import ProfileError, load_profile


def probe_recorded(name_or_path: str) -> model.Topology:
    """A recorded machine (a bundled name or a profile's path), as NVML would report it."""
    try:
        profile = load_profile(name_or_path)
    except ProfileError as exc:
        raise MachineError(str(exc)) from None
    return as_nvml_reads(profile.topology, model.Source("recorded", profile.name, profile.path))


def _nvml_order(recorded: model.Topology) -> list[int]:
    """The recording's GPUs (by index) in NVML's order: by nvml_index, a GPU without one keeping its
    place by index."""
    gpus = recorded.gpus
    return sorted(
        range(len(gpus)), key=lambda p: (gpus[p].nvml_index if gpus[p].nvml_index is not None else gpus[p].index, p)
    )


def as_nvml_reads(recorded: model.Topology, source: model.Source) -> model.Topology:
    """The recording as NVML would report it (``nvml.probe``): the GPUs in NVML's order, numbered
    0..n-1 (``index == nvml_index``, published figures renumbered with them); each GPU's facts and
    NVLinks in NVML's form; a pair's NVLink count counted from its GPUs' links where both list theirs
    (the recorded count where that count is unknown, or where a GPU lists none: ``nvidia-smi topo -m``
    text gives counts, not links); a PCIe class only where NVML has a level for it. What NVML cannot
    know is the recording's: CUDA's answers, the versions, host name, NICs and figures, the GPUs its PCI
    bus held that NVML did not list and its kernel log's XIDs. A machine
    without GPUs keeps the recording's ``problem`` (why it had none); the recording's warnings and
    CUDA device count were its host's, and are not this machine's facts."""
    listed = recorded.restrict(_nvml_order(recorded))
    base: dict[str, Any] = dict(
        source=source,
        driver_version=recorded.driver_version,
        cuda_driver_version=recorded.cuda_driver_version,
        cuda_runtime_version=recorded.cuda_runtime_version,
        nccl_version=recorded.nccl_version,
        hostname=recorded.hostname,
        nics=recorded.nics,
        published=listed.published,
        pci_unlisted=recorded.pci_unlisted,  # the recorded node's bus and kernel log, as its versions
        xids=recorded.xids,
    )
    if not listed.gpus:
        return model.Topology(problem=recorded.problem, **base)
    bus_ids = [g.pci_bus_id or nvml.synthetic_bus_id(k) for k, g in enumerate(listed.gpus)]
    read = [[_nvlink_read(ln) for ln in sorted(g.nvlinks, key=lambda ln: ln.link)] for g in listed.gpus]
    counted = nvml.nvlink_counts(read, bus_ids)
    gpus = tuple(_gpu_read(g, tuple(link for link, _ in links)) for g, links in zip(listed.gpus, read, strict=True))
    links = []
    for ln in listed.links:
        count = counted[ln.a, ln.b] if listed.gpus[ln.a].nvlinks and listed.gpus[ln.b].nvlinks else None
        links.append(
            dataclasses.replace(
                ln,
                pcie=ln.pcie if ln.pcie in model.CLASS_TO_NVML_LEVEL else None,
                nvlinks=ln.nvlinks if count is None else count,
            )
        )
    return model.Topology(gpus=gpus, links=tuple(links), **base)


def _nvlink_read(link: model.NvLink) -> tuple[model.NvLink, str | None]:
    """A recorded NVLink as NVML reads it, and its remote bus id as NVML gives it (for counting):
    nothing is asked past a link that is down; a switch's bus id is not asked; a device type or
    version NVML has no code for is unknown."""
    if not link.active:
        return model.NvLink(link=link.link, active=False), None
    kind = link.remote_type if link.remote_type in nvml.NVLINK_DEVICE_TYPES.values() else "unknown"
    remote = None if kind == "SWITCH" else link.remote_bus_id or None
    version = link.version if link.version in nvml.NVLINK_VERSIONS.values() else None
    shown = None if remote is None or nvml.is_synthetic_bus_id(remote) else remote
    return model.NvLink(link=link.link, active=True, remote_bus_id=shown, remote_type=kind, version=version), remote


_CAPABILITY = re.compile(r"^(\d{1,9})\.(\d{1,9})$")


def _gpu_read(gpu: model.Gpu, nvlinks: tuple[model.NvLink, ...]) -> model.Gpu:
    """A recorded GPU's facts as NVML gives them: its NVML index, a bus id (none in the all-ones
    domain), the CPU list as NVML's bitmask writes it, the compute capability as major.minor."""
    bus = gpu.pci_bus_id or None
    mask = cpu_mask(gpu.cpu_affinity)
    cc = _CAPABILITY.match(gpu.compute_capability or "")
    return dataclasses.replace(
        gpu,
        nvml_index=gpu.index,
        nvlinks=nvlinks,
        pci_bus_id=None if bus is None or nvml.is_synthetic_bus_id(bus) else bus,
        cpu_affinity=nvml.cpu_list(mask) if mask else None,
        compute_capability=f"{int(cc.group(1))}.{int(cc.group(2))}" if cc else None,
        fabric=_fabric_read(gpu.fabric),
    )


def _fabric_read(fabric: model.Fabric | None) -> model.Fabric | None:
    """A recorded fabric registration as NVML's struct carries it: status, clique, cluster and health
    mask only once completed (a completed one always has a status and a clique), the cluster UUID in its
    canonical form, all zeros being none."""
    if fabric is None or fabric.state != "Completed":
        return None if fabric is None else model.Fabric(fabric.state)
    cluster = fabric.cluster_uuid or None
    if cluster is not None:
        try:
            cluster = str(uuid.UUID(cluster))
        except ValueError:
            pass  # not a UUID: kept as recorded
    return model.Fabric(
        fabric.state,
        fabric.status or model.FABRIC_SUCCESS,
        fabric.clique_id or 0,
        None if cluster == str(uuid.UUID(int=0)) else cluster,
        fabric.health_mask or None,  # 0: no field reported, as the NVML reader reads it
    )


def is_text(machine: str) -> bool:
    # Whatever the path is (a FIFO, a symlink loop): reading it says what it is.
    return Path(machine).suffix.lower() in (".txt", ".log", ".out") and os.path.lexists(machine)


def from_smi_file(path: str) -> model.Topology:
    """``nvidia-smi topo -m`` text as a machine, made where all tool text becomes one
    (``parse.text_machine``)."""
    from ..parse import smi_table, smi_topo
    from ..parse.text_machine import TextMachine

    try:
        smi = smi_topo.parse_topo_matrix(files.read_text(path))
    except (OSError, smi_table.SmiParseError) as exc:
        raise MachineError(f"{path}: {exc}") from None
    return TextMachine(smi, name=path).finish()
