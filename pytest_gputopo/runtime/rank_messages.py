"""What the pytest process and the ranks of a ``ranks(n)`` test send each other, one type per message.

``RankSetup`` starts a rank (its group, GPUs, output); ``BodyJob`` is one test's body, by reference
(module, qualified name) with the fixture values pickled; ``BodyResult`` is what the body did, with
the job's sequence number and test id, so that a result of another test is never taken for this
one's; ``Ready`` is what a warm pool's rank says after the barrier that follows each test, ``Stop``
what ends it. A rank started for one test is given its setup and job as spawn arguments and writes its
result to a file (``RESULTS``, through ``rank_procs``); a pool's rank is given jobs and sends results
and readiness over its pipe (``send``, ``receive``: pickled, as torch's spawn pickles the arguments,
each message checked for its kind as it comes). Every rank appends its trail of torch.distributed
calls to a file of its own (``TrailCall``, ``TrailLeft``: ``TRAIL``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

from .messages import Channel, MessageError, from_json, is_message, to_json

Outcome = Literal["passed", "failed", "skipped"]
OUTCOMES = get_args(Outcome)
POOL_BARRIER_S = 5.0  # after each test of a warm pool: every rank meets a barrier this soon, or a new pool


@dataclass(frozen=True)
class CoverageSpec:
    """The coverage measurement the pytest process runs (pytest-cov's, or ``coverage run``'s), for each
    rank to measure its bodies alike: a parallel data file beside the run's, which the run's own
    combine takes in (pytest-cov combines at its end; ``coverage combine`` after ``coverage run``)."""

    data_file: str  # absolute: the run's data file, each rank's beside it with a suffix of its own
    config_file: str | bool  # the file the run's coverage read, or False: none
    source: tuple[str, ...] | None = None
    source_pkgs: tuple[str, ...] | None = None
    include: tuple[str, ...] | None = None
    omit: tuple[str, ...] | None = None
    branch: bool = False
    timid: bool = False
    cover_pylib: bool = False


@dataclass(frozen=True)
class RankSetup:
    """What every rank of a test (or of a pool) needs before any body: the group and its GPUs."""

    n: int
    backend: str
    group_timeout_s: float
    gpus: tuple | None  # a ``core.model.Gpu`` per rank, or None on the CPUs
    visible: str | None  # the ranks' CUDA_VISIBLE_DEVICES (a lease's GPUs), or None: as it is
    parent: int  # the pytest process: each rank dies with it
    capture: bool  # each rank's stdout and stderr to files, for the report
    locks: tuple = ()  # a lease's lock descriptors (``rank_procs.Inherited``), held by every rank
    coverage: CoverageSpec | None = None  # the run measures coverage: each rank measures its bodies too


@dataclass(frozen=True)
class BodyJob:
    """One test's body: where its function is, its fixture values pickled, the test and its number."""

    seq: int
    test: str  # the test's node id
    module: str
    path: str
    qualname: str
    instance: bytes | None
    kwargs: dict[str, bytes] = field(default_factory=dict)
    takes_rank: bool = False
    rewrite: bool = True


@dataclass(frozen=True)
class BodyResult:
    """What a rank's body did: ``outcome`` one of ``OUTCOMES``, its error in one line and its
    traceback, and when it ended (which rank failed first)."""

    seq: int
    test: str
    outcome: Outcome
    error: str = ""
    traceback: str = ""
    ended_at: float = 0.0


@dataclass(frozen=True)
class Opened:
    """A pool's rank has its group open and begins the job's body: the test's time starts here, so that
    a fresh pool's start (torch imported, the group formed) is not taken from the first test's."""

    seq: int


@dataclass(frozen=True)
class Ready:
    """A pool's rank after the barrier that follows a test: ``usable`` when every rank met it within
    its deadline (the group works for the next test)."""

    seq: int
    usable: bool


@dataclass(frozen=True)
class Stop:
    """A pool's rank is told to end: its group closed, it exits."""


@dataclass(frozen=True)
class TrailCall:
    """A torch.distributed call a rank's body entered (``plugin.rank_trail``): its op, its group's name
    and members, its first tensor's shape, its peer (point-to-point), its number among the group's
    calls of its kind (``seq``) and among the rank's calls (``i``, which ``TrailLeft`` names)."""

    op: str
    group: str
    members: tuple[int, ...]
    shape: str
    peer: int | None
    seq: int
    i: int


@dataclass(frozen=True)
class TrailLeft:
    """The call numbered ``left`` returned."""

    left: int


# A rank's trail, a line per message, read back by ``core.hangs.read_trail`` by its own rules (the core
# reads the lines' fields, as untrusted as any file a body can write to).
TRAIL = Channel("a rank's trail", TrailCall, TrailLeft)
RESULTS = Channel("a rank's result file", BodyResult)  # a rank started for one test: its result, as a file
TO_RANK = (BodyJob, Stop)  # what a pool's rank is sent over its pipe
FROM_RANK = (Opened, BodyResult, Ready)  # what it sends back
PoolMessage = BodyJob | Stop | Opened | BodyResult | Ready


def send(pipe, message: PoolMessage) -> None:
    """``message`` over a pool's pipe; TypeError for anything that is not one of its kinds (a dict)."""
    if type(message) not in TO_RANK + FROM_RANK:
        raise TypeError(f"a rank's pipe carries {', '.join(k.__name__ for k in TO_RANK + FROM_RANK)}, not {message!r}")
    pipe.send(message)


def receive(pipe, kinds: tuple[type, ...], source: str) -> PoolMessage:
    """The next message on a pool's pipe, one of ``kinds``; MessageError naming ``source`` otherwise
    (EOFError or OSError where the other end has gone). A result is checked field by field, as one
    read from a file is: a body may have replaced anything in its rank."""
    try:
        message = pipe.recv()
    except (EOFError, OSError):
        raise
    except Exception as exc:  # noqa: BLE001 - what does not unpickle here is not a message
        raise MessageError(f"{source}: a message that cannot be read: {type(exc).__name__}: {exc}") from None
    if type(message) not in kinds or not is_message(message):
        raise MessageError(
            f"{source}: sent {type(message).__name__}, not one of {', '.join(k.__name__ for k in kinds)}"
        )
    if isinstance(message, BodyResult):
        return from_json(BodyResult, to_json(message), source)
    return message
