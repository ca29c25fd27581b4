"""What the run and a leased test's own process (``lease_child``) say to each other, one type per
message, each channel's written and read through its ``Channel`` here (``runtime.messages``: checked
field by field on read, a plain dict refused on write).

- ``SPEC``: the process's start (``LeaseSpec``), a file in the lease's folder that the environment
  names (``runtime.environ.lease_spec``): its descriptors and its worker input.
- ``HANDED``: the lease handed to it (``Handed``: the machine it sees and its ``CUDA_VISIBLE_DEVICES``),
  a file beside it; the GPUs' lock descriptors come over a socket.
- ``COMMANDS``: the run's commands, a line each on a pipe (``RunTest``; the pipe closed: the end).
- ``REPORTS``: the process's lines on another pipe: whether it took its lease (``Took``, ``Refused``),
  then for each test its reports (``Report``: pytest's own serialized form, as xdist relays its
  workers'), its warnings (``RecordedWarning``), ``Missing`` where it did not collect the test, and
  ``Done``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..runtime.messages import Channel


@dataclass(frozen=True)
class LeaseSpec:
    """A leased test's process's start: the socket its lease's locks come over, its commands' and
    reports' pipes, its worker input (``lease_node``), and the file its own report lines go to where
    the test's output goes to the run's terminal (-s, --pdb)."""

    lease: int
    commands: int
    reports: int
    workerinput: dict[str, Any]
    terminal: str | None = None


@dataclass(frozen=True)
class Handed:
    """The lease handed to the process: its GPUs' machine (``schema.to_dict``) and ``CUDA_VISIBLE_DEVICES``."""

    topology: dict[str, Any]
    visible: str


@dataclass(frozen=True)
class Took:
    """The process took its lease: ``CUDA_VISIBLE_DEVICES`` names its GPUs."""


@dataclass(frozen=True)
class Refused:
    """The process could not take its lease (``why``): it ends, and the run starts another."""

    why: str


@dataclass(frozen=True)
class RunTest:
    """Run ``test`` (a node id), then ``next`` (for its fixtures' teardown), or None: no test follows."""

    test: str
    next: str | None = None


@dataclass(frozen=True)
class Report:
    """A test's report as ``pytest_report_to_serializable`` made it (pytest's own form)."""

    data: dict[str, Any]


@dataclass(frozen=True)
class RecordedWarning:
    """A warning a test recorded, for the run's summary: its category named by module and class."""

    module: str
    category: str
    message: str
    filename: str
    lineno: int | None = None


@dataclass(frozen=True)
class Missing:
    """The process did not collect ``test`` (its collection differs from the run's)."""

    test: str


@dataclass(frozen=True)
class Done:
    """Every report of ``test`` has been sent."""

    test: str


SPEC = Channel("a leased test's process's spec", LeaseSpec)
HANDED = Channel("a lease handed to its process", Handed)
COMMANDS = Channel("the run's commands to a leased test's process", RunTest)
REPORTS = Channel("a leased test's process's reports", Took, Refused, Report, RecordedWarning, Missing, Done)
