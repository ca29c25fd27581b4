"""What nvidia-smi lists about each GPU (``--query-gpu=... --format=csv``, ``-L``, ``-q -x``): one
GPU as a listing prints it (``SmiGpu``, None where it does not say), a listing (``SmiGpus``), and PCI
bus ids compared as addresses. ``parse.text_machine`` joins listings to a machine read from text."""

from __future__ import annotations

import dataclasses
import re
import uuid
from dataclasses import dataclass
from typing import Any

from ..core.limits import MAX_MEMORY_BYTES
from ..core.model import Fabric, MigDevice

# The per-GPU facts a listing can give, as ``model.Gpu`` names them, and how a warning says them.
FACTS = {
    "name": "name",
    "uuid": "UUID",
    "pci_bus_id": "PCI bus id",
    "memory_total_bytes": "memory",
    "compute_capability": "compute capability",
    "pcie_gen_current": "PCIe generation (current)",
    "pcie_gen_max": "PCIe generation (max)",
    "pcie_width_current": "PCIe width (current)",
    "pcie_width_max": "PCIe width (max)",
    "mig": "MIG mode",
    "compute_mode": "compute mode",
}


@dataclass(frozen=True)
class SmiFabric:
    """A GPU's registration with its NVLink fabric as ``nvidia-smi -q -x`` prints it (``<fabric>``: GB200
    and other multi-node NVLink systems; NVML's ``nvmlGpuFabricInfo``): ``state`` Not Supported, Not
    Started, In Progress or Completed; ``status`` (meaningful once Completed) Success or the error;
    the clique and cluster a completed GPU belongs to. Shown by ``gputopo parse smi-xml`` and, as the
    model holds NVML's answer (``fact``), recorded."""

    state: str | None = None
    status: str | None = None
    clique_id: int | None = None
    cluster_uuid: str | None = None

    def fact(self) -> Fabric | None:
        """The model's ``Fabric`` as the NVML reader (``probe.nvml._fabric``) makes it of the struct
        nvidia-smi printed (nvidia-ml-py 13.615.71 ``c_nvmlGpuFabricInfo_v2_t``: clusterUuid, status,
        cliqueId, state): the state alone before Completed (nvml.h: the status is read only once
        Completed); once Completed its status, clique and cluster, the all-zero cluster (what a GPU of
        no multi-node fabric prints) being none. None where the state is unknown, or Completed with no
        status read: NVML's struct always has one, and a recording would read a missing one as
        Success (``probe.named_machine``), so it is not recorded."""
        if self.state is None:
            return None
        if self.state != "Completed":
            return Fabric(self.state)
        if self.status is None:
            return None
        cluster = None
        if self.cluster_uuid is not None:
            try:
                cluster = uuid.UUID(self.cluster_uuid)
            except ValueError:
                cluster = None
        return Fabric(
            self.state, self.status, self.clique_id, str(cluster) if cluster is not None and cluster.int else None
        )

    def text(self) -> str:
        said = [self.state or "state ?"] + ([self.status] if self.status else [])
        if self.clique_id is not None or self.cluster_uuid:
            said.append(
                f"clique {'?' if self.clique_id is None else self.clique_id} of cluster {self.cluster_uuid or '?'}"
            )
        return ", ".join(said)


@dataclass(frozen=True)
class SmiGpu:
    """One GPU as a listing prints it; None where it does not say."""

    index: int | None = None  # nvidia-smi's index (NVML's); None where the listing does not print it
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None  # as printed, "00000000:07:00.0"
    memory_total_bytes: int | None = None
    compute_capability: str | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    mig: bool | None = None
    compute_mode: str | None = None
    fabric: SmiFabric | None = None  # -q -x only; None where it says nothing (N/A) of a fabric
    mig_devices: tuple[MigDevice, ...] = ()  # the MIG devices listed under it (-L, -q -x, -q)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if (v is not None and v != ()) or k == "index"}


@dataclass(frozen=True)
class SmiGpus:
    """A listing of GPUs by ``tool``. ``attached`` is how many GPUs nvidia-smi saw where the listing
    says (every GPU listed, or -q -x's ``attached_gpus``); None where it may list some only."""

    tool: str
    gpus: tuple[SmiGpu, ...]
    attached: int | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "attached_gpus": self.attached,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "gpus": [g.to_json() for g in self.gpus],
            "warnings": list(self.warnings),
        }

    def lines(self) -> list[str]:
        """One line per GPU: what the listing says of it ('?' where it does not say)."""
        out = []
        for g in self.gpus:
            memory = f"{g.memory_total_bytes / 2**20:g} MiB" if g.memory_total_bytes else "?"
            pcie = (
                f", PCIe Gen{g.pcie_gen_current or '?'}/{g.pcie_gen_max or '?'} "
                f"x{g.pcie_width_current or '?'}/{g.pcie_width_max or '?'}"
                if any(
                    v is not None for v in (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max)
                )
                else ""
            )
            out.append(
                f"GPU{'?' if g.index is None else g.index}: {g.name or '?'} ({g.uuid or 'UUID ?'}), "
                f"bus {g.pci_bus_id or '?'}, {memory}, compute capability {g.compute_capability or '?'}{pcie}"
                + (", MIG enabled" if g.mig else "")
                + _mig_text(g.mig_devices)
                + (f", fabric {g.fabric.text()}" if g.fabric else "")
            )
        versions = [
            f"driver {self.driver_version}" if self.driver_version else "",
            f"CUDA {self.cuda_driver_version}" if self.cuda_driver_version else "",
        ]
        if any(versions):
            out.append(", ".join(v for v in versions if v))
        return out + [f"warning: {w}" for w in self.warnings]


def _mig_text(devices: tuple[MigDevice, ...]) -> str:
    """``, MIG devices 0 (1g.10gb, GI 1, CI 0), 1 (...)``: each listed device by what was said of it."""

    def one(d: MigDevice) -> str:
        said = [
            d.profile,
            None if d.gpu_instance_id is None else f"GI {d.gpu_instance_id}",
            None if d.compute_instance_id is None else f"CI {d.compute_instance_id}",
            None if d.memory_total_bytes is None else f"{d.memory_total_bytes / 2**20:g} MiB",
        ]
        shown = [s for s in said if s]
        return ("?" if d.index is None else str(d.index)) + (f" ({', '.join(shown)})" if shown else "")

    return f", MIG devices {', '.join(one(d) for d in devices)}" if devices else ""


_MIB_RE = re.compile(r"([0-9]{1,12}) MiB")


def mib_bytes(text: str | None) -> int | None:
    """``81559 MiB`` (how nvidia-smi prints memory) in bytes; None where it is not that, or no memory
    a GPU has (0, above ``limits.MAX_MEMORY_BYTES``)."""
    m = _MIB_RE.fullmatch(text or "")
    return int(m.group(1)) * 2**20 if m and 0 < int(m.group(1)) * 2**20 <= MAX_MEMORY_BYTES else None


_BUS_RE = re.compile(r"(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")


def bus_key(bus: str) -> tuple[int, str] | None:
    """A PCI bus id compared as an address: NVML's "00000000:07:00.0" and lspci's "0000:07:00.0" are
    the same, (0, "07:00.0"); None where it is no bus id."""
    m = _BUS_RE.fullmatch(bus.strip())
    return (int(m.group(1) or "0", 16), m.group(2).upper()) if m else None
