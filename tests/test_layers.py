"""The layers of the package hold: imports point down (pyproject.toml's import-linter contracts),
no module imports the hook module, and no cycle runs through a layer or between two modules."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold():
    pytest.importorskip("importlinter", reason="import-linter is not installed (requirements-dev.txt)")
    # A child: import-linter builds its graph by importing nothing, but prints with rich to stdout.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(no_cache=True, no_logo=True))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


PACKAGE = ROOT / "pytest_gputopo"


def import_graph() -> dict[str, dict[str, int]]:
    """Every module of the package -> the package's modules it imports, with the line of the first
    such import: at the top, inside functions and under ``TYPE_CHECKING`` alike (an annotation's
    import is a dependency too). ``from .x import name`` is an import of ``x.name`` where that is a
    module, else of ``x``."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)

    def known(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, (path, is_package) in modules.items():
        here = name if is_package else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here.rsplit(".", node.level - 1)[0] if node.level else ""
                whole = ".".join(filter(None, (base, node.module)))
                targets = [f"{whole}.{a.name}" if f"{whole}.{a.name}" in modules else whole for a in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == PACKAGE.name:
                    edges.setdefault(known(target), node.lineno)
        edges.pop(name, None)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, without recursion),
    each sorted: a module in one can reach every other and be reached back."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack, on_stack, found = [], set(), []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_import_cycle():
    """No module reaches itself through the package's imports, counting those inside functions and
    under ``TYPE_CHECKING`` (import-linter's ``acyclic_siblings`` contract says the same by folder)."""
    graph = import_graph()
    said = []
    for group in cycles(graph):
        edges = [f"  {a} -> {b} (line {graph[a][b]})" for a in group for b in graph[a] if b in group]
        said.append(f"a cycle among {', '.join(group)}:\n" + "\n".join(edges))
    assert not said, "\n".join(said)


def test_the_cycle_test_finds_a_cycle():
    """The walk above finds what it looks for: a cycle of three modules, none in a chain, and imports
    under ``TYPE_CHECKING`` and inside functions in the graph."""
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {}}) == []
    graph = import_graph()
    assert graph["pytest_gputopo.plugin.run"]["pytest_gputopo.core.requirements"] > 0  # under TYPE_CHECKING
    assert "pytest_gputopo.probe.this_host" in graph["pytest_gputopo.probe"]  # inside a function


def test_a_requirement_built_directly_is_validated():
    """Validation lives in the requirement classes, not in the marker factories."""
    from pytest_gputopo.core import fact_requirements as facts, gpu_requirements, requirements as reqs

    for build, says in (
        (lambda: gpu_requirements.GpuRequirement(gpus=-1), "n must be a number of GPUs from 0 to 1024"),
        (lambda: reqs.P2PRequirement(gpus=0), "gpus must be a number of GPUs from 1 to 1024"),
        (lambda: reqs.LinkRequirement(need="XYZ"), "XYZ"),
        (lambda: facts.BandwidthRequirement(gbps=float("nan")), "gbps must be a number above 0"),
        (lambda: facts.BandwidthRequirement(metric="bogus"), "metric must be one of"),
        (lambda: facts.TransportRequirement(kind="UDP"), "kind must be one of"),
    ):
        with pytest.raises(reqs.RequirementError, match=says):
            build()
    assert reqs.LinkRequirement(need="nv12") == reqs.LinkRequirement(need=reqs.LinkLabel.parse("NV12"), spelled="NV12")
    assert facts.BandwidthRequirement(gbps=50) == facts.BandwidthRequirement(gbps=50.0)


def test_the_floor_options_are_the_cores_floors():
    from pytest_gputopo.core import thresholds
    from pytest_gputopo.plugin import options

    assert options.FLOOR_KEYS == thresholds.FLOOR_KEYS


def test_the_option_tables_environment_prefix_is_the_runtimes():
    """``option_table`` spells the variables' prefix itself (the entry point imports nothing else)."""
    from pytest_gputopo.plugin import option_table
    from pytest_gputopo.runtime import environ

    assert option_table.ENV_PREFIX == environ.ENV_PREFIX


# The reporters draw a run's verdicts; the judges make them (issue 45: one verdict, made once in the
# run's record, which every medium renders). A reporter that imported a judge could decide again.
REPORTERS = ("pytest_gputopo.render", "pytest_gputopo.plugin.reporter", "pytest_gputopo.plugin.report_writer")
JUDGES = {
    f"pytest_gputopo.{name}"
    for name in (
        "core.causes",
        "core.fabric_health",
        "core.fact_requirements",
        "core.faults",
        "core.fleet",
        "core.gpu_requirements",
        "core.health",
        "core.judgement",
        "core.nvlinks",
        "core.ranks_requirement",
        "core.regressions",
        "core.requirements",
        "core.run_verdict",
        "core.xid",
        "nccl.expect",
        "nccl.fallbacks",
        "plugin.checks",
        "plugin.gate",
        "plugin.nccl_view",
        "plugin.verdicts",
    )
}


def test_no_reporter_imports_a_judge():
    """render/, the reporter and the report writer import no module that decides a verdict (at the top,
    inside a function or for a type alike): they draw the verdict the record holds."""
    graph = import_graph()
    assert JUDGES <= graph.keys(), JUDGES - graph.keys()  # a judge renamed: name it again here
    found = [
        f"{module} imports the judge {judge} (line {line})"
        for module, edges in sorted(graph.items())
        if module.startswith(REPORTERS[0] + ".") or module in REPORTERS
        for judge, line in edges.items()
        if judge in JUDGES
    ]
    assert not found, "\n".join(found)
