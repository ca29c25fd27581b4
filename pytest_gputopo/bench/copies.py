"""Copy-engine bandwidth on GPUs: P2P between a pair, and host<->device per GPU.

GPU-only (exercised by ``tests/gpu``). Copies are ``Tensor.copy_`` (the copy engine, as
p2pBandwidthLatencyTest's default and nvbandwidth's ``*_ce`` cases). Each measurement goes through the
shared harness and is verified after timing: the destination must hold the source's byte pattern.
torch is imported inside the functions: loading the plugin never imports it.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time

from ..core import keys
from ..core.cpus import cpu_set
from ..runtime import environ
from .harness import Measurement, WallTimer, measure
from .messages import ANSWERS, REQUESTS, CopyAnswer, CopyRequest
from .subproc import RESULT

DEFAULT_COPY_BYTES = 256 * 2**20  # nvbandwidth uses 512 MiB; 256 MiB reaches line rate on every link we know


def _pattern(torch, n: int, device):
    # A byte pattern no copy of a stale or zeroed buffer can match (period 251, a prime); built by
    # repeating one small tile so it costs n bytes, not an n-element int index.
    tile = torch.arange(251, dtype=torch.uint8, device=device)
    return tile.repeat(-(-n // 251))[:n]


def _verify(torch, dst, n: int, what: str):
    def check() -> str | None:
        torch.cuda.synchronize(dst.device) if dst.is_cuda else None
        bad = int((dst != _pattern(torch, n, dst.device)).sum())
        return f"{what}: {bad} of {n} bytes differ from the source after the copy" if bad else None

    return check


def _sync_all(torch, devices):
    def sync() -> None:
        for d in devices:
            torch.cuda.synchronize(d)

    return sync


class EachWayTimer:
    """Both directions of a copy at once, timed as nvbandwidth times them for its bidirectional
    ``_total``: each direction's stream by CUDA events of its own, the second starting when the first
    does, and the figure the sum of the two directions' rates (NVIDIA/nvbandwidth v0.8 memcpy.cpp
    ``doMemcpyCore``: a start and an end event per copy's stream, each copy's bandwidth from its own
    interval; testcases_ce.cpp ``DeviceToDeviceBidirWriteCE``: ``_total = results[0] + results[1]``).
    Not the wall time of both: a direction that finishes early would be counted at the slower one's
    pace. ``stop`` returns the interval that gives that sum over both directions' bytes."""

    def __init__(self, torch, streams) -> None:
        self._torch, self._streams = torch, streams
        self._events: list = []

    def start(self) -> None:
        cuda = self._torch.cuda
        for stream in self._streams:  # nothing queued earlier is counted
            cuda.synchronize(stream.device)
        self._events = [(cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) for _ in self._streams]
        first = self._events[0][0]
        first.record(self._streams[0])
        for (begin, _), stream in zip(self._events[1:], self._streams[1:], strict=True):
            stream.wait_event(first)  # as nvbandwidth: cuStreamWaitEvent(streams[i], startEvents[0])
            begin.record(stream)

    def stop(self) -> float:
        for (_, end), stream in zip(self._events, self._streams, strict=True):
            end.record(stream)
        for _, end in self._events:
            end.synchronize()
        return each_way_seconds([begin.elapsed_time(end) / 1e3 for begin, end in self._events])


def each_way_seconds(intervals) -> float:
    """The one interval over which the copies' bytes together (an equal share each) move at the sum
    of their own rates: ``n / sum(1 / t)``, the harmonic mean of the intervals."""
    return len(intervals) / sum(1 / t for t in intervals)


def p2p_copy(
    src: int,
    dst: int,
    *,
    peer: bool = True,
    bidirectional: bool = False,
    size_bytes: int = DEFAULT_COPY_BYTES,
    budget_s: float = 2.0,
) -> Measurement:
    """GPU ``src`` -> GPU ``dst`` by the copy engine. ``peer=False`` stages the copy through pinned host
    memory (what a copy costs with P2P off), so a "P2P" slower than staging can be named."""
    import torch

    a, b = torch.device("cuda", src), torch.device("cuda", dst)
    x = _pattern(torch, size_bytes, a)
    y = torch.empty(size_bytes, dtype=torch.uint8, device=b)
    back_src = _pattern(torch, size_bytes, b) if bidirectional else None
    back_dst = torch.empty(size_bytes, dtype=torch.uint8, device=a) if bidirectional else None
    host = None if peer else torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)
    streams = (torch.cuda.Stream(a), torch.cuda.Stream(b)) if bidirectional else None
    # Staging: the D2H runs on the source GPU's stream and the H2D on the destination's, and torch
    # orders neither against the other through the host buffer. Two events do: the H2D waits for the
    # D2H to fill it, the next D2H for the H2D to drain it. No pipelining, so "staged" is a lower
    # bound of what staging can give: a P2P copy slower than that is certainly not working.
    filled, drained = (torch.cuda.Event(), torch.cuda.Event()) if not peer else (None, None)

    def stage(out, inp):
        host.copy_(inp, non_blocking=True)
        filled.record(torch.cuda.current_stream(a))
        torch.cuda.current_stream(b).wait_event(filled)
        out.copy_(host, non_blocking=True)
        drained.record(torch.cuda.current_stream(b))
        torch.cuda.current_stream(a).wait_event(drained)

    def one(out, inp, stream=None):
        ctx = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        with ctx:
            if peer:
                out.copy_(inp, non_blocking=True)
            else:
                stage(out, inp)

    def run(k: int) -> None:
        for _ in range(k):
            if bidirectional:
                one(y, x, streams[0])  # type: ignore[index]  # bidirectional: two streams
                one(back_dst, back_src, streams[1])  # type: ignore[index]  # as above
            else:
                one(y, x)

    checks = [_verify(torch, y, size_bytes, f"GPU{src}->GPU{dst}")]
    if bidirectional:  # both directions carried data: both are checked
        checks.append(_verify(torch, back_dst, size_bytes, f"GPU{dst}->GPU{src}"))

    def verify() -> str | None:
        return "; ".join(e for e in (check() for check in checks) if e) or None

    kind = ("P2P" if peer else "staged") + (" bidirectional" if bidirectional else "")
    timer = EachWayTimer(torch, streams) if bidirectional else WallTimer(sync=_sync_all(torch, (a, b)))
    result = measure(
        f"{kind} copy GPU{src}->GPU{dst}",
        run,
        size_bytes=size_bytes,
        bytes_per_iteration=size_bytes * (2 if bidirectional else 1),
        timer=timer,
        budget_s=budget_s,
        verify=verify,
    )
    return result


def peer_access(src: int, dst: int) -> bool:
    """Whether CUDA lets each GPU access the other. Without it, torch's cross-device ``copy_`` does
    not enable peer access (``at::cuda::get_p2p_access`` asks ``cudaDeviceCanAccessPeer``) and the
    driver stages the copy through host memory: a figure of that copy is no P2P figure."""
    import torch

    return bool(torch.cuda.can_device_access_peer(src, dst) and torch.cuda.can_device_access_peer(dst, src))


@contextlib.contextmanager
def _near(cpus: set[int] | None):
    """Run on the GPU's own CPUs while host memory is allocated and first touched, so that Linux's
    first-touch policy places its pages on the GPU's NUMA node."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        yield False
        return
    before = os.sched_getaffinity(0)
    usable = cpus & before
    if not usable:
        yield False
        return
    os.sched_setaffinity(0, usable)
    try:
        yield True
    finally:
        os.sched_setaffinity(0, before)


def host_device_copy(
    gpu: int,
    *,
    to_device: bool = True,
    pinned: bool = True,
    cpu_affinity: str | None = None,
    size_bytes: int = DEFAULT_COPY_BYTES,
    budget_s: float = 2.0,
) -> Measurement:
    """Host -> GPU (or GPU -> host) by the copy engine, from pinned or pageable host memory placed on
    the GPU's NUMA node when its CPU affinity is known."""
    import torch

    dev = torch.device("cuda", gpu)
    with _near(cpu_set(cpu_affinity)) as placed:
        host = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=pinned)
        host.copy_(_pattern(torch, size_bytes, "cpu")) if to_device else host.zero_()
    device_buf = (
        _pattern(torch, size_bytes, dev) if not to_device else torch.empty(size_bytes, dtype=torch.uint8, device=dev)
    )
    src, dst = (host, device_buf) if to_device else (device_buf, host)

    def run(k: int) -> None:
        for _ in range(k):
            dst.copy_(src, non_blocking=pinned)

    what = f"{'H2D' if to_device else 'D2H'} {'pinned' if pinned else 'pageable'} GPU{gpu}"
    result = measure(
        what + (" (host memory on the GPU's NUMA node)" if placed else ""),
        run,
        size_bytes=size_bytes,
        timer=WallTimer(sync=_sync_all(torch, (dev,))),
        budget_s=budget_s,
        verify=_verify(torch, dst, size_bytes, what),
    )
    return result


def _test_figure(faults: dict, key: list) -> CopyAnswer:
    """The project's tests' copy figure without a GPU (``runtime.environ.test_faults``): ``copy_gbps``
    one figure for every copy, or a table by copy, its GPUs as CUDA_VISIBLE_DEVICES names them
    ("p2p-GPU-1f..-GPU-9c..") or by index (``keys.name_of``: "p2p-0-1", "h2d-3-True"), and by kind
    ("p2p", "p2p_staged", "p2p_bidir", "h2d", "h2d_pageable", "d2h", "d2h_pageable"); the copies
    named in ``copy_wrong`` came back with wrong data."""
    figures = faults["copy_gbps"]
    name = "-".join(map(str, key))
    if isinstance(figures, dict):
        kind = key[0] + ("_pageable" if key[0] in ("h2d", "d2h") and not key[2] else "")
        figures = figures.get(_physical_name(key), figures.get(name, figures.get(kind)))
    wrong = name in faults.get("copy_wrong", ())
    error = f"{name}: 1 byte differs from the source (test fault)" if wrong else None
    return CopyAnswer(os.getpid(), None if figures is None else float(figures), error, test_fault=True)


def _physical_name(key: list) -> str:
    """A copy's name with its GPUs as CUDA_VISIBLE_DEVICES names them ("p2p-GPU-1f..-GPU-9c.."): the
    same GPUs whatever a process numbers them (a leased test's process numbers its GPUs from 0)."""
    visible = (environ.cuda_environment()["CUDA_VISIBLE_DEVICES"] or "").split(",")
    gpus = key[1:3] if key[0].startswith("p2p") else key[1:2]
    if not all(isinstance(g, int) and 0 <= g < len(visible) and visible[g] for g in gpus):
        return ""
    return "-".join([key[0], *(visible[g] for g in gpus), *map(str, key[1 + len(gpus) :])])


def answer(request: CopyRequest) -> CopyAnswer:
    """The measurement a request names (``bench.subproc``), with this process's pid."""
    key, budget = request.key, request.budget_s
    faults = environ.test_faults()
    if faults.get("copy_hang"):  # the project's tests (runtime.environ.test_faults): a copy that hangs
        time.sleep(3600)
    if "copy_gbps" in faults:  # ... and a figure without a GPU
        return _test_figure(faults, key.to_list())
    if isinstance(key, keys.Copy):
        if key.kind in ("p2p", "p2p_bidir") and not peer_access(key.src, key.dst):
            return CopyAnswer(os.getpid(), None, peer_access=False)  # nothing to measure as P2P
        peer, both = key.kind != "p2p_staged", key.kind == "p2p_bidir"
        m = p2p_copy(key.src, key.dst, peer=peer, bidirectional=both, budget_s=budget)
    else:
        to_device, near = key.kind == "h2d", request.cpu_affinity
        m = host_device_copy(key.gpu, to_device=to_device, pinned=key.pinned, cpu_affinity=near, budget_s=budget)
    return CopyAnswer(os.getpid(), m.bw_gbps, m.error, measurement=m.to_json())


def serve(idle_s: float) -> int:
    """Child-process entry: a request per line on stdin, an answer line each (``subproc.RESULT``
    and JSON) on stdout; ends at the end of its input or after ``idle_s`` without a request."""
    stdin = sys.stdin.fileno()
    pending = b""
    while True:
        while b"\n" not in pending:
            if not select.select([stdin], [], [], idle_s)[0]:
                return 0  # idle: no CUDA context of ours outlives a burst of copies
            chunk = os.read(stdin, 65536)
            if not chunk:
                return 0
            pending += chunk
        line, pending = pending.split(b"\n", 1)
        request = REQUESTS.decode(line, "the run's request")  # the run's own: one it cannot read is a bug, said
        print(RESULT + ANSWERS.encode(answer(request)), flush=True)


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] != ["--serve"]:
        sys.exit("usage: python -m pytest_gputopo.bench.copies --serve IDLE_SECONDS")
    sys.exit(serve(float(sys.argv[2])))
