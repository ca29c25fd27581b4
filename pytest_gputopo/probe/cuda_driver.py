"""What only CUDA's driver API says of a device, asked of ``libcuda`` directly (no torch needed):
whether it supports multicast objects, the fact NCCL's NVLS algorithm and torch's symmetric memory
rest on. ``cuInit`` starts CUDA: this runs in the probe child only (``probe.host``), never in the
user's process.
"""

from __future__ import annotations

import ctypes

# cuda.h (CUDA 12.0+): "Device supports switch multicast and reduction operations". NCCL asks the same
# attribute in ncclNvlsInit (src/transport/nvls.cc) and takes NVLS only where it is 1.
CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132
CUDA_SUCCESS = 0


def multicast_by_bus(lib=None) -> dict[str, bool]:
    """{bus id in NVML's form: multicast supported} for every device CUDA sees; a device CUDA cannot
    answer for is left out (unknown), and so is everything when libcuda cannot be loaded or started."""
    if lib is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError:  # no driver, or another platform's library name
            return {}
    count = ctypes.c_int(0)
    if lib.cuInit(0) != CUDA_SUCCESS or lib.cuDeviceGetCount(ctypes.pointer(count)) != CUDA_SUCCESS:
        return {}
    # NCCL's rule too: a driver without cuMulticastCreate (before CUDA 12.1) has no multicast.
    creates = hasattr(lib, "cuMulticastCreate")
    found = {}
    for ordinal in range(count.value):
        device, value = ctypes.c_int(0), ctypes.c_int(0)
        bus = ctypes.create_string_buffer(32)
        if (lib.cuDeviceGet(ctypes.pointer(device), ordinal) != CUDA_SUCCESS
                or lib.cuDeviceGetPCIBusId(bus, len(bus), device) != CUDA_SUCCESS):
            continue
        bus_id = nvml_bus_id(bus.value.decode("ascii", "replace"))
        if bus_id is None:
            continue
        if not creates:
            found[bus_id] = False
        elif lib.cuDeviceGetAttribute(ctypes.pointer(value), CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
                                      device) == CUDA_SUCCESS:
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
