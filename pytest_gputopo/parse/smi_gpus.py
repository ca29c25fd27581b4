"""What nvidia-smi lists about each GPU (``--query-gpu=... --format=csv``, ``-L``, ``nvlink -s``'s
headers), and how it joins a machine read from ``nvidia-smi topo -m`` text.

A listing belongs to the machine only if it can: a GPU is found by its UUID, else its PCI bus id,
else its nvidia-smi index (NVML's, as topo -m numbers GPUs). A UUID or bus id other than the one
the machine already knows for that GPU, a listing of another GPU count, or a GPU found by UUID under
another index is another machine's output (or one numbered otherwise) and is refused, as the other
tools' outputs are (``parse.published``). Each fact is filled once: the first source to give it is
kept, and a later one that says otherwise is a warning naming both."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ..core import model
from ..core.units import counted


class GpuListingError(ValueError):
    """A listing that cannot describe this machine; the message says why."""


# The per-GPU facts a listing can give, as ``model.Gpu`` names them, and how a warning says them.
FACTS = {"name": "name", "uuid": "UUID", "pci_bus_id": "PCI bus id", "memory_total_bytes": "memory (bytes)",
         "compute_capability": "compute capability", "pcie_gen_current": "PCIe generation (current)",
         "pcie_gen_max": "PCIe generation (max)", "pcie_width_current": "PCIe width (current)",
         "pcie_width_max": "PCIe width (max)", "mig": "MIG mode", "compute_mode": "compute mode"}


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

    def to_json(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None or k == "index"}


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

    def to_json(self) -> dict:
        return {"tool": self.tool, "attached_gpus": self.attached, "driver_version": self.driver_version,
                "cuda_driver_version": self.cuda_driver_version, "gpus": [g.to_json() for g in self.gpus],
                "warnings": list(self.warnings)}

    def lines(self) -> list[str]:
        """One line per GPU: what the listing says of it ('?' where it does not say)."""
        out = []
        for g in self.gpus:
            memory = f"{g.memory_total_bytes / 2**20:g} MiB" if g.memory_total_bytes else "?"
            pcie = (f", PCIe Gen{g.pcie_gen_current or '?'}/{g.pcie_gen_max or '?'} "
                    f"x{g.pcie_width_current or '?'}/{g.pcie_width_max or '?'}"
                    if any(v is not None for v in (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current,
                                                   g.pcie_width_max)) else "")
            out.append(f"GPU{'?' if g.index is None else g.index}: {g.name or '?'} ({g.uuid or 'UUID ?'}), "
                       f"bus {g.pci_bus_id or '?'}, {memory}, compute capability {g.compute_capability or '?'}{pcie}"
                       + (", MIG enabled" if g.mig else ""))
        versions = [f"driver {self.driver_version}" if self.driver_version else "",
                    f"CUDA {self.cuda_driver_version}" if self.cuda_driver_version else ""]
        if any(versions):
            out.append(", ".join(v for v in versions if v))
        return out + [f"warning: {w}" for w in self.warnings]


_BUS_RE = re.compile(r"(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")


def bus_key(bus: str) -> tuple[int, str] | None:
    """A PCI bus id compared as an address: NVML's "00000000:07:00.0" and lspci's "0000:07:00.0" are
    the same, (0, "07:00.0"); None where it is no bus id."""
    m = _BUS_RE.fullmatch(bus.strip())
    return (int(m.group(1) or "0", 16), m.group(2).upper()) if m else None


def find(gpus: list[model.Gpu], row: SmiGpu, position: int | None, tool: str, file: str) -> model.Gpu:
    """The machine's GPU a listed one is, refusing one that belongs to another machine. ``position``
    (its place in a listing of every GPU, in index order) stands for an index the listing does not
    print; None where the listing may list some GPUs only."""
    label = f"{file}: {tool}'s GPU {row.index if row.index is not None else position if position is not None else '?'}"
    by = None
    if row.uuid:
        by = next((g for g in gpus if g.uuid == row.uuid), None)
    if by is None and row.pci_bus_id and bus_key(row.pci_bus_id):
        by = next((g for g in gpus if g.pci_bus_id and bus_key(g.pci_bus_id) == bus_key(row.pci_bus_id)), None)
    index = row.index if row.index is not None else position
    if by is None and index is None:
        raise GpuListingError(f"{label} ({row.uuid or row.pci_bus_id or 'no UUID'}) has no UUID or bus id the machine "
                              f"knows, and the listing prints no index and lists some GPUs only: which GPU it is "
                              f"is unknown")
    if by is not None:
        if row.index is not None and by.nvml_index is not None and by.nvml_index != row.index:
            raise GpuListingError(f"{label} ({row.uuid or row.pci_bus_id}) is the machine's GPU{by.index} (NVML index "
                                  f"{by.nvml_index}): GPUs numbered otherwise (a container and its host?)")
        gpu = by
    else:
        gpu = next((g for g in gpus if (g.nvml_index if g.nvml_index is not None else g.index) == index), None)
        if gpu is None:
            raise GpuListingError(f"{label} is no GPU of this machine ({counted(len(gpus), 'GPU')}): another "
                                  f"machine, or GPUs numbered otherwise")
    for key in ("uuid", "pci_bus_id"):
        have, said = getattr(gpu, key), getattr(row, key)
        same = (bus_key(have) == bus_key(said)) if key == "pci_bus_id" and have and said else have == said
        if have and said and not same:
            raise GpuListingError(f"{label} has {FACTS[key]} {said[:48]}, the machine's GPU{gpu.index} {have[:48]}: "
                                  f"another machine's output")
    return gpu


def fill(gpu: model.Gpu, row: SmiGpu, source: str, warnings: list[str]) -> model.Gpu:
    """``gpu`` with every fact it lacks taken from ``row``; a fact it has that ``row`` states
    otherwise is kept, with a warning."""
    changes = {}
    for key, what in FACTS.items():
        have, said = getattr(gpu, key), getattr(row, key)
        if said is None:
            continue
        if have is None:
            changes[key] = said
        elif have != said and key != "pci_bus_id":  # bus ids were compared as addresses in find
            warnings.append(f"GPU{gpu.index}: {source} says {what} {str(said)[:60]}, an earlier source "
                            f"{str(have)[:60]}; the earlier is kept")
    return dataclasses.replace(gpu, **changes) if changes else gpu


def with_gpu_facts(topology: model.Topology, listing: SmiGpus, file: str) -> model.Topology:
    """``topology`` with what ``listing`` says of its GPUs and versions (see the module docstring).
    Raises ``GpuListingError`` for another machine's output."""
    count = len(topology.gpus)
    if listing.attached is not None and listing.attached != count:
        raise GpuListingError(f"{file}: {listing.tool} saw {counted(listing.attached, 'GPU')} and the machine has "
                              f"{count}: another machine, or another NVIDIA_VISIBLE_DEVICES (run it with every GPU "
                              f"visible)")
    every = listing.attached == len(listing.gpus)  # a GPU's place in the listing is its index
    gpus = list(topology.gpus)
    warnings = list(topology.warnings)
    source = f"{listing.tool} ({file})"
    seen: dict[int, int] = {}
    for position, row in enumerate(listing.gpus):
        gpu = find(gpus, row, position if every else None, listing.tool, file)
        if gpu.index in seen:
            raise GpuListingError(f"{file}: {listing.tool} lists the machine's GPU{gpu.index} twice (its GPUs "
                                  f"{seen[gpu.index]} and {position}): not one machine's listing")
        seen[gpu.index] = position
        gpus[gpu.index] = fill(gpu, row, source, warnings)
    versions = {}
    for key, what in (("driver_version", "driver version"), ("cuda_driver_version", "CUDA version")):
        have, said = getattr(topology, key), getattr(listing, key)
        if said is not None and have is None:
            versions[key] = said
        elif said is not None and have != said:
            warnings.append(f"{source} says {what} {said[:40]}, an earlier source {have[:40]}; the earlier is kept")
    return dataclasses.replace(topology, gpus=tuple(gpus), warnings=tuple(dict.fromkeys(warnings)), **versions)
