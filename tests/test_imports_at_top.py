"""Imports at the top (issue 33 item 5): a module imports inside its functions only at a boundary its
allowance below names (torch, pynvml, packaging, pytest in ``gputopo check``, or the load budget: a
part of the plugin a run may not need), as ``tests/test_plugin.py`` and ``tests/test_gpu_host.py``
guard the modules loading the plugin and a run judged on NVML's facts import.

An ``import`` or ``from`` statement anywhere inside a ``def`` counts (an import under ``if
TYPE_CHECKING:`` at module level does not). A new one fails here until it moves to the top or its
module's allowance is raised with its reason written down; one moved to the top fails here too, until
the allowance is lowered. Counted so: 245 statements in 47 modules before issue 33 item 5 (commit
caf29cc), 147 in 33 after, each kept one named below (render/ and cli/ keep three between them).
Every move was checked against the modules 18 kinds of run import (plain, xdist, recorded with each
kind of marker, -v, a JSON report, the check, a run gate, a plan, this host, an emulated GPU host and
NVML's child): none imports more; where one would, the import stayed inside its function.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pytest_gputopo"

LOADED = "load budget (loaded with the plugin)"

# module -> (imports inside its functions, why: the boundary each stands at)
ALLOWED: dict[str, tuple[int, str]] = {
    "bench/allreduce_worker.py": (
        9,
        "torch: in the worker process only (allreduce_plan and sweep import this module in pytest's process)",
    ),
    "bench/copies.py": (3, "torch: in the copy child only (the suite imports this module in pytest's process)"),
    "bench/harness.py": (1, "torch: the CUDA event timer (the gputopo_bench fixture imports the harness)"),
    "bench/suite.py": (
        5,
        "load budget: NCCL's own run (nccl-tests, the supervised all-reduce, NCCL's log) "
        "loads only for an all-reduce measured here",
    ),
    "cli/check.py": (1, "pytest: gputopo check's run only; the other commands never load pytest"),
    "core/fact_requirements.py": (
        4,
        "load budget: the judges (keys, judgement, thresholds) load for a bandwidth "
        "requirement only, not for a run judged on NVML's facts",
    ),
    "core/fleet_roster.py": (1, "load budget: hashlib (OpenSSL, 3.6 MB resident) where nodes share a host name"),
    "core/hardware.py": (2, "packaging: where a version or a specifier is read"),
    "core/schema.py": (1, "load budget: the keys load where a profile's recorded figures are read"),
    "plugin/fixtures.py": (
        8,
        f"{LOADED}: each fixture loads what it hands (the ranks, the source line, "
        "the leases, the harness, the keys, the measurements)",
    ),
    "plugin/hooks.py": (
        28,
        f"{LOADED}: the plan, the check items and their report, the leases and the lease "
        "child, the ranks, the run folder, progress relays, NCCL's view, the probe, the "
        "schema, the run gates, the verdicts, the run record and the escaping load when a run asks",
    ),
    "plugin/leases.py": (1, "load budget: the probe under -n auto alone"),
    "plugin/machine.py": (
        6,
        f"{LOADED}: the model, the schema and the boot record's owner check (grp, pwd) "
        "load when the machine is learned",
    ),
    "plugin/marker_table.py": (5, f"{LOADED}: the requirement classes (three modules) load when a marker is read"),
    "plugin/measurements.py": (
        3,
        "load budget: the ranks' rendezvous, installed versions and progress lines "
        "load only where the suite needs them",
    ),
    "plugin/nccl_view.py": (
        3,
        "load budget: the benchmarks (the suite, its keys) load only where NCCL's view is observed, not predicted",
    ),
    "plugin/options.py": (1, f"{LOADED}: the floors (core.thresholds) load when a floor is read"),
    "plugin/plan.py": (
        2,
        "load budget: the health-check items and the measurements load only for a plan that has them",
    ),
    "plugin/rank_body.py": (
        9,
        "torch (and the trail, which wraps its functions) in each rank; coverage where the run measures it; "
        "pytest (assertion rewriting, a skip) only where a rank rewrites or fails",
    ),
    "plugin/ranks_run.py": (
        3,
        "load budget: the lease rooms load only under --gputopo-lease; torch after a launch is refused, "
        "which a pytest without torch says",
    ),
    "plugin/entry.py": (
        2,
        f"{LOADED}: the plugin's hooks and its fixtures' code load when a run asks something of the plugin",
    ),
    "plugin/reporter.py": (
        10,
        f"{LOADED}: a plain run's summary loads no renderer or report writer (the record and the judges are "
        "the hooks' to load: the reporter imports none)",
    ),
    "plugin/run.py": (1, f"{LOADED}: the ranks (runtime.ranks) load only for a launch"),
    "plugin/run_record.py": (
        3,
        "load budget: the benchmarks and NCCL's view load for the record only where "
        "the run has them (xdist results, a pair of GPUs, a suite)",
    ),
    "plugin/run_settings.py": (1, f"{LOADED}: the floors load when a floor is set"),
    "plugin/verdicts.py": (
        13,
        "load budget: the judges, the measurements, NCCL's view, the run gates and the "
        "reference load only for the requirements that need them",
    ),
    "probe/__init__.py": (
        6,
        "load budget: the probe's sources load by what the run names (a recorded "
        "machine, nvidia-smi text, this host, CUDA's numbering)",
    ),
    "probe/gpu_memory.py": (1, "pynvml: in the sampler's thread, where a leased test is measured"),
    "probe/host.py": (
        11,
        "pynvml; load budget: CUDA's view, torch's versions, the process runner, NVML's reader, the node's "
        "health (its judge, the PCI bus, the kernel log) and the environment's (files, tempfile) load only "
        "in the child that asks them",
    ),
    "probe/named_machine.py": (2, "load budget: the nvidia-smi text readers (parse/) load only for a named text file"),
    "probe/this_host.py": (
        4,
        "load budget: CUDA's view, NVML's child and the installed versions load only "
        "where this host has a driver and the run asks them",
    ),
    "probe/torch_cuda.py": (1, "torch: its versions, in the child that asks them"),
    "render/report.py": (
        2,
        "load budget: a run's header loads neither nvidia-smi's legend (gputopo show) nor the GPU tables (-v)",
    ),
    "runtime/environ.py": (
        3,
        f"{LOADED}: NCCL's rules and pwd load when NCCL's view is asked; socket only where os.uname is missing",
    ),
    "runtime/rank_pool.py": (1, "torch: torch.multiprocessing spawns a warm pool's ranks"),
    "runtime/rank_procs.py": (1, "torch: torch.multiprocessing spawns a ranks(n) test's processes"),
    "runtime/ranks.py": (1, "torch: torch.distributed's store, for a launch"),
}
TOTAL = 159  # the allowances' sum, said in docs/architecture.md


def imports_inside_functions(source: str) -> list[int]:
    """The line of each ``import``/``from`` statement inside a function (at any depth below it)."""
    found = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child.lineno)
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    walk(ast.parse(source), False)
    return found


def counts() -> dict[str, int]:
    return {
        path.relative_to(PACKAGE).as_posix(): n
        for path in sorted(PACKAGE.rglob("*.py"))
        if (n := len(imports_inside_functions(path.read_text(encoding="utf-8"))))
    }


def test_the_counter_counts_imports_inside_functions_only():
    source = """
from typing import TYPE_CHECKING
import os
if TYPE_CHECKING:
    from collections.abc import Sequence
class C:
    import json
    def method(self):
        import re
        def inner():
            from . import x
async def later():
    import torch
def gated():
    if os.name:
        import pwd
"""
    assert imports_inside_functions(source) == [9, 11, 13, 16]


def test_each_module_imports_inside_functions_only_at_its_named_boundaries():
    found = counts()
    more = {m: f"{n} (allowed {ALLOWED.get(m, (0,))[0]})" for m, n in found.items() if n > ALLOWED.get(m, (0,))[0]}
    assert not more, (
        "imports inside functions beyond the allowance: move each to the module's top, or raise "
        f"the module's allowance in ALLOWED with the boundary it stands at: {more}"
    )
    fewer = {m: f"{found.get(m, 0)} (allowed {n})" for m, (n, _) in ALLOWED.items() if found.get(m, 0) < n}
    assert not fewer, f"fewer imports inside functions than allowed: lower ALLOWED to match: {fewer}"


def test_every_allowance_names_its_boundary_and_the_docs_say_the_total():
    boundaries = ("torch", "pynvml", "packaging", "pytest", "load budget", "the lease rooms")
    assert all(why.startswith(boundaries) for _, why in ALLOWED.values())
    assert sum(n for n, _ in ALLOWED.values()) == TOTAL
    assert f"{TOTAL} imports inside functions" in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
