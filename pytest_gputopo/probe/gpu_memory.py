"""A leased test's peak GPU memory as NVML sees its processes use it: sampled by the run (a thread of
the process that holds the lease, ``Sampler``), not inside the test, which need not call anything.

Each look asks NVML for the compute processes on each of the test's GPUs
(``nvmlDeviceGetComputeRunningProcesses``: pid and ``usedGpuMemory``, which nvidia-ml-py gives as
None where the driver cannot say) and adds up what the test's own processes use (its process and
every descendant, found in ``/proc``). The figure is the most any one of its GPUs held at a look,
per GPU as a budget counts it. It stays unknown, never a guessed 0, where NVML gives no per-process
memory, lists no process at all on the test's GPUs (the test used none, or NVML shows none here), or
names only processes this PID namespace does not show (a container without the host's PID namespace
sees the host's pids from NVML: nothing of the test's is ever matched).

NVML is started in this process once, on the first leased test that is sampled; it creates no CUDA
context. A driver that hangs in an NVML call holds only the sampler's thread: the figure is unknown.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from ..runtime.lineage import descendants

SAMPLE_S = 0.1  # between looks: a test's peak held for less may be missed
STOP_S = 2.0  # a sampler that has not answered by then (a hung NVML call) leaves the figure unknown


@dataclass(frozen=True)
class Peak:
    bytes: int | None  # the most one GPU held for the test's processes at a look; None: unknown
    why_unknown: str | None = None

    @property
    def gib(self) -> float | None:
        return None if self.bytes is None else self.bytes / 2**30


@dataclass
class _Seen:
    """What the looks found so far."""

    peak: int = 0
    listed: bool = False  # NVML listed a process on the test's GPUs at some look
    matched: bool = False  # a process of the test's was listed at some look
    foreign: bool = False  # NVML listed a pid this namespace does not show
    why_unknown: str | None = None

    def result(self) -> Peak:
        if self.why_unknown is not None:
            return Peak(None, self.why_unknown)
        if not self.listed:  # 0 would be a guess: some drivers and containers list no process at all
            return Peak(
                None,
                "NVML listed no compute process on its GPUs while it ran: it used none, or NVML does "
                "not show processes here",
            )
        if self.foreign and not self.matched:
            return Peak(
                None,
                "NVML names processes this PID namespace does not show (a container without the "
                "host's PID namespace): the test's own are not told apart",
            )
        return Peak(self.peak)


def look(listed: Iterable[Iterable[tuple[int, int | None]]], own: Callable[[], set[int]], seen: _Seen) -> None:
    """One look: ``listed`` is, per GPU, the (pid, used bytes or None) NVML gives; ``own`` the
    test's processes (asked only where NVML lists some)."""
    mine: set[int] | None = None
    for processes in listed:
        used = 0
        for pid, used_bytes in processes:
            seen.listed = True
            if mine is None:
                mine = own()
            if pid in mine:
                seen.matched = True
                if used_bytes is None:
                    seen.why_unknown = "NVML gives no per-process memory on this driver (usedGpuMemory unavailable)"
                    return
                used += used_bytes
            elif not os.path.exists(f"/proc/{pid}"):
                seen.foreign = True
        seen.peak = max(seen.peak, used)


@functools.cache
def _nvml():
    """pynvml, started (once per process), or the reason it cannot be."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # not installed, no driver: the figure is unknown, and says why
        return None, f"NVML cannot be started here: {type(exc).__name__}: {exc}"
    return pynvml, None


class Sampler:
    """Samples the test's use of ``uuids`` until ``stop``. ``root``: the test's process (the one it
    runs in, or that starts its ranks; None: not known yet, nothing counted), which may be set while
    it samples; ``but()``: processes below ``root`` that are not the test's, nor what they started."""

    def __init__(self, uuids: Iterable[str], root: int | None, but: Callable[[], Collection[int]] = tuple) -> None:
        self.uuids, self.root, self.but = tuple(uuids), root, but
        self._seen = _Seen()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="gputopo-gpu-memory", daemon=True)
        self._thread.start()

    def stop(self) -> Peak:
        """A last look, and the test's peak."""
        self._stopping.set()
        self._thread.join(STOP_S)
        if self._thread.is_alive():
            return Peak(None, f"NVML did not answer within {STOP_S:g} s")
        return self._seen.result()

    def _own(self) -> set[int]:
        root = self.root
        return set() if root is None else descendants(root, self.but()) | {root}

    def _sample(self) -> None:
        nvml, why = _nvml()
        if nvml is None:
            self._seen.why_unknown = why
            return
        try:
            handles = [nvml.nvmlDeviceGetHandleByUUID(uuid) for uuid in self.uuids]
            while True:
                stopping = self._stopping.is_set()
                listed = [
                    [(p.pid, p.usedGpuMemory) for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)] for h in handles
                ]
                look(listed, self._own, self._seen)
                if stopping or self._seen.why_unknown is not None:
                    return
                self._stopping.wait(SAMPLE_S)  # set: one last look
        except nvml.NVMLError as exc:
            self._seen.why_unknown = f"NVML could not list the GPUs' processes: {exc}"
