"""What the pytest process and the ranks of a ``ranks(n)`` test send each other, one type per message.

``RankSetup`` starts a rank (its group, GPUs, output); ``BodyJob`` is one test's body, by reference
(module, qualified name) with the fixture values pickled; ``BodyResult`` is what the body did, with
the job's sequence number and test id, so that a result of another test is never taken for this
one's; ``Ready`` is what a warm pool's rank says after the barrier that follows each test. A rank
started for one test is given its setup and job as spawn arguments and writes its result to a file
(``rank_procs``); a pool's rank is given jobs and sends results and readiness over its pipe.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

OUTCOMES = ("passed", "failed", "skipped")
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
    outcome: str
    error: str = ""
    traceback: str = ""
    ended_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> BodyResult | None:
        """A result as a rank wrote it, or None where it is not one (a rank's file or pipe is read as
        untrusted: a body may write anything anywhere)."""
        if not isinstance(data, dict) or set(data) != {f for f in cls.__dataclass_fields__}:
            return None
        typed = (
            type(data["seq"]) is int
            and all(isinstance(data[k], str) for k in ("test", "outcome", "error", "traceback"))
            and type(data["ended_at"]) is float
        )
        return cls(**data) if typed and data["outcome"] in OUTCOMES else None


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
