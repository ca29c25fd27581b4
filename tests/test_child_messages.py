"""Typed messages between the run and every child it starts (issue 45 item 3): one dataclass per
message kind, each channel's written and read in one place (``runtime.messages.Channel``), a plain
dict refused on write and a malformed message refused on read, naming its channel and its source.

Two guards. The source: no module that talks to a child hands its writer (``json.dump(s)``,
``pickle.dump(s)``, a pipe's ``send``) a dict built as a message -- a literal, a comprehension,
``dict(...)``, or a name bound to one or annotated as one -- and every module that starts a child is
named here. At run time: every channel's encoder refuses a plain dict, and every kind round-trips.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import math
import os
from pathlib import Path

import pytest

from pytest_gputopo.bench import messages as bench_messages
from pytest_gputopo.core import keys, model
from pytest_gputopo.plugin import lease_messages
from pytest_gputopo.probe import host
from pytest_gputopo.runtime import messages, rank_messages
from pytest_gputopo.runtime.messages import Channel, MessageError

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_gputopo"

# The modules that talk to a child, each side of each channel: their writers are scanned.
TALKERS = (
    "bench/allreduce.py",  # an all-reduce's parent: its workers' configuration, status and rows
    "bench/allreduce_plan.py",  # ... the configuration made
    "bench/allreduce_worker.py",  # ... the worker
    "bench/copies.py",  # the copy child
    "bench/messages.py",  # the benchmarks' children's messages
    "bench/subproc.py",  # the copy child's parent
    "plugin/lease_child.py",  # a leased test's process and its parent
    "plugin/lease_messages.py",  # their messages
    "plugin/leases.py",  # what starts a lease's process
    "plugin/rank_body.py",  # a rank: its result, a pool's pipe
    "plugin/rank_trail.py",  # a rank's trail
    "plugin/ranks_run.py",  # a ranks test's call
    "probe/host.py",  # the probe child and its parent
    "runtime/rank_messages.py",  # the ranks' messages
    "runtime/rank_pool.py",  # a warm pool's pipes
    "runtime/rank_procs.py",  # a rank's result file
)
# The modules that start a child (a process, a fork, a pipe to one) without a message of their own.
STARTERS_WITHOUT_MESSAGES = {
    "runtime/procs.py": "the one supervisor: a child's argv, environment and descriptors, no message",
    "runtime/reaper.py": "a keeper: its argv, no message",
    "bench/nccl_tests.py": "nccl-tests' all_reduce_perf: its own text, read by parse/nccl_tests",
}
# What starts a child, by the name called.
STARTING = {"Popen", "run_child", "Children", "start_processes", "fork", "Pipe", "socketpair"}
WRITERS = {"json.dumps", "json.dump", "pickle.dumps", "pickle.dump"}  # and any ``.send(...)``
DICTS = {"dict", "Dict", "Mapping", "MutableMapping"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _dict_annotation(node: ast.AST | None) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        node = ast.parse(node.value, mode="eval").body
    if isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, (ast.Name, ast.Attribute)) and _dotted(node).split(".")[-1] in DICTS


def _dict_built(node: ast.AST, bound: dict[str, bool]) -> bool:
    """Whether ``node`` is a dict built as a message: a literal, a comprehension, ``dict(...)``, a merge
    of such (``a | b``), or a name bound to one or annotated as one (``bound``)."""
    if isinstance(node, (ast.Dict, ast.DictComp)):
        return True
    if isinstance(node, ast.Call) and _dotted(node.func) == "dict":
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _dict_built(node.left, bound) or _dict_built(node.right, bound)
    return isinstance(node, ast.Name) and bound.get(node.id, False)


def _bound_dicts(function: ast.AST) -> dict[str, bool]:
    """The names a function binds to a dict: its parameters annotated as one, its assignments of one."""
    bound: dict[str, bool] = {}
    if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = function.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            bound[arg.arg] = _dict_annotation(arg.annotation)
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound[target.id] = bound.get(target.id, False) or _dict_built(node.value, bound)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound[node.target.id] = _dict_annotation(node.annotation) or (
                node.value is not None and _dict_built(node.value, bound)
            )
    return bound


def untyped_messages(source: str, name: str = "<source>") -> list[str]:
    """Each place in ``source`` where a writer is handed a dict built as a message, as ``name:line``."""
    found = []
    tree = ast.parse(source)
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    for scope in scopes:
        bound = _bound_dicts(scope)
        body = scope.body if isinstance(scope, ast.Module) else [scope]
        for node in (n for top in body for n in ast.walk(top)):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            called = _dotted(node.func)
            writes = called in WRITERS or (isinstance(node.func, ast.Attribute) and node.func.attr == "send")
            if writes and _dict_built(node.args[0], bound):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)[:100]}")
    return sorted(set(found))


def _starts_a_child(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        called = _dotted(node.func) if isinstance(node, ast.Call) else ""
        if called.split(".")[-1] in STARTING or called.endswith(("supervisor.start", "procs.start", "children.start")):
            return True
    return False


def test_no_module_that_talks_to_a_child_writes_an_untyped_dict():
    found = [hit for module in TALKERS for hit in untyped_messages((PACKAGE / module).read_text(), module)]
    assert found == [], "a child's message built as a dict (make it a dataclass of its channel's):\n" + "\n".join(found)


PLANTED = """
import json, os, pickle
def answer(pipe, fd, result: dict):
    reply = {"bw_gbps": 1.0}
    print(json.dumps(reply))
    os.write(fd, json.dumps({"ready": True}).encode())
    pipe.send(dict(seq=1))
    pickle.dumps(result)
    json.dumps(message.to_json())  # a message's own JSON: not a dict built here
"""


def test_the_scan_finds_a_planted_dict():
    """The scan itself: each dict built as a message, however it reaches its writer, is found."""
    assert [hit.split(":")[1] for hit in untyped_messages(PLANTED)] == ["5", "6", "7", "8"]


def test_every_module_that_starts_a_child_is_named_here():
    """A new child must say how it talks: its module is a talker (scanned) or says why it has no message."""
    starting = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if _starts_a_child(path.read_text(encoding="utf-8"))
    }
    unnamed = starting - set(TALKERS) - set(STARTERS_WITHOUT_MESSAGES)
    assert not unnamed, f"modules that start a child, named neither as talkers nor as without messages: {unnamed}"


def _channels() -> list[tuple[str, Channel]]:
    """Every channel the talkers use, once, by the module and name that define it."""
    found: dict[int, tuple[str, Channel]] = {}
    for module in TALKERS:
        loaded = importlib.import_module("pytest_gputopo." + module.removesuffix(".py").replace("/", "."))
        for name, value in vars(loaded).items():
            if isinstance(value, Channel):
                defined = next(iter(value.kinds.values())).__module__.removeprefix("pytest_gputopo.")
                found.setdefault(id(value), (f"{defined}.{name}", value))
    return sorted(found.values(), key=lambda pair: pair[0])


TOPOLOGY = model.Topology(gpus=(model.Gpu(0, uuid="GPU-0"),), source=model.Source("nvml"), hostname="h")
MEASUREMENT: bench_messages.MeasurementRecord = {
    "name": "p2p",
    "size_bytes": 4096,
    "bytes_per_iteration": 4096,
    "iterations_per_sample": 3,
    "samples_s": [0.001, 0.002],
    "median_s": 0.0015,
    "median_ci95_s": [0.001, 0.002],
    "min_s": 0.001,
    "max_s": 0.002,
    "spread": 2.0,
    "target_ci": 1.1,
    "stable": True,
    "bw_gbps": 2.7,
    "bw_ci95_gbps": [2.0, math.inf],
    "verified": True,
    "error": None,
    "warmup_iterations": 5,
    "wall_s": 0.1,
    "verify_s": 0.01,
}
# One message of every kind every channel carries (a new kind adds its own here).
SAMPLES = [
    host.Answer(TOPOLOGY, None, {"cuda_runtime_version": "12.4", "nccl_version": None}, ("a warning",)),
    bench_messages.CopyRequest(keys.HostCopy("h2d", 0, True), 0.5, "0-3"),
    bench_messages.CopyAnswer(7, 12.5, measurement=MEASUREMENT),
    bench_messages.CopyAnswer(7, None, peer_access=False),
    bench_messages.WorkerConfig(
        "gloo", 2, (1, 256), "float32", None, 2.0, 5, 5, 1000, 1.1, 0.02, "fair", "/s", False, None, "/w", 1, 2.5, 60.0
    ),
    bench_messages.WorkerStatus(0, 3, "all_reduce of 1 KiB", 9, size_bytes=1024, missing=(1,)),
    bench_messages.WorkerRows((bench_messages.WorkerRow(1024, 256, 0, MEASUREMENT),)),
    lease_messages.LeaseSpec(3, 4, 5, {"workerid": "master", "workercount": 1}, None),
    lease_messages.Handed({"schema": 1}, "GPU-0"),
    lease_messages.Took(),
    lease_messages.Refused("CUDA's driver was loaded"),
    lease_messages.RunTest("t.py::test_a", None),
    lease_messages.Report({"$report_type": "TestReport", "nodeid": "t.py::test_a", "longrepr": None}),
    lease_messages.RecordedWarning("builtins", "UserWarning", "careful", "t.py", 3),
    lease_messages.Missing("t.py::test_b"),
    lease_messages.Done("t.py::test_a"),
    rank_messages.BodyResult(1, "t.py::test_a", "failed", "AssertionError", "tb", 1.5),
    rank_messages.TrailCall("all_reduce", "default", (0, 1), "float32[4]", None, 1, 0),
    rank_messages.TrailLeft(0),
]


@pytest.mark.parametrize("where, channel", _channels(), ids=[w for w, _ in _channels()])
def test_every_channel_refuses_a_plain_dict_and_carries_dataclasses(where, channel):
    assert channel.kinds, where
    for kind in channel.kinds.values():
        assert dataclasses.is_dataclass(kind), f"{where}: {kind} is not a dataclass"
    with pytest.raises(TypeError, match="not one of its messages"):
        channel.encode({"kind": next(iter(channel.kinds)), "seq": 1})
    sample = next(s for s in SAMPLES if type(s) in channel.kinds.values())
    with pytest.raises(TypeError):
        channel.encode(dataclasses.asdict(sample))


def test_every_kind_of_every_channel_round_trips():
    carried = {kind for _, channel in _channels() for kind in channel.kinds.values()}
    assert {type(sample) for sample in SAMPLES} == carried  # a sample of each kind, none of another
    for sample in SAMPLES:
        channel = next(c for _, c in _channels() if type(sample) in c.kinds.values())
        line = channel.encode(sample)
        assert "\n" not in line
        assert channel.decode(line, "a test") == sample


def test_a_malformed_message_is_refused_naming_its_channel_and_source():
    line = bench_messages.ANSWERS.encode(bench_messages.CopyAnswer(7, 12.5))
    for bad, why in (
        (line.replace("12.5", '"fast"'), "bw_gbps 'fast' is not float"),
        (line.replace("12.5", "NaN"), "bw_gbps nan is not float"),
        (line.replace('"worker_pid": 7', '"worker_pid": true'), "worker_pid True is not int"),
        (line.replace('"worker_pid": 7, ', ""), "field 'worker_pid' is missing"),
        (line[:-1] + ', "extra": 1}', "unknown field 'extra'"),
        (line[:20], "not JSON"),
        ('{"bw_gbps": 1.0}', "not one of its messages"),
        ('{"kind": "CopyRequest", "budget_s": 1}', "not one of its messages"),
    ):
        with pytest.raises(MessageError) as refused:
            bench_messages.ANSWERS.decode(bad, "its output")
        assert str(refused.value).startswith("the copy benchmark's answer (its output): "), str(refused.value)
        assert why in str(refused.value)


def test_a_messages_own_checks_and_codecs_refuse_what_they_do_not_take():
    with pytest.raises(MessageError, match="outcome 'maybe' is not one of 'passed', 'failed', 'skipped'"):
        rank_messages.RESULTS.decode('{"kind": "BodyResult", "seq": 1, "test": "t", "outcome": "maybe"}', "rank0.json")
    copy = bench_messages.REQUESTS.encode(bench_messages.CopyRequest(keys.Copy("p2p", 0, 1), 1.0))
    with pytest.raises(MessageError, match="key: .*is not a copy"):
        bench_messages.REQUESTS.decode(copy.replace('["p2p", 0, 1]', '["allreduce", 2, 1024]'), "stdin")
    answer = host.ANSWERS.encode(host.Answer(torch={"cuda_runtime_version": "12.4"}))
    with pytest.raises(MessageError, match="torch's versions name 'cudnn'"):
        host.ANSWERS.decode(answer.replace("cuda_runtime_version", "cudnn"), "its output")
    with pytest.raises(MessageError, match="topology"):
        host.ANSWERS.decode(json.dumps({"kind": "Answer", "topology": {"gpus": "many"}}), "its output")


def test_a_probe_answer_that_is_not_one_is_the_probes_failure_saying_why():
    answer, why = host._answer('noise\n{"kind": "Answer", "warnings": "none"}\n')
    assert answer is None and "the probe of this host (its output): not a Answer message: warnings" in why


def test_the_pipes_and_the_codec_refuse_a_plain_dict():
    class Pipe:
        sent: list = []

        def send(self, message):
            self.sent.append(message)

    with pytest.raises(TypeError, match="a rank's pipe carries"):
        rank_messages.send(Pipe(), {"seq": 1, "test": "t", "outcome": "passed"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dict is not a message"):
        messages.to_json({"seq": 1})
    rank_messages.send(Pipe(), rank_messages.Ready(1, True))
    assert Pipe.sent == [rank_messages.Ready(1, True)]


def test_a_rank_result_file_that_is_not_one_is_no_result(tmp_path):
    from pytest_gputopo.runtime import rank_procs

    rank_procs.write_result(str(tmp_path), 0, rank_messages.BodyResult(1, "t", "passed", ended_at=2.0))
    assert rank_procs.read_result(str(tmp_path), 0) == rank_messages.BodyResult(1, "t", "passed", ended_at=2.0)
    Path(rank_procs.result_path(str(tmp_path), 0)).write_text(json.dumps({"seq": 1, "outcome": "passed"}))
    assert rank_procs.read_result(str(tmp_path), 0) is None
    with pytest.raises(TypeError):
        rank_procs.write_result(str(tmp_path), 1, {"seq": 1, "test": "t", "outcome": "passed"})  # type: ignore[arg-type]
    assert not os.path.exists(rank_procs.result_path(str(tmp_path), 1))


def test_a_leased_tests_process_is_told_by_its_environment_not_by_an_option(pytester):
    """No hidden option carries a lease's spec: ``--gputopo-lease-child`` is no option of pytest's."""
    result = pytester.runpytest_subprocess("--gputopo-lease-child=spec.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --gputopo-lease-child=spec.json*"])
