"""torch.cuda as the personality has it; every function that starts CUDA records it."""

from types import SimpleNamespace

from .. import _emu
from . import nccl  # noqa: F401


def _lazy_init():
    _emu.record("cuda._lazy_init")


def is_available():
    return True


def device_count():
    _emu.record("cuda.device_count")
    return 8


def get_device_properties(i):
    _lazy_init()
    fields = dict(name="emulated", major=8, minor=0, total_memory=80 * 10**9, multi_processor_count=108)
    if _emu.SERIES >= (2, 4):  # torch/csrc/cuda/Module.cpp registered pci_* on _CudaDeviceProperties late
        fields.update(pci_domain_id=0, pci_bus_id=7 + i, pci_device_id=0)
    return SimpleNamespace(**fields)


def can_device_access_peer(a, b):
    _lazy_init()
    return True
