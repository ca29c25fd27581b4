"""A warm pool of ranks: n processes started once (by torch's ``start_processes``, as ``rank_procs``
starts a test's ranks) and kept between the tests of one ``(n, backend, GPUs, timeout)``, each test's
body sent to every rank over its pipe and its result taken only if it carries that test's number.

The pool is kept only while it is fit: after a test whose rank failed, died, skipped alone, hung or
did not meet the barrier that follows each test (``Ready``), it is ended, and the next test starts a
new one. Ended as ``rank_procs`` ends ranks: each rank leads its own process group, its keeper dies
with the pytest process, and ``procs.end`` ends every group (SIGTERM, then SIGKILL) and reaps.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import time
from collections.abc import Callable

from . import procs as supervisor, rank_procs, run_folder
from .messages import MessageError, from_json, to_json
from .rank_messages import (
    FROM_RANK,
    POOL_BARRIER_S,
    BodyJob,
    BodyResult,
    Opened,
    PoolMessage,
    RankSetup,
    Ready,
    Stop,
    receive,
    send,
)

READY_GRACE_S = 2.0  # past the ranks' own barrier deadline, for their word to arrive
END_PATIENCE_S = 3.0  # a pool told to stop: time for its ranks to close their group and exit


class RankPool:
    """n ranks serving bodies (``entry(rank, workdir, setup, pipes)``: ``plugin.rank_body.serve``)."""

    def __init__(self, key: tuple, entry: Callable, setup: RankSetup) -> None:
        import torch.multiprocessing as mp  # torch, when a ranks test runs

        self.key, self.n = key, setup.n
        self.workdir = run_folder.make(run_folder.RANKS)  # private: the store, output, trails, stacks
        pairs = [multiprocessing.get_context("spawn").Pipe() for _ in range(self.n)]
        self.pipes = [ours for ours, _ in pairs]
        theirs = tuple(end for _, end in pairs)
        try:
            self.context = mp.start_processes(
                entry, args=(self.workdir, setup, theirs), nprocs=self.n, join=False, start_method="spawn"
            )
        except BaseException:
            run_folder.remove(self.workdir)
            raise
        finally:
            for end in theirs:
                end.close()
        self.procs = self.context.processes
        self.seq = 0
        self.ended = self.unfit = False

    @property
    def fit(self) -> bool:
        """Whether the pool can take the next test: not ended nor unfit, every rank running."""
        return not (self.ended or self.unfit) and all(_status(p) is None for p in self.procs)

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def run(self, job: BodyJob, timeout_s: float, grace_s: float = rank_procs.FAILED_GRACE_S):
        """Send ``job`` to every rank; wait until each has its group open (``Opened``: a fresh pool's
        start is not the test's time; at most ``timeout_s``), then for each rank's result until all
        came, ``grace_s`` after the first failure, or ``timeout_s``; take the stacks of the ranks still
        in the body. Returns
        (``rank_procs.Ended``, each rank's ``BodyResult`` or None); the pool is unfit (to be ended, once
        its files are read) unless every rank passed (or every rank skipped) and then met the barrier."""
        for pipe in self.pipes:
            try:
                send(pipe, job)
            except OSError:  # a rank that has gone: its sentinel says so below
                pass
        results: list[BodyResult | None] = [None] * self.n
        try:
            self._opened(job, results, time.monotonic() + timeout_s)
            timed_out = self._collect(job, results, time.monotonic() + timeout_s, grace_s)
        except BaseException:  # pytest-timeout's alarm, Ctrl-C: the ranks are mid-body, never reused
            self.unfit = True
            raise
        running = [r for r in range(self.n) if results[r] is None and _status(self.procs[r]) is None]
        stacks = rank_procs.take_stacks(self.procs, running, self.workdir)
        exits = tuple(self._exit(r, results[r], stacks) for r in range(self.n))
        self.unfit = self.unfit or not self._ready(job, results)
        return rank_procs.Ended(exits, timed_out and bool(running)), results

    def _opened(self, job: BodyJob, results: list, deadline: float) -> None:
        """Wait until every rank has opened its group for ``job``, or ``deadline``; a rank that sent its
        result instead (its group could not be opened) or died ends the wait: ``_collect`` judges it."""
        waiting = set(range(self.n))
        while waiting and time.monotonic() < deadline:
            if any(r is not None for r in results) or any(_status(p) is not None for p in self.procs):
                return
            ready = multiprocessing.connection.wait(
                [self.pipes[r] for r in waiting] + [self.procs[r].sentinel for r in waiting],
                timeout=max(0.0, deadline - time.monotonic()),
            )
            for rank in [self.pipes.index(p) for p in ready if p in self.pipes]:
                message = _receive(self.pipes[rank])
                if isinstance(message, Opened) and message.seq == job.seq:
                    waiting.discard(rank)
                else:
                    results[rank] = _taken(message, job) or results[rank]

    def _collect(self, job: BodyJob, results: list, deadline: float, grace_s: float) -> bool:
        """Fill ``results``; True when the deadline passed with no rank failed."""
        failed_by = None
        while True:
            pending = [r for r in range(self.n) if results[r] is None and _status(self.procs[r]) is None]
            failed = any(r is not None and r.outcome == "failed" for r in results) or any(
                results[r] is None and _status(p) is not None for r, p in enumerate(self.procs)
            )
            now = time.monotonic()
            if failed and failed_by is None:
                failed_by = min(deadline, now + grace_s)
            stop = deadline if failed_by is None else failed_by
            if not pending or now >= stop:
                return failed_by is None and bool(pending)
            waiting = [self.pipes[r] for r in pending] + [self.procs[r].sentinel for r in pending]
            for ready in multiprocessing.connection.wait(waiting, timeout=stop - now):
                if ready in self.pipes:
                    rank = self.pipes.index(ready)
                    results[rank] = _taken(_receive(ready), job) or results[rank]

    def _ready(self, job: BodyJob, results: list) -> bool:
        """Whether every rank passed (or every one skipped) and then met the barrier in time."""
        outcomes = {r.outcome if r else None for r in results}
        if outcomes not in ({"passed"}, {"skipped"}):  # a skip on some ranks only: a rank may wait in a collective
            return False
        until = time.monotonic() + READY_GRACE_S + POOL_BARRIER_S
        for pipe in self.pipes:
            left = until - time.monotonic()
            if left <= 0 or not pipe.poll(left):
                return False
            word = _receive(pipe)
            if not (isinstance(word, Ready) and word.seq == job.seq and word.usable):
                return False
        return True

    def _exit(self, rank: int, result: BodyResult | None, stacks: dict[int, str]) -> rank_procs.RankExit:
        """A pool rank's end as a one-test rank's would read: status 0 for a body that passed or skipped,
        1 for one that failed (the rank itself lives on until the pool ends), its exit status where it
        died, None (with its stack) where it was still in the body."""
        if result is not None:
            return rank_procs.RankExit(rank, 1 if result.outcome == "failed" else 0)
        status = _status(self.procs[rank])
        if status is None:
            return rank_procs.RankExit(rank, None, stacks.get(rank, ""))
        stack = rank_procs.read_text(rank_procs.stack_path(self.workdir, rank)) if status < 0 else ""
        return rank_procs.RankExit(rank, status, stack)

    def end(self) -> None:
        """Every rank told to stop, given ``END_PATIENCE_S``, then ended with its group and reaped; the
        pool's folder removed."""
        if self.ended:
            return
        self.ended = True
        for pipe in self.pipes:
            try:
                send(pipe, Stop())
            except OSError:
                pass
        try:
            supervisor.end([p._popen for p in self.procs], patience_s=END_PATIENCE_S)
            for p in self.procs:
                p.join()
        finally:
            for pipe in self.pipes:
                pipe.close()
            run_folder.remove(self.workdir)


def _status(proc) -> int | None:
    return supervisor.exited(proc._popen)


def _receive(pipe) -> PoolMessage | None:
    """The rank's next message, None where it has gone or sent what is not one (the test is then
    judged by what the rank did not say)."""
    try:
        return receive(pipe, FROM_RANK, "a pool's rank")
    except (EOFError, OSError, MessageError):
        return None


def _taken(message: object, job: BodyJob) -> BodyResult | None:
    """``message`` as this job's result: a ``BodyResult`` whose fields are what a rank writes, with the
    job's number and test (a stale result of an earlier test is never this one's)."""
    if not isinstance(message, BodyResult):
        return None
    try:
        checked = from_json(BodyResult, to_json(message), "a pool's rank")
    except MessageError:
        return None
    return checked if checked.seq == job.seq and checked.test == job.test else None


def pool_key(setup: RankSetup) -> tuple:
    """The pools a test may share: its ranks, backend, GPUs, visibility, group timeout, output, coverage."""
    gpus = tuple(g.uuid or g.index for g in setup.gpus) if setup.gpus else None
    return (setup.n, setup.backend, gpus, setup.visible, setup.group_timeout_s, setup.capture, setup.coverage)
