"""One setting, three surfaces: ``--gputopo-<name>``, ini ``gputopo_<name>``, env ``PYTEST_GPUTOPO_<NAME>``.

Precedence: ini < env < command line (< a marker's own argument, applied by the plugin). Every
value is returned with where it came from, so that an error names its source.
"""

from __future__ import annotations

import argparse
from typing import NamedTuple, overload

import pytest

from ..core import numtext
from ..core.limits import MAX_BYTES
from ..core.units import read_size
from ..runtime import environ as runtime
from ..runtime.files import unwritable


class Option(NamedTuple):  # not a dataclass: cheaper to define, and this module loads with the plugin
    name: str
    metavar: str | None  # None: a flag
    help: str
    const: str | None = None  # the value when the option is given without one (--gputopo-check)

    @property
    def flag(self) -> str:
        return "--gputopo-" + self.name

    @property
    def ini(self) -> str:
        return "gputopo_" + self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return runtime.env_name(self.name.replace("-", "_"))


# core.thresholds.FLOOR_KEYS, spelled here so that loading the plugin does not import the core (a test
# compares the two).
FLOOR_KEYS = ("p2p", "h2d_pinned", "h2d_pageable", "allreduce")

OPTIONS = {
    o.name: o
    for o in (
        Option(
            "machine",
            "NAME|PATH",
            "gate against a recorded machine instead of this host: a bundled name (see `gputopo machines`), "
            "a profile written by `gputopo record`, or `nvidia-smi topo -m` text (.txt)",
        ),
        Option("strict", None, "an unmet requirement fails the test instead of skipping it"),
        Option(
            "require",
            "EXPR",
            "stop the run before collection unless the machine meets EXPR, e.g. 'gpus>=8,p2p,link>=NV18'",
        ),
        Option(
            "expect",
            "NAME|PATH",
            "stop the run before collection if this node is worse than a reference profile "
            "(a healthy node recorded once): links, NVLinks, PCIe generation/width, P2P, GPU count",
        ),
        Option(
            "check",
            "LEVEL",
            "add health-check items: 'quick' (topology and P2P status, seconds) or 'full' "
            "(also P2P, host-to-device and all-reduce benchmarks)",
            const="quick",
        ),
        Option(
            "json",
            "PATH",
            "write the topology and every measurement (units, sizes, iterations, spread, "
            "measured or recorded) and every check's outcome as one JSON document",
        ),
        Option(
            "html",
            "PATH",
            "write a self-contained HTML report (the machine, coloured link and P2P matrices, "
            "measured bandwidth against what the links should give, checks, unmet requirements, "
            "NCCL's transports): one file that opens offline",
        ),
        Option(
            "allreduce-backend",
            "nccl|gloo",
            "torch.distributed backend of the all-reduce benchmark: nccl (GPUs, default) or gloo (CPUs)",
        ),
        Option("allreduce-world-size", "N", "processes of the gloo all-reduce benchmark (default 2)"),
        Option(
            "allreduce-engine",
            "torch|nccl-tests",
            "torch (torch.distributed, default) or nccl-tests (runs all_reduce_perf when it is installed)",
        ),
        Option(
            "allreduce-sched",
            "fair|fifo",
            "CPU scheduling of the all-reduce workers: fair (the kernel's default) or fifo (SCHED_FIFO, "
            "needs root or CAP_SYS_NICE; keeps scheduler wake-up delays out of CPU figures)",
        ),
        Option(
            "allreduce-size",
            "BYTES",
            "the size all-reduce thresholds are judged at, e.g. 1G, 256M (default 1G on GPUs, 16M with gloo)",
        ),
        Option(
            "bench-timeout",
            "SECONDS",
            "deadline of each benchmark: a hang or a dead rank ends it with a reason (default 300)",
        ),
        Option(
            "bench-budget",
            "SECONDS",
            "time each benchmark size may sample for a stable figure; one that did not settle in it is "
            "reported with its interval, not stable (default 10)",
        ),
        *(
            Option(
                f"floor-{key.replace('_', '-')}",
                "RATIO",
                f"pass a {key.replace('_', ' ')} measurement at RATIO x the expected bandwidth (default in "
                f"docs/thresholds.md; set explicitly, it also replaces a published per-SKU floor)",
            )
            for key in FLOOR_KEYS
        ),
        Option(
            "cache",
            None,
            "reuse benchmark results from pytest's cache, keyed by host, GPUs, driver and "
            "library versions (see --gputopo-cache-max-age)",
        ),
        Option("cache-max-age", "HOURS", "the age limit of cached benchmark results (default 24)"),
        Option(
            "reprobe",
            None,
            "ask CUDA (device order, peer access, multicast) and torch (its CUDA and NCCL versions) "
            "again instead of taking them from this boot's record in pytest's cache",
        ),
        Option(
            "rank-timeout",
            "SECONDS",
            "under torchrun: how long a rank waits for the others to report "
            "their topology or a verdict before the run ends with a reason (default 120)",
        ),
        Option(
            "plan",
            None,
            "a dry run: print each selected test's verdict (run, skip, fail, broken, or unknown until "
            "a benchmark measures) and why, on this host or --gputopo-machine, and run no test and no "
            "benchmark; exit status 0",
        ),
        Option("plan-json", "PATH", "write the plan as JSON to PATH (implies --gputopo-plan)"),
        Option(
            "lease",
            None,
            "GPU leases: each test whose markers ask for GPUs holds a set of its own while it runs, "
            "chosen by topology to meet them, exclusive across xdist workers and pytest runs on this "
            "host, and runs in a process of its own that sees only those GPUs (`gputopo docs parallel`)",
        ),
        Option(
            "lease-timeout",
            "SECONDS",
            "how long a leased test waits for a free set of GPUs that meets its markers "
            "before it fails naming who holds what (default 600)",
        ),
        Option(
            "lease-memory",
            "GIB|measured",
            "GPU leases share GPUs by memory: each leased test uses at most GIB GiB (2^30 bytes) of "
            "each GPU it holds, and leases share a GPU while their budgets and a CUDA context's 1 GiB "
            "each fit its memory; or 'measured': each undeclared test's last measured peak and a "
            "quarter (at least 0.5 GiB more), whole GPUs until it has one (default: whole GPUs, exclusive)",
        ),
        Option(
            "ranks-pool",
            None,
            "ranks(n) tests share warm pools of ranks (per n, backend and GPUs) kept between tests, started "
            "afresh after a test that leaves one unfit; a marker's pool=True/False overrides it",
        ),
        Option(
            "lease-dir",
            "PATH",
            "the folder of the GPU locks, shared by every run of this user on this host; only "
            "this user may write it (default /tmp/pytest-gputopo-leases-<uid>)",
        ),
    )
}

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(
        "gputopo",
        "GPU topology gating (pytest-gputopo; its docs: `gputopo docs`, and `gputopo docs NAME` for docs/NAME.md)",
    )
    for opt in OPTIONS.values():
        where = f"(ini: {opt.ini}, env: {opt.env})"
        if opt.metavar is None:
            group.addoption(opt.flag, action="store_true", default=None, dest=opt.ini, help=f"{opt.help} {where}")
            group.addoption(
                f"--gputopo-no-{opt.name}",
                action="store_true",
                default=None,
                dest=f"gputopo_no_{opt.name}",
                help=f"turn {opt.flag} off (overrides ini and env)",
            )
        elif opt.const is not None:
            group.addoption(
                opt.flag,
                metavar=opt.metavar,
                default=None,
                dest=opt.ini,
                nargs="?",
                const=opt.const,
                help=f"{opt.help} {where}",
            )
        else:
            group.addoption(opt.flag, metavar=opt.metavar, default=None, dest=opt.ini, help=f"{opt.help} {where}")
        parser.addini(opt.ini, f"{opt.help} (same as {opt.flag})", default=None)
    # A leased test's own process is told its test and GPUs here (plugin/lease_child); not a setting.
    group.addoption(
        "--gputopo-lease-child", metavar="SPEC", default=None, dest="gputopo_lease_child", help=argparse.SUPPRESS
    )


def value(config: pytest.Config, name: str) -> tuple[str | None, str]:
    """The setting's raw value (None when unset) and a description of where it came from."""
    opt = OPTIONS[name]
    cli = config.getoption(opt.ini)
    if cli is not None:
        return (str(cli) if opt.metavar else "true"), opt.flag
    env = runtime.env_option(name.replace("-", "_"))
    if env is not None and env.strip():  # empty is unset, as an empty ini key is
        return env, f"environment variable {opt.env}"
    ini = config.getini(opt.ini)
    if ini not in (None, ""):
        return str(ini).strip(), f"ini option {opt.ini}" + (f" in {config.inipath}" if config.inipath else " (-o)")
    return None, ""


def flag(config: pytest.Config, name: str) -> bool:
    opt = OPTIONS[name]
    on, off = config.getoption(opt.ini), config.getoption(f"gputopo_no_{name}")
    if on and off:
        raise pytest.UsageError(f"{opt.flag} and --gputopo-no-{name} contradict each other; give one")
    if off:
        return False
    raw, where = value(config, name)
    if raw is None:
        return False
    if raw.strip().lower() in TRUE:
        return True
    if raw.strip().lower() in FALSE:
        return False
    raise pytest.UsageError(
        f"{where}: {raw!r} is not a boolean (use one of {', '.join(TRUE)} / {', '.join(f for f in FALSE if f)})"
    )


def choice(config: pytest.Config, name: str, choices: tuple[str, ...], default: str) -> str:
    raw, where = value(config, name)
    if raw is None:
        return default
    if raw.strip().lower() not in choices:
        raise pytest.UsageError(f"{where}: {raw!r} is not one of {', '.join(choices)}")
    return raw.strip().lower()


# The range of each numeric setting: above 0, up to a limit no real run needs.
LIMITS = {
    "bench-timeout": 7 * 24 * 3600.0,  # seconds: a week
    "bench-budget": 3600.0,  # seconds per size: an hour
    "rank-timeout": 7 * 24 * 3600.0,
    "cache-max-age": 365 * 24.0,  # hours: a year
    "lease-timeout": 7 * 24 * 3600.0,
    "lease-memory": 1024.0,  # GiB per GPU: beyond any GPU's memory
    "allreduce-world-size": 1024,  # gloo processes on one host
}


def parse_number(raw: str, where: str, *, integer: bool = False, maximum: float) -> float:
    """A number above 0 and at most ``maximum`` (``1e3`` allowed unless ``integer``): NaN,
    infinity, ``²`` and 5,000-digit numbers are usage errors naming ``where``."""
    parsed = numtext.read_int(raw, 1, int(maximum)) if integer else numtext.read_number(raw, 0, maximum, above_low=True)
    if parsed is None:
        kind = "an integer" if integer else "a number"
        raise pytest.UsageError(f"{where}: {raw[:40]!r} is not {kind} above 0 and at most {maximum:g}")
    return parsed


@overload
def number(config: pytest.Config, name: str, default: float, *, integer: bool = False) -> float: ...
@overload
def number(config: pytest.Config, name: str, default: None, *, integer: bool = False) -> float | None: ...
def number(config: pytest.Config, name: str, default: float | None, *, integer: bool = False) -> float | None:
    raw, where = value(config, name)
    if raw is None:
        return default
    return parse_number(raw, where, integer=integer, maximum=LIMITS[name])


def size(config: pytest.Config, name: str) -> int | None:
    """A size in bytes: ``1073741824``, ``1G``, ``256M`` (binary units, as nccl-tests reads them)."""
    raw, where = value(config, name)
    if raw is None:
        return None
    found = read_size(raw, 4, MAX_BYTES)
    if found is None:
        raise pytest.UsageError(
            f"{where}: {raw[:40]!r} is not a size in bytes from 4 to 1T, such as 1073741824, 1G or 256M"
        )
    return found


def floor_overrides(config: pytest.Config) -> dict[str, float]:
    """The efficiency floors the user set (option, env or ini), checked."""
    names = [f"floor-{key.replace('_', '-')}" for key in FLOOR_KEYS]
    if all(value(config, name)[0] is None for name in names):
        return {}
    from ..core import thresholds  # its ratio rule, only when a floor is set

    found = {}
    for key, name in zip(FLOOR_KEYS, names, strict=True):
        raw, where = value(config, name)
        if raw is not None:
            try:
                found[key] = thresholds.parse_floor_ratio(raw, where)
            except ValueError as exc:
                raise pytest.UsageError(str(exc)) from None
    return found


def writable_path(config: pytest.Config, name: str) -> str | None:
    """A file setting (``json``, ``html``) whose file can be written by ``runtime.files.write_text``'s
    rule (a regular file or a symlink's file replaced, /dev/null written through, a FIFO, device or
    /dev/stdout refused): checked at start, so that a bad path is a usage error before any test
    runs, not a report lost after them."""
    raw, where = value(config, name)
    if raw is None:
        return None

    problem = unwritable(raw)
    if problem is None:
        return raw
    raise pytest.UsageError(f"{where}: cannot write {raw}: {problem}")
