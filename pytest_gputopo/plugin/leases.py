"""GPU leases (``--gputopo-lease``): each selected test whose markers ask for GPUs holds a set of its
own while it runs, chosen by topology (``core.placement``), exclusive host-wide
(``runtime.gpu_locks``), and seen by CUDA alone (``lease_child``: the test runs in a process of
its own whose ``CUDA_VISIBLE_DEVICES`` names them from before its conftests load). ``Leases`` is the
run's part: its hooks, and the processes that run leased tests; taking a lease is ``lease_taking``'s,
what each test asks ``lease_demands``', what it used ``lease_figures``'.

For other plugin modules (a ``ranks(n)`` test spawns its ranks itself, in this process):
``held(item)`` is the GPUs the running item holds, renumbered as the test sees them (``index``:
``cuda:<i>``), or None; ``visible_devices(gpus)`` the ``CUDA_VISIBLE_DEVICES`` value that shows a
process exactly those GPUs. The lease is taken around the item's whole protocol (setup, call,
teardown), ``ranks(n)`` counting as n GPUs where its ranks run on GPUs.
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

import pytest

from ..core.model import NVML, Gpu
from ..render.escape import terminal
from ..runtime import gpu_locks
from ..runtime.environ import seeing_only
from .lease_child import LeaseProcess
from .lease_demands import Demands, leasable
from .lease_figures import Figures
from .lease_taking import RUN, Lease, Taker, within
from .run import GputopoRun, run_of

LEASE = pytest.StashKey["Lease"]()
NOT_PLACED = pytest.StashKey[tuple]()  # (why the item holds no lease, whether it waited in vain): it skips or fails


class Kept(NamedTuple):
    """A lease, and the process that runs its tests, kept from one test for the next (``nodeid``)."""

    lease: Lease
    process: LeaseProcess
    nodeid: str


def held(item: pytest.Item) -> tuple[Gpu, ...] | None:
    """The GPUs ``item`` holds while it runs (``index``: ``cuda:<i>`` inside the test), or None."""
    lease = item.stash.get(LEASE, None)
    return None if lease is None else lease.gpus


def held_locks(item: pytest.Item) -> tuple[int, ...]:
    """The lock descriptors of the lease ``item`` holds while it runs (none without one)."""
    lease = item.stash.get(LEASE, None)
    return () if lease is None else lease.fds


def visible_devices(gpus) -> str:
    """``CUDA_VISIBLE_DEVICES`` naming exactly ``gpus``, in order, by UUID (``GPU-<uuid>`` "as given
    by nvidia-smi -L", a form the CUDA Programming Guide lists, 5.2.1.1 CUDA_VISIBLE_DEVICES:
    docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/environment-variables.html): unlike an
    index, a UUID means the same GPU whatever the outer ``CUDA_VISIBLE_DEVICES`` or
    ``CUDA_DEVICE_ORDER`` numbered."""
    return ",".join(g.uuid for g in gpus)


class Leases:
    """The plugin object registered when leases are on (not in a test's own child process)."""

    def __init__(self, run: GputopoRun, reqs_key, folder: str, figures: Figures):
        self.run, self.reqs_key, self.folder, self.figures = run, reqs_key, folder, figures
        self.demands = Demands.of_run(run, reqs_key)
        self.kept: Kept | None = None
        self.spare: LeaseProcess | None = None  # started ahead for a test's module, before its lease
        self.ending: list[LeaseProcess] = []  # told to end; each holds its GPUs until it has ended
        # Why no process is started ahead (--pdb: the child reads this one's input; or one refused its
        # lease, as every one would in this run), or None.
        self.no_spares: str | None = "--pdb" if run.config.getoption("usepdb", False) else None
        self.started = time.time()  # xdist's controller: when this run's leases began (``RUN``)
        self.taker = Taker(
            folder,
            self.demands,
            run.settings.lease_timeout_s,
            getattr(run.config, "workerinput", None) or {},
            lambda item: self.prestart(item),
            lambda: self.reap(),
        )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        placer, requirements = self.demands.placer_of(item)
        kept = self.kept if self.kept is not None and self.kept.nodeid == item.nodeid else None
        if kept is None:
            self.end_kept()
        self.reap()
        lease = None
        if kept is not None:
            lease = kept.lease.shrunk(self.demands.budget_of(item))
            self.kept = kept = kept._replace(lease=lease)
            lease.say(gpu_locks.Holder(kept.process.process.pid, item.nodeid, time.time()))
            item.stash[LEASE] = lease
        elif placer is not None and (placer.never or self.demands.too_large(item, placer)):
            item.stash[NOT_PLACED] = (placer.never or self.demands.too_large(item, placer), False)
        elif placer is not None:
            lease = self.taker.take(item, placer)
            if lease is None:
                item.stash[NOT_PLACED] = (self.taker.who_holds_what(placer, requirements), True)
            else:
                item.stash[LEASE] = lease
        self.taker.first_round = False  # the worker's first test has come (``Taker.take``)
        if lease is not None:
            # Its processes: the one it runs in (known once it is chosen), or this one's, which start its
            # ranks, but not the processes of other tests still ending here, which may share its GPUs.
            root = None if self.in_own_process(item) else os.getpid()
            uuids, declared = [g.uuid for g in lease.gpus], self.demands.declared(item)
            self.figures.start(item.nodeid, uuids, root, self.others, lease.budget_gib, declared)
        try:
            return (yield)
        finally:
            if lease is not None:
                self.figures.stop(item.nodeid)
                del item.stash[LEASE]
                if self.kept is None or self.kept.lease is not lease:
                    lease.release(handed_on=self.in_own_process(item))

    def keeps(self, lease: Lease, nextitem: pytest.Item | None, module: str) -> bool:
        """Whether ``nextitem`` runs on the same ``lease`` in the same process (``module``: the one
        that process collected): a test of that module, run in a process of its own (not ranks),
        that asks for as many GPUs with a memory budget within the lease's (``within``), and that the
        policy lets keep them (``lease_policy.may_keep``: no test waiting before it, in this run or
        another, reserved them beyond what it fits beside, and no better-linked set is open to it).
        Decided before the test before it runs, which must know what runs next for its fixtures'
        teardown."""
        if nextitem is None or str(nextitem.path) != module or nextitem.get_closest_marker("ranks") is not None:
            return False
        placer, _ = self.demands.placer_of(nextitem)
        if (
            placer is None
            or placer.never
            or placer.k != len(lease.gpus)
            or not within(self.demands.budget_of(nextitem), lease.budget_gib)
        ):
            return False
        return self.taker.may_keep(lease, nextitem, placer)

    def end_kept(self) -> None:
        """Stop the process kept for a test that did not come next, and give its GPUs back."""
        kept, self.kept = self.kept, None
        if kept is not None:
            self.let_end(kept.process)
            kept.lease.release(handed_on=True)

    def let_end(self, process: LeaseProcess) -> None:
        """Tell ``process`` to end without waiting: the GPUs it holds (its own lock descriptors) stay
        locked until it has ended, so the next test here need not wait for it unless it needs them."""
        process.end()
        self.ending.append(process)

    def others(self) -> set[int]:
        """The processes of this run's other leased tests (kept, started ahead, ending)."""
        found = [*self.ending, self.spare, self.kept.process if self.kept is not None else None]
        return {p.process.pid for p in found if p is not None}

    def reap(self) -> None:
        self.ending = [process for process in self.ending if not process.ended()]

    def in_own_process(self, item: pytest.Item) -> bool:
        """Whether ``item`` runs in a leased process of its own (a ``ranks`` test spawns its ranks)."""
        placer, _ = self.demands.placer_of(item)
        return placer is not None and not placer.never and item.get_closest_marker("ranks") is None

    def prestart(self, item: pytest.Item | None) -> None:
        """Start the process ``item`` will run in, ahead of its lease (it waits for the lease before
        its conftests load, seeing no GPU until then): its start overlaps the test before or the
        wait for GPUs. One process ahead at a time, for one module. One that cannot start (too many
        processes or open files, say) is not started ahead: that is no test's failure, and the
        test's own start, when it comes, says why if it still cannot."""
        if item is None or self.no_spares is not None or not self.in_own_process(item):
            return
        if self.spare is not None and self.spare.module == str(item.path) and self.spare.alive:
            return
        self.end_spare()
        try:
            self.spare = LeaseProcess(item, seeing_only(""))
        except OSError:
            pass

    def end_spare(self) -> None:
        spare, self.spare = self.spare, None
        if spare is not None:
            self.let_end(spare)

    def process_for(self, item: pytest.Item, lease: Lease) -> LeaseProcess:
        """The process that runs ``item`` on ``lease``: the one started ahead for its module where it
        takes the lease, else a new one, started seeing the lease's GPUs."""
        visible = visible_devices(lease.gpus)
        spare, self.spare = self.spare, None
        if spare is not None and spare.module == str(item.path) and spare.alive:
            refused = spare.hand(lease, visible)
            if refused is None:
                return self.held_by(spare, lease, item)
            self.no_spares = refused  # every one would refuse: not started ahead again
        if spare is not None:
            self.let_end(spare)
        process = LeaseProcess(item, seeing_only(visible))
        process.hand(lease, visible)  # taken (it saw them from its start), or it ended: its test says so
        return self.held_by(process, lease, item)

    @staticmethod
    def held_by(process: LeaseProcess, lease: Lease, item: pytest.Item) -> LeaseProcess:
        """The locks name the process that holds them now (its keeper, which outlives this run's
        process if that is killed): "who holds what" then names a live holder."""
        lease.say(gpu_locks.Holder(process.process.pid, item.nodeid, time.time()))
        return process

    @pytest.hookimpl(wrapper=True, trylast=True)  # inside other plugins' wrappers: before their end
    def pytest_runtestloop(self, session: pytest.Session):
        """The processes left have ended when the run's tests have: what they leave for the run (a
        coverage data file for pytest-cov to combine at the loop's end, a worker's figures) is there
        before the run (or under ``-n``, xdist's controller) reads it, as a worker's is."""
        try:
            return (yield)
        finally:
            self.stop_all()

    def stop_all(self) -> None:
        """Tell every process left to end, and wait for each (terminated, then killed, late)."""
        self.end_kept()
        self.end_spare()
        ending, self.ending = self.ending, []
        for process in ending:
            process.stop()

    def pytest_unconfigure(self) -> None:
        """No process of this run outlives it (a run may end without its test loop ending)."""
        self.stop_all()

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        """xdist controller: when this run's leases began and its id, the same for every worker (``take``)."""
        node.workerinput[RUN] = [self.started, f"{os.getpid()}-{self.started!r}"]

    @pytest.hookimpl(tryfirst=True)  # before the markers are judged: they would be judged on every GPU
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        reason, waited = item.stash.get(NOT_PLACED, (None, False))
        if reason is None:
            return
        strict = any(s for _, s in item.stash.get(self.reqs_key, ())) or self.run.settings.strict
        if strict or waited:  # a test that could run here, but found no GPUs free in time, failed
            pytest.fail(terminal(reason), pytrace=False)
        raise pytest.skip.Exception(terminal(reason), _use_item_location=True)

    @pytest.hookimpl(trylast=True)  # after the plugin's own hook has read the markers
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list) -> None:
        """Each test's own budget (``lease_memory``), checked: a bad one is a usage error naming the
        test. Under xdist, the leased tests costliest first (``Demands.by_cost``); every worker
        collects the same order, as xdist requires. A run without xdist runs one test at a time: its
        order is left as it is."""
        self.demands.read(config, items)
        if hasattr(config, "workerinput"):
            self.demands.by_cost(items)


class InOwnProcess:
    """Runs a leased test in a process that sees its GPUs alone (``lease_child``): the one kept for
    it by the test before, or the one started ahead for it (``Leases.process_for``); kept for the
    next test where that fits (``Leases.keeps``), so that consecutive tests of one module on one
    lease pay one process start. A ``ranks(n)`` test
    stays here: its ranks are processes of their own, started with the lease's ``visible_devices``."""

    def __init__(self, leases: Leases):
        self.leases = leases

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem) -> bool | None:
        lease = item.stash.get(LEASE, None)
        if lease is None or item.get_closest_marker("ranks") is not None:
            return None
        leases, kept = self.leases, self.leases.kept
        leases.kept = None
        if kept is not None and kept.lease is lease and kept.process.alive:
            process = kept.process
        else:
            process = leases.process_for(item, lease)
        leases.figures.runs_in(item.nodeid, process.process.pid)
        keep = leases.keeps(lease, nextitem, process.module)
        # The next test's process starts while this one runs, once it has begun: a start competing
        # with this test's own collection and setup would delay them (at a round's end, every worker's).
        begun = None if keep else (lambda: leases.prestart(nextitem))
        process.run(item, nextitem if keep else None, begun)
        if keep and process.alive:
            leases.kept = Kept(lease, process, nextitem.nodeid)
        else:
            leases.let_end(process)
        return True


def register(config: pytest.Config, run: GputopoRun, reqs_key) -> None:
    """Leases for this run: its lock folder checked now (a usage error naming it and where to point
    instead), then the plugins that take them and run leased tests in processes of their own."""
    settings = run.settings
    if settings.machine is not None:
        raise pytest.UsageError(
            f"--gputopo-lease places tests on this host's GPUs, but {settings.machine_from} "
            f"names another machine ({settings.machine}); give one or the other (with --gputopo-plan, "
            f"a plan shows what leases would do there)"
        )
    folder = settings.lease_dir or gpu_locks.default_folder()
    try:
        gpu_locks.lock_folder(folder)
    except OSError as exc:
        where = settings.lease_dir_from or "the default"
        raise pytest.UsageError(
            f"{exc} ({where}): GPU leases are not taken there; remove it, or point "
            f"--gputopo-lease-dir (ini gputopo_lease_dir, env PYTEST_GPUTOPO_LEASE_DIR) at a "
            f"folder only you can write"
        ) from None
    figures = Figures(config, settings.strict)
    leases = Leases(run, reqs_key, folder, figures)
    config.pluginmanager.register(figures, "gputopo-lease-figures")
    config.pluginmanager.register(leases, "gputopo-leases")
    config.pluginmanager.register(InOwnProcess(leases), "gputopo-lease-runner")


def auto_workers(config: pytest.Config) -> int | None:
    """xdist's worker count under ``-n auto`` with leases: the GPUs a lease may hold (NVML's facts,
    learned now: xdist asks before the run is configured); None (xdist's own count) where none."""
    from ..probe import learn  # under -n auto alone

    allowed, _ = leasable(learn(None, needs=frozenset((NVML,))).topology)
    return len(allowed.gpus) or None


def gpus_of(item: pytest.Item) -> tuple[Gpu, ...]:
    """``gputopo_gpus``: the GPUs the test holds (in its own process, the machine it sees is the
    lease); without a lease it holds none of its own: every GPU it sees."""
    found = held(item)
    return found if found is not None else run_of(item.config).topology.gpus
