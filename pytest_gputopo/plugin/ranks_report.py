"""What a ``ranks(n)`` test's report says: each rank's output, capped, with the rest kept beside it;
NCCL's flight recorder dumps kept and named; every rank that did not pass and how, which rank failed
first (shared fate: the others ended for it) and where a stuck test stopped (``core.hangs``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile

import pytest

from ..core import hangs
from ..render.escape import terminal_lines
from ..runtime import rank_procs
from ..runtime.rank_messages import BodyResult
from .reporter import RANKS_PROPERTY


def show_output(item: pytest.Function, workdir: str, n: int, before: dict[str, int] | None = None) -> None:
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


def keep_flight_recorder_dumps(item: pytest.Function, workdir: str) -> str:
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


def report(
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
