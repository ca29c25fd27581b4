"""Where nvidia-smi's text becomes the model: a machine recorded from the outputs an operator captured.

``nvidia-smi topo -m`` makes the machine (its GPUs, links, affinities; ``parse.smi_machine``), with
the ``topo -p2p`` matrices' statuses. Then, in the order given, each GPU listing (``--query-gpu``
CSV, ``-L``, ``-q -x``, ``-q``: ``parse.smi_query``, ``smi_list``, ``smi_xml``, ``smi_q``) and each ``nvlink -s`` joins
it GPU by GPU. Each fact is filled once, from the first source that gives it; a later source that
says otherwise is a warning naming both sources and both values, and the first is kept. A GPU's
health (``-q``, ``-q -x``: ``model.GpuHealth``) is joined so fact by fact: a later report fills what an
earlier left unknown, and its clocks-event reasons, a reading of another moment, do not replace the
first's. Last, a GPU whose compute capability no source gave gets the one NVIDIA's CUDA GPU list
gives its name (``core.hardware.capability_of_name``), said in ``inferred``; a capability a source
gave that the list contradicts is a warning, the source's kept. A name the list does not give leaves
it unknown.

A source belongs to the machine only if it can: a GPU is found by its UUID, else its PCI bus id, else
its nvidia-smi index (NVML's, as topo -m numbers GPUs). A UUID or bus id other than the one the machine
already knows for that GPU, a listing or P2P matrix of another GPU count, or a GPU found by UUID under
another index is another machine's output (or one numbered otherwise): ``TextMachineError``, and
none of its facts is kept."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from ..core import model
from ..core.hardware import capability_of_name
from ..core.units import counted
from .nvlink_status import NvlinkStatus
from .smi_gpus import FACTS, SmiGpu, SmiGpus, bus_key
from .smi_list import SmiListParseError, parse_smi_list
from .smi_machine import Matrix, to_topology
from .smi_q import SmiQParseError, parse_smi_q
from .smi_query import SmiQueryParseError, parse_smi_query
from .smi_topo import SmiTopo
from .smi_xml import SmiXmlParseError, parse_smi_xml
from .which_tool import tools_in

NVLINK_STATUS = "nvidia-smi nvlink -s"
CUDA_GPU_LIST = "NVIDIA's CUDA GPU list (developer.nvidia.com/cuda-gpus)"
# What read_listing raises: the refusal of the format the text was told to be.
LISTING_ERRORS = (SmiXmlParseError, SmiQParseError, SmiListParseError, SmiQueryParseError)
_VERSIONS = {"driver_version": "driver version", "cuda_driver_version": "CUDA version"}
# How a warning names each health fact (model.GpuHealth's fields).
_HEALTH_FACTS = {
    "ecc_uncorrected_volatile": "uncorrectable ECC errors (volatile)",
    "ecc_uncorrected_aggregate": "uncorrectable ECC errors (aggregate)",
    "remapped_rows_pending": "row remapping pending",
    "remapping_failed": "row remapping failed",
    "retired_pages_pending": "pages pending retirement",
    "clocks_event_reasons": "clocks-event reasons",
    "persistence_mode": "persistence mode",
    "vbios_version": "VBIOS",
    "inforom_version": "InfoROM image",
}


class TextMachineError(ValueError):
    """An output that cannot describe this machine (another machine's, or numbered otherwise)."""


# The GPU listings, by the `gputopo parse` format that reads each.
_LISTINGS = {"smi-xml": parse_smi_xml, "smi-q": parse_smi_q, "smi-list": parse_smi_list, "smi-query": parse_smi_query}


def read_listing(text: str) -> SmiGpus:
    """A GPU listing, its format told by its text (``parse.which_tool``): ``nvidia-smi -q -x``,
    ``-q`` (or only its line for a GPU it cannot reach, which -q's reader explains), ``-L`` or
    ``--query-gpu`` CSV; any other text is read as CSV, whose reader refuses it naming its tool.
    Raises that format's parse error."""
    for tool in tools_in(text):
        if tool.readers and tool.readers[0] in _LISTINGS:
            return _LISTINGS[tool.readers[0]](text)
    return parse_smi_query(text)


def _shown(key: str, value: object) -> str:
    """A fact as nvidia-smi prints it (memory in MiB, its unit), cut to a line's share."""
    if key == "memory_total_bytes" and isinstance(value, int):
        return f"{value / 2**20:g} MiB"
    if isinstance(value, model.Fabric):
        return ", ".join(filter(None, (value.state, value.status)))[:60]
    if key == "clocks_event_reasons" and isinstance(value, int):
        return hex(value)
    if key in _HEALTH_FACTS and isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)[:60]


def _gpu_runs(indices: list[int]) -> str:
    """``GPU0-GPU7``, ``GPU0, GPU2-GPU3``: ascending indices, consecutive ones as a run."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"GPU{r[0]}" + (f"-GPU{r[-1]}" if len(r) > 1 else "") for r in runs)


def _same_count(tool: str, file: str, seen: int, count: int) -> None:
    if seen != count:
        raise TextMachineError(
            f"{file}: {tool} saw {counted(seen, 'GPU')} and the machine has {count}: another "
            f"machine, or another NVIDIA_VISIBLE_DEVICES (run it with every GPU visible)"
        )


class TextMachine:
    """A machine built from nvidia-smi text (see the module docstring). ``sources`` lists each file
    read with what it said (``notes``), as a profile records them; ``inferred`` the facts not read
    from any file; ``topology`` the machine so far."""

    def __init__(self, smi: SmiTopo, p2p: dict[str, tuple[str, Matrix]] | None = None, name: str | None = None) -> None:
        """``p2p``: {capability: (file, matrix)} of ``topo -p2p``; ``name``: the topo -m file."""
        p2p = p2p or {}
        self.topology = to_topology(smi, {cap: matrix for cap, (_, matrix) in p2p.items()}, name=name)
        for file, matrix in p2p.values():  # its statuses would land on other GPUs, or on pairs it never saw
            _same_count("nvidia-smi topo -p2p", file, len(matrix), len(self.topology.gpus))
        self.sources: list[dict[str, Any]] = [{"what": "nvidia-smi topo -m", "file": name}]
        self.sources += [{"what": f"nvidia-smi topo -p2p ({cap})", "file": file} for cap, (file, _) in p2p.items()]
        self.inferred: list[str] = ["every fact the text does not give is recorded as null (unknown)"]
        self._said: dict[tuple[int | None, str], str] = {}  # (GPU index or None, fact) -> the source that gave it
        self._warnings: list[str] = list(self.topology.warnings)

    # -- joining a source ------------------------------------------------------------------------

    @contextlib.contextmanager
    def _all_or_nothing(self) -> Iterator[None]:
        """A source refused leaves the machine as it was before it (none of its facts kept)."""
        saved = self.topology, dict(self._said), list(self._warnings)
        try:
            yield
        except TextMachineError:
            self.topology, self._said, self._warnings = saved
            raise

    def _find(self, row: SmiGpu, position: int | None, tool: str, file: str) -> model.Gpu:
        """The machine's GPU a listed one is, refusing one of another machine. ``position`` (its place
        in a listing of every GPU, in index order) stands for an index the listing does not print;
        None where the listing may list some GPUs only."""
        gpus = self.topology.gpus
        number = row.index if row.index is not None else position
        label = f"{file}: {tool}'s GPU {'?' if number is None else number}"
        by = None
        if row.uuid:
            by = next((g for g in gpus if g.uuid == row.uuid), None)
        if by is None and row.pci_bus_id and bus_key(row.pci_bus_id):
            by = next((g for g in gpus if g.pci_bus_id and bus_key(g.pci_bus_id) == bus_key(row.pci_bus_id)), None)
        if by is None and number is None:
            raise TextMachineError(
                f"{label} ({row.uuid or row.pci_bus_id or 'no UUID'}) has no UUID or bus id the "
                f"machine knows, and the listing prints no index and lists some GPUs only: which "
                f"GPU it is is unknown"
            )
        gpu: model.Gpu | None
        if by is not None:
            if row.index is not None and by.nvml_index is not None and by.nvml_index != row.index:
                raise TextMachineError(
                    f"{label} ({row.uuid or row.pci_bus_id}) is the machine's GPU{by.index} (NVML "
                    f"index {by.nvml_index}): GPUs numbered otherwise (a container and its host?)"
                )
            gpu = by
        else:
            gpu = next((g for g in gpus if (g.nvml_index if g.nvml_index is not None else g.index) == number), None)
            if gpu is None:
                raise TextMachineError(
                    f"{label} is no GPU of this machine ({counted(len(gpus), 'GPU')}): another "
                    f"machine, or GPUs numbered otherwise"
                )
        for key in ("uuid", "pci_bus_id"):
            have, said = getattr(gpu, key), getattr(row, key)
            same = (bus_key(have) == bus_key(said)) if key == "pci_bus_id" and have and said else have == said
            if have and said and not same:
                raise TextMachineError(
                    f"{label} has {FACTS[key]} {said[:48]}, the machine's GPU{gpu.index} "
                    f"{have[:48]}: another machine's output"
                )
        return gpu

    def _fill(
        self,
        holder: model.Gpu | model.Topology,
        key: str,
        said: object,
        source: str,
        what: str,
        where: str,
        changes: dict[str, Any],
    ) -> None:
        """Put ``said`` in ``changes`` where ``holder`` (a GPU or the machine) lacks ``key``; warn,
        naming both sources, where it has another value."""
        if said is None:
            return
        have = getattr(holder, key)
        index = holder.index if isinstance(holder, model.Gpu) else None
        if have is None:
            changes[key] = said
            self._said[index, key] = source
        elif have != said and key != "pci_bus_id":  # bus ids were compared as addresses in _find
            earlier = self._said.get((index, key), "an earlier source")
            self._warnings.append(
                f"{where}{source} says {what} {_shown(key, said)}, an earlier source "
                f"{_shown(key, have)}, from {earlier}; the earlier is kept"
            )

    def _fill_gpu(self, gpu: model.Gpu, row: SmiGpu, source: str) -> model.Gpu:
        changes: dict[str, Any] = {}
        for key, what in FACTS.items():
            self._fill(gpu, key, getattr(row, key), source, what, f"GPU{gpu.index}: ", changes)
        if row.mig_devices:
            changes["mig_devices"] = self._mig_devices(gpu, row.mig_devices, source)
        fabric = row.fabric.fact() if row.fabric is not None else None  # as NVML's answer would be held
        self._fill(gpu, "fabric", fabric, source, "NVLink fabric", f"GPU{gpu.index}: ", changes)
        health = self._fill_health(gpu, row.health, source)
        if health is not gpu.health:
            changes["health"] = health
        return dataclasses.replace(gpu, **changes) if changes else gpu

    def _fill_health(self, gpu: model.Gpu, said: model.GpuHealth | None, source: str) -> model.GpuHealth | None:
        """The GPU's health with a report's joined fact by fact, as ``_fill`` joins the GPU's facts: each
        filled once, another value a warning naming both sources, the earlier kept (two reports are two
        moments: their clocks-event reasons may differ, and the first reading stays the one recorded)."""
        if said is None:
            return gpu.health
        have = gpu.health or model.GpuHealth()
        filled: dict[str, Any] = {}
        for key, what in _HEALTH_FACTS.items():
            value, known = getattr(said, key), getattr(have, key)
            if value is None:
                continue
            if known is None:
                filled[key] = value
                self._said[gpu.index, f"health.{key}"] = source
            elif known != value:
                earlier = self._said.get((gpu.index, f"health.{key}"), "an earlier source")
                self._warnings.append(
                    f"GPU{gpu.index}: {source} says {what} {_shown(key, value)}, an earlier source "
                    f"{_shown(key, known)}, from {earlier}; the earlier is kept"
                )
        return dataclasses.replace(have, **filled) if filled else gpu.health

    def _mig_devices(
        self, gpu: model.Gpu, said: tuple[model.MigDevice, ...], source: str
    ) -> tuple[model.MigDevice, ...]:
        """The GPU's MIG devices with a listing's joined, device by index: each fact filled once (-L
        gives UUIDs and profiles, -q and -q -x instance ids and memory); another set of devices is a
        warning, the earlier kept."""
        have = {d.index: d for d in gpu.mig_devices}
        if have and set(have) != {d.index for d in said}:
            listed = sorted(str(d.index) for d in said)
            self._warnings.append(
                f"GPU{gpu.index}: {source} lists MIG devices {listed}, an earlier source "
                f"{sorted(map(str, have))}: MIG changed between the outputs? The earlier is kept"
            )
            return gpu.mig_devices
        if not have:
            return said
        merged = []
        for device in said:
            known = have[device.index]
            merged.append(
                dataclasses.replace(
                    known,
                    **{
                        f.name: getattr(device, f.name)
                        for f in dataclasses.fields(device)
                        if getattr(known, f.name) is None and getattr(device, f.name) is not None
                    },
                )
            )
        return tuple(merged)

    def _joined(self, gpus: list[model.Gpu], what: str, file: str, before: set[str], notes: Iterable[str] = ()) -> None:
        self.topology = dataclasses.replace(
            self.topology, gpus=tuple(gpus), warnings=tuple(dict.fromkeys(self._warnings))
        )
        self.sources.append(
            {"what": what, "file": file, "notes": list(notes) + [w for w in self.topology.warnings if w not in before]}
        )

    def add_listing(self, listing: SmiGpus, file: str) -> None:
        """What ``listing`` (--query-gpu, -L or -q -x) says of the machine's GPUs and versions."""
        with self._all_or_nothing():
            self._add_listing(listing, file)

    def _add_listing(self, listing: SmiGpus, file: str) -> None:
        before = set(self.topology.warnings)
        if listing.attached is not None:  # None: a listing that may list some GPUs only (-i)
            _same_count(listing.tool, file, listing.attached, len(self.topology.gpus))
        every = listing.attached == len(listing.gpus)  # a GPU's place in the listing is its index
        gpus = list(self.topology.gpus)
        source = f"{listing.tool} ({file})"
        seen: dict[int, int] = {}
        for position, row in enumerate(listing.gpus):
            gpu = self._find(row, position if every else None, listing.tool, file)
            if gpu.index in seen:
                raise TextMachineError(
                    f"{file}: {listing.tool} lists the machine's GPU{gpu.index} twice (its GPUs "
                    f"{seen[gpu.index]} and {position}): not one machine's listing"
                )
            seen[gpu.index] = position
            gpus[gpu.index] = self._fill_gpu(gpu, row, source)
            self.topology = dataclasses.replace(self.topology, gpus=tuple(gpus))
        versions: dict[str, Any] = {}
        for key, what in _VERSIONS.items():
            self._fill(self.topology, key, getattr(listing, key), source, what, "", versions)
        self.topology = dataclasses.replace(self.topology, **versions)
        self._joined(gpus, listing.tool, file, before, [f"{file}: {w}" for w in listing.warnings])

    def add_nvlink_status(self, status: NvlinkStatus, file: str) -> None:
        """The NVLink states ``nvidia-smi nvlink -s`` printed as its GPUs' links (state only: where a
        link leads, nvlink -s does not say), and the name and UUID of each GPU's header; a warning where
        the links up disagree with topo -m's NV#. ``-i <gpu>`` lists some GPUs only: no GPU count is
        compared."""
        with self._all_or_nothing():
            self._add_nvlink_status(status, file)

    def _add_nvlink_status(self, status: NvlinkStatus, file: str) -> None:
        before = set(self.topology.warnings)
        gpus = list(self.topology.gpus)
        source = f"{NVLINK_STATUS} ({file})"
        for listed in status.gpus:
            gpu = self._find(SmiGpu(index=listed.index, uuid=listed.uuid), None, NVLINK_STATUS, file)
            gpu = self._fill_gpu(gpu, SmiGpu(name=listed.name, uuid=listed.uuid), source)
            gpus[gpu.index] = gpu
            self.topology = dataclasses.replace(self.topology, gpus=tuple(gpus))
            best = max((ln.nvlinks or 0 for ln in self.topology.links if gpu.index in (ln.a, ln.b)), default=0)
            if listed.all_inactive:
                self._warnings.append(
                    f"GPU{gpu.index}: {source} says all its links are inactive (not how many)"
                    + (f", while its pairs show NV{best}" if best else "")
                )
                continue
            gpus[gpu.index] = dataclasses.replace(
                gpu, nvlinks=tuple(model.NvLink(s.link, s.active) for s in listed.links)
            )
            if listed.active_links < best:
                self._warnings.append(
                    f"GPU{gpu.index}: {source} shows {listed.active_links} links up, a pair shows "
                    f"NV{best}: outputs taken at different times?"
                )
        self._joined(gpus, NVLINK_STATUS, file, before)

    # -- what no source gave -----------------------------------------------------------------------

    def finish(self) -> model.Topology:
        """The machine, each GPU's compute capability from its name where no source gave one (and a
        warning where a source's disagrees with the name's)."""
        gpus = list(self.topology.gpus)
        by_name: dict[tuple[str | None, str], list[int]] = {}
        for gpu in gpus:
            listed = capability_of_name(gpu.name)
            if listed is None:
                continue
            if gpu.compute_capability is None:
                gpus[gpu.index] = dataclasses.replace(gpu, compute_capability=listed)
                by_name.setdefault((gpu.name, listed), []).append(gpu.index)
            elif gpu.compute_capability != listed:
                source = self._said.get((gpu.index, "compute_capability"), "an earlier source")
                self._warnings.append(
                    f"GPU{gpu.index}: {source} says compute capability {gpu.compute_capability}, "
                    f"{CUDA_GPU_LIST} gives {listed} for {gpu.name}; the source's is kept"
                )
        for (name, cc), indices in by_name.items():
            which = _gpu_runs(indices)
            self.inferred.append(f"{which}: compute capability {cc}, from the name {name} in {CUDA_GPU_LIST}")
        self.topology = dataclasses.replace(
            self.topology, gpus=tuple(gpus), warnings=tuple(dict.fromkeys(self._warnings))
        )
        return self.topology
