"""The run's settings: every pytest-gputopo option resolved once at start-up from its surfaces
(``options``: CLI, env, ini), so that a bad value is a usage error naming its source before any test
runs. The benchmarks themselves start only when something selected needs them."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

import pytest

from ..bench.bench_settings import BenchSettings
from ..runtime import environ
from . import options

CHECK_LEVELS = ("quick", "full")


class RunSettings(NamedTuple):  # not a dataclass: cheaper to define, and this module loads with the plugin
    strict: bool = False
    machine: str | None = None  # --gputopo-machine: a recorded machine instead of this host
    machine_from: str = ""
    require: str | None = None  # --gputopo-require, parsed by the run gate
    require_from: str = ""  # where each raw value came from, for errors
    expect: str | None = None  # --gputopo-expect: a reference machine
    expect_from: str = ""
    check: str | None = None  # "quick", "full", or None: no health-check items
    json: str | None = None  # --gputopo-json: checked writable at start
    json_from: str = ""
    html: str | None = None  # --gputopo-html: likewise
    html_from: str = ""
    github_summary: str | None = None  # GITHUB_STEP_SUMMARY: the job summary to append to
    cache: bool = False
    reprobe: bool = False  # --gputopo-reprobe: CUDA's view and torch's versions asked again
    rank_timeout_s: float = 120.0
    bench: BenchSettings = BenchSettings()
    floor_overrides: Mapping[str, float] = MappingProxyType({})  # set by option, env or ini
    plan: bool = False  # --gputopo-plan (or --gputopo-plan-json): a dry run, no test and no benchmark run
    plan_from: str = ""  # where the plan was asked, for its summary line: a stray ini key or variable shows
    plan_json: str | None = None  # --gputopo-plan-json: checked writable at start
    lease: bool = False  # --gputopo-lease: tests that ask for GPUs hold their own (plugin/leases)
    lease_timeout_s: float = 600.0
    lease_memory_gib: float | None = None  # --gputopo-lease-memory: each leased test's budget per GPU; None: whole GPUs
    # --gputopo-lease-memory measured: an undeclared test's budget is its last measured peak's (lease_figures)
    lease_memory_measured: bool = False
    ranks_pool: bool = False  # --gputopo-ranks-pool: ranks(n) tests share warm pools unless their marker says
    lease_dir: str | None = None  # --gputopo-lease-dir; None: runtime.gpu_locks.default_folder()
    lease_dir_from: str = ""

    @property
    def writes_report(self) -> bool:
        """A document of the run is asked for (--gputopo-json, --gputopo-html)."""
        return self.json is not None or self.html is not None

    @property
    def asks_machine(self) -> bool:
        """Whether an option needs the machine whatever the tests ask: a machine named, a run gate, a
        health check, a report of the machine."""
        return any(v is not None for v in (self.machine, self.require, self.expect, self.check, self.json, self.html))

    def floors(self) -> tuple[dict, set]:
        """The efficiency floors (defaults from ``core.thresholds``) and the keys the user set explicitly."""
        from ..core import thresholds  # the core: on the first judged figure, not at start-up

        return {**thresholds.DEFAULT_FLOORS, **self.floor_overrides}, set(self.floor_overrides)


def read_run_settings(config: pytest.Config) -> RunSettings:
    """Every setting, checked; raises ``pytest.UsageError`` naming the surface of a bad one."""
    for name, opt in options.OPTIONS.items():
        if opt.metavar is None:
            options.flag(config, name)  # --gputopo-no-X and X given together, or a bad boolean
    engine = options.choice(config, "allreduce-engine", ("torch", "nccl-tests"), "torch")
    bench = BenchSettings(
        allreduce_backend=options.choice(config, "allreduce-backend", ("nccl", "gloo"), "nccl"),
        allreduce_engine=engine,
        allreduce_sched=options.choice(config, "allreduce-sched", ("fair", "fifo"), "fair"),
        world_size=options.number(config, "allreduce-world-size", None, integer=True),  # type: ignore[arg-type]  # an int
        size_bytes=options.size(config, "allreduce-size"),
        timeout_s=options.number(config, "bench-timeout", 300.0),
        budget_s=options.number(config, "bench-budget", 10.0),
        cache_max_age_s=options.number(config, "cache-max-age", 24.0) * 3600,
        nccl_tests_binary=environ.find_all_reduce_perf() if engine == "nccl-tests" else None,
    )
    machine, machine_from = options.value(config, "machine")
    require, require_from = options.value(config, "require")
    expect, expect_from = options.value(config, "expect")
    json_from = options.value(config, "json")[1]
    html_from = options.value(config, "html")[1]
    check = options.value(config, "check")[0]
    lease_dir, lease_dir_from = options.value(config, "lease-dir")
    measured = (options.value(config, "lease-memory")[0] or "").lower() == "measured"
    plan_json = None if config.getoption("gputopo_no_plan") else options.writable_path(config, "plan-json")
    plan_from = (
        options.value(config, "plan")[1]
        if options.flag(config, "plan")
        else options.value(config, "plan-json")[1]
        if plan_json is not None
        else ""
    )
    return RunSettings(
        strict=options.flag(config, "strict"),
        machine=machine,
        machine_from=machine_from,
        require=require,
        require_from=require_from,
        expect=expect,
        expect_from=expect_from,
        check=options.choice(config, "check", CHECK_LEVELS, "quick") if check is not None else None,
        json=options.writable_path(config, "json"),
        json_from=json_from,
        html=options.writable_path(config, "html"),
        html_from=html_from,
        github_summary=environ.github_step_summary(),
        cache=options.flag(config, "cache"),
        reprobe=options.flag(config, "reprobe"),
        rank_timeout_s=options.number(config, "rank-timeout", 120.0),
        bench=bench,
        floor_overrides=options.floor_overrides(config),
        plan=bool(plan_from),
        plan_from=plan_from,
        plan_json=plan_json,
        lease=options.flag(config, "lease"),
        lease_timeout_s=options.number(config, "lease-timeout", 600.0),
        lease_memory_gib=None if measured else options.number(config, "lease-memory", None),
        lease_memory_measured=measured,
        ranks_pool=options.flag(config, "ranks-pool"),
        lease_dir=lease_dir,
        lease_dir_from=lease_dir_from,
    )
