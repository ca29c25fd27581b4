"""The gputopo markers as data: each one's signature (its factory's) and help, registered at start-up by
the entry point, and the requirement it states. The requirement classes (``core.requirements`` and its
siblings) validate their own arguments; a factory only binds its arguments to its signature and names
the class, imported when the first marked test is read (``markers``), not when the plugin loads.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable


def _requires_gpus(
    n=1,
    *,
    min_memory_gb=None,
    compute_capability=None,
    arch=None,
    model=None,
    bf16=None,
    multicast=None,
    healthy=None,
    strict=None,
):
    from ..core.gpu_requirements import GpuRequirement

    return GpuRequirement(
        gpus=n,
        min_memory_gb=min_memory_gb,
        compute_capability=compute_capability,
        arch=arch,
        model=model,
        bf16=bf16,
        multicast=multicast,
        healthy=healthy,
    )


def _requires_versions(*, driver=None, cuda=None, cuda_runtime=None, nccl=None, strict=None):
    from ..core.gpu_requirements import VersionRequirement

    return VersionRequirement(driver=driver, cuda=cuda, cuda_runtime=cuda_runtime, nccl=nccl)


def _requires_p2p(gpus=None, *, strict=None):
    return requirements_core().P2PRequirement(gpus=gpus)


def _requires_nvlink(gpus=None, min_links=1, *, strict=None):
    return requirements_core().NvLinkRequirement(gpus=gpus, min_links=min_links)


def _requires_link(cls, gpus=None, *, strict=None):
    return requirements_core().LinkRequirement(gpus=gpus, need=cls)


def _min_allreduce_bw(gbps=None, gpus=None, size=None, *, floor=None, strict=None):
    return fact_requirements_core().BandwidthRequirement(
        gpus=gpus, metric="allreduce", gbps=gbps, size=size, floor=floor
    )


def _min_p2p_bw(gbps=None, gpus=None, *, floor=None, strict=None):
    return fact_requirements_core().BandwidthRequirement(gpus=gpus, metric="p2p", gbps=gbps, floor=floor)


def _min_h2d_bw(gbps=None, pinned=True, *, floor=None, strict=None):
    return fact_requirements_core().BandwidthRequirement(metric="h2d", gbps=gbps, pinned=pinned, floor=floor)


def _requires_nccl_transport(kind, gpus=None, *, gdrdma=None, strict=None):
    return fact_requirements_core().TransportRequirement(gpus=gpus, kind=kind, gdrdma=gdrdma)


def _ranks(n, *, timeout=None, backend=None, pool=None, strict=None):
    return ranks_requirement_core().RanksRequirement(n=n, timeout=timeout, backend=backend, pool=pool)


def requirements_core():
    from ..core import requirements  # the core, on the first marked test (see the module's docstring)

    return requirements


def fact_requirements_core():
    from ..core import fact_requirements  # (as requirements_core) those judged on figures and NCCL's account

    return fact_requirements


def ranks_requirement_core():
    from ..core import ranks_requirement  # (as requirements_core) a test run as n ranks

    return ranks_requirement


MARKERS: dict[str, Callable] = {
    "requires_gpus": _requires_gpus,
    "requires_versions": _requires_versions,
    "requires_p2p": _requires_p2p,
    "requires_nvlink": _requires_nvlink,
    "requires_link": _requires_link,
    "min_allreduce_bw": _min_allreduce_bw,
    "min_p2p_bw": _min_p2p_bw,
    "min_h2d_bw": _min_h2d_bw,
    "requires_nccl_transport": _requires_nccl_transport,
    "ranks": _ranks,
}

MARKER_HELP = {
    "requires_gpus": "n GPUs are visible (n: a number, or a list of GPU indices such as [0, 5]) and each of "
    "cuda:0..n-1 (or of those listed) meets every condition given: min_memory_gb (1e9 bytes), "
    "compute_capability ('>=9.0'), arch ('hopper', '>=ampere', '<blackwell', '!=hopper', a list: "
    "any), model (a substring of the name, or a list: any), bf16 (native), multicast (NVLS), "
    "healthy (no health fault at rest: docs/health.md)",
    "requires_versions": "each version given is met, as a specifier ('>=2.18'): driver (NVIDIA driver), cuda "
    "(CUDA the driver supports), cuda_runtime (CUDA torch was built with), "
    "nccl (NCCL torch loads)",
    "requires_p2p": "every pair among the GPUs the test uses (cuda:0..gpus-1, or gpus=[0, 5], default all) can do "
    "P2P read and write",
    "requires_nvlink": "every such pair is connected by at least min_links NVLinks",
    "requires_link": "every such pair is linked at cls or better: NV# > PIX > PXB > PHB > NODE > SYS "
    "('NV' = any NVLink)",
    "min_allreduce_bw": "all-reduce bus bandwidth among the GPUs the test uses, at one large size, is at least "
    "gbps GB/s (None: floor x what the links should give)",
    "min_p2p_bw": "P2P copy bandwidth of every such pair is at least gbps GB/s (None: floor x the link's)",
    "min_h2d_bw": "host-to-device copy bandwidth of every visible GPU is at least gbps GB/s",
    "requires_nccl_transport": "NCCL takes transport kind (P2P, SHM, NET/IB, NET/Socket, NVLS, COLLNET) between "
    "the GPUs the test uses; gdrdma=True/False for GPUDirect RDMA",
    "ranks": "run the test as n ranks spawned by torch.multiprocessing (n: a number, or a list of world sizes "
    "such as [2, 4]: one test each, ids ranks2, ranks4), each with its process group initialised "
    "(backend: 'nccl', one GPU per rank; 'gloo', on the CPUs; None: NCCL where the machine has a GPU, "
    "else gloo) and the fixture gputopo_rank; timeout: seconds for all ranks (default 300), past it "
    "every rank's stack is reported and the test fails; pool=True: a warm pool of ranks kept between "
    "such tests (None: --gputopo-ranks-pool)",
}


# Not a requirement (nothing is judged): what a leased test says of itself (plugin/leases.py).
LEASE_MEMORY = "lease_memory"
LEASE_MEMORY_LINE = (
    f"{LEASE_MEMORY}(gib): under --gputopo-lease, this test uses at most gib GiB (2^30 bytes) of each GPU it "
    "holds, and its lease shares the GPUs while the budgets fit their memory (None: whole GPUs); "
    "overrides --gputopo-lease-memory"
)


@functools.cache
def registration_lines() -> tuple[str, ...]:
    """The ``markers`` ini lines that register the gputopo markers, with their full signatures."""
    return (
        *(
            f"{marker_signature(name).replace('*, ', '').replace('strict=None', 'strict=False')}: {text}; "
            f"unmet -> skip (fail when strict)"
            for name, text in MARKER_HELP.items()
        ),
        LEASE_MEMORY_LINE,
    )


def marker_signature(name: str) -> str:
    sig = str(inspect.signature(MARKERS[name]))
    return f"{name}{sig}"
