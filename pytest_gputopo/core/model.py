"""The machine as data: GPUs, the link between every GPU pair, and where the facts came from.

Pure core: no I/O, no environment, no heavy imports. Every fact a source could not give is
``None`` (unknown), never a guess. ``core.schema`` writes and reads it as a machine profile.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .limits import MAX_NVLINKS
from .units import counted
from .xid import XidEvent


class LinkClass(enum.IntEnum):
    """A GPU pair's path, ordered worst to best (so ``max``/``>=`` mean "at least as close")."""

    SYS = 1  # PCIe + the SMP interconnect between NUMA nodes (QPI/UPI); the old name is SOC
    NODE = 2  # PCIe + the interconnect between host bridges within one NUMA node
    PHB = 3  # PCIe + a host bridge (typically the CPU)
    PXB = 4  # several PCIe bridges, no host bridge
    PIX = 5  # at most one PCIe bridge
    NV = 6  # a bonded set of NVLinks

    @classmethod
    def from_name(cls, name: str) -> LinkClass:
        name = name.strip().upper()
        if name == "SOC":
            return cls.SYS
        if name.startswith("NV"):
            return cls.NV
        return cls[name]


# NVML_TOPOLOGY_* common-ancestor levels -> nvidia-smi labels. INTERNAL (0, two GPUs on one
# board such as a K80) is printed as PIX by nvidia-smi in real outputs.
NVML_LEVEL_TO_CLASS = {
    0: LinkClass.PIX,
    10: LinkClass.PIX,
    20: LinkClass.PXB,
    30: LinkClass.PHB,
    40: LinkClass.NODE,
    50: LinkClass.SYS,
}
CLASS_TO_NVML_LEVEL = {LinkClass.PIX: 10, LinkClass.PXB: 20, LinkClass.PHB: 30, LinkClass.NODE: 40, LinkClass.SYS: 50}

_LABEL_RE = re.compile(r"^(?:NV(\d+)|(SYS|SOC|NODE|PHB|PXB|PIX))$")


@dataclass(frozen=True, order=True)
class LinkLabel:
    """One ``nvidia-smi topo -m`` cell: a class and, for NVLink, the number of links (``NV12``)."""

    cls: LinkClass
    nvlinks: int = 0

    @classmethod
    def parse(cls, text: str) -> LinkLabel:
        """``"NV12"``, ``"PXB"``, ``"SOC"`` (= SYS); ``"NV"`` alone means one link or more."""
        text = text.strip().upper()
        if text == "NV":
            return cls(LinkClass.NV, 1)
        m = _LABEL_RE.match(text)
        if not m or (m.group(1) is not None and not 1 <= int(m.group(1)) <= MAX_NVLINKS):
            raise ValueError(
                f"unknown link label {text[:40]!r} (expected NV<n> with n from 1 to {MAX_NVLINKS}, "
                f"PIX, PXB, PHB, NODE or SYS)"
            )
        if m.group(1) is not None:
            return cls(LinkClass.NV, int(m.group(1)))
        return cls(LinkClass.from_name(m.group(2)))

    def __str__(self) -> str:
        return f"NV{self.nvlinks}" if self.cls is LinkClass.NV else self.cls.name


class P2PStatus(str, enum.Enum):  # noqa: UP042 (a StrEnum's str() is its value: texts that print a member would change)
    """``NVML_P2P_STATUS_*`` with the abbreviations ``nvidia-smi topo -p2p`` prints."""

    OK = "OK"
    CHIPSET_NOT_SUPPORTED = "CNS"
    GPU_NOT_SUPPORTED = "GNS"
    TOPOLOGY_NOT_SUPPORTED = "TNS"
    DISABLED_BY_REGKEY = "DR"
    NOT_SUPPORTED = "NS"
    UNKNOWN = "U"

    @property
    def description(self) -> str:
        return _P2P_TEXT[self]

    @classmethod
    def from_nvml(cls, value: int) -> P2PStatus:
        return _P2P_BY_NVML.get(value, cls.UNKNOWN)

    @property
    def nvml_value(self) -> int:
        return _P2P_NVML[self]


_P2P_NVML = {
    P2PStatus.OK: 0,
    P2PStatus.CHIPSET_NOT_SUPPORTED: 1,
    P2PStatus.GPU_NOT_SUPPORTED: 2,
    P2PStatus.TOPOLOGY_NOT_SUPPORTED: 3,
    P2PStatus.DISABLED_BY_REGKEY: 4,
    P2PStatus.NOT_SUPPORTED: 5,
    P2PStatus.UNKNOWN: 6,
}
_P2P_BY_NVML = {v: k for k, v in _P2P_NVML.items()}
_P2P_TEXT = {
    P2PStatus.OK: "OK",
    P2PStatus.CHIPSET_NOT_SUPPORTED: "chipset not supported",
    P2PStatus.GPU_NOT_SUPPORTED: "GPU not supported",
    P2PStatus.TOPOLOGY_NOT_SUPPORTED: "topology not supported",
    P2PStatus.DISABLED_BY_REGKEY: "disabled by regkey",
    P2PStatus.NOT_SUPPORTED: "not supported",
    P2PStatus.UNKNOWN: "unknown",
}

P2P_CAPS = ("read", "write", "nvlink", "atomics")

# NVML_COMPUTEMODE_* (nvmlDeviceGetComputeMode: 0..3) by the names nvidia-smi prints. Exclusive_Thread
# is deprecated (CUDA treats it as Exclusive_Process).
COMPUTE_MODES = ("Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process")


@dataclass(frozen=True)
class P2P:
    """NVML's P2P status for a pair, per capability; UNKNOWN where no source said."""

    read: P2PStatus = P2PStatus.UNKNOWN
    write: P2PStatus = P2PStatus.UNKNOWN
    nvlink: P2PStatus = P2PStatus.UNKNOWN
    atomics: P2PStatus = P2PStatus.UNKNOWN

    @property
    def read_write(self) -> bool | None:
        """True when read and write are OK, False when either is refused, None when unknown."""
        statuses = (self.read, self.write)
        if any(s not in (P2PStatus.OK, P2PStatus.UNKNOWN) for s in statuses):
            return False
        return True if all(s is P2PStatus.OK for s in statuses) else None


@dataclass(frozen=True)
class NvLink:
    """One NVLink of a GPU: its state and where it leads (remote PCI bus id, device type)."""

    link: int
    active: bool
    remote_bus_id: str | None = None
    remote_type: str = "unknown"  # GPU, SWITCH, IBMNPU or unknown
    version: str | None = None  # NVLink generation, e.g. "4.0"


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a compute instance of a GPU instance) a GPU in MIG mode holds, as nvidia-smi
    lists it: ``index`` its place among the GPU's MIG devices (``-L``'s ``Device <n>``, ``-q``'s
    Index), ``profile`` as ``-L`` names it (``1g.10gb``), the GPU and compute instance ids, its
    memory; None where the listing does not say."""

    index: int | None = None
    uuid: str | None = None  # "MIG-..." (-L only)
    profile: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_total_bytes: int | None = None


# NVML_GPU_FABRIC_STATE_* (0..3, nvmlGpuFabricState_t) by the names nvidia-smi -q prints.
FABRIC_STATES = ("Not Supported", "Not Started", "In Progress", "Completed")
FABRIC_SUCCESS = "Success"  # a completed registration's status, as nvidia-smi prints NVML_SUCCESS


@dataclass(frozen=True)
class Fabric:
    """A GPU's registration with its NVLink fabric, as NVML's GPU fabric info gives it (Hopper and
    later on NVSwitch / GB200 systems: the fabric manager registers each GPU): ``state`` one of
    ``FABRIC_STATES``; ``status`` the registration's result ("Success" or the error's words), which
    nvml.h says to read only once the state is Completed (None before, or where no source said);
    the clique and cluster a registered GPU belongs to (None where unknown); ``health_mask`` the
    registration's health as NVML's ``healthMask`` gives it (``core.fabric_health`` reads it), None
    where unknown: a struct without the field (nvmlGpuFabricInfo_t, before v2), a registration not
    completed, or a mask that reports no field."""

    state: str
    status: str | None = None
    clique_id: int | None = None
    cluster_uuid: str | None = None
    health_mask: int | None = None

    @property
    def up(self) -> bool | None:
        """True: registered (Completed, Success); False: the GPU has a fabric and is not in it (Not
        Started, In Progress, or Completed with an error); None: it has none (Not Supported) or the
        status of a completed registration is unknown."""
        if self.state in ("Not Started", "In Progress"):
            return False
        if self.state != "Completed" or self.status is None:
            return None
        return self.status == FABRIC_SUCCESS

    @property
    def problem(self) -> str | None:
        """Why the fabric is not up, in words (None unless ``up`` is False)."""
        if self.up is not False:
            return None
        if self.state == "Completed":
            return f"NVLink fabric registration failed ({self.status})"
        return f"NVLink fabric not up (state {self.state}: the fabric manager has not registered it)"


@dataclass(frozen=True)
class GpuHealth:
    """What NVML says of a GPU's health at rest (``core.health`` judges it), each fact None where unknown:
    the GPU or driver does not report it (NVML's NotSupported: no ECC, no row remapper, MIG enabled,
    Windows for persistence), the call failed, or the source did not record it. ECC counts are NVML's
    total uncorrectable errors, volatile (since the driver loaded) and aggregate (the GPU's life);
    ``clocks_event_reasons`` NVML's bitmask of what holds the clocks down (``nvmlClocksEventReason*``)."""

    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    remapped_rows_pending: bool | None = None
    remapping_failed: bool | None = None
    retired_pages_pending: bool | None = None
    clocks_event_reasons: int | None = None
    persistence_mode: bool | None = None
    vbios_version: str | None = None
    inforom_version: str | None = None

    @property
    def known(self) -> bool:
        return any(getattr(self, f.name) is not None for f in dataclasses.fields(self))


@dataclass(frozen=True)
class UnlistedGpu:
    """A GPU NVML lists that CUDA does not enumerate, though the environment leaves it visible (issue
    39): no CUDA process can use it. Named as NVML knows it: NVML's index (nvidia-smi's), UUID, PCI
    bus id and model (None where NVML did not say)."""

    nvml_index: int
    uuid: str | None = None
    pci_bus_id: str | None = None
    name: str | None = None

    def describe(self) -> str:
        """``NVML's GPU3 (NVIDIA A100-SXM4-80GB, GPU-..., PCI 00000000:47:00.0)``."""
        said = [s for s in (self.name, self.uuid, f"PCI {self.pci_bus_id}" if self.pci_bus_id else None) if s]
        return f"NVML's GPU{self.nvml_index}" + (f" ({', '.join(said)})" if said else "")


def cuda_unlisted(
    gpus: tuple[Gpu, ...], visible: Iterable[int], placed: Iterable[int | None], by_index: bool
) -> tuple[UnlistedGpu, ...] | None:
    """The GPUs NVML lists (``gpus``, NVML's order) that CUDA does not enumerate though the environment
    leaves them ``visible`` (positions in ``gpus``: CUDA_VISIBLE_DEVICES as NVML's facts map it), where
    CUDA's devices are ``placed`` at those positions (None: a device NVML cannot place). A GPU in MIG
    mode is not judged (CUDA enumerates its instances, not it). None, unknown, where the comparison
    would rest on a guess: a device NVML cannot place (it may be the GPU that looks lost), or CUDA
    enumerating a GPU the environment's mapping did not expect (the indices of ``by_index``
    CUDA_VISIBLE_DEVICES name CUDA's order, which NVML's facts map only as far as they know it)."""
    placed, visible = list(placed), list(visible)
    mig = {i for i, g in enumerate(gpus) if g.mig}
    if None in placed or (by_index and mig) or set(placed) - set(visible) - mig:
        return None
    lost = [gpus[i] for i in visible if i not in mig and i not in placed]
    return tuple(
        UnlistedGpu(g.index if g.nvml_index is None else g.nvml_index, g.uuid, g.pci_bus_id, g.name) for g in lost
    )


def unlisted_line(gpus: tuple[UnlistedGpu, ...]) -> str:
    """The GPUs NVML lists and CUDA does not enumerate, in one line (the cuda item's, the fleet's fault's,
    the header's warning)."""
    named = "; ".join(g.describe() for g in gpus)
    return f"CUDA does not enumerate {counted(len(gpus), 'GPU')} NVML lists: {named}"


@dataclass(frozen=True)
class Gpu:
    index: int  # the CUDA index a test uses (cuda:<index>)
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None  # NVML form, "00000000:19:00.0"
    nvml_index: int | None = None
    numa_node: int | None = None
    cpu_affinity: str | None = None  # as nvidia-smi prints it, "0-23,48-71"
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    memory_total_bytes: int | None = None
    compute_capability: str | None = None  # "9.0"
    nvlinks: tuple[NvLink, ...] = ()
    # CUDA's CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: multicast objects over an NVSwitch fabric, what
    # NCCL's NVLS (NVLink SHARP) algorithm and torch's symmetric memory need.
    multicast: bool | None = None
    # NVML's current MIG mode (nvmlDeviceGetMigMode): True when MIG is enabled, so that a process sees a
    # MIG instance, never the whole GPU; None where NVML did not say (a GPU without MIG says so).
    mig: bool | None = None
    compute_mode: str | None = None  # one of COMPUTE_MODES (nvmlDeviceGetComputeMode)
    mig_devices: tuple[MigDevice, ...] = ()  # listed by nvidia-smi text; () where none was listed
    fabric: Fabric | None = None  # NVML's GPU fabric info; None where NVML gave none (no such function, NotSupported)
    health: GpuHealth | None = None  # None where no source was asked (a listing without the sections)

    @property
    def active_nvlinks(self) -> int:
        return sum(1 for link in self.nvlinks if link.active)

    @property
    def exclusive(self) -> bool:
        """Whether one process at a time may hold a CUDA context on this GPU (its compute mode)."""
        return self.compute_mode in ("Exclusive_Process", "Exclusive_Thread")


@dataclass(frozen=True)
class Link:
    """The path between GPUs ``a < b``: the PCIe common ancestor, NVLinks, and P2P status."""

    a: int
    b: int
    pcie: LinkClass | None = None  # None: unknown (e.g. hidden behind NV# in nvidia-smi text)
    nvlinks: int | None = 0  # None: unknown
    p2p: P2P = P2P()
    cuda_peer: bool | None = None  # CUDA's cuDeviceCanAccessPeer (torch's can_device_access_peer), both ways

    @property
    def label(self) -> LinkLabel | None:
        """NV# where NVLinks join the pair, else its PCIe class; None (unknown) where either is unknown:
        a pair whose NVLink count NVML could not give may be NVLinked whatever its PCIe path."""
        if self.nvlinks:
            return LinkLabel(LinkClass.NV, self.nvlinks)
        if self.pcie is None or self.nvlinks is None:
            return None
        return LinkLabel(self.pcie)

    @property
    def name(self) -> str:
        return f"GPU{self.a}-GPU{self.b}"

    @property
    def p2p_works(self) -> bool | None:
        """P2P read and write, NVML's status joined with CUDA's own answer when there is one:
        a refusal by either wins; otherwise a yes by either; otherwise unknown."""
        nvml = self.p2p.read_write
        if nvml is False or self.cuda_peer is False:
            return False
        return True if (nvml or self.cuda_peer) else None


# What a question about this host needs learned, cheapest first: NVML's facts (links, NVLinks, PCIe,
# memory, capability), CUDA's view (device order, peer access, multicast: CUDA started in a child) and
# torch's versions (the CUDA and NCCL it was built with: torch imported in a child).
NVML, CUDA, TORCH = "nvml", "cuda", "torch"
# The node's health at rest, read with NVML's facts where asked (a health check, ``healthy=True``): each
# GPU's health calls, the PCI bus and this boot's kernel log, which a run on the topology alone skips.
HEALTH = "health"
ALL_FACTS = frozenset((NVML, CUDA, TORCH, HEALTH))


@dataclass(frozen=True)
class Source:
    """Where the facts came from: ``nvml``, ``smi-text`` or ``recorded`` (with the machine's name)."""

    kind: str
    name: str | None = None
    detail: str | None = None

    def __str__(self) -> str:
        if self.kind == "recorded":
            return f"recorded:{self.name}"
        if self.kind == "smi-text":
            return f"text:{self.name}" if self.name else "text"
        return self.kind.upper() if self.kind == "nvml" else self.kind


# The one problem that says a host has no GPU to use, rather than that its GPUs are unknown.
NO_DRIVER = "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver installed"


@dataclass(frozen=True)
class Topology:
    gpus: tuple[Gpu, ...] = ()
    links: tuple[Link, ...] = ()
    source: Source = Source("none")
    driver_version: str | None = None  # the NVIDIA driver, "570.124.06"
    cuda_driver_version: str | None = None  # the CUDA version the driver supports, "12.8"
    cuda_runtime_version: str | None = None  # the CUDA torch was built with (torch.version.cuda)
    nccl_version: str | None = None  # the NCCL torch loads (torch.cuda.nccl.version()), "2.21.5"
    hostname: str | None = None
    nics: tuple[str, ...] = ()
    problem: str | None = None  # why no GPU facts could be had (no library, no driver, ...)
    # CUDA's view asked of this host: how many devices CUDA lists, or why it could not be had (cuInit
    # failed: "cuInit returned CUDA_ERROR_SYSTEM_NOT_READY (802): ..."); both None where it was not asked.
    cuda_devices: int | None = None
    cuda_problem: str | None = None
    # The GPUs NVML lists, CUDA_VISIBLE_DEVICES leaves visible and CUDA does not enumerate (MIG apart);
    # () where CUDA's view was compared with NVML's and lacks none, None where it was not compared.
    cuda_unlisted: tuple[UnlistedGpu, ...] | None = None
    # The NVIDIA GPUs on this host's PCI bus, bound to the nvidia driver and this process's to use, that
    # NVML does not list, by bus id (``core.health.unlisted_on_bus``): () none, None not looked at or unknown.
    pci_unlisted: tuple[str, ...] | None = None
    # The NVIDIA driver's XID events in this boot's kernel log (``core.xid``), None where it could not be read.
    xids: tuple[XidEvent, ...] | None = None
    warnings: tuple[str, ...] = ()
    # Benchmark figures published for a recorded machine (never measured here): dicts with kind
    # ("allreduce", "p2p", "h2d", ...), gbps, source, and what they were measured on (see docs):
    # ``src``/``dst`` or ``gpu`` name GPUs by index, renumbered with the GPUs (``restrict``).
    published: tuple[dict[str, Any], ...] = ()
    _by_pair: dict[tuple[int, int], Link] = field(
        default=None,  # type: ignore[arg-type]
        init=False,
        repr=False,
        compare=False,
    )  # set in __post_init__

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_pair", {(ln.a, ln.b): ln for ln in self.links})

    @property
    def gpus_known(self) -> bool:
        """Whether ``gpus`` is every GPU there is: the facts were had, or no NVIDIA driver is
        installed. False where NVML failed (not loaded, no permission, an error) on a host whose
        GPUs may be there all the same."""
        return self.problem is None or bool(self.gpus) or self.problem == NO_DRIVER

    @property
    def recorded(self) -> bool:
        return self.source.kind == "recorded"

    @property
    def is_this_host(self) -> bool:
        """Whether these are this host's own facts (a live NVML probe). A recorded profile or
        ``nvidia-smi`` text is another machine: it gets no host fact (CPU vendor, NCCL's own run)
        and no host measurement."""
        return self.source.kind == "nvml"

    def link(self, a: int, b: int) -> Link:
        if a == b:
            raise ValueError(f"GPU{a} has no link to itself")
        key = (min(a, b), max(a, b))
        try:
            return self._by_pair[key]
        except KeyError:
            raise KeyError(
                f"no GPU pair GPU{key[0]}-GPU{key[1]} on this machine ({counted(len(self.gpus), 'GPU')})"
            ) from None

    def p2p(self, a: int, b: int) -> bool | None:
        """Whether ``cuda:a`` and ``cuda:b`` can do P2P read and write (None: unknown)."""
        return self.link(a, b).p2p_works

    def chosen(self, gpus: int | Iterable[int] | None = None) -> list[int]:
        """The indices of the GPUs named: ``cuda:0 .. cuda:gpus-1`` for a number, the listed ones for a
        list, all GPUs for None; only those this machine has."""
        if gpus is None:
            return list(range(len(self.gpus)))
        if isinstance(gpus, int):
            return list(range(min(gpus, len(self.gpus))))
        return sorted(i for i in set(gpus) if 0 <= i < len(self.gpus))

    def pairs(self, gpus: int | Iterable[int] | None = None) -> Iterator[Link]:
        """Every pair among the GPUs named (``chosen``): the first ``gpus``, a list, or all."""
        chosen = self.chosen(gpus)
        for i, a in enumerate(chosen):
            for b in chosen[i + 1 :]:
                yield self.link(a, b)

    def pairs_worse_than(self, label: str | LinkLabel, gpus: int | Iterable[int] | None = None) -> list[Link]:
        """Pairs linked worse than ``label`` (unknown links count as worse: they are not proven)."""
        need = LinkLabel.parse(label) if isinstance(label, str) else label
        return [ln for ln in self.pairs(gpus) if ln.label is None or not link_satisfies(ln.label, need)]

    def worst_link(self) -> Link | None:
        known = [ln for ln in self.links if ln.label is not None]
        unknown = [ln for ln in self.links if ln.label is None]
        if unknown:
            return unknown[0]
        return min(known, key=lambda ln: ln.label, default=None)  # type: ignore[arg-type, return-value]  # known labels

    def restrict(self, order: Iterable[int]) -> Topology:
        """The machine as a process sees it: the GPUs at ``order`` (current indices), renumbered 0..n-1."""
        order = list(order)
        new_index = {old: new for new, old in enumerate(order)}
        gpus = tuple(dataclasses.replace(self.gpus[old], index=new) for new, old in enumerate(order))
        links = []
        for ln in self.links:
            if ln.a in new_index and ln.b in new_index:
                a, b = sorted((new_index[ln.a], new_index[ln.b]))
                links.append(dataclasses.replace(ln, a=a, b=b))
        links.sort(key=lambda ln: (ln.a, ln.b))
        return dataclasses.replace(
            self, gpus=gpus, links=tuple(links), published=renumber_figures(self.published, new_index)
        )


_FIGURE_GPUS = ("src", "dst", "gpu")


def renumber_figures(figures: Iterable[dict[str, Any]], new_index: dict[int, int]) -> tuple[dict[str, Any], ...]:
    """Published figures with the GPUs they name renumbered by ``new_index`` (old -> new); a figure
    naming a GPU not in it is dropped (it was measured on a GPU this view does not have)."""
    out = []
    for fig in figures:
        named = {k: fig[k] for k in _FIGURE_GPUS if k in fig}
        if all(v in new_index for v in named.values()):
            out.append({**fig, **{k: new_index[v] for k, v in named.items()}})
    return tuple(out)


def link_satisfies(have: LinkLabel, need: LinkLabel) -> bool:
    """``have`` is ``need`` or better: NV# > PIX > PXB > PHB > NODE > SYS; NV12 needs 12 links."""
    if need.cls is LinkClass.NV:
        return have.cls is LinkClass.NV and have.nvlinks >= need.nvlinks
    return have.cls >= need.cls


# ---------------------------------------------------------------------------------------------
# Plain-dict form (the machine-profile format)
