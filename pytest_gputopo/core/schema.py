"""The machine-profile format (docs/profile-format.md): ``to_dict`` writes a ``model.Topology`` as
plain JSON data, ``from_dict`` reads it back and validates every field's type and range against
``core.limits``, naming the offending field (``gpus[3].uuid``) on bad input."""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from . import xid
from .cpus import cpu_ranges, looks_like_cpu_list
from .limits import (
    MAX_BYTES,
    MAX_CPUS,
    MAX_GBPS,
    MAX_GPUS,
    MAX_MEMORY_BYTES,
    MAX_MIG_DEVICES,
    MAX_NICS,
    MAX_NUMA_NODES,
    MAX_NVLINKS,
    MAX_PCIE_GEN,
    MAX_PCIE_WIDTH,
    MAX_WARNINGS,
    is_bandwidth,
    show_value,
)
from .model import (
    COMPUTE_MODES,
    FABRIC_STATES,
    P2P,
    P2P_CAPS,
    Fabric,
    Gpu,
    GpuHealth,
    Link,
    LinkClass,
    MigDevice,
    NvLink,
    P2PStatus,
    Source,
    Topology,
    UnlistedGpu,
)
from .units import counted
from .xid import MAX_XIDS, XidEvent

SCHEMA_VERSION = 1


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
        return {
            f.name: _enc(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.init and not f.name.startswith("_")
        }
    return value


def to_dict(topology: Topology) -> dict[str, Any]:
    data = {"schema": SCHEMA_VERSION, **_enc(topology)}
    for gpu in data["gpus"]:  # written only where a listing named some, as profiles before them were
        if not gpu["mig_devices"]:
            del gpu["mig_devices"]
        if gpu["fabric"] is None:  # likewise only where NVML (or a listing) gave the GPU's fabric
            del gpu["fabric"]
        elif gpu["fabric"]["health_mask"] is None:  # and its health mask only where NVML gave one
            del gpu["fabric"]["health_mask"]
        if gpu["health"] is None:  # only where a source gave health facts, and only the facts it gave
            del gpu["health"]
        else:
            gpu["health"] = {k: v for k, v in gpu["health"].items() if v is not None}
    for key in ("cuda_devices", "cuda_problem", "cuda_unlisted", "pci_unlisted", "xids"):  # only where asked
        if data[key] is None:
            del data[key]
    return data


def _get(
    d: Mapping[str, Any], key: str, path: str, types: tuple[type, ...], default: Any = ..., allow_none: bool = True
) -> Any:
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


def _int(
    d: Mapping[str, Any], key: str, path: str, low: int, high: int, default: Any = None, allow_none: bool = True
) -> Any:
    value = _get(d, key, path, (int,), default, allow_none)
    if value is not None and not low <= value <= high:
        raise SchemaError(f"{path}{key}", f"{show_value(value)} is not from {low} to {high}")
    return value


def _strings(d: Mapping[str, Any], key: str, path: str, limit: int) -> tuple[str, ...]:
    items = _list(d, key, path)
    if len(items) > limit:
        raise SchemaError(f"{path}{key}", f"{len(items)} entries; at most {limit} are read")
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise SchemaError(f"{path}{key}[{i}]", f"expected str, got {show_value(item)}")
    return tuple(items)


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if type(value) is not dict and not isinstance(value, Mapping):  # dict first: the ABC check is slow
        raise SchemaError(path, f"expected an object, got {type(value).__name__}")
    return value


def _list(d: Mapping[str, Any], key: str, path: str) -> list[Any]:
    return _get(d, key, path, (list,), default=[], allow_none=False)  # type: ignore[no-any-return]  # a list


E = TypeVar("E", bound=enum.Enum)


def _enum(enum_cls: type[E], text: Any, path: str, by_name: bool = False) -> E:
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


_GPU_INTS = {
    "nvml_index": (0, MAX_GPUS - 1),
    "numa_node": (0, MAX_NUMA_NODES - 1),
    "pcie_gen_current": (1, MAX_PCIE_GEN),
    "pcie_gen_max": (1, MAX_PCIE_GEN),
    "pcie_width_current": (1, MAX_PCIE_WIDTH),
    "pcie_width_max": (1, MAX_PCIE_WIDTH),
    "memory_total_bytes": (1, MAX_MEMORY_BYTES),
}
_GPU_STRS = ("name", "uuid", "pci_bus_id", "cpu_affinity", "compute_capability")
_GPU_BOOLS = ("multicast", "mig")


def _nvlink_from(d: Any, path: str) -> NvLink:
    d = _mapping(d, path)
    p = path + "."
    return NvLink(
        link=_int(d, "link", p, 0, MAX_NVLINKS - 1, ..., allow_none=False),
        active=_get(d, "active", p, (bool,), allow_none=False),
        remote_bus_id=_get(d, "remote_bus_id", p, (str,), None),
        remote_type=_get(d, "remote_type", p, (str,), "unknown", allow_none=False),
        version=_get(d, "version", p, (str,), None),
    )


def _mig_device_from(d: Any, path: str) -> MigDevice:
    d = _mapping(d, path)
    p = path + "."
    extra = set(d) - {f.name for f in dataclasses.fields(MigDevice)}
    if extra:
        raise SchemaError(f"{p}{sorted(extra)[0]}", "unknown field")
    return MigDevice(
        index=_int(d, "index", p, 0, MAX_MIG_DEVICES - 1),
        uuid=_get(d, "uuid", p, (str,), None),
        profile=_get(d, "profile", p, (str,), None),
        gpu_instance_id=_int(d, "gpu_instance_id", p, 0, 2**31 - 1),
        compute_instance_id=_int(d, "compute_instance_id", p, 0, 2**31 - 1),
        memory_total_bytes=_int(d, "memory_total_bytes", p, 1, MAX_MEMORY_BYTES),
    )


def _fabric_from(d: Any, path: str) -> Fabric | None:
    if d is None:
        return None
    d = _mapping(d, path)
    p = path + "."
    extra = set(d) - {f.name for f in dataclasses.fields(Fabric)}
    if extra:
        raise SchemaError(f"{p}{sorted(extra)[0]}", "unknown field")
    state = _get(d, "state", p, (str,), allow_none=False)
    if state not in FABRIC_STATES:
        raise SchemaError(f"{p}state", f"{show_value(state)} is not one of {list(FABRIC_STATES)}")
    status = _get(d, "status", p, (str,), None)
    if status is not None and not 0 < len(status) <= 80:
        raise SchemaError(f"{p}status", f"{show_value(status)} is not a status of 1 to 80 characters")
    cluster = _get(d, "cluster_uuid", p, (str,), None)
    if cluster is not None and len(cluster) > 80:
        raise SchemaError(f"{p}cluster_uuid", f"{show_value(cluster)} is longer than 80 characters")
    return Fabric(
        state=state,
        status=status,
        clique_id=_int(d, "clique_id", p, 0, 2**32 - 1),
        cluster_uuid=cluster,
        health_mask=_int(d, "health_mask", p, 0, 2**32 - 1),
    )


_HEALTH_COUNTS = ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "clocks_event_reasons")
_HEALTH_BOOLS = ("remapped_rows_pending", "remapping_failed", "retired_pages_pending", "persistence_mode")
_HEALTH_VERSIONS = ("vbios_version", "inforom_version")


def _health_from(d: Any, path: str) -> GpuHealth | None:
    """``gpus[].health``: what NVML (or nvidia-smi's report) said of the GPU's health; a fact left out is unknown."""
    if d is None:
        return None
    d = _mapping(d, path)
    p = path + "."
    extra = set(d) - {f.name for f in dataclasses.fields(GpuHealth)}
    if extra:
        raise SchemaError(f"{p}{sorted(extra)[0]}", "unknown field")
    for key in _HEALTH_VERSIONS:
        version = _get(d, key, p, (str,), None)
        if version is not None and not 0 < len(version) <= 64:
            raise SchemaError(f"{p}{key}", f"{show_value(version)} is not a version of 1 to 64 characters")
    return GpuHealth(
        **{k: _int(d, k, p, 0, 2**64 - 1) for k in _HEALTH_COUNTS},
        **{k: _get(d, k, p, (bool,), None) for k in _HEALTH_BOOLS},
        **{k: d.get(k) for k in _HEALTH_VERSIONS},
    )


_BUS_ID = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")


def _bus_ids_from(d: Any, path: str) -> tuple[str, ...] | None:
    """``pci_unlisted``: bus ids in NVML's form (None: not looked at)."""
    if d is None:
        return None
    if not isinstance(d, list) or len(d) > MAX_GPUS:
        raise SchemaError(path, f"expected a list of at most {MAX_GPUS} bus ids, got {show_value(d)}")
    for i, bus in enumerate(d):
        if not isinstance(bus, str) or not _BUS_ID.match(bus):
            raise SchemaError(f"{path}[{i}]", f"{show_value(bus)} is not a PCI bus id as NVML writes one")
    return tuple(d)


def _xids_from(d: Any, path: str) -> tuple[XidEvent, ...] | None:
    """``xids``: the XID events of the node's kernel log (None: it could not be read)."""
    if d is None:
        return None
    if not isinstance(d, list) or len(d) > MAX_XIDS:
        raise SchemaError(path, f"expected a list of at most {MAX_XIDS} XID events, got {show_value(d)}")
    out = []
    for i, e in enumerate(d):
        e = _mapping(e, f"{path}[{i}]")
        p = f"{path}[{i}]."
        extra = set(e) - {"pci", "xid", "text"}
        if extra:
            raise SchemaError(f"{p}{sorted(extra)[0]}", "unknown field")
        pci = _get(e, "pci", p, (str,), allow_none=False)
        if not xid.PCI_ADDRESS.fullmatch(pci):
            raise SchemaError(f"{p}pci", f"{show_value(pci)} is not a PCI address")
        text = _get(e, "text", p, (str,), allow_none=False)
        if len(text) > xid.MAX_LINE:
            raise SchemaError(f"{p}text", f"longer than {xid.MAX_LINE} characters")
        out.append(XidEvent(pci, _int(e, "xid", p, 0, 9999, ..., allow_none=False), text))
    return tuple(out)


def _unlisted_from(d: Any, path: str) -> tuple[UnlistedGpu, ...] | None:
    """``cuda_unlisted``: the GPUs NVML lists and CUDA does not enumerate (None: not compared)."""
    if d is None:
        return None
    if not isinstance(d, list):
        raise SchemaError(path, f"expected a list, got {show_value(d)}")
    if len(d) > MAX_GPUS:
        raise SchemaError(path, f"{len(d)} GPUs; at most {MAX_GPUS} are read")
    out = []
    for i, g in enumerate(d):
        g = _mapping(g, f"{path}[{i}]")
        p = f"{path}[{i}]."
        extra = set(g) - {f.name for f in dataclasses.fields(UnlistedGpu)}
        if extra:
            raise SchemaError(f"{p}{sorted(extra)[0]}", "unknown field")
        out.append(
            UnlistedGpu(
                nvml_index=_int(g, "nvml_index", p, 0, MAX_GPUS - 1, ..., allow_none=False),
                **{k: _get(g, k, p, (str,), None) for k in ("uuid", "pci_bus_id", "name")},
            )
        )
    return tuple(out)


def _gpu_from(d: Any, path: str) -> Gpu:
    d = _mapping(d, path)
    p = path + "."
    extra = (
        set(d)
        - set(_GPU_INTS)
        - set(_GPU_STRS)
        - set(_GPU_BOOLS)
        - {"index", "nvlinks", "compute_mode", "mig_devices", "fabric", "health"}
    )
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
    mode = _get(d, "compute_mode", p, (str,), None)
    if mode is not None and mode not in COMPUTE_MODES:
        raise SchemaError(f"{p}compute_mode", f"{show_value(mode)} is not one of {list(COMPUTE_MODES)}")
    listed = _list(d, "mig_devices", p)
    if len(listed) > MAX_MIG_DEVICES:
        raise SchemaError(f"{p}mig_devices", f"{len(listed)} MIG devices; a GPU holds at most {MAX_MIG_DEVICES}")
    migs = tuple(_mig_device_from(m, f"{p}mig_devices[{i}]") for i, m in enumerate(listed))
    return Gpu(
        index=_int(d, "index", p, 0, MAX_GPUS - 1, ..., allow_none=False),
        nvlinks=links,
        compute_mode=mode,
        mig_devices=migs,
        fabric=_fabric_from(d.get("fabric"), f"{p}fabric"),
        health=_health_from(d.get("health"), f"{p}health"),
        **{k: _int(d, k, p, low, high) for k, (low, high) in _GPU_INTS.items()},
        **{k: _get(d, k, p, (str,), None) for k in _GPU_STRS},
        **{k: _get(d, k, p, (bool,), None) for k in _GPU_BOOLS},
    )


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
    return Link(
        a=a,
        b=b,
        pcie=None if pcie is None else _enum(LinkClass, pcie, p + "pcie", by_name=True),
        nvlinks=_int(d, "nvlinks", p, 0, MAX_NVLINKS, 0),
        p2p=_p2p_from(d.get("p2p", {}), p + "p2p"),
        cuda_peer=_get(d, "cuda_peer", p, (bool,), None),
    )


def _published_from(d: Any, path: str, n_gpus: int) -> dict[str, Any]:
    # The benchmarks' keys (a boundary of the load budget, docs/performance.md): a figure published for a
    # recorded machine is read with them; NVML's facts of this host, in the probe's child and the run, never are
    from .keys import COPY_KINDS, HOST_KINDS

    published_kinds = ("allreduce",) + COPY_KINDS + HOST_KINDS
    d = _mapping(d, path)
    p = path + "."
    kind = _get(d, "kind", p, (str,), allow_none=False)
    if kind not in published_kinds:
        raise SchemaError(p + "kind", f"{kind!r} is not one of {list(published_kinds)}")
    gbps = _get(d, "gbps", p, (int, float), allow_none=False)
    if not is_bandwidth(gbps):
        raise SchemaError(p + "gbps", f"must be a number above 0 and at most {MAX_GBPS:g}, got {show_value(gbps)}")
    if not _get(d, "source", p, (str,), allow_none=False).strip():
        raise SchemaError(p + "source", "must say where the figure was published")
    _int(d, "gpus", p, 1, MAX_GPUS)
    _int(d, "size_bytes", p, 1, MAX_BYTES)
    _get(d, "pinned", p, (bool,), None)
    _get(d, "note", p, (str,), None)
    # Which GPUs a figure was measured on (indices of this profile): a pair for a copy between GPUs,
    # one GPU for a host copy. Without them a figure stands for every pair (every GPU).
    named = {"src", "dst"} if kind in COPY_KINDS else {"gpu"} if kind in HOST_KINDS else set()
    for name in ("src", "dst", "gpu"):
        if name in d and name not in named:
            raise SchemaError(p + name, f"a figure of kind {kind} names no {name}")
        if name in d and not n_gpus:
            raise SchemaError(p + name, "names a GPU, and the profile lists none")
        if name in d:
            _int(d, name, p, 0, n_gpus - 1, allow_none=False)
    if ("src" in d) != ("dst" in d):
        raise SchemaError(p + ("dst" if "src" in d else "src"), "src and dst name a pair: both or neither")
    if "src" in d and d["src"] == d["dst"]:
        raise SchemaError(p + "dst", "a copy between GPUs needs two GPUs")
    extra = set(d) - {"kind", "gbps", "source", "gpus", "size_bytes", "pinned", "note", "src", "dst", "gpu"}
    if extra:
        raise SchemaError(f"{p}{sorted(extra)[0]}", "unknown field")
    return dict(d)


def from_dict(d: Any, path: str = "") -> Topology:
    """Build a Topology from its dict form; ``path`` prefixes field names in errors."""
    d = _mapping(d, path or "topology")
    p = f"{path}." if path else ""
    schema = d.get("schema", SCHEMA_VERSION)
    if schema != SCHEMA_VERSION:
        raise SchemaError(
            f"{p}schema", f"version {show_value(schema)} is not supported (this plugin reads {SCHEMA_VERSION})"
        )
    listed = _list(d, "gpus", p)
    if len(listed) > MAX_GPUS:
        raise SchemaError(f"{p}gpus", f"{len(listed)} GPUs; at most {MAX_GPUS} are read")
    gpus = tuple(_gpu_from(g, f"{p}gpus[{i}]") for i, g in enumerate(listed))
    seen: dict[tuple[str, Any], int] = {}
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
        raise SchemaError(f"{p}links", f"{len(listed)} entries for {counted(len(gpus), 'GPU')} (one per pair)")
    links = tuple(_link_from(ln, f"{p}links[{i}]", len(gpus)) for i, ln in enumerate(listed))
    pairs = {(ln.a, ln.b) for ln in links}
    if len(pairs) != len(links):
        raise SchemaError(f"{p}links", "a GPU pair is listed twice")
    missing = [(a, b) for a in range(len(gpus)) for b in range(a + 1, len(gpus)) if (a, b) not in pairs]
    if missing:
        raise SchemaError(
            f"{p}links",
            f"no entry for GPU{missing[0][0]}-GPU{missing[0][1]} "
            f"(every pair must be listed, with unknown facts as null)",
        )
    src = _mapping(d.get("source", {"kind": "none"}), p + "source")
    return Topology(
        gpus=gpus,
        links=tuple(sorted(links, key=lambda ln: (ln.a, ln.b))),
        source=Source(
            kind=_get(src, "kind", p + "source.", (str,), allow_none=False),
            name=_get(src, "name", p + "source.", (str,), None),
            detail=_get(src, "detail", p + "source.", (str,), None),
        ),
        driver_version=_get(d, "driver_version", p, (str,), None),
        cuda_driver_version=_get(d, "cuda_driver_version", p, (str,), None),
        cuda_runtime_version=_get(d, "cuda_runtime_version", p, (str,), None),
        nccl_version=_get(d, "nccl_version", p, (str,), None),
        hostname=_get(d, "hostname", p, (str,), None),
        nics=_strings(d, "nics", p, MAX_NICS),
        problem=_get(d, "problem", p, (str,), None),
        cuda_devices=_int(d, "cuda_devices", p, 0, MAX_GPUS),
        cuda_problem=_get(d, "cuda_problem", p, (str,), None),
        cuda_unlisted=_unlisted_from(d.get("cuda_unlisted"), f"{p}cuda_unlisted"),
        pci_unlisted=_bus_ids_from(d.get("pci_unlisted"), f"{p}pci_unlisted"),
        xids=_xids_from(d.get("xids"), f"{p}xids"),
        warnings=_strings(d, "warnings", p, MAX_WARNINGS),
        published=tuple(
            _published_from(f, f"{p}published[{i}]", len(gpus))
            for i, f in enumerate(_get(d, "published", p, (list,), [], allow_none=False))
        ),
    )
