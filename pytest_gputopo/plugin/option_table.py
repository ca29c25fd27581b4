"""The plugin's options as data: each setting's name, its three surfaces (``--gputopo-<name>``, ini
``gputopo_<name>``, env ``PYTEST_GPUTOPO_<NAME>``) and its help; ``addoption`` registers them. What
every pytest run loads of the plugin (``entry``): it imports nothing of the package. Reading a value
is ``options``'s."""

from __future__ import annotations

from typing import NamedTuple

import pytest

# runtime.environ.ENV_PREFIX, spelled here so that loading the plugin imports nothing else (a test
# compares the two).
ENV_PREFIX = "PYTEST_GPUTOPO_"


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
        return ENV_PREFIX + self.name.replace("-", "_").upper()


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
