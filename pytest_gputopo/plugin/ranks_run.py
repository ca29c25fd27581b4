"""The call of a ``@pytest.mark.ranks(n)`` test: its body run as ``n`` ranks, and their outcome as the
test's.

The body reaches the ranks by reference: each rank loads the test's module from its file and finds
the function by its qualified name, and is given the fixture values this process made in the test's
setup, pickled (a value that cannot be pickled fails the test, naming the fixture). So fixtures and
``parametrize`` work as in any test, and are made once, not once per rank; ``gputopo_rank`` is the
one value each rank gets its own of. Collecting the item again in every rank would cost each rank a
pytest start-up and would run every fixture once per rank (n temporary folders for one test).

The gating markers were judged at setup (``hooks.pytest_runtest_setup``): a test that skips never
comes here, so it spawns nothing.
"""

from __future__ import annotations

import functools
import os
import pickle
import sys

import pytest

from ..bench.sweep import available_memory
from ..core import hangs
from ..runtime import environ, rank_procs, run_folder
from ..runtime.rank_messages import BodyJob, CoverageSpec, RankSetup
from ..runtime.rank_pool import RankPool, pool_key
from . import rank_body
from .ranks_report import keep_flight_recorder_dumps, report, show_output
from .run import run_of


def call(item: pytest.Function, requirement, strict: bool | None) -> None:
    """Run ``item``'s body as its ranks; return when every rank passed, else fail (or skip) the test
    saying which ranks did not pass and why. Nothing starts before the launch, the backend and the
    host's memory are known to allow it."""
    __tracebackhide__ = True
    _refuse_inside_a_launch(requirement)
    run = run_of(item.config)
    _check_backend(requirement, requirement.backend_on(run.topology))
    _check_memory(run, requirement, strict)
    setup = _setup(item, requirement, run.topology)
    if _pooled(item, requirement, setup):
        _call_in_pool(item, requirement, setup)
        return
    job = _body_job(item, seq=1)
    # private (0700): the store, results, stacks; one a killed run left is removed by a later run
    workdir = run_folder.make(run_folder.RANKS)
    try:
        ended = rank_procs.run_ranks(
            rank_body.main, (workdir, setup, job), requirement.n, requirement.timeout_s, workdir
        )
        results = [rank_procs.read_result(workdir, rank) for rank in range(requirement.n)]
        trails = [hangs.read_trail(rank_procs.read_trail(workdir, rank)) for rank in range(requirement.n)]
    finally:
        if setup.capture:
            show_output(item, workdir, requirement.n)
        dumps = keep_flight_recorder_dumps(item, workdir)
        run_folder.remove(workdir)
    report(item, requirement, ended, results, trails, dumps)


def _pooled(item: pytest.Function, requirement, setup: RankSetup) -> bool:
    """A warm pool where the test or the run asks for one (``ranks(..., pool=True)``,
    ``--gputopo-ranks-pool``), never for a leased test: a pool's ranks would hold its GPUs past its lease."""
    asked = requirement.pool if requirement.pool is not None else run_of(item.config).settings.ranks_pool
    return asked and not setup.locks and setup.visible is None


def _call_in_pool(item: pytest.Function, requirement, setup: RankSetup) -> None:
    """The body run by the pool of its kind (started for the first such test, or afresh after a test
    that left the last one unfit); reported as a test's own ranks are."""
    __tracebackhide__ = True
    pool = _pool_for(item.config, setup)
    job = _body_job(item, pool.next_seq())
    before = rank_procs.sizes(pool.workdir, setup.n)
    workdir = pool.workdir
    try:
        ended, results = pool.run(job, requirement.timeout_s)
        trails = [
            hangs.read_trail(rank_procs.read_trail(workdir, r, before[rank_procs.trail_path(workdir, r)]))
            for r in range(setup.n)
        ]
        if setup.capture:
            show_output(item, workdir, setup.n, before)
        dumps = keep_flight_recorder_dumps(item, workdir)
    finally:
        if not pool.fit:
            pool.end()
    report(item, requirement, ended, results, trails, dumps)


def _end_pools(held: list) -> None:
    while held:
        held.pop().end()


_POOL = pytest.StashKey[list]()  # the run's warm pool of ranks: at most one at a time, ended with the run


def _pool_for(config: pytest.Config, setup: RankSetup):
    """The live pool of ``setup``'s kind, or a new one (the last, of another kind or unfit, ended)."""
    held = config.stash.get(_POOL, None)
    if held is None:
        held = config.stash[_POOL] = []
        config.add_cleanup(functools.partial(_end_pools, held))  # pytest's own end of the run, however it ends
    key = pool_key(setup)
    if held and (held[0].key != key or not held[0].fit):
        held.pop().end()
    if not held:
        held.append(RankPool(key, rank_body.serve, setup))
    return held[0]


def _refuse_inside_a_launch(requirement) -> None:
    """Under torchrun or srun this process is already a rank: it does not start ranks of its own."""
    launch: environ.Launch | bool | None
    try:
        launch = environ.launch()
    except ValueError as exc:
        launch, why = True, f"a launcher's variables are set ({exc})"
    else:
        why = f"this pytest is already rank {launch.rank} of {launch.world_size} of a launch" if launch else ""
    if launch:
        pytest.fail(
            f"{requirement}: {why} (torchrun, srun): a ranks test starts its own ranks; run it in a "
            f"pytest started without a launcher",
            pytrace=False,
        )


def _check_backend(requirement, backend: str) -> None:
    """A backend the installed torch does not have fails the test here, not after n ranks started
    (torch's own ``is_backend_available``: built in, or registered by ``Backend.register_backend``,
    as the test's module may do at import; composite ``"cpu:gloo,cuda:nccl"`` checked part by part)."""
    __tracebackhide__ = True
    import torch  # after the launch's refusal, which a pytest without torch still says
    import torch.distributed as dist

    if not dist.is_available():
        pytest.fail(f"{requirement}: the installed torch {torch.__version__} has no torch.distributed", pytrace=False)
    try:
        available = dist.is_backend_available(backend)
    except (ValueError, KeyError) as exc:  # a composite string torch cannot read
        available, why = False, f" ({exc})"
    else:
        why = ""
    if not available:
        unreal = (dist.Backend.UNDEFINED, "fake")  # "fake": torch's own tests' backend, no collective runs
        have = [b for b in dist.Backend.backend_list if b not in unreal and dist.is_backend_available(b)]
        pytest.fail(
            f"{requirement}: the installed torch {torch.__version__} has no backend {backend!r}{why}; available "
            f"here: {', '.join(have) or 'none'}",
            pytrace=False,
        )


def _check_memory(run, requirement, strict: bool | None) -> None:
    """More ranks than this host's memory holds are unmet here, as too few GPUs are: skipped (failed
    when strict), before any starts, never the host's memory run out under n torch processes."""
    __tracebackhide__ = True
    shortfall = requirement.memory_shortfall(available_memory())
    if shortfall is None:
        return
    if run.settings.strict if strict is None else strict:
        pytest.fail(f"{requirement}: {shortfall}", pytrace=False)
    raise pytest.skip.Exception(f"{requirement}: {shortfall}", _use_item_location=True)


def _setup(item: pytest.Function, requirement, topology) -> RankSetup:
    """What every rank needs before the body: its group, its GPUs, its output."""
    gpus, visible, locks = _placed(item, requirement, topology)
    return RankSetup(
        n=requirement.n,
        backend=requirement.backend_on(topology),
        group_timeout_s=requirement.group_timeout_s,
        gpus=gpus,
        visible=visible,
        parent=os.getpid(),  # each rank dies with this process (``rank_body``)
        # each rank's output to files, shown capped in the report (``ranks_report.show_output``); under -s it streams
        capture=item.config.getoption("capture", "fd") != "no",
        locks=tuple(rank_procs.Inherited(fd) for fd in locks),  # each rank holds its lease's GPUs too
        coverage=_coverage(item.config),
    )


def _coverage(config: pytest.Config) -> CoverageSpec | None:
    """The coverage this process measures (``coverage.Coverage.current()``: pytest-cov's, or ``coverage
    run``'s), for the ranks to measure alike; None where none runs (coverage is not even imported)."""
    coverage = sys.modules.get("coverage")
    current = getattr(getattr(coverage, "Coverage", None), "current", None)
    measuring = current() if current is not None else None
    if measuring is None:
        return None
    settings = measuring.config

    def listed(values) -> tuple[str, ...] | None:
        return tuple(values) if values else None

    return CoverageSpec(
        data_file=os.path.join(config.invocation_params.dir, settings.data_file),  # where the run started
        config_file=settings.config_file or False,
        source=listed(settings.source),
        source_pkgs=listed(settings.source_pkgs),
        include=listed(settings.run_include),
        omit=listed(settings.run_omit),
        branch=bool(settings.branch),
        timid=bool(settings.timid),
        cover_pylib=bool(settings.cover_pylib),
    )


def _body_job(item: pytest.Function, seq: int) -> BodyJob:
    """The body by reference and the fixture values pickled (as pytest's own ``pytest_pyfunc_call``
    picks them: ``_fixtureinfo.argnames``)."""
    kwargs = {}
    for name in item._fixtureinfo.argnames:
        if name != rank_body.RANK_FIXTURE:
            kwargs[name] = _pickled(item, f"fixture {name!r}", item.funcargs[name])
    instance = item.instance
    return BodyJob(
        seq=seq,
        test=item.nodeid,
        module=item.module.__name__,
        path=item.module.__file__,
        qualname=item.obj.__qualname__,
        instance=None if instance is None else _pickled(item, f"the instance of {type(instance).__name__}", instance),
        kwargs=kwargs,
        takes_rank=rank_body.RANK_FIXTURE in item._fixtureinfo.argnames,
        rewrite=item.config.getoption("assertmode", "rewrite") == "rewrite",
    )


def _pickled(item: pytest.Function, what: str, value) -> bytes:
    __tracebackhide__ = True
    try:
        return pickle.dumps(value)
    except Exception as exc:  # noqa: BLE001 - whatever pickling raises, the test says which value
        pytest.fail(
            f"{item.nodeid}: {what} ({type(value).__name__}) cannot be sent to the ranks: {exc}. A ranks "
            f"test's fixture values are made once, in the pytest process, and pickled to each rank: give "
            f"the ranks what they can rebuild it from (a path, a config), or build it in the test's body",
            pytrace=False,
        )


def _placed(item: pytest.Function, requirement, topology) -> tuple[tuple | None, str | None, tuple[int, ...]]:
    """Each rank's GPU, the ``CUDA_VISIBLE_DEVICES`` the ranks get and the lease's lock descriptors:
    the test's lease where leases are on (the ranks see the leased GPUs alone, as ``cuda:0..n-1``),
    else the first n GPUs this process sees, as torchrun's local ranks take ``cuda:<local_rank>``
    (visibility left as it is); (None, None, ()) on the CPUs."""
    if not requirement.on_gpus(topology):
        return None, None, ()
    from . import leases  # GPU leases (--gputopo-lease), a room of their own

    held = leases.held(item)
    if held is None:
        return tuple(topology.gpus[: requirement.n]), None, ()
    return tuple(held[: requirement.n]), leases.visible_devices(held[: requirement.n]), leases.held_locks(item)
