"""The machine as data: GPUs, the link between every GPU pair, and where the facts came from.

Pure core: no I/O, no environment, no heavy imports. Every fact a source could not give is
``None`` (unknown), never a guess. ``to_dict``/``from_dict`` are the machine-profile format
(see docs/profile-format.md); ``from_dict`` names the offending field on bad input.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import reprlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

from .cpus import MAX_CPUS, cpu_ranges, looks_like_cpu_list

SCHEMA_VERSION = 1


class LinkClass(enum.IntEnum):
    """A GPU pair's path, ordered worst to best (so ``max``/``>=`` mean "at least as close")."""

    SYS = 1  # PCIe + the SMP interconnect between NUMA nodes (QPI/UPI); the old name is SOC
    NODE = 2  # PCIe + the interconnect between host bridges within one NUMA node
    PHB = 3  # PCIe + a host bridge (typically the CPU)
    PXB = 4  # several PCIe bridges, no host bridge
    PIX = 5  # at most one PCIe bridge
    NV = 6  # a bonded set of NVLinks

    @classmethod
    def from_name(cls, name: str) -> "LinkClass":
        name = name.strip().upper()
        if name == "SOC":
            return cls.SYS
        if name.startswith("NV"):
            return cls.NV
        return cls[name]


# NVML_TOPOLOGY_* common-ancestor levels -> nvidia-smi labels. INTERNAL (0, two GPUs on one
# board such as a K80) is printed as PIX by nvidia-smi in real outputs.
NVML_LEVEL_TO_CLASS = {0: LinkClass.PIX, 10: LinkClass.PIX, 20: LinkClass.PXB, 30: LinkClass.PHB,
                       40: LinkClass.NODE, 50: LinkClass.SYS}
CLASS_TO_NVML_LEVEL = {LinkClass.PIX: 10, LinkClass.PXB: 20, LinkClass.PHB: 30,
                       LinkClass.NODE: 40, LinkClass.SYS: 50}

_LABEL_RE = re.compile(r"^(?:NV(\d+)|(SYS|SOC|NODE|PHB|PXB|PIX))$")
# Limits no real machine reaches, each with where it comes from: a damaged or hostile profile, cache
# entry or argument is refused before anything is allocated or compared by its figures.
# NVML_NVLINK_MAX_LINKS of the newest nvml.h (pynvml.py of nvidia-ml-py 13: 36; H100 and B200 use 18):
# no GPU has more NVLinks, so no pair of GPUs is joined by more.
MAX_NVLINKS = 36
MAX_GPUS = 1024  # GPUs one host shows; the largest NVLink domain today is 72 (GB200 NVL72)
MAX_NUMA_NODES = 1024  # Linux MAX_NUMNODES at CONFIG_NODES_SHIFT=10, the most x86-64 allows
MAX_PCIE_GEN = 16  # PCIe 7.0 is the newest specification
MAX_PCIE_WIDTH = 32  # x32, the widest link the PCIe specification defines
MAX_MEMORY_BYTES = 2**44  # 16 TiB; the largest GPU memory today is 288 GB (B300)
MAX_GBPS = 1e6  # GB/s: a thousand times NVLink 5's 1.8 TB/s per GPU
MAX_BYTES = 2**40  # 1 TiB: a message size above the memory of any GPU
MAX_NICS = 1024  # network devices of one host (an 8-GPU node has about 10 RDMA NICs)
MAX_WARNINGS = 10_000


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 40
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict = 3, 6, 4


def is_bandwidth(value: Any) -> bool:
    """A figure in GB/s a verdict may compare: a number above 0 and at most MAX_GBPS. Written as a
    comparison, which is False for NaN and needs no float() of 10**400."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= MAX_GBPS


def show_value(value: Any) -> str:
    """A short, safe rendering of an untrusted value for an error message: never the repr of a
    5,000-digit integer (ValueError), of a deeply nested list (RecursionError) or of 60 MB."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    try:
        return _SHORT.repr(value)
    except (ValueError, RecursionError):  # a huge integer inside a list
        return f"a {type(value).__name__}"


@dataclass(frozen=True, order=True)
class LinkLabel:
    """One ``nvidia-smi topo -m`` cell: a class and, for NVLink, the number of links (``NV12``)."""

    cls: LinkClass
    nvlinks: int = 0

    @classmethod
    def parse(cls, text: str) -> "LinkLabel":
        """``"NV12"``, ``"PXB"``, ``"SOC"`` (= SYS); ``"NV"`` alone means one link or more."""
        text = text.strip().upper()
        if text == "NV":
            return cls(LinkClass.NV, 1)
        m = _LABEL_RE.match(text)
        if not m or (m.group(1) is not None and not 1 <= int(m.group(1)) <= MAX_NVLINKS):
            raise ValueError(f"unknown link label {text[:40]!r} (expected NV<n> with n from 1 to {MAX_NVLINKS}, "
                             f"PIX, PXB, PHB, NODE or SYS)")
        if m.group(1) is not None:
            return cls(LinkClass.NV, int(m.group(1)))
        return cls(LinkClass.from_name(m.group(2)))

    def __str__(self) -> str:
        return f"NV{self.nvlinks}" if self.cls is LinkClass.NV else self.cls.name


class P2PStatus(str, enum.Enum):
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
    def from_nvml(cls, value: int) -> "P2PStatus":
        return _P2P_BY_NVML.get(value, cls.UNKNOWN)

    @property
    def nvml_value(self) -> int:
        return _P2P_NVML[self]


_P2P_NVML = {P2PStatus.OK: 0, P2PStatus.CHIPSET_NOT_SUPPORTED: 1, P2PStatus.GPU_NOT_SUPPORTED: 2,
             P2PStatus.TOPOLOGY_NOT_SUPPORTED: 3, P2PStatus.DISABLED_BY_REGKEY: 4,
             P2PStatus.NOT_SUPPORTED: 5, P2PStatus.UNKNOWN: 6}
_P2P_BY_NVML = {v: k for k, v in _P2P_NVML.items()}
_P2P_TEXT = {P2PStatus.OK: "OK", P2PStatus.CHIPSET_NOT_SUPPORTED: "chipset not supported",
             P2PStatus.GPU_NOT_SUPPORTED: "GPU not supported",
             P2PStatus.TOPOLOGY_NOT_SUPPORTED: "topology not supported",
             P2PStatus.DISABLED_BY_REGKEY: "disabled by regkey", P2PStatus.NOT_SUPPORTED: "not supported",
             P2PStatus.UNKNOWN: "unknown"}

P2P_CAPS = ("read", "write", "nvlink", "atomics")


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

    @property
    def active_nvlinks(self) -> int:
        return sum(1 for link in self.nvlinks if link.active)


@dataclass(frozen=True)
class Link:
    """The path between GPUs ``a < b``: the PCIe common ancestor, NVLinks, and P2P status."""

    a: int
    b: int
    pcie: LinkClass | None = None  # None: unknown (e.g. hidden behind NV# in nvidia-smi text)
    nvlinks: int | None = 0  # None: unknown
    p2p: P2P = P2P()
    cuda_peer: bool | None = None  # torch.cuda.can_device_access_peer, both directions

    @property
    def label(self) -> LinkLabel | None:
        if self.nvlinks:
            return LinkLabel(LinkClass.NV, self.nvlinks)
        if self.pcie is None:
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


@dataclass(frozen=True)
class Topology:
    gpus: tuple[Gpu, ...] = ()
    links: tuple[Link, ...] = ()
    source: Source = Source("none")
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    hostname: str | None = None
    nics: tuple[str, ...] = ()
    problem: str | None = None  # why no GPU facts could be had (no library, no driver, ...)
    warnings: tuple[str, ...] = ()
    # Benchmark figures published for a recorded machine (never measured here): dicts with kind
    # ("allreduce", "p2p", "h2d"), gbps, source, and what they were measured on (see docs).
    published: tuple[dict, ...] = ()
    _by_pair: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_pair", {(ln.a, ln.b): ln for ln in self.links})

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
            raise KeyError(f"no GPU pair GPU{key[0]}-GPU{key[1]} on this machine "
                           f"({len(self.gpus)} GPUs)") from None

    def p2p(self, a: int, b: int) -> bool | None:
        """Whether ``cuda:a`` and ``cuda:b`` can do P2P read and write (None: unknown)."""
        return self.link(a, b).p2p_works

    def pairs(self, gpus: int | None = None) -> Iterator[Link]:
        """Every pair among ``cuda:0 .. cuda:gpus-1`` (all GPUs when ``gpus`` is None)."""
        n = len(self.gpus) if gpus is None else min(gpus, len(self.gpus))
        for a in range(n):
            for b in range(a + 1, n):
                yield self.link(a, b)

    def pairs_worse_than(self, label: str | LinkLabel, gpus: int | None = None) -> list[Link]:
        """Pairs linked worse than ``label`` (unknown links count as worse: they are not proven)."""
        need = LinkLabel.parse(label) if isinstance(label, str) else label
        return [ln for ln in self.pairs(gpus) if ln.label is None or not link_satisfies(ln.label, need)]

    def worst_link(self) -> Link | None:
        known = [ln for ln in self.links if ln.label is not None]
        unknown = [ln for ln in self.links if ln.label is None]
        if unknown:
            return unknown[0]
        return min(known, key=lambda ln: ln.label, default=None)

    def restrict(self, order: Iterable[int]) -> "Topology":
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
        return dataclasses.replace(self, gpus=gpus, links=tuple(links))


def link_satisfies(have: LinkLabel, need: LinkLabel) -> bool:
    """``have`` is ``need`` or better: NV# > PIX > PXB > PHB > NODE > SYS; NV12 needs 12 links."""
    if need.cls is LinkClass.NV:
        return have.cls is LinkClass.NV and have.nvlinks >= need.nvlinks
    return have.cls >= need.cls


# ---------------------------------------------------------------------------------------------
# Plain-dict form (the machine-profile format)


class SchemaError(ValueError):
    """A profile field is missing or malformed; ``field`` is its path (``gpus[3].uuid``)."""

    def __init__(self, field_path: str, message: str):
        super().__init__(f"{field_path}: {message}")
        self.field = field_path


def _enc(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.name if isinstance(value, LinkClass) else value.value
    if isinstance(value, tuple):
        return [_enc(v) for v in value]
    if dataclasses.is_dataclass(value):
        return {f.name: _enc(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.init and not f.name.startswith("_")}
    return value


def to_dict(topology: Topology) -> dict:
    return {"schema": SCHEMA_VERSION, **_enc(topology)}


def _get(d: Mapping, key: str, path: str, types: tuple, default: Any = ..., allow_none=True) -> Any:
    if key not in d:
        if default is ...:
            raise SchemaError(f"{path}{key}", "missing")
        return default
    value = d[key]
    if value is None and allow_none:
        return None
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise SchemaError(f"{path}{key}", f"expected {'/'.join(t.__name__ for t in types)}, got {show_value(value)}")
    return value


def _int(d: Mapping, key: str, path: str, low: int, high: int, default: Any = None, allow_none=True) -> Any:
    value = _get(d, key, path, (int,), default, allow_none)
    if value is not None and not low <= value <= high:
        raise SchemaError(f"{path}{key}", f"{show_value(value)} is not from {low} to {high}")
    return value


def _strings(d: Mapping, key: str, path: str, limit: int) -> tuple[str, ...]:
    items = _list(d, key, path)
    if len(items) > limit:
        raise SchemaError(f"{path}{key}", f"{len(items)} entries; at most {limit} are read")
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise SchemaError(f"{path}{key}[{i}]", f"expected str, got {show_value(item)}")
    return tuple(items)


def _mapping(value: Any, path: str) -> Mapping:
    if not isinstance(value, Mapping):
        raise SchemaError(path, f"expected an object, got {type(value).__name__}")
    return value


def _list(d: Mapping, key: str, path: str) -> list:
    return _get(d, key, path, (list,), default=[], allow_none=False)


def _enum(enum_cls, text: Any, path: str, by_name=False):
    try:
        return enum_cls[text] if by_name else enum_cls(text)
    except (KeyError, ValueError):
        allowed = [m.name if by_name else m.value for m in enum_cls]
        raise SchemaError(path, f"{show_value(text)} is not one of {allowed}") from None


def _p2p_from(d: Any, path: str) -> P2P:
    d = _mapping(d, path)
    unknown = set(d) - set(P2P_CAPS)
    if unknown:
        raise SchemaError(f"{path}.{sorted(unknown)[0]}", f"unknown P2P capability (expected {P2P_CAPS})")
    return P2P(**{cap: _enum(P2PStatus, d.get(cap, "U"), f"{path}.{cap}") for cap in P2P_CAPS})


_GPU_INTS = {"nvml_index": (0, MAX_GPUS - 1), "numa_node": (0, MAX_NUMA_NODES - 1),
             "pcie_gen_current": (1, MAX_PCIE_GEN), "pcie_gen_max": (1, MAX_PCIE_GEN),
             "pcie_width_current": (1, MAX_PCIE_WIDTH), "pcie_width_max": (1, MAX_PCIE_WIDTH),
             "memory_total_bytes": (1, MAX_MEMORY_BYTES)}
_GPU_STRS = ("name", "uuid", "pci_bus_id", "cpu_affinity", "compute_capability")


def _nvlink_from(d: Any, path: str) -> NvLink:
    d = _mapping(d, path)
    p = path + "."
    return NvLink(link=_int(d, "link", p, 0, MAX_NVLINKS - 1, ..., allow_none=False),
                  active=_get(d, "active", p, (bool,), allow_none=False),
                  remote_bus_id=_get(d, "remote_bus_id", p, (str,), None),
                  remote_type=_get(d, "remote_type", p, (str,), "unknown", allow_none=False),
                  version=_get(d, "version", p, (str,), None))


def _gpu_from(d: Any, path: str) -> Gpu:
    d = _mapping(d, path)
    p = path + "."
    extra = set(d) - set(_GPU_INTS) - set(_GPU_STRS) - {"index", "nvlinks"}
    if extra:
        raise SchemaError(f"{p}{sorted(extra)[0]}", "unknown field")
    listed = _list(d, "nvlinks", p)
    if len(listed) > MAX_NVLINKS:
        raise SchemaError(f"{p}nvlinks", f"{len(listed)} links; a GPU has at most {MAX_NVLINKS}")
    links = tuple(_nvlink_from(ld, f"{p}nvlinks[{i}]") for i, ld in enumerate(listed))
    if len({ln.link for ln in links}) != len(links):
        raise SchemaError(f"{p}nvlinks", "a link number is listed twice")
    cpus = _get(d, "cpu_affinity", p, (str,), None)
    # Other text ("N/A") is no CPU list: unknown. A list names CPUs a machine can have.
    if cpus and looks_like_cpu_list(cpus) and cpu_ranges(cpus) is None:
        raise SchemaError(f"{p}cpu_affinity", f"{cpus[:40]!r} is not a CPU range list below {MAX_CPUS}")
    return Gpu(index=_int(d, "index", p, 0, MAX_GPUS - 1, ..., allow_none=False),
               nvlinks=links,
               **{k: _int(d, k, p, low, high) for k, (low, high) in _GPU_INTS.items()},
               **{k: _get(d, k, p, (str,), None) for k in _GPU_STRS})


def _link_from(d: Any, path: str, n_gpus: int) -> Link:
    d = _mapping(d, path)
    p = path + "."
    a = _int(d, "a", p, 0, MAX_GPUS - 1, ..., allow_none=False)
    b = _int(d, "b", p, 0, MAX_GPUS - 1, ..., allow_none=False)
    if not (0 <= a < b < n_gpus):
        raise SchemaError(f"{p}a", f"pair ({a}, {b}) must satisfy 0 <= a < b < {n_gpus}")
    pcie = _get(d, "pcie", p, (str,), None)
    extra = set(d) - {"a", "b", "pcie", "nvlinks", "p2p", "cuda_peer"}
    if extra:
        raise SchemaError(f"{p}{sorted(extra)[0]}", "unknown field")
    return Link(a=a, b=b,
                pcie=None if pcie is None else _enum(LinkClass, pcie, p + "pcie", by_name=True),
                nvlinks=_int(d, "nvlinks", p, 0, MAX_NVLINKS, 0),
                p2p=_p2p_from(d.get("p2p", {}), p + "p2p"),
                cuda_peer=_get(d, "cuda_peer", p, (bool,), None))


PUBLISHED_KINDS = ("allreduce", "p2p", "p2p_staged", "h2d")


def _published_from(d: Any, path: str) -> dict:
    d = _mapping(d, path)
    p = path + "."
    kind = _get(d, "kind", p, (str,), allow_none=False)
    if kind not in PUBLISHED_KINDS:
        raise SchemaError(p + "kind", f"{kind!r} is not one of {list(PUBLISHED_KINDS)}")
    gbps = _get(d, "gbps", p, (int, float), allow_none=False)
    if not is_bandwidth(gbps):
        raise SchemaError(p + "gbps", f"must be a number above 0 and at most {MAX_GBPS:g}, got {show_value(gbps)}")
    if not _get(d, "source", p, (str,), allow_none=False).strip():
        raise SchemaError(p + "source", "must say where the figure was published")
    _int(d, "gpus", p, 1, MAX_GPUS)
    _int(d, "size_bytes", p, 1, MAX_BYTES)
    _get(d, "pinned", p, (bool,), None)
    _get(d, "note", p, (str,), None)
    extra = set(d) - {"kind", "gbps", "source", "gpus", "size_bytes", "pinned", "note"}
    if extra:
        raise SchemaError(f"{p}{sorted(extra)[0]}", "unknown field")
    return dict(d)


def from_dict(d: Any, path: str = "") -> Topology:
    """Build a Topology from its dict form; ``path`` prefixes field names in errors."""
    d = _mapping(d, path or "topology")
    p = f"{path}." if path else ""
    schema = d.get("schema", SCHEMA_VERSION)
    if schema != SCHEMA_VERSION:
        raise SchemaError(f"{p}schema", f"version {show_value(schema)} is not supported "
                                        f"(this plugin reads {SCHEMA_VERSION})")
    listed = _list(d, "gpus", p)
    if len(listed) > MAX_GPUS:
        raise SchemaError(f"{p}gpus", f"{len(listed)} GPUs; at most {MAX_GPUS} are read")
    gpus = tuple(_gpu_from(g, f"{p}gpus[{i}]") for i, g in enumerate(listed))
    seen: dict = {}
    for i, g in enumerate(gpus):
        if g.index != i:
            raise SchemaError(f"{p}gpus[{i}].index", f"expected {i} (GPUs are listed in index order)")
        for key in ("uuid", "pci_bus_id"):
            value = getattr(g, key)
            if value is not None and (key, value) in seen:
                raise SchemaError(f"{p}gpus[{i}].{key}", f"{show_value(value)} is also gpus[{seen[key, value]}]'s")
            seen[key, value] = i
    listed = _list(d, "links", p)
    if len(listed) > len(gpus) * (len(gpus) - 1) // 2:
        raise SchemaError(f"{p}links", f"{len(listed)} entries for {len(gpus)} GPUs (one per pair)")
    links = tuple(_link_from(ln, f"{p}links[{i}]", len(gpus)) for i, ln in enumerate(listed))
    pairs = {(ln.a, ln.b) for ln in links}
    if len(pairs) != len(links):
        raise SchemaError(f"{p}links", "a GPU pair is listed twice")
    missing = [(a, b) for a in range(len(gpus)) for b in range(a + 1, len(gpus)) if (a, b) not in pairs]
    if missing:
        raise SchemaError(f"{p}links", f"no entry for GPU{missing[0][0]}-GPU{missing[0][1]} "
                                       f"(every pair must be listed, with unknown facts as null)")
    src = _mapping(d.get("source", {"kind": "none"}), p + "source")
    return Topology(
        gpus=gpus, links=tuple(sorted(links, key=lambda ln: (ln.a, ln.b))),
        source=Source(kind=_get(src, "kind", p + "source.", (str,), allow_none=False),
                      name=_get(src, "name", p + "source.", (str,), None),
                      detail=_get(src, "detail", p + "source.", (str,), None)),
        driver_version=_get(d, "driver_version", p, (str,), None),
        cuda_driver_version=_get(d, "cuda_driver_version", p, (str,), None),
        hostname=_get(d, "hostname", p, (str,), None),
        nics=_strings(d, "nics", p, MAX_NICS),
        problem=_get(d, "problem", p, (str,), None),
        warnings=_strings(d, "warnings", p, MAX_WARNINGS),
        published=tuple(_published_from(f, f"{p}published[{i}]")
                        for i, f in enumerate(_get(d, "published", p, (list,), [], allow_none=False))),
    )
