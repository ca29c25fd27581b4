"""The NVML backend: read the machine through a ``pynvml``-like module.

``probe(nvml)`` takes the module as a parameter, so the same code reads real NVML (``import pynvml``)
and its test double (``tests/fake_nvml.py``: ``make_fake_pynvml(topology)`` serving a recorded
machine). Every NVML call goes through one choke point (``_Reader.call``) that turns "not
supported" (``NVMLError_NotSupported``, ``NVMLError_FunctionNotFound``, a function an older
nvidia-ml-py lacks) into the sentinel ``NA`` and returns other ``NVMLError``s instead of raising
them: a fact NVML cannot give becomes ``None`` (other errors also leave a warning), never a crash.
Only ``nvmlInit`` errors propagate; ``unavailable_reason`` words them for a human.

GPUs come back in NVML index order with ``index == nvml_index``; the caller reorders them into CUDA
order. NVLink pair counts follow nvidia-smi ``topo -m``: links of GPU a whose remote
bus id is b's, plus, through NVSwitches, the smaller of the two GPUs' active switch links. A count is
``None`` (unknown) when either GPU has an active link whose destination NVML could not say (no remote
bus id, or an unknown device type at a bus id that is no GPU's: it could be a switch), or whose NVLink
state failed with an error: such a link could lead anywhere.

No torch here; ``pynvml`` itself is only imported by the caller.
"""

from __future__ import annotations

import ctypes
import os
import re
import time
import uuid as uuids
from collections.abc import Sequence
from typing import Any

from ..core import health, limits, model
from ..runtime import environ as runtime

# A GPU whose PCI address is unknown gets a bus id in the all-ones domain from the fake module: PCI
# reads return all ones for "no device", so no real GPU has it. probe() uses such ids only to match
# NVLink ends and reports them as unknown (None).
SYNTHETIC_DOMAIN = "FFFFFFFF"


def synthetic_bus_id(n: int) -> str:
    """The placeholder bus id for GPU ``n`` (NVML index) whose real one is unknown."""
    return f"{SYNTHETIC_DOMAIN}:{n & 0xFF:02X}:{(n >> 8) & 0x1F:02X}.0"


def is_synthetic_bus_id(bus_id: str) -> bool:
    return bus_id[:9].upper() == SYNTHETIC_DOMAIN + ":"


# NVML_NVLINK_VERSION_* are encoded (nvml.h; hwloc#658): 5 is NVLink 3.1, not NVLink 5.
NVLINK_VERSIONS = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
NVLINK_DEVICE_TYPES = {0: "GPU", 1: "IBMNPU", 2: "SWITCH"}  # NVML_NVLINK_DEVICE_TYPE_*; 0xFF: unknown

# NVML_P2P_CAPS_INDEX_* as the C enum has them: the module's READ is the tuple (0,) (a trailing comma
# in every nvidia-ml-py), which ctypes refuses with ArgumentError.
P2P_CAPS_INDEX = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}

_MIG_ENABLE = 1  # NVML_DEVICE_MIG_ENABLE
_LIBRARY_NOT_FOUND, _DRIVER_NOT_LOADED, _NO_PERMISSION = 12, 9, 4  # NVML_ERROR_* (C values)
_INVALID_ARGUMENT = 2
_FABRIC_COMPLETED = 3  # NVML_GPU_FABRIC_STATE_COMPLETED (pynvml 13.615.71 l.7196; nvml.h "Fabric definitions")
_FABRIC_UUID_LEN = 16  # NVML_GPU_FABRIC_UUID_LEN: the C struct's clusterUuid[16]
_ENABLED = 1  # NVML_FEATURE_ENABLED (pynvml l.44)
_UNCORRECTED, _VOLATILE_ECC, _AGGREGATE_ECC = (
    1,
    0,
    1,
)  # NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC
CLOCKS_EVENT_CALLS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
CLOCKS_RECHECK_S = 0.2
# nvmlDeviceGetGpuFabricInfoV with pynvml's c_nvmlGpuFabricInfoV_t (the v2 struct, its version preset by
# __init__, as NCCL's nvmlwrap.cc sets nvmlGpuFabricInfo_v2), then, for a driver or binding without it,
# the older nvmlDeviceGetGpuFabricInfo with c_nvmlGpuFabricInfo_t.
FABRIC_CALLS = (
    ("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
    ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t"),
)
NVLINK_MAX_LINKS_NEWEST = limits.MAX_NVLINKS  # old bindings on new drivers still see all links


def unavailable_reason(exc: BaseException) -> str:
    """Why NVML cannot be used, for a header line (``exc``: what ``nvmlInit`` raised)."""
    code = getattr(exc, "value", None)
    if code == _LIBRARY_NOT_FOUND:
        return model.NO_DRIVER
    if code == _DRIVER_NOT_LOADED:
        return "NVIDIA driver not loaded"
    if code == _NO_PERMISSION:
        return "no permission to use NVML"
    return f"NVML error: {exc}"


class _NA:
    def __repr__(self) -> str:
        return "NA"


NA = _NA()  # "not supported": the call said so, or the binding lacks the function


def probe(nvml: Any, *, source: model.Source | None = None, health: bool = True) -> model.Topology:
    """Read the machine through ``nvml``; ``nvmlInit`` errors propagate as the NVMLError they are.
    ``health``: each GPU's health facts too (else unknown: no run asked them)."""
    nvml.nvmlInit()
    try:
        return _Reader(nvml, health).topology(source)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass  # the facts are read; a failing shutdown must not lose them


def _mask(words) -> int:
    """A ctypes bitmask array (64 bits per word, lowest first) as one int."""
    mask = 0
    for i, word in enumerate(words):
        mask |= int(word) << (64 * i)
    return mask


def cpu_list(mask: int) -> str | None:
    """A CPU bitmask as nvidia-smi prints it: ``0-23,48-71`` (None when empty)."""
    bits = format(mask, "b")[::-1]  # bit i is CPU i
    runs = ((m.start(), m.end() - 1) for m in re.finditer("1+", bits))
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs) or None


def _text(value: Any) -> str:
    # nvidia-ml-py <= 11.495 returns bytes for strings and struct fields
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _cuda_version(value: int) -> str:
    return f"{value // 1000}.{value % 1000 // 10}"  # 12040 -> "12.4"


def _worse(x: model.P2PStatus, y: model.P2PStatus) -> model.P2PStatus:
    """The pair's status from both directions: a refusal beats unknown beats OK."""
    if x is y or y is model.P2PStatus.OK:
        return x
    if x is model.P2PStatus.OK or x is model.P2PStatus.UNKNOWN:
        return y
    return x


class _GpuLinks:
    """What the pair counts need from one GPU's NVLinks."""

    __slots__ = ("direct", "switch", "untyped", "ambiguous")

    def __init__(self) -> None:
        self.direct: dict[str, int] = {}  # lower-case remote bus id -> active links (not to a switch)
        self.switch = 0  # active links to an NVSwitch
        self.untyped: set[str] = set()  # remote bus ids of active links of unknown device type
        self.ambiguous = False  # an active link (or one whose state failed) leads nobody knows where

    def add(self, link: model.NvLink, remote: str | None) -> None:
        """Count one link; ``remote`` is its remote bus id as NVML gave it (synthetic ones too)."""
        if not link.active:
            return
        if link.remote_type == "SWITCH":
            self.switch += 1
        elif remote is None:
            self.ambiguous = True
        else:
            key = remote.lower()
            self.direct[key] = self.direct.get(key, 0) + 1
            if link.remote_type == "unknown":
                self.untyped.add(key)

    def resolve(self, gpu_buses: set[str]) -> None:
        """A link of unknown type at a bus id that is no GPU's may lead to a switch: pairs unknown."""
        if self.untyped - gpu_buses:
            self.ambiguous = True


def counts_unknown(nvlinks: tuple[model.NvLink, ...], gpu_bus_ids) -> bool:
    """Whether a GPU's NVLinks leave the NVLink counts of all its pairs unknown (see the module doc)."""
    summary = _GpuLinks()
    for link in nvlinks:
        summary.add(link, link.remote_bus_id)
    summary.resolve({b.lower() for b in gpu_bus_ids if b})
    return summary.ambiguous


def nvlink_counts(
    nvlinks: Sequence[Sequence[tuple[model.NvLink, str | None]]], bus_ids: Sequence[str]
) -> dict[tuple[int, int], int | None]:
    """Every pair's NVLink count (``a < b``) as ``probe`` makes it from its GPUs' links: ``nvlinks[k]``
    lists GPU k's links as read, each with its remote bus id as NVML gave it (synthetic ones too);
    ``bus_ids[k]`` is GPU k's own (synthetic where unknown). A recorded machine's links are counted
    here, so that its pairs say what NVML would say of those links."""
    gpu_buses = {b.lower() for b in bus_ids if b}
    summaries = []
    for links in nvlinks:
        summary = _GpuLinks()
        for link, remote in links:
            summary.add(link, remote)
        summary.resolve(gpu_buses)
        summaries.append(summary)
    n = len(summaries)
    return {(a, b): _count(summaries[a], summaries[b], bus_ids[b]) for a in range(n) for b in range(a + 1, n)}


class _Reader:
    def __init__(self, nvml: Any, with_health: bool = True):
        self.nvml = nvml
        self.with_health = with_health
        self.error = nvml.NVMLError
        self.unsupported = tuple(
            c
            for c in (
                getattr(nvml, "NVMLError_NotSupported", None),
                getattr(nvml, "NVMLError_FunctionNotFound", None),
                getattr(nvml, "NVMLLibraryMismatchError", None),
            )
            if c is not None
        )
        self.fns: dict[str, Any] = {}
        self.failures: dict[tuple[str, str], list] = {}  # (function, error) -> [first place, count]

    # -- the choke point ------------------------------------------------------------------------

    def call(self, name: str, *args: Any) -> Any:
        """The value, ``NA`` (not supported / no such function), or the NVMLError (returned, not raised)."""
        fn = self.fns.get(name)
        if fn is None:
            fn = self.fns[name] = getattr(self.nvml, name, None) or _missing
        try:
            return fn(*args)
        except self.unsupported:
            return NA
        except self.error as exc:
            return exc

    def fact(self, where: str, name: str, *args: Any) -> Any:
        """A value, or None when NVML cannot give it (other errors leave a warning)."""
        value = self.call(name, *args)
        if value is NA:
            return None
        if isinstance(value, self.error):
            self.failed(where, name, value)
            return None
        return value

    def failed(self, where: str, name: str, exc: BaseException) -> None:
        entry = self.failures.setdefault((name, str(exc)), [where, 0])
        entry[1] += 1

    def warnings(self) -> tuple[str, ...]:
        return tuple(
            f"{name} failed for {where}: {err}" + (f" (and {n - 1} more)" if n > 1 else "")
            for (name, err), (where, n) in self.failures.items()
        )

    # -- the machine ----------------------------------------------------------------------------

    def topology(self, source: model.Source | None) -> model.Topology:
        driver = self.fact("the system", "nvmlSystemGetDriverVersion")
        cuda = self.fact("the system", "nvmlSystemGetCudaDriverVersion")
        count = self.fact("the system", "nvmlDeviceGetCount")
        problem = None if count is not None else "NVML could not count the GPUs"
        handles, raw_bus, gpus, nvlinks = [], [], [], []
        for i in range(count or 0):
            handle = self.fact(f"GPU{i}", "nvmlDeviceGetHandleByIndex", i)
            gpu, bus, own = self.gpu(i, handle) if handle is not None else (model.Gpu(i, nvml_index=i), None, None)
            handles.append(handle)
            raw_bus.append(bus)
            gpus.append(gpu)
            nvlinks.append(own)
        links = self.pairs(handles, raw_bus, nvlinks)
        return model.Topology(
            gpus=tuple(gpus),
            links=tuple(links),
            source=source or model.Source("nvml"),
            driver_version=None if driver is None else _text(driver),
            cuda_driver_version=None if cuda is None else _cuda_version(cuda),
            hostname=runtime.hostname() if source is None else None,  # a given source: the caller fills it
            problem=problem,
            warnings=self.warnings(),
        )

    def gpu(self, i: int, h: Any) -> tuple[model.Gpu, str | None, _GpuLinks]:
        where = f"GPU{i}"
        f = self.fact
        name, uuid = f(where, "nvmlDeviceGetName", h), f(where, "nvmlDeviceGetUUID", h)
        pci = f(where, "nvmlDeviceGetPciInfo", h)
        bus = _text(pci.busId) or None if pci is not None else None
        memory = f(where, "nvmlDeviceGetMemoryInfo", h)
        cc = f(where, "nvmlDeviceGetCudaComputeCapability", h)
        # Enough 64-bit words for every CPU here, and at least 1024 CPUs (a recorded machine may be bigger).
        words = (max(os.cpu_count() or 1, 1024) + 63) // 64
        cpus = f(where, "nvmlDeviceGetCpuAffinity", h, words)
        nvlinks, links = self.nvlinks(where, h)
        mig = f(where, "nvmlDeviceGetMigMode", h)  # [current, pending]: the current mode is the one in force
        mode = f(where, "nvmlDeviceGetComputeMode", h)
        gpu = model.Gpu(
            index=i,
            nvml_index=i,
            name=None if name is None else _text(name),
            uuid=None if uuid is None else _text(uuid),
            pci_bus_id=None if bus is None or is_synthetic_bus_id(bus) else bus,
            numa_node=self.numa_node(where, h),
            cpu_affinity=None if cpus is None else cpu_list(_mask(cpus)),
            pcie_gen_current=f(where, "nvmlDeviceGetCurrPcieLinkGeneration", h),
            pcie_gen_max=f(where, "nvmlDeviceGetMaxPcieLinkGeneration", h),
            pcie_width_current=f(where, "nvmlDeviceGetCurrPcieLinkWidth", h),
            pcie_width_max=f(where, "nvmlDeviceGetMaxPcieLinkWidth", h),
            memory_total_bytes=None if memory is None else int(memory.total),
            compute_capability=None if cc is None else f"{cc[0]}.{cc[1]}",
            nvlinks=nvlinks,
            mig=None if mig is None else mig[0] == _MIG_ENABLE,
            compute_mode=model.COMPUTE_MODES[mode] if mode in range(len(model.COMPUTE_MODES)) else None,
            fabric=self.fabric(where, h),
            health=self.health(h) if self.with_health else None,
        )
        return gpu, bus, links

    def health(self, h: Any) -> model.GpuHealth | None:
        """The GPU's health facts (``core.health`` judges them), each None where NVML does not give it.
        Signatures as pynvml 13.615.71 has them: ``nvmlDeviceGetTotalEccErrors(handle, errorType,
        counterType)`` a count, ``nvmlDeviceGetRemappedRows(device)`` the tuple (corrRows, uncRows,
        isPending, failureOccurred), ``...RetiredPagesPendingStatus`` and ``...PersistenceMode`` an
        ``nvmlEnableState_t`` value, the versions strings (bytes before 11.515). A call that fails leaves
        its fact unknown without a warning: the health item says what was not reported, and an error
        here (a vGPU guest's, a MIG GPU's) says nothing against the machine's other facts."""
        rows = self.quiet("nvmlDeviceGetRemappedRows", h)
        pending = self.quiet("nvmlDeviceGetRetiredPagesPendingStatus", h)
        persistence = self.quiet("nvmlDeviceGetPersistenceMode", h)
        vbios, inforom = self.quiet("nvmlDeviceGetVbiosVersion", h), self.quiet("nvmlDeviceGetInforomImageVersion", h)
        facts = model.GpuHealth(
            ecc_uncorrected_volatile=self.quiet("nvmlDeviceGetTotalEccErrors", h, _UNCORRECTED, _VOLATILE_ECC),
            ecc_uncorrected_aggregate=self.quiet("nvmlDeviceGetTotalEccErrors", h, _UNCORRECTED, _AGGREGATE_ECC),
            remapped_rows_pending=None if rows is None else bool(rows[2]),
            remapping_failed=None if rows is None else bool(rows[3]),
            retired_pages_pending=None if pending is None else pending == _ENABLED,
            clocks_event_reasons=self.clocks_events(h),
            persistence_mode=None if persistence is None else persistence == _ENABLED,
            vbios_version=None if vbios is None else _text(vbios) or None,
            inforom_version=None if inforom is None else _text(inforom) or None,
        )
        return facts if facts.known else None

    def clocks_events(self, h: Any) -> int | None:
        """What holds the GPU's clocks down now (``nvmlClocksEventReason*``; the older name of the call
        where the binding or driver lacks the new one). A reason the health check judges is kept only
        where it is still set a moment later: nvml.h says hardware slowdown "may be also reported during
        PState or clock change"."""
        for name in CLOCKS_EVENT_CALLS:
            first = self.quiet(name, h)
            if first is None:
                continue
            if not first & health.JUDGED_REASONS:
                return first
            time.sleep(CLOCKS_RECHECK_S)
            again = self.quiet(name, h)
            return None if again is None else again & (first | ~health.JUDGED_REASONS)
        return None

    def quiet(self, name: str, *args: Any) -> Any:
        """A value, or None where NVML does not give it, with no warning (``health``)."""
        value = self.call(name, *args)
        return None if value is NA or isinstance(value, self.error) else value

    def fabric(self, where: str, h: Any) -> model.Fabric | None:
        """The GPU's NVLink fabric registration (``FABRIC_CALLS``), or None where NVML gives none: the
        function or its struct is missing (a driver or binding before it), or NotSupported (nvml.h: "If
        device doesn't support gpu fabric"); another error leaves a warning and only this fact unknown.
        Both calls take a caller-allocated struct by reference and return 0 (pynvml passes the argument
        to the C function as given: ``ctypes.byref``). A binding whose struct is not the C layout (12.535
        and 12.575's ``c_nvmlGpuFabricInfo_t`` has an 80-byte clusterUuid where the C struct has 16,
        so every later field would be read at the wrong offset) is not used."""
        for name, struct in FABRIC_CALLS:
            cls = getattr(self.nvml, struct, None)
            if cls is None or not _c_layout(cls):
                continue
            info = cls()
            got = self.call(name, h, ctypes.byref(info))
            if got is NA:
                continue
            if isinstance(got, self.error):
                self.failed(where, name, got)
                return None
            return _fabric(info, self.nvml)
        return None

    def numa_node(self, where: str, h: Any) -> int | None:
        """The CPU-side NUMA node the GPU is near (nvidia-smi's "NUMA Affinity"). Not
        nvmlDeviceGetNumaNodeId: on Grace that is the GPU's own memory node ("GPU NUMA ID")."""
        words = self.fact(where, "nvmlDeviceGetMemoryAffinity", h, 16, 0)  # 1024 nodes, NVML_AFFINITY_SCOPE_NODE
        mask = 0 if words is None else _mask(words)
        return mask.bit_length() - 1 if mask and not mask & (mask - 1) else None  # exactly one node

    def nvlinks(self, where: str, h: Any) -> tuple[tuple[model.NvLink, ...], _GpuLinks]:
        """Every NVLink, looping as DCGM does: InvalidArgument ends the links, NotSupported skips one."""
        found, summary = [], _GpuLinks()
        limit = max(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", 0), NVLINK_MAX_LINKS_NEWEST)
        for k in range(limit):
            state = self.call("nvmlDeviceGetNvLinkState", h, k)
            if state is NA:
                continue  # not this link (a GPU without NVLink answers so for every link)
            if isinstance(state, self.error):
                if state.value == _INVALID_ARGUMENT:
                    break  # past the GPU's last link
                self.failed(f"{where} NVLink {k}", "nvmlDeviceGetNvLinkState", state)
                summary.ambiguous = True
                continue
            if state != 1:  # not NVML_FEATURE_ENABLED: a link that is down leads nowhere; ask nothing of it
                found.append(model.NvLink(link=k, active=False))
                continue
            # NCCL (src/graph/xml.cc ncclTopoGetXmlFromGpu, v2.30.7) asks each link's P2P capability
            # (skipping a link without it; its comment says the call "should have trained the link"),
            # then its state, then the remote PCI info of an active link, and never the remote device
            # type: it takes the remote's PCI class from the OS (an NVSwitch where it cannot). Here, as
            # there, nothing is asked past a link that is down; NVML's remote type comes before the PCI
            # info, which is not asked of a switch: a switch may not be visible at all (inside a VM),
            # and its bus id counts for nothing here. The capability is not asked: the counts follow
            # nvidia-smi topo -m (module doc), not NCCL's graph.
            at = f"{where} NVLink {k}"
            remote_type = NVLINK_DEVICE_TYPES.get(self.fact(at, "nvmlDeviceGetNvLinkRemoteDeviceType", h, k), "unknown")
            remote = None
            if remote_type != "SWITCH":
                pci = self.fact(at, "nvmlDeviceGetNvLinkRemotePciInfo", h, k)
                remote = _text(pci.busId) or None if pci is not None else None
            version = self.fact(at, "nvmlDeviceGetNvLinkVersion", h, k)
            link = model.NvLink(
                link=k,
                active=True,
                remote_bus_id=None if remote is None or is_synthetic_bus_id(remote) else remote,
                remote_type=remote_type,
                version=NVLINK_VERSIONS.get(version),
            )
            found.append(link)
            summary.add(link, remote)
        return tuple(found), summary

    # -- the pairs ------------------------------------------------------------------------------

    def pairs(self, handles: list, raw_bus: list, nvlinks: list) -> list[model.Link]:
        gpu_buses = {b.lower() for b in raw_bus if b}
        for links in nvlinks:
            if links is not None:
                links.resolve(gpu_buses)
        out = []
        n = len(handles)
        caps = tuple(P2P_CAPS_INDEX.items())
        for a in range(n):
            for b in range(a + 1, n):
                ha, hb = handles[a], handles[b]
                where = f"GPU{a}-GPU{b}"
                if ha is None or hb is None:
                    out.append(model.Link(a, b, pcie=None, nvlinks=None))
                    continue
                level = self.fact(where, "nvmlDeviceGetTopologyCommonAncestor", ha, hb)
                p2p = {}
                for cap, index in caps:
                    ab = self.call("nvmlDeviceGetP2PStatus", ha, hb, index)
                    ba = self.call("nvmlDeviceGetP2PStatus", hb, ha, index)
                    p2p[cap] = _worse(self._status(where, ab), self._status(where, ba))
                out.append(
                    model.Link(
                        a,
                        b,
                        pcie=model.NVML_LEVEL_TO_CLASS.get(level),
                        nvlinks=_count(nvlinks[a], nvlinks[b], raw_bus[b]),
                        p2p=model.P2P(**p2p),
                    )
                )
        return out

    def _status(self, where: str, value: Any) -> model.P2PStatus:
        if value is NA:
            return model.P2PStatus.UNKNOWN
        if isinstance(value, self.error):
            self.failed(where, "nvmlDeviceGetP2PStatus", value)
            return model.P2PStatus.UNKNOWN
        return model.P2PStatus.from_nvml(value)


def _c_layout(cls: Any) -> bool:
    """Whether a binding's fabric struct has the C layout's 16-byte clusterUuid (see ``_Reader.fabric``)."""
    field = getattr(cls, "clusterUuid", None)
    return field is not None and getattr(field, "size", None) == _FABRIC_UUID_LEN


def _fabric(info: Any, nvml: Any) -> model.Fabric | None:
    """A filled fabric struct as the model holds it. The status, clique, cluster and health mask are
    read only for a completed registration (nvml.h: the status "must be checked only if Probe state returns
    complete"); the cluster UUID from the struct's raw bytes (a binding's ``c_char`` array decodes
    them as text and can fail: nvml-nccl-torch.md §0), all zeros being none."""
    state = int(info.state)
    if not 0 <= state < len(model.FABRIC_STATES):
        return None  # a state this code does not know: unknown, not guessed
    if state != _FABRIC_COMPLETED:
        return model.Fabric(model.FABRIC_STATES[state])
    code = int(info.status)
    if code == 0:  # NVML_SUCCESS
        status = model.FABRIC_SUCCESS
    else:
        try:
            status = str(nvml.NVMLError(code))
        except Exception:  # an NVMLError that cannot word itself still has its number
            status = f"NVML error {code}"
    field = type(info).clusterUuid
    raw = bytes(info)[field.offset : field.offset + _FABRIC_UUID_LEN]
    clique = getattr(info, "cliqueId", None)
    # healthMask: v2 and later (nvml.h: "GPU Fabric health Status Mask. See NVML_GPU_FABRIC_HEALTH_MASK_*");
    # the older struct has none. 0 reports every field "not supported": no health said, as where none.
    mask = int(getattr(info, "healthMask", 0) or 0) & 0xFFFFFFFF
    return model.Fabric(
        model.FABRIC_STATES[state],
        status,
        None if clique is None else int(clique),
        str(uuids.UUID(bytes=raw)) if any(raw) else None,
        mask or None,
    )


def _count(a: _GpuLinks | None, b: _GpuLinks | None, b_bus: str | None) -> int | None:
    """NVLinks between a and b as nvidia-smi counts them (from a's side), or None when unknowable."""
    if a is None or b is None or a.ambiguous or b.ambiguous:
        return None
    if b_bus is None:
        direct = None if a.direct else 0
    else:
        direct = a.direct.get(b_bus.lower(), 0)
    return None if direct is None else direct + min(a.switch, b.switch)


def _missing(*args: Any) -> Any:
    return NA
