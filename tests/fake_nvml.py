"""A fake ``pynvml`` module that serves a recorded machine (a ``model.Topology``): the test double of
``nvml`` (the contract tests, the emulated GPU host of ``tests/emulated_host``, and the tests that hold
``named_machine.as_nvml_reads`` to what NVML's code path reads of a profile). No named machine is read
through it: that needs no ``pynvml``.

``make_fake_pynvml(topology)`` returns a module that code written against nvidia-ml-py can use as is.
It reuses the real ``pynvml``'s constants, ``NVMLError`` hierarchy and ctypes types (so
``except pynvml.NVMLError_NotSupported`` catches the fake's errors too) and reproduces what the
reference (``nvml-nccl-torch.md`` §0, §1.9) says the real module does:

* calls before ``nvmlInit()`` (or after the last ``nvmlShutdown()``) raise ``NVMLError_Uninitialized``;
  init is reference-counted; ``init_error`` makes ``nvmlInit`` raise e.g. ``NVMLError_LibraryNotFound``;
* ``NVML_P2P_CAPS_INDEX_READ`` is the tuple ``(0,)`` and passing it to ``nvmlDeviceGetP2PStatus``
  raises ``ctypes.ArgumentError`` (an untyped ctypes call cannot convert a tuple);
* handles are fresh ``LP_struct_c_nvmlDevice_t`` pointers: two handles to one GPU are not ``==``;
* ``nvmlDeviceGetPciInfo`` / ``...NvLinkRemotePciInfo`` return ``nvmlPciInfo_t`` structs (busId, legacy
  busId, domain, bus, device filled from the bus id; pciDeviceId unknown, so 0), ``nvmlDeviceGetMemoryInfo``
  ``c_nvmlMemory_t``, ``nvmlDeviceGetCpuAffinity`` / ``...MemoryAffinity`` ``c_ulonglong`` arrays,
  ``nvmlDeviceGetCudaComputeCapability`` a tuple; NVLink versions are the encoded ``NVML_NVLINK_VERSION_*``;
* NVLink getters raise ``InvalidArgument`` past a GPU's last link and ``NotSupported`` for a link the
  recording does not list (DCGM skips those) and for every link of a GPU without NVLink;
* ``nvmlDeviceGetMigMode`` returns the list ``[current, pending]`` (both the recorded mode) and raises
  ``NotSupported`` where the recording says nothing, as a GPU without MIG does;
  ``nvmlDeviceGetComputeMode`` returns the ``NVML_COMPUTEMODE_*`` value of the recorded mode;
* ``nvmlDeviceGetGpuFabricInfoV`` / ``nvmlDeviceGetGpuFabricInfo`` take a caller-allocated struct by
  reference (``ctypes.byref``; a struct passed as is raises ``ctypes.ArgumentError``, as ctypes cannot
  hand it to the C pointer parameter the way the caller means), fill it as the C library does (the C
  layout: ``clusterUuid[16]``, whatever the binding's struct says; ``V``'s ``healthMask`` the
  recorded ``health_mask``, 0 where none is recorded) and return 0; ``V`` refuses a
  struct whose ``version`` is not v2 or v3 (``ArgumentVersionMismatch``). A GPU whose recording has no
  ``fabric`` raises ``NotSupported`` (nvml.h: a device without GPU fabric). Bindings before 12.535
  have neither function, before 12.575 no ``V``; 12.535 and 12.575's ``c_nvmlGpuFabricInfo_t`` have
  the 80-byte clusterUuid they had (12.535: ``partitionId`` for ``cliqueId``) and 12.575's
  ``c_nvmlGpuFabricInfoV_t`` a ``c_char * 16`` one (nvml-nccl-torch.md §1.6);
* the health calls (``core.health``) return what the GPU's ``health`` records, in the real
  wrappers' forms: ``nvmlDeviceGetTotalEccErrors`` a count (uncorrected only; corrected errors are
  not recorded), ``nvmlDeviceGetRemappedRows`` the tuple (0, 0, isPending, failureOccurred),
  ``...RetiredPagesPendingStatus`` and ``...PersistenceMode`` an ``nvmlEnableState_t`` value,
  ``...CurrentClocksEventReasons`` (and its older name) the mask, the versions strings;
* ``nvmlDeviceGetNumaNodeId`` raises ``NotSupported`` (as on x86; the NUMA node comes from
  ``nvmlDeviceGetMemoryAffinity``); a common ancestor or P2P query for a GPU with itself is
  ``InvalidArgument`` (the real answer is unverified);
* ``binding_version`` below 11.515 returns ``bytes`` for strings and struct fields; functions a binding
  lacks are absent (``nvmlDeviceGetGpuMaxPcieLinkGeneration`` < 12.535, ``nvmlDeviceGetNumaNodeId`` < 12.575)
  and ``NVML_NVLINK_MAX_LINKS`` / ``NVML_P2P_CAPS_INDEX_UNKNOWN`` take that binding's values.

A fact the topology does not know (``None``) is ``NotSupported``; a P2P status it does not know is
``NVML_P2P_STATUS_UNKNOWN``. GPUs are enumerated in ``nvml_index`` order (renumbered 0..n-1; a GPU
without one keeps its place by ``index``). Three things a recording may lack are synthesized:

* a GPU without a PCI bus id gets ``nvml.synthetic_bus_id(nvml_index)`` (the all-ones PCI domain),
  which ``nvml.probe`` reports back as ``None``;
* a GPU that lists no NVLinks but has pairs with a known count (``nvidia-smi topo -m`` text: ``NV12``
  and no per-link data) gets that many active links whose remote bus id is the peer's (a GPU link,
  version unknown); when one GPU would need more than 18 (the most any GPU has), the links go to
  NVSwitches: each GPU gets as many switch links as its best pair's count, which gives every pair
  min(a, b) -- when that fits every pair's count (a box whose GPU lost its links included); when it
  does not, those GPUs' NVLink states fail, leaving their counts unknown. These links show in the
  probed GPUs' ``nvlinks`` (``named_machine.as_nvml_reads`` keeps the recording's: none);
* a GPU that lists no NVLinks but is in a pair whose count is unknown gets an NVLink state that fails
  (``NVMLError_Unknown``), which makes all of its pairs' counts unknown in a probe (chosen to cover
  the unknown pairs with as few GPUs as it can).

So ``nvml.probe(make_fake_pynvml(t))`` gives back ``t``'s GPUs and links (minus ``cuda_peer``, which
NVML does not know) for any topology a probe recorded, listed in NVML order.
"""

from __future__ import annotations

import ctypes
import re
import types
import uuid
from typing import Any

from pytest_gputopo.core import model
from pytest_gputopo.core.cpus import cpu_mask
from pytest_gputopo.probe.nvml import NVLINK_MAX_LINKS_NEWEST, NVLINK_VERSIONS, counts_unknown, synthetic_bus_id

_VERSION_CODES = {v: k for k, v in NVLINK_VERSIONS.items()}
_DEVICE_TYPE_CODES = {"GPU": 0, "IBMNPU": 1, "SWITCH": 2}  # anything else: 0xFF (unknown)
_BUS_RE = re.compile(r"^([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$")
_UNKNOWN_NVLINK = "unknown"  # a GPU's NVLink state fails with NVMLError_Unknown
_MOST_NVLINKS = 18  # the most NVLinks one GPU has (Hopper, Blackwell): a GPU needing more sits on NVSwitches


def make_fake_pynvml(
    topology: model.Topology, *, binding_version: str = "13.615.71", init_error: str | None = None
) -> types.ModuleType:
    """A ``pynvml``-like module serving ``topology``; ``init_error`` names an NVMLError class suffix
    (``"LibraryNotFound"``, ``"DriverNotLoaded"``, ``"NoPermission"``) that ``nvmlInit`` raises."""
    import pynvml as real  # a runtime dependency; imported here so loading the plugin stays light

    version = tuple(int(p) for p in re.findall(r"\d+", binding_version)[:3])
    mod: Any = types.ModuleType("pynvml", __doc__)  # pynvml as built here: its names set at run time
    mod.__file__ = __file__
    for name, value in vars(real).items():
        if name.startswith(("NVML_", "NVMLError")) or name in (
            "nvmlExceptionClass",
            "NVMLLibraryMismatchError",
            "struct_c_nvmlDevice_t",
            "c_nvmlDevice_t",
            "nvmlPciInfo_t",
            "c_nvmlMemory_t",
            "c_nvmlMemory_v2_t",
            "nvmlMemory_v2",
            "c_nvmlGpuFabricInfo_t",
            "c_nvmlGpuFabricInfoV_t",
            "c_nvmlGpuFabricInfo_v2_t",
            "nvmlGpuFabricInfo_v2",
            "nvmlGpuFabricInfo_v3",
        ):
            setattr(mod, name, value)
    if version < (12, 535):
        for name in ("c_nvmlGpuFabricInfo_t", "c_nvmlGpuFabricInfoV_t", "c_nvmlGpuFabricInfo_v2_t"):
            delattr(mod, name)
    elif version < (13,):
        mod.c_nvmlGpuFabricInfo_t = _old_fabric_struct("partitionId" if version < (12, 575) else "cliqueId")
        if version < (12, 575):
            del mod.c_nvmlGpuFabricInfoV_t, mod.c_nvmlGpuFabricInfo_v2_t
        else:
            mod.c_nvmlGpuFabricInfoV_t = mod.c_nvmlGpuFabricInfo_v2_t = _FabricInfoV12
    if version < (12,):
        mod.NVML_NVLINK_MAX_LINKS = 12
    elif version < (13,):
        mod.NVML_NVLINK_MAX_LINKS = 18
    if version < (12, 575):
        mod.NVML_P2P_CAPS_INDEX_UNKNOWN = 6  # a binding bug; the C value is 5
    old = version < (11, 515)
    if old:
        # 11.495 had no _PrintableStructure.__getattribute__: char fields come back as bytes
        mod.nvmlPciInfo_t = type("nvmlPciInfo_t", (real.nvmlPciInfo_t,), {"__getattribute__": object.__getattribute__})
    if init_error is not None:
        cls = getattr(real, "NVMLError_" + init_error, None)
        if not (isinstance(cls, type) and issubclass(cls, real.NVMLError)):
            raise ValueError(f"unknown NVML error {init_error!r} (e.g. LibraryNotFound, DriverNotLoaded, NoPermission)")

    fake = _FakeNvml(real, mod, topology, old, init_error)
    skip: set[str] = set()
    if version < (12, 535):
        skip.update(("nvmlDeviceGetGpuMaxPcieLinkGeneration", "nvmlDeviceGetGpuFabricInfo"))
    if version < (12, 575):
        skip.update(("nvmlDeviceGetNumaNodeId", "nvmlDeviceGetGpuFabricInfoV"))
    for name in dir(_FakeNvml):
        if name.startswith("nvml") and name not in skip:
            setattr(mod, name, getattr(fake, name))
    if old:
        mod.nvmlDeviceGetMemoryInfo = lambda handle: fake.nvmlDeviceGetMemoryInfo(handle)  # no version kwarg yet
    return mod


# The fabric structs as the C library fills them (nvml.h: clusterUuid[NVML_GPU_FABRIC_UUID_LEN = 16]).
class _CFabricInfo(ctypes.Structure):
    _fields_ = [
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_uint),
    ]


class _CFabricInfoV(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_uint),
        ("healthMask", ctypes.c_uint),
    ]


_FABRIC_V2, _FABRIC_V3 = 0x02000024, 0x3000028  # nvmlGpuFabricInfo_v2 / _v3


def _old_fabric_struct(clique: str) -> type:
    """``c_nvmlGpuFabricInfo_t`` as nvidia-ml-py 12.535 (``partitionId``) and 12.575 (``cliqueId``) define it."""
    return type(
        "c_nvmlGpuFabricInfo_t",
        (ctypes.Structure,),
        {
            "_fields_": [
                ("clusterUuid", ctypes.c_char * 80),
                ("status", ctypes.c_uint),
                (clique, ctypes.c_uint),
                ("state", ctypes.c_uint),
            ]
        },
    )


class _FabricInfoV12(ctypes.Structure):
    """nvidia-ml-py 12.575's ``c_nvmlGpuFabricInfoV_t``: a ``c_char`` clusterUuid, version preset."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_char * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_uint),
        ("healthMask", ctypes.c_uint),
    ]

    def __init__(self) -> None:
        super().__init__(version=_FABRIC_V2)


def _words(mask: int, size: int) -> Any:
    array = (ctypes.c_ulonglong * size)()
    for i in range(size):
        array[i] = (mask >> (64 * i)) & 0xFFFFFFFFFFFFFFFF
    return array


def _status_code(real: Any, status: str | None) -> int:
    """A recorded fabric status as the NVML return code that nvidia-ml-py words so."""
    if status in (None, model.FABRIC_SUCCESS):
        return 0
    for code, text in real.NVMLError._errcode_to_string.items():
        if text == status:
            return code
    named = getattr(real, "NVML_ERROR_" + re.sub(r"\W+", "_", status.strip()).upper(), None)  # "Insufficient Resources"
    return named if isinstance(named, int) else real.NVML_ERROR_UNKNOWN


def _cover(pairs: list[tuple[int, int]], eligible: set[int]) -> set[int]:
    """Few GPUs (from ``eligible``) that touch every pair: greedy, most pairs first."""
    chosen: set[int] = set()
    left = list(pairs)
    while left:
        counts: dict[int, int] = {}
        for p in left:
            for g in p:
                if g in eligible:
                    counts[g] = counts.get(g, 0) + 1
        if not counts:
            break
        best = max(sorted(counts), key=counts.__getitem__)
        chosen.add(best)
        left = [p for p in left if best not in p]
    return chosen


class _FakeNvml:
    """The machine's tables, precomputed so that each call is a lookup."""

    def __init__(self, real: Any, mod: types.ModuleType, t: model.Topology, old: bool, init_error: str | None):
        self.real, self.mod, self.old = real, mod, old
        self.init_error = getattr(real, f"NVMLError_{init_error}") if init_error else None
        self.refcount = 0
        self.topology_driver, self.topology_cuda = t.driver_version, t.cuda_driver_version
        self.NotSupported = real.NVMLError_NotSupported
        self.InvalidArgument = real.NVMLError_InvalidArgument
        self.Uninitialized = real.NVMLError_Uninitialized
        self.max_links = mod.NVML_NVLINK_MAX_LINKS

        # NVML order: by nvml_index, a GPU without one keeps its place by index
        order = sorted(
            range(len(t.gpus)),
            key=lambda p: (t.gpus[p].nvml_index if t.gpus[p].nvml_index is not None else t.gpus[p].index, p),
        )
        self.gpus = [t.gpus[p] for p in order]
        nvml_of = {t.gpus[p].index: k for k, p in enumerate(order)}  # topology index -> NVML index
        self.bus = [g.pci_bus_id or synthetic_bus_id(k) for k, g in enumerate(self.gpus)]
        self.structs = [real.struct_c_nvmlDevice_t() for _ in self.gpus]  # the handles point at these
        self.by_address = {ctypes.addressof(s): k for k, s in enumerate(self.structs)}
        self.pci_bytes: dict[str, bytes] = {}

        n = len(self.gpus)
        unknown_status = model.P2PStatus.UNKNOWN.nvml_value
        self.level: dict[tuple[int, int], int | None] = {}
        self.p2p: dict[tuple[int, int], tuple[int, ...]] = {}
        counts: dict[tuple[int, int], int | None] = {}
        for ln in t.links:
            if ln.a not in nvml_of or ln.b not in nvml_of:
                continue
            a, b = nvml_of[ln.a], nvml_of[ln.b]
            level = model.CLASS_TO_NVML_LEVEL.get(ln.pcie)  # type: ignore[arg-type]  # None: no level
            status = tuple(getattr(ln.p2p, cap).nvml_value for cap in model.P2P_CAPS)
            status += (unknown_status,)  # NVML_P2P_CAPS_INDEX_PCI (PROP): not recorded
            for key in ((a, b), (b, a)):
                self.level[key] = level
                self.p2p[key] = status
                counts[key] = ln.nvlinks
        self.links = self._links(n, counts)

    def _links(self, n: int, counts: dict) -> list:
        """Per GPU: a list indexed by link number (an NvLink, or None: NotSupported), or a marker."""
        links: list[Any] = []
        for g in self.gpus:
            if g.nvlinks:
                table: list = [None] * (max(ln.link for ln in g.nvlinks) + 1)
                for ln in g.nvlinks:
                    table[ln.link] = ln
                links.append(table)
            else:
                links.append(None)  # no NVLink, unless synthesized below
        bare = {k for k in range(n) if links[k] is None}
        # unknown counts that the recorded links do not already explain
        explained = {k for k in range(n) if k not in bare and counts_unknown(self.gpus[k].nvlinks, self.bus)}
        unknown = [(a, b) for (a, b), c in counts.items() if a < b and c is None and not {a, b} & explained]
        for k in _cover(unknown, bare):
            links[k] = _UNKNOWN_NVLINK
            bare.discard(k)
        peers: dict[int, list[tuple[int, int]]] = {k: [] for k in bare}
        for (a, b), c in sorted(counts.items()):
            if c and a in peers:
                peers[a].append((b, c))
        limit = max(self.max_links, NVLINK_MAX_LINKS_NEWEST)  # where nvml.probe stops looking
        if any(sum(c for _, c in wanted) > min(_MOST_NVLINKS, limit) for wanted in peers.values()):
            # More links than a GPU has: they go to NVSwitches. Each GPU gets as many switch links as
            # its best pair has, which gives every pair min(a, b) -- when that is what the counts say
            # (a box whose GPU lost its links included); otherwise the counts are left unknown.
            switch = {k: max((c for _, c in wanted), default=0) for k, wanted in peers.items()}
            fits = all(
                min(switch[a], switch[b]) == (c or 0)
                for (a, b), c in counts.items()
                if a in switch and b in switch and c is not None
            )
            for k in peers:
                links[k] = (
                    [model.NvLink(i, True, None, "SWITCH") for i in range(switch[k])] if fits else _UNKNOWN_NVLINK
                )
            return links
        for k, wanted in peers.items():
            if wanted:
                remotes = [self.bus[peer] for peer, c in wanted for _ in range(c)]
                links[k] = [model.NvLink(i, True, bus, "GPU") for i, bus in enumerate(remotes)]
        return links

    # -- plumbing -------------------------------------------------------------------------------

    def _gpu(self, handle: Any) -> int:
        """The NVML index a handle points at (handles compare by identity, so by address here)."""
        if not self.refcount:
            raise self.Uninitialized()
        try:
            return self.by_address[ctypes.addressof(handle.contents)]
        except (AttributeError, TypeError, ValueError, KeyError):
            raise self.InvalidArgument() from None

    def _fact(self, value: Any) -> Any:
        if value is None:
            raise self.NotSupported()
        return value

    def _str(self, value: str | None) -> Any:
        value = self._fact(value)
        return value.encode() if self.old else value  # bindings before 11.515 return bytes

    def _pci(self, bus_id: str) -> Any:
        raw = self.pci_bytes.get(bus_id)
        if raw is None:
            info = self.mod.nvmlPciInfo_t()
            m = _BUS_RE.match(bus_id)
            if m:
                info.domain, info.bus, info.device = (int(m.group(i), 16) for i in (1, 2, 3))
                info.busIdLegacy = f"{info.domain & 0xFFFF:04X}:{info.bus:02X}:{info.device:02X}.0".encode()
            info.busId = bus_id.encode()
            raw = self.pci_bytes[bus_id] = bytes(info)
        return self.mod.nvmlPciInfo_t.from_buffer_copy(raw)  # a fresh struct per call, as the real one

    def _link(self, handle: Any, link: int) -> model.NvLink:
        table = self.links[self._gpu(handle)]
        if table is None:
            if 0 <= link < self.max_links:
                raise self.NotSupported()
            raise self.InvalidArgument()
        if table is _UNKNOWN_NVLINK:
            if link == 0:
                raise self.real.NVMLError_Unknown()
            raise self.InvalidArgument()
        if not 0 <= link < len(table):
            raise self.InvalidArgument()
        return self._fact(table[link])

    def _pair(self, table: dict, d1: Any, d2: Any) -> Any:
        try:
            return table[self._gpu(d1), self._gpu(d2)]
        except KeyError:
            raise self.InvalidArgument() from None

    # -- the module's functions -----------------------------------------------------------------

    def nvmlInitWithFlags(self, flags: int) -> None:
        if self.init_error is not None:
            raise self.init_error()
        self.refcount += 1

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> None:
        if not self.refcount:
            raise self.Uninitialized()
        self.refcount -= 1

    def nvmlSystemGetDriverVersion(self) -> Any:
        if not self.refcount:
            raise self.Uninitialized()
        return self._str(self.topology_driver)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        if not self.refcount:
            raise self.Uninitialized()
        m = re.match(r"^(\d+)\.(\d+)$", self.topology_cuda or "")
        if not m:
            raise self.NotSupported()
        return int(m.group(1)) * 1000 + int(m.group(2)) * 10

    nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion

    def nvmlDeviceGetCount(self) -> int:
        if not self.refcount:
            raise self.Uninitialized()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not self.refcount:
            raise self.Uninitialized()
        if not 0 <= index < len(self.gpus):
            raise self.InvalidArgument()
        return ctypes.pointer(self.structs[index])  # a new pointer object each time, as ctypes does

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: Any) -> Any:
        want = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
        return self._handle_where(self.bus, want.upper())

    def nvmlDeviceGetHandleByUUID(self, uuid: Any) -> Any:
        want = uuid.decode() if isinstance(uuid, bytes) else uuid
        return self._handle_where([g.uuid or "" for g in self.gpus], want.upper())

    def _handle_where(self, values: list, want: str) -> Any:
        if not self.refcount:
            raise self.Uninitialized()
        for k, value in enumerate(values):
            if value.upper() == want:
                return self.nvmlDeviceGetHandleByIndex(k)
        raise self.real.NVMLError_NotFound()

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._gpu(handle)

    def nvmlDeviceGetName(self, handle: Any) -> Any:
        return self._str(self.gpus[self._gpu(handle)].name)

    def nvmlDeviceGetUUID(self, handle: Any) -> Any:
        return self._str(self.gpus[self._gpu(handle)].uuid)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return self._pci(self.bus[self._gpu(handle)])

    nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        total = self._fact(self.gpus[self._gpu(handle)].memory_total_bytes)
        if version:
            return self.real.c_nvmlMemory_v2_t(version=version, total=total, free=total)
        return self.real.c_nvmlMemory_t(total=total, free=total, used=0)

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        cc = self.gpus[self._gpu(handle)].compute_capability
        m = re.match(r"^(\d+)\.(\d+)$", cc or "")
        if not m:
            raise self.NotSupported()
        return int(m.group(1)), int(m.group(2))

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        mig = int(self._fact(self.gpus[self._gpu(device)].mig))
        return [mig, mig]  # [current, pending]: a recording knows of no change pending a reset

    def nvmlDeviceGetComputeMode(self, handle: Any) -> int:
        return model.COMPUTE_MODES.index(self._fact(self.gpus[self._gpu(handle)].compute_mode))

    def nvmlDeviceGetCpuAffinity(self, handle: Any, cpuSetSize: int) -> Any:
        return _words(self._fact(cpu_mask(self.gpus[self._gpu(handle)].cpu_affinity)), cpuSetSize)

    def nvmlDeviceGetCpuAffinityWithinScope(self, handle: Any, cpuSetSize: int, scope: int) -> Any:
        return self.nvmlDeviceGetCpuAffinity(handle, cpuSetSize)

    def nvmlDeviceGetMemoryAffinity(self, handle: Any, nodeSetSize: int, scope: int) -> Any:
        node = self._fact(self.gpus[self._gpu(handle)].numa_node)
        return _words(1 << node, nodeSetSize)

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        self._gpu(handle)
        raise self.NotSupported()  # only where GPUs are NUMA nodes (Grace); a recording cannot tell

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._fact(self.gpus[self._gpu(handle)].pcie_gen_current)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._fact(self.gpus[self._gpu(handle)].pcie_gen_max)

    nvmlDeviceGetGpuMaxPcieLinkGeneration = nvmlDeviceGetMaxPcieLinkGeneration

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._fact(self.gpus[self._gpu(handle)].pcie_width_current)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._fact(self.gpus[self._gpu(handle)].pcie_width_max)

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        return self._fact(self._pair(self.level, device1, device2))

    def nvmlDeviceGetP2PStatus(self, device1: Any, device2: Any, p2pIndex: Any) -> int:
        if not isinstance(p2pIndex, int):
            # the real wrapper hands p2pIndex to an untyped ctypes call, which cannot convert a tuple
            raise ctypes.ArgumentError("argument 3: TypeError: Don't know how to convert parameter 3")
        status = self._pair(self.p2p, device1, device2)
        if not 0 <= p2pIndex < len(status):
            raise self.InvalidArgument()
        return status[p2pIndex]

    def _fabric_target(self, device: Any, info: Any) -> tuple[model.Fabric, Any]:
        fabric = self._fact(self.gpus[self._gpu(device)].fabric)
        target = getattr(info, "_obj", None)  # ctypes.byref(struct) -> the struct
        if target is None and isinstance(info, ctypes._Pointer):
            target = info.contents
        if not isinstance(target, ctypes.Structure):
            raise ctypes.ArgumentError("argument 2: the struct must be passed by reference (ctypes.byref)")
        return fabric, target

    def _fill_fabric(self, fabric: model.Fabric, out: Any) -> None:
        state = model.FABRIC_STATES.index(fabric.state)
        out.state = state
        if state == model.FABRIC_STATES.index("Completed"):
            out.status = _status_code(self.real, fabric.status)
            out.cliqueId = fabric.clique_id or 0
            if fabric.cluster_uuid:
                ctypes.memmove(out.clusterUuid, uuid.UUID(fabric.cluster_uuid).bytes, 16)
            if hasattr(out, "healthMask"):  # v2 and later; a mask not recorded reports no field (0)
                out.healthMask = fabric.health_mask or 0

    def _write(self, c_struct: Any, target: Any) -> None:
        ctypes.memmove(
            ctypes.addressof(target), ctypes.addressof(c_struct), min(ctypes.sizeof(c_struct), ctypes.sizeof(target))
        )

    def nvmlDeviceGetGpuFabricInfoV(self, device: Any, gpuFabricInfo: Any) -> int:
        fabric, target = self._fabric_target(device, gpuFabricInfo)
        version = ctypes.c_uint.from_buffer(target).value  # the C function reads the first field
        if version not in (_FABRIC_V2, _FABRIC_V3):
            raise self.real.NVMLError_ArgumentVersionMismatch()
        out = _CFabricInfoV(version=version)
        self._fill_fabric(fabric, out)
        self._write(out, target)
        return 0

    def nvmlDeviceGetGpuFabricInfo(self, device: Any, gpuFabricInfo: Any) -> int:
        fabric, target = self._fabric_target(device, gpuFabricInfo)
        out = _CFabricInfo()
        self._fill_fabric(fabric, out)
        self._write(out, target)
        return 0

    # -- health (core.health): what a GPU's recording does not say is NotSupported -----------------

    def _health(self, device: Any, field: str) -> Any:
        return self._fact(getattr(self.gpus[self._gpu(device)].health, field, None))

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        if errorType not in (0, 1) or counterType not in (0, 1):  # nvml.h: an invalid type is InvalidArgument
            raise self.InvalidArgument()
        if errorType == 0:  # corrected errors are not recorded
            raise self.NotSupported()
        return int(self._health(handle, ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate")[counterType]))

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        pending, failed = self._health(device, "remapped_rows_pending"), self._health(device, "remapping_failed")
        return (0, 0, int(pending), int(failed))  # (corrRows, uncRows, isPending, failureOccurred); counts not recorded

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int:
        return int(self._health(device, "retired_pages_pending"))  # NVML_FEATURE_ENABLED / DISABLED

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._health(handle, "clocks_event_reasons")

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        return int(self._health(handle, "persistence_mode"))

    def nvmlDeviceGetVbiosVersion(self, handle: Any) -> Any:
        return self._str(self._health(handle, "vbios_version"))

    def nvmlDeviceGetInforomImageVersion(self, handle: Any) -> Any:
        return self._str(self._health(handle, "inforom_version"))

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        return 1 if self._link(device, link).active else 0  # NVML_FEATURE_ENABLED / DISABLED

    def _up(self, device: Any, link: int) -> model.NvLink:
        """A link whose far end can be described: the driver describes nothing past a link that is
        down (an NVLink-capable PCIe card without a bridge reports every link disabled), and a
        query about it is an error -- as the issue's trial on real drivers saw (issue 8, item 8)."""
        found = self._link(device, link)
        if not found.active:
            raise self.real.NVMLError_Unknown()
        return found

    def nvmlDeviceGetNvLinkVersion(self, device: Any, link: int) -> int:
        return self._fact(_VERSION_CODES.get(self._up(device, link).version))  # type: ignore[arg-type]  # None: none

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> Any:
        return self._pci(self._fact(self._up(device, link).remote_bus_id))

    nvmlDeviceGetNvLinkRemotePciInfo_v2 = nvmlDeviceGetNvLinkRemotePciInfo

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        return _DEVICE_TYPE_CODES.get(self._up(handle, link).remote_type, 0xFF)
