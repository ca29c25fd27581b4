"""Marker arguments -> requirement objects: every gputopo marker's signature, help and validation.

Kept apart from ``requirements`` (what the requirements mean and how they are judged) so that
registering the markers at start-up costs no more than these plain functions: the requirement
classes are imported only when a test actually carries a marker.
"""

from __future__ import annotations

import inspect
from typing import Callable

from .model import MAX_BYTES, MAX_GBPS, MAX_GPUS, MAX_NVLINKS, is_bandwidth, show_value

TRANSPORT_KINDS = ("P2P", "SHM", "NET", "NET/IB", "NET/Socket", "NVLS", "COLLNET")


class RequirementError(ValueError):
    """A marker argument or a ``--gputopo-require`` term is malformed."""


def _int_arg(value, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequirementError(f"{what} must be an integer from {low} to {high}, got {show_value(value)}")
    return value


def _gpu_arg(value, what: str) -> int | None:
    return None if value is None else _int_arg(value, what, 1, MAX_GPUS)


def _requires_gpus(n, *, strict=None):
    from .requirements import GpuCount

    return GpuCount(count=_int_arg(n, "n", 0, MAX_GPUS))


def _requires_p2p(gpus=None, *, strict=None):
    from .requirements import P2PRequirement

    return P2PRequirement(gpus=_gpu_arg(gpus, "gpus"))


def _requires_nvlink(gpus=None, min_links=1, *, strict=None):
    from .requirements import NvLinkRequirement

    return NvLinkRequirement(gpus=_gpu_arg(gpus, "gpus"), min_links=_int_arg(min_links, "min_links", 1, MAX_NVLINKS))


def _requires_link(cls, gpus=None, *, strict=None):
    from .model import LinkLabel
    from .requirements import LinkRequirement

    if not isinstance(cls, str):
        raise RequirementError(f"cls must be a link class string such as 'NV', 'NV12' or 'PXB', got {cls!r}")
    try:
        need = LinkLabel.parse(cls)
    except ValueError as exc:
        raise RequirementError(str(exc)) from None
    return LinkRequirement(gpus=_gpu_arg(gpus, "gpus"), need=need, spelled=cls.strip().upper())


def _bw_args(gbps, floor):
    if gbps is not None and not is_bandwidth(gbps):
        raise RequirementError(f"gbps must be a number above 0 and at most {MAX_GBPS:g} (GB/s = 1e9 B/s) "
                               f"or None, got {show_value(gbps)}")
    if floor is not None and (isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0 < floor <= 2):
        raise RequirementError(f"floor must be a fraction of the expected bandwidth in (0, 2], got {show_value(floor)}")
    return None if gbps is None else float(gbps), None if floor is None else float(floor)


def _min_allreduce_bw(gbps=None, gpus=None, size=None, *, floor=None, strict=None):
    from .requirements import BandwidthRequirement

    gbps, floor = _bw_args(gbps, floor)
    if size is not None:
        _int_arg(size, "size (bytes)", 4, MAX_BYTES)
    return BandwidthRequirement(gpus=_gpu_arg(gpus, "gpus"), metric="allreduce", gbps=gbps, size=size, floor=floor)


def _min_p2p_bw(gbps=None, gpus=None, *, floor=None, strict=None):
    from .requirements import BandwidthRequirement

    gbps, floor = _bw_args(gbps, floor)
    return BandwidthRequirement(gpus=_gpu_arg(gpus, "gpus"), metric="p2p", gbps=gbps, floor=floor)


def _min_h2d_bw(gbps=None, pinned=True, *, floor=None, strict=None):
    from .requirements import BandwidthRequirement

    gbps, floor = _bw_args(gbps, floor)
    if not isinstance(pinned, bool):
        raise RequirementError(f"pinned must be True or False, got {pinned!r}")
    return BandwidthRequirement(metric="h2d", gbps=gbps, pinned=pinned, floor=floor)


def _requires_nccl_transport(kind, gpus=None, *, gdrdma=None, strict=None):
    from .requirements import TransportRequirement

    if not isinstance(kind, str) or not (kind in TRANSPORT_KINDS or kind.startswith("NET/")):
        raise RequirementError(f"kind must be one of {', '.join(TRANSPORT_KINDS)} or 'NET/<plugin>', got {kind!r}")
    if gdrdma is not None and not isinstance(gdrdma, bool):
        raise RequirementError(f"gdrdma must be True, False or None, got {gdrdma!r}")
    return TransportRequirement(gpus=_gpu_arg(gpus, "gpus"), kind=kind, gdrdma=gdrdma)


MARKERS: dict[str, Callable] = {
    "requires_gpus": _requires_gpus,
    "requires_p2p": _requires_p2p,
    "requires_nvlink": _requires_nvlink,
    "requires_link": _requires_link,
    "min_allreduce_bw": _min_allreduce_bw,
    "min_p2p_bw": _min_p2p_bw,
    "min_h2d_bw": _min_h2d_bw,
    "requires_nccl_transport": _requires_nccl_transport,
}

MARKER_HELP = {
    "requires_gpus": "at least n visible GPUs",
    "requires_p2p": "every pair among the GPUs the test uses (cuda:0..gpus-1, default all) can do P2P read and write",
    "requires_nvlink": "every such pair is connected by at least min_links NVLinks",
    "requires_link": "every such pair is linked at cls or better: NV# > PIX > PXB > PHB > NODE > SYS ('NV' = any NVLink)",
    "min_allreduce_bw": "all-reduce bus bandwidth among the GPUs the test uses, at one large size, is at least "
                        "gbps GB/s (None: floor x what the links should give)",
    "min_p2p_bw": "P2P copy bandwidth of every such pair is at least gbps GB/s (None: floor x the link's)",
    "min_h2d_bw": "host-to-device copy bandwidth of every visible GPU is at least gbps GB/s",
    "requires_nccl_transport": "NCCL takes transport kind (P2P, SHM, NET/IB, NET/Socket, NVLS, COLLNET) between "
                               "the GPUs the test uses; gdrdma=True/False for GPUDirect RDMA",
}


def marker_signature(name: str) -> str:
    sig = str(inspect.signature(MARKERS[name]))
    return f"{name}{sig}"


def from_marker(name: str, args: tuple, kwargs: dict) -> tuple:
    """The requirement a marker states, and its ``strict=`` argument (None when not given)."""
    factory = MARKERS[name]
    try:
        inspect.signature(factory).bind(*args, **kwargs)
    except TypeError as exc:
        raise RequirementError(f"{exc}; signature: {marker_signature(name)}") from None
    strict = kwargs.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise RequirementError(f"strict must be True or False, got {strict!r}")
    return factory(*args, **kwargs), strict


