"""The CUDA and NCCL versions torch was built with, asked in the probe child (importing torch takes
seconds on a GPU host) and only when a requirement needs them. Nothing here starts CUDA."""

from __future__ import annotations


def torch_versions() -> dict:
    """The CUDA torch was built with (``torch.version.cuda``) and the NCCL it loads
    (``torch.cuda.nccl.version()``: ``ncclGetVersion``, which starts nothing); None where torch has
    no CUDA or no NCCL (a CPU build has no ``torch._C._nccl_version``). Empty without torch."""
    try:
        import torch
    except ModuleNotFoundError as exc:  # not installed; a torch that fails to import says why (not caught)
        if exc.name != "torch":
            raise
        return {}

    nccl = None
    try:
        nccl = nccl_version_text(torch.cuda.nccl.version())
    except (AttributeError, RuntimeError):
        pass
    return {"cuda_runtime_version": getattr(torch.version, "cuda", None), "nccl_version": nccl}


def nccl_version_text(version) -> str | None:
    """``torch.cuda.nccl.version()`` as "2.21.5", whatever shape the installed torch gives it: a
    tuple (major, minor, patch) since torch 1.x, with a suffix string appended when NCCL has one
    (torch/cuda/nccl.py, current), or NCCL's own integer code in older releases (nccl.h:
    major*10000 + minor*100 + patch since 2.9, major*1000 + minor*100 + patch before)."""
    if isinstance(version, bool):
        return None
    if isinstance(version, int):
        major_div = 10000 if version >= 10000 else 1000
        version = (version // major_div, version % major_div // 100, version % 100)
    if (
        isinstance(version, (tuple, list))
        and len(version) >= 3
        and all(isinstance(part, int) and not isinstance(part, bool) and part >= 0 for part in version[:3])
    ):
        return ".".join(str(part) for part in version[:3])
    return None
