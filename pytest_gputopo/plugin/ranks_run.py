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
import json
import os
import pickle
import shutil
import signal
import sys
import tempfile

import pytest

from ..bench.sweep import available_memory
from ..core import hangs
from ..render.escape import terminal_lines
from ..runtime import environ, rank_procs, run_folder
from ..runtime.rank_messages import BodyJob, BodyResult, CoverageSpec, RankSetup
from ..runtime.rank_pool import RankPool, pool_key
from . import rank_body
from .reporter import RANKS_PROPERTY
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
        results = [BodyResult.from_json(rank_procs.read_result(workdir, rank)) for rank in range(requirement.n)]
        trails = [hangs.read_trail(rank_procs.read_trail(workdir, rank)) for rank in range(requirement.n)]
    finally:
        if setup.capture:
            _show_output(item, workdir, requirement.n)
        dumps = _keep_flight_recorder_dumps(item, workdir)
        run_folder.remove(workdir)
    _report(item, requirement, ended, results, trails, dumps)


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
            _show_output(item, workdir, setup.n, before)
        dumps = _keep_flight_recorder_dumps(item, workdir)
    finally:
        if not pool.fit:
            pool.end()
    _report(item, requirement, ended, results, trails, dumps)


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
        # each rank's output to files, shown capped in the report (``_show_output``); under -s it streams
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


def _show_output(item: pytest.Function, workdir: str, n: int, before: dict[str, int] | None = None) -> None:
    """Each rank's stdout and stderr (from ``before``: where this test's starts in a pool's rank) into
    the test's captured output (its report), under a line naming the rank; a stream longer than the
    report takes (``rank_procs.Output``) is shown by its head and tail, and kept whole under pytest's
    temporary folder (its last 3 runs are kept), named there."""
    for rank in range(n):
        for stream, to in (("stdout", sys.stdout), ("stderr", sys.stderr)):
            path = rank_procs.output_path(workdir, rank, stream)
            start = (before or {}).get(path, 0)
            output = rank_procs.read_output(path, start)
            if output is None:
                continue
            to.write(f"----- rank {rank} of {n}, {stream} -----\n{output.head}")
            if output.cut:
                whole = os.path.join(_kept_folder(item), f"rank{rank}.{stream}")
                with open(path, "rb") as source, open(whole, "wb") as copy:
                    source.seek(start)
                    shutil.copyfileobj(source, copy)
                to.write(f"\n[... {output.cut} bytes not shown: the whole {stream} of rank {rank} is {whole}]\n")
                to.write(output.tail)
            to.flush()


def _keep_flight_recorder_dumps(item: pytest.Function, workdir: str) -> str:
    """The NCCL flight recorder's dumps the ranks wrote at a watchdog timeout, kept beside the report
    (``_kept_folder``); the line that names them, "" where there are none."""
    dumps = rank_procs.flight_recorder_dumps(workdir)
    if not dumps:
        return ""
    kept = _kept_folder(item)
    for dump in dumps:
        shutil.copyfile(dump, os.path.join(kept, os.path.basename(dump)))
    return (
        f"NCCL's flight recorder dumped {len(dumps)} rank(s)' last collectives to {kept} (torch's reader: "
        f"torchfrtrace {kept})"
    )


def _kept_folder(item: pytest.Function) -> str:
    """A folder of this test's own under pytest's ``--basetemp`` (pytest keeps the last 3 runs'), else a
    private one of the system's temporary folder."""
    kept = item.stash.get(_KEPT, None)
    if kept is None:
        factory = getattr(item.config, "_tmp_path_factory", None)  # pytest's tmp_path_factory (its tmpdir plugin)
        name = "gputopo-ranks-" + "".join(c if c.isalnum() else "_" for c in item.name)[:40]
        kept = item.stash[_KEPT] = str(factory.mktemp(name)) if factory is not None else tempfile.mkdtemp(prefix=name)
    return kept


_KEPT = pytest.StashKey[str]()  # the test's folder of what its ranks left beside the report


Results = list[BodyResult | None]  # each rank's, None where it wrote none (it died first)


def _report(
    item: pytest.Function, requirement, ended: rank_procs.Ended, results: Results, trails: list, dumps: str
) -> None:
    __tracebackhide__ = True
    n = requirement.n
    first = _first_failed(ended, results)
    problems = _problems(requirement, ended, results, first)
    skipped = [r for r in results if r and r.outcome == "skipped"]
    if not problems and skipped and len(skipped) == n:
        raise pytest.skip.Exception(f"{requirement}: rank 0 skipped: {skipped[0].error}", _use_item_location=True)
    if skipped and len(skipped) < n:  # ranks that disagree on skipping: a rank left in a collective waits
        problems += [
            (i, "skipped", f"skipped while other ranks ran: {r.error}", "")
            for i, r in enumerate(results)
            if r and r.outcome == "skipped"
        ]
    if not problems:
        return
    problems.sort()
    for rank, outcome, headline, _ in problems:
        record = {"rank": rank, "world_size": n, "outcome": outcome, "exit_status": ended.exits[rank].status}
        item.user_properties.append((RANKS_PROPERTY, json.dumps({"test": item.nodeid, **record, "error": headline})))
    shared_fate = len(problems) > 1  # the rank that failed first is said to have, the others ended for it
    said = [
        f"rank {rank} {outcome}{' first' if shared_fate and rank == first else ''}: {headline.partition(chr(10))[0]}"
        for rank, outcome, headline, _ in problems
    ]
    lines = [f"{requirement}: " + "; ".join(said)]
    stuck = hangs.culprit(_rank_ends(ended, results, trails))
    lines += [f"where it stopped: {stuck}"] if stuck else []
    lines += [dumps] if dumps else []
    for rank, outcome, headline, details in problems:
        lines += ["", f"--- rank {rank} of {n}: {outcome}", details or headline]
    pytest.fail("\n".join(terminal_lines("\n".join(lines).splitlines())), pytrace=False)


def _problems(requirement, ended: rank_procs.Ended, results: Results, first: int | None) -> list[tuple]:
    """(rank, outcome, headline, details) of each rank that did not pass: failed, died, hung in exit,
    timed out, or stuck (ended by the plugin after rank ``first`` failed: shared fate)."""
    problems = []
    for end, result in zip(ended.exits, results, strict=True):
        outcome = result.outcome if result else None
        if end.hung_in_exit:
            problems += _hung_in_exit(end, result)
        elif end.status is None:
            cause = (
                f"still running after {requirement.timeout_s:g} s (the test's timeout)"
                if ended.timed_out
                else f"still running {rank_procs.FAILED_GRACE_S:g} s after rank {first} failed"
            )
            stuck = "timed out" if ended.timed_out else "stuck"
            problems.append(
                (
                    end.rank,
                    stuck,
                    f"{cause}; ended by gputopo",
                    f"{cause}; ended by gputopo. Its stack:\n{end.stack.rstrip()}",
                )
            )
        elif outcome == "failed":
            problems.append((end.rank, "failed", result.error, result.traceback.rstrip()))  # type: ignore[union-attr]
        elif outcome == "skipped" or (outcome == "passed" and end.status == 0):
            continue
        else:
            problems.append((end.rank, "died", _died(end.status), end.stack.rstrip()))
    return problems


def _first_failed(ended: rank_procs.Ended, results: Results) -> int | None:
    """The rank that failed first: by the time each failed rank wrote its result (``ended_at``), a rank
    that died without one after them; None where none failed."""
    failed = [
        (result.ended_at if result else float("inf"), end.rank)
        for end, result in zip(ended.exits, results, strict=True)
        if end.status not in (0, None) or (result and result.outcome == "failed")
    ]
    return min(failed)[1] if failed else None


def _rank_ends(ended: rank_procs.Ended, results: Results, trails: list) -> list[hangs.RankEnd]:
    """Each rank's trail and how it ended, for ``hangs.culprit``."""
    ends = []
    for end, result, trail in zip(ended.exits, results, trails, strict=True):
        outcome = result.outcome if result else None
        if end.hung_in_exit:
            state, detail = "hung in exit", f"{outcome}" if outcome else ""
        elif end.status is None:
            state, detail = "running", hangs.innermost_frame(end.stack, _not_the_users())
        elif outcome in ("failed", "skipped"):
            state, detail = outcome, result.error  # type: ignore[union-attr]
        elif outcome == "passed" and end.status == 0:
            state, detail = "passed", ""
        else:
            state, detail = "died", _died(end.status)
        ends.append(hangs.RankEnd(end.rank, trail, state, detail))
    return ends


def _not_the_users() -> tuple[str, ...]:
    """Where a rank's innermost frame is not the user's code: torch, the standard library (and what is
    installed below it), this plugin."""
    torch = sys.modules.get("torch")  # imported: the ranks were started with it
    places = [os.path.dirname(os.__file__), os.path.dirname(os.path.dirname(__file__))]
    places += [os.path.dirname(torch.__file__)] if torch is not None and torch.__file__ else []
    return tuple(place + os.sep for place in places)


def _hung_in_exit(end: rank_procs.RankExit, result: BodyResult | None) -> list[tuple]:
    """A rank that wrote its result and did not end: a failed one is reported by its own error (not
    as timed out), with where it hung; one that passed or skipped did what it was asked."""
    if result is None or result.outcome != "failed":
        return []
    hung = f"then hung in exit for {rank_procs.EXIT_GRACE_S:g} s; ended by gputopo"
    details = f"{result.traceback.rstrip()}\n{hung}. Its stack:\n{end.stack.rstrip()}"
    return [(end.rank, "failed", f"{result.error} ({hung})", details)]


def _died(status: int | None) -> str:
    if status is not None and status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"killed by {name} (exit status {status}) before its body ended"
    return f"exited with status {status} before its body ended"
