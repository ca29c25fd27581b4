"""In each rank of a ``ranks(n)`` test: the trail of the torch.distributed calls its body makes, so that
a test that hangs says which rank never entered which call (``core.hangs``).

The user's calls are left as they are: the functions of ``torch.distributed`` (and of
``torch.distributed.distributed_c10d``, where torch's own helpers find them) are wrapped in the rank's
process before the test's module is loaded, so ``dist.all_reduce(t)`` and ``from torch.distributed
import all_reduce`` both reach the wrapper. Each call appends a line when it is entered and one when it
returns, with ``O_APPEND`` writes the size of a line (nothing buffered: a rank killed keeps its trail).
A call made inside another (``all_gather_object`` gathers with ``all_gather``) is the outer one's.
Signatures checked against torch 2.13's torch/distributed/distributed_c10d.py.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from ..core.hangs import RECVS, SENDS
from ..runtime.rank_messages import TRAIL, TrailCall, TrailLeft

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "gather",
    "gather_object",
    "monitored_barrier",
    "new_group",  # every rank of the world calls it, members or not
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
)
POINT_TO_POINT = tuple(sorted(SENDS | RECVS))
_TENSOR_ARGS = ("tensor", "input_tensor", "input", "output_tensor", "output", "tensor_list", "object_list")


class Trail:
    """The rank's trail file and its numbering: collectives per group, point-to-point calls per group,
    direction and peer. ``on`` while the body runs (the plugin's own barrier is not the user's)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        self.counts: dict[tuple, int] = {}
        self.entered = 0
        self.on = False
        self.inside = threading.local()

    def begin(self) -> None:
        """A test's body starts: its calls numbered from 1 (every rank begins each test together)."""
        self.counts.clear()
        self.on = True

    def install(self) -> None:
        for name in COLLECTIVES + POINT_TO_POINT:
            original = getattr(c10d, name, None)
            if original is not None:
                traced = self._traced(name, original)
                setattr(c10d, name, traced)
                if getattr(dist, name, None) is original:
                    setattr(dist, name, traced)

    def _traced(self, name: str, original):
        signature = inspect.signature(original)

        @functools.wraps(original)
        def traced(*args, **kwargs):
            if not self.on or getattr(self.inside, "call", False):
                return original(*args, **kwargs)
            index = self._enter(name, signature, args, kwargs)
            self.inside.call = True
            try:
                result = original(*args, **kwargs)
            finally:
                self.inside.call = False
            self._write(TrailLeft(index))  # not after a raise: the call it failed in stays open
            return result

        return traced

    def _enter(self, name: str, signature: inspect.Signature, args: tuple, kwargs: dict) -> int:
        try:
            bound = signature.bind(*args, **kwargs).arguments
        except TypeError:  # the call itself will raise, saying why
            bound = {}
        group = bound.get("group") if name != "new_group" else None
        group = group if group is not None else dist.group.WORLD
        called, peer = _name_of(group), _peer(name, bound, group)
        key = (called, peer, name in SENDS) if peer is not None else (called,)
        seq = self.counts[key] = self.counts.get(key, 0) + 1
        index = self.entered  # its "left" line names it by this (a trail may be read from its middle)
        self.entered += 1
        self._write(TrailCall(name, called, tuple(_members(group)), _shape(bound), peer, seq, index))
        return index

    def _write(self, message: TrailCall | TrailLeft) -> None:
        try:
            os.write(self.fd, (TRAIL.encode(message) + "\n").encode())
        except OSError:  # a full disk: the trail stops, the call goes on
            pass


def _name_of(group) -> str:
    if group is dist.group.WORLD:
        return "default"
    try:
        return c10d._get_process_group_name(group)
    except Exception:  # noqa: BLE001 - a group torch does not know (this rank is not in it)
        return "unknown"


def _members(group) -> list[int]:
    try:
        return dist.get_process_group_ranks(group)
    except Exception:  # noqa: BLE001 - not a member: torch returns from the call at once
        return []


def _peer(name: str, bound: dict, group) -> int | None:
    """A point-to-point call's other rank, global (``dst``/``src``, or ``group_dst``/``group_src``)."""
    if name not in SENDS and name not in RECVS:
        return None
    way = "dst" if name in SENDS else "src"
    if bound.get(way) is not None:
        return int(bound[way])
    if bound.get(f"group_{way}") is not None:
        try:
            return dist.get_global_rank(group, int(bound[f"group_{way}"]))
        except Exception:  # noqa: BLE001 - the call will say what is wrong
            return None
    return None


def _shape(bound: dict) -> str:
    """The call's first tensor, as ``float32[4,2]`` (a list's first)."""
    for arg in _TENSOR_ARGS:
        value = bound.get(arg)
        if isinstance(value, (list, tuple)) and value:
            value = value[0]
        if isinstance(value, torch.Tensor):
            return f"{str(value.dtype).removeprefix('torch.')}[{','.join(map(str, value.shape))}]"
    return ""
