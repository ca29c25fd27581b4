"""CUDA's own view through torch: device order by PCI bus id, ``can_device_access_peer``, and the CUDA
and NCCL versions torch was built with.

Used only on a real GPU machine with torch built for CUDA; imported lazily by the probe chain.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class CudaView:
    bus_ids: tuple[str, ...]  # NVML form, upper case, in CUDA order (cuda:0 first)
    peer: dict  # (a, b) with a < b -> can both access the other


def cuda_view() -> CudaView | None:
    """None when torch is not installed, has no CUDA, or sees no device."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    n = torch.cuda.device_count()
    bus_ids = []
    for i in range(n):
        p = torch.cuda.get_device_properties(i)
        # Not in the type stub, but read by torch itself (torch/numa/binding.py).
        bus_ids.append(f"{p.pci_domain_id:08X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0")
    peer = {(a, b): bool(torch.cuda.can_device_access_peer(a, b) and torch.cuda.can_device_access_peer(b, a))
            for a in range(n) for b in range(a + 1, n)}
    return CudaView(tuple(bus_ids), peer)


def torch_versions() -> dict:
    """The CUDA torch was built with (``torch.version.cuda``) and the NCCL it loads
    (``torch.cuda.nccl.version()``: ``ncclGetVersion``, which starts nothing); None where torch has
    no CUDA or no NCCL (a CPU build has no ``torch._C._nccl_version``)."""
    if importlib.util.find_spec("torch") is None:
        return {}
    import torch

    nccl = None
    try:
        nccl = ".".join(str(part) for part in torch.cuda.nccl.version()[:3])
    except (AttributeError, RuntimeError):
        pass
    return {"cuda_runtime_version": torch.version.cuda, "nccl_version": nccl}
