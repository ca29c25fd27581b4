"""CUDA's own view of this host, asked of ``libcuda`` directly (no torch needed): the devices in CUDA's
order (by PCI bus id, which joins them to NVML's), which pairs can access each other as peers, and
which devices support multicast objects (what NCCL's NVLS algorithm and torch's symmetric memory rest
on). ``cuInit`` starts CUDA: this runs in the probe child only (``probe.host``), never in the user's
process.

Why the driver API and not torch: CUDA's runtime numbers devices as the driver does (both apply
CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER at initialisation), and ``torch.cuda.can_device_access_peer``
is ``cudaDeviceCanAccessPeer``, which is ``cuDeviceCanAccessPeer``; but importing torch costs seconds
on a GPU host, and the PCI fields of ``torch.cuda.get_device_properties`` exist only in recent
releases (``torch/csrc/cuda/Module.cpp`` registered ``_CudaDeviceProperties`` without ``pci_*`` for
years). The driver API has had every function used here since CUDA 4.0, the multicast attribute since
12.0.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

# cuda.h (CUDA 12.0+): "Device supports switch multicast and reduction operations". NCCL asks the same
# attribute in ncclNvlsInit (src/transport/nvls.cc) and takes NVLS only where it is 1.
CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132
CUDA_SUCCESS = 0
_UUID = re.compile(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


CUDA_UNKNOWN = "CUDA's view (device order, peer access, multicast) is unknown: "  # the probe child's warning


class CudaError(Exception):
    """CUDA cannot be asked at all here (no libcuda, ``cuInit`` refused): its facts stay unknown."""


@dataclass(frozen=True)
class CudaView:
    bus_ids: tuple[str, ...]  # NVML form, upper case, in CUDA order (cuda:0 first)
    peer: dict  # (a, b) with a < b, CUDA ordinals -> each can access the other as a peer
    multicast: dict  # bus id -> CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED; a device CUDA did not answer for is absent
    uuids: tuple = ()  # NVML form ("GPU-..."), in CUDA order, None where CUDA gave none; () when not asked

    def to_json(self) -> dict:
        return {
            "bus_ids": list(self.bus_ids),
            "peer": [[a, b, ok] for (a, b), ok in sorted(self.peer.items())],
            "multicast": dict(sorted(self.multicast.items())),
            "uuids": list(self.uuids),
        }

    @classmethod
    def from_json(cls, data) -> CudaView:
        """The view a child printed or a boot record kept; ValueError when it is not one (a record in
        pytest's cache is a file anyone could have written)."""
        try:
            buses = tuple(data["bus_ids"])
            if not all(isinstance(b, str) and nvml_bus_id(b) == b for b in buses) or len(set(buses)) != len(buses):
                raise ValueError("bus ids are not NVML's")
            peer = {}
            for a, b, ok in data["peer"]:
                if not (type(a) is int and type(b) is int and 0 <= a < b < len(buses) and type(ok) is bool):
                    raise ValueError(f"bad peer entry {[a, b, ok]!r}"[:80])
                peer[(a, b)] = ok
            multicast = dict(data["multicast"])
            if not all(b in buses and type(v) is bool for b, v in multicast.items()):
                raise ValueError("bad multicast entry")
            uuids = tuple(data.get("uuids", ()))
            if uuids and (len(uuids) != len(buses) or not all(u is None or _UUID.fullmatch(str(u)) for u in uuids)):
                raise ValueError("bad uuids")
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not CUDA's view: {exc}"[:120]) from None
        return cls(buses, peer, multicast, uuids)


def cuda_view(lib=None) -> CudaView:
    """Every device CUDA sees, in its order; raises ``CudaError`` when libcuda cannot be loaded or
    started, or a device cannot be named (without its bus id, no fact of it can be joined to NVML)."""
    if lib is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:  # no driver, or another platform's library name
            raise CudaError(f"libcuda.so.1 cannot be loaded: {exc}") from None
    count = ctypes.c_int(0)
    for call, status in (
        ("cuInit", lambda: lib.cuInit(0)),
        ("cuDeviceGetCount", lambda: lib.cuDeviceGetCount(ctypes.pointer(count))),
    ):
        code = status()
        if code != CUDA_SUCCESS:
            raise CudaError(f"{call} returned {error_text(lib, code)}")
    devices, buses = [], []
    for ordinal in range(count.value):
        device = ctypes.c_int(0)
        bus = ctypes.create_string_buffer(32)
        if (
            lib.cuDeviceGet(ctypes.pointer(device), ordinal) != CUDA_SUCCESS
            or lib.cuDeviceGetPCIBusId(bus, len(bus), device) != CUDA_SUCCESS
        ):
            raise CudaError(f"CUDA device {ordinal} has no PCI bus id")
        bus_id = nvml_bus_id(bus.value.decode("ascii", "replace"))
        if bus_id is None:
            raise CudaError(f"CUDA device {ordinal}: unreadable PCI bus id {bus.value[:32]!r}")
        devices.append(device)
        buses.append(bus_id)
    peer = {}
    for a in range(len(devices)):
        for b in range(a + 1, len(devices)):
            both = [_can_access(lib, devices[x], devices[y]) for x, y in ((a, b), (b, a))]
            if None not in both:  # a pair CUDA did not answer for stays unknown
                peer[(a, b)] = all(both)
    return CudaView(tuple(buses), peer, _multicast(lib, devices, buses), tuple(_uuid(lib, d) for d in devices))


def error_text(lib, code: int) -> str:
    """``CUDA_ERROR_SYSTEM_NOT_READY (802): system not yet initialized``: the CUresult's name and text as
    the driver gives them (cuda.h: ``CUresult cuGetErrorName(CUresult error, const char **pStr)``, and
    ``cuGetErrorString`` alike; both may be called before ``cuInit`` and answer
    CUDA_ERROR_INVALID_VALUE for a code they do not know); ``CUresult 802`` where neither can say."""
    said = []
    for function in ("cuGetErrorName", "cuGetErrorString"):
        text = ctypes.c_char_p()
        call = getattr(lib, function, None)
        if call is not None and call(ctypes.c_int(code), ctypes.byref(text)) == CUDA_SUCCESS and text.value:
            said.append(text.value.decode("ascii", "replace")[:120])
    if not said:
        return f"CUresult {code}"
    return f"{said[0]} ({code})" + (f": {said[1]}" if len(said) > 1 else "")


class _CUuuid(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * 16)]  # cuda.h: typedef struct CUuuid_st { char bytes[16]; } CUuuid


def _uuid(lib, device) -> str | None:
    """The device's UUID as NVML writes it (``GPU-`` and 8-4-4-4-12 hex digits), or None. cuda.h:
    ``CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)``; ``_v2`` (CUDA 11.4+) is the same call,
    but for a MIG instance's own UUID (never asked here: a MIG view is not joined to GPUs)."""
    call = getattr(lib, "cuDeviceGetUuid_v2", None) or getattr(lib, "cuDeviceGetUuid", None)
    found = _CUuuid()
    if call is None or call(ctypes.byref(found), device) != CUDA_SUCCESS:
        return None
    h = bytes(found.bytes).hex()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _can_access(lib, device, peer) -> bool | None:
    value = ctypes.c_int(0)
    if lib.cuDeviceCanAccessPeer(ctypes.pointer(value), device, peer) != CUDA_SUCCESS:
        return None
    return bool(value.value)


def _multicast(lib, devices: list, buses: list) -> dict[str, bool]:
    # NCCL's rule too: a driver without cuMulticastCreate (before CUDA 12.1) has no multicast.
    creates = hasattr(lib, "cuMulticastCreate")
    found = {}
    for device, bus_id in zip(devices, buses, strict=True):
        value = ctypes.c_int(0)
        if not creates:
            found[bus_id] = False
        elif (
            lib.cuDeviceGetAttribute(ctypes.pointer(value), CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, device)
            == CUDA_SUCCESS
        ):
            found[bus_id] = bool(value.value)
    return found


def nvml_bus_id(cuda_bus_id: str) -> str | None:
    """CUDA's ``0000:07:00.0`` as NVML writes it, ``00000000:07:00.0``; None when unreadable."""
    try:
        domain, bus, rest = cuda_bus_id.split(":")
        device, function = rest.split(".")
        return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{int(function, 16):X}"
    except ValueError:
        return None
