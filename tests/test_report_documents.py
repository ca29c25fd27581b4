"""Reports that tell the truth. A killed run's partial report holds what was known when
it died and never claims "every"; ``gputopo report`` draws any document it accepts and refuses any
other naming the field, never with an internal error."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import USER_PYTEST, json_paths, wait_for_file
from pytest_gputopo.cli import main as gputopo
from pytest_gputopo.render.html import ReportError, check_document, html_report

# ---------------------------------------------------------------------------------------------
# 20.6: a killed run's report

DGX_A100_REPORTS = ("--gputopo-machine", "dgx-a100", "--gputopo-json", "out.json")


def start_user_run(folder, *args) -> subprocess.Popen:
    """pytest ARGS started as a user starts it in ``folder``, in a session of its own (so that killing its
    group ends xdist's workers too), with TMPDIR there: what a killed run leaves stays there."""
    return subprocess.Popen(
        [*USER_PYTEST, *args],
        cwd=folder,
        env={**os.environ, "TMPDIR": str(folder)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@pytest.mark.parametrize("xdist", [[], ["-n", "2", "--dist", "loadfile"]], ids=["serial", "xdist"])
def test_a_killed_runs_report_holds_its_unmet_requirement_and_claims_no_every(pytester, xdist):
    """test_a is skipped for an unmet requirement after test_0 passed (the report was written then,
    and no measurement changes since); test_b waits (up to 20 s) for the partial HTML, written after
    the JSON, to name test_a, then the run is killed with SIGTERM. Under xdist the file goes to one
    worker (``--dist loadfile``), so that the tests end in this order there too."""
    started = pytester.path / "started"
    pytester.makepyfile(
        test_f=f"""
import pathlib, time, pytest

def test_0(): pass

@pytest.mark.requires_gpus(16)
def test_a(): pass

def test_b():
    out, deadline = pathlib.Path("out.html"), time.monotonic() + 20
    while time.monotonic() < deadline and "test_a" not in (out.read_text() if out.exists() else ""):
        time.sleep(0.05)
    pathlib.Path({str(started)!r}).write_text("")
    time.sleep(120)
"""
    )
    proc = start_user_run(pytester.path, *xdist, *DGX_A100_REPORTS, "--gputopo-html", "out.html")
    try:
        assert wait_for_file(started, 90)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # xdist's workers too
        except ProcessLookupError:
            pass
        proc.wait()
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc["complete"] is False
    assert [(u["test"], u["requirement"]) for u in doc["unmet"]] == [("test_f.py::test_a", "requires_gpus(16)")]
    text = (pytester.path / "out.html").read_text()
    assert "incomplete" in text and "test_f.py::test_a" in text
    assert "every" not in text.lower()


@pytest.mark.parametrize("xdist", [[], ["-n", "1"]], ids=["serial", "xdist"])
def test_a_run_killed_in_its_first_test_leaves_a_report_of_the_machine(pytester, xdist):
    """xdist's controller collects nothing: the first partial report came with the first test's
    report, so a run killed during its first test left none."""
    pytester.makepyfile(
        test_f="""
import pathlib, time

def test_first():
    out, deadline = pathlib.Path("out.json"), time.monotonic() + 20
    while time.monotonic() < deadline and not out.exists():
        time.sleep(0.05)
    pathlib.Path("started").write_text(str(out.exists()))
    time.sleep(120)
"""
    )
    proc = start_user_run(pytester.path, *xdist, *DGX_A100_REPORTS)
    started = pytester.path / "started"
    try:
        wait_for_file(started, 90)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert started.read_text() == "True"
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc["complete"] is False and len(doc["topology"]["gpus"]) == 8


def test_the_partial_report_holds_each_check_outcome_as_it_comes(pytester):
    """Most health-check items of a recorded machine measure nothing: each one's outcome is in the
    partial report as soon as the item has finished all the same (read after each item by a hook)."""
    pytester.makeconftest("""
import json, pathlib

def pytest_runtest_logfinish(nodeid, location):
    doc = json.loads(pathlib.Path("out.json").read_text())
    with open("seen.jsonl", "a") as f:
        f.write(json.dumps([nodeid, [c["check"] for c in doc["checks"]], doc["complete"]]) + "\\n")
""")
    result = pytester.runpytest(
        "--gputopo-machine", "hgx-h100-nvlink-down", "--gputopo-check", "quick", "--gputopo-json", "out.json"
    )
    result.stdout.fnmatch_lines(["gputopo check: 1 failed, * passed*"])  # nvlink[GPU5]
    seen = [json.loads(line) for line in (pytester.path / "seen.jsonl").read_text().splitlines()]
    assert len(seen) > 3
    for i, (nodeid, checks, complete) in enumerate(seen):
        assert complete is False
        assert len(checks) == i + 1 and nodeid.endswith(checks[-1]), (nodeid, checks)


def test_an_incomplete_report_with_nothing_unmet_yet_says_so_without_every():
    from pytest_gputopo.probe import probe
    from pytest_gputopo.render.report import json_document

    doc = {**json_document(probe("dgx-a100"), [], []), "unmet": [], "nccl": None, "complete": False}
    text = html_report(doc)
    assert "incomplete" in text and "every" not in text.lower()
    assert "Every selected test's requirements were met" in html_report({**doc, "complete": True})


# ---------------------------------------------------------------------------------------------
# 20.7: gputopo report draws what it accepts, and refuses the rest by the field's path


def valid_document() -> dict:
    """A document with every section the report draws: a run's (measurements, checks, unmet, NCCL,
    nodes) and a sweep's."""
    from pytest_gputopo.core.schema import to_dict
    from pytest_gputopo.probe import probe
    from pytest_gputopo.render.report import machine_document

    topology = probe("dgx-a100")
    expected = {"gbps": 200.0, "basis": "NV12", "floor": 0.8, "needed_gbps": 160.0}
    row = {
        "size_bytes": 1048576,
        "count": 262144,
        "time_us": 50.5,
        "algbw_gbps": 20.7,
        "busbw_gbps": 36.3,
        "wrong": 0,
        "iterations": 20,
    }
    return {
        **machine_document(topology),
        "complete": True,
        "measurements": [
            {
                "key": ["p2p", 0, 1],
                "what": "GPU0->GPU1 copy, P2P",
                "gbps": 180.5,
                "origin": "measured",
                "source": None,
                "error": None,
                "detail": {"size_bytes": 268435456},
                "expected": expected,
            },
            {
                "key": ["p2p_bidir", 1, 0],
                "what": "both ways",
                "gbps": None,
                "origin": "cached",
                "source": "x",
                "error": "no figure",
                "detail": {},
                "expected": None,
            },
            {
                "key": ["h2d", 0, True],
                "what": "GPU0 host->device",
                "gbps": 20.0,
                "origin": "recorded",
                "source": "nvbandwidth",
                "error": None,
                "detail": {},
                "expected": {**expected, "gbps": None},
            },
            {
                "key": ["allreduce", 8, 1048576],
                "what": "all-reduce",
                "gbps": 30.0,
                "origin": "measured",
                "source": None,
                "error": None,
                "detail": {},
                "expected": expected,
            },
        ],
        "lost_measurements": ["p2p-0-2"],
        "test_measurements": [{"test": "t", "gbps": 1.0}],
        "checks": [
            {"check": "nvlink[GPU0]", "outcome": "passed", "message": "12/12 up"},
            {"check": "p2p[GPU0->GPU1]", "outcome": "failed", "message": "slow"},
        ],
        "unmet": [
            {"test": "test_x.py::test_a", "outcome": "skipped", "requirement": "requires_gpus(16)", "reason": "8 GPUs"}
        ],
        "nccl": {
            "origin": "predicted",
            "account_line": "gputopo nccl: P2P",
            "pairs": [{"pair": "GPU0-GPU1", "transports": ["P2P"], "why": "NVLink"}],
            "fallbacks": [
                {
                    "pair": "GPU0-GPU1",
                    "label": "NV12",
                    "actual": "SHM",
                    "expected": "P2P",
                    "causes": ["NCCL_P2P_DISABLE=1"],
                }
            ],
        },
        "nodes": [{"where": "node0", "differs": False, "topology": to_dict(topology)}],
        "sweeps": [
            {
                "what": "all-reduce sweep",
                "origin": "measured",
                "host": "h",
                "devices": [0, 1],
                "sizes": {"begin": 1024, "end": 1048576, "factor": 2},
                "expected": {"gbps": 200.0, "basis": "NV12", "source": None},
                "result": {"rows": [row, {**row, "size_bytes": 2048, "wrong": 3}]},
            }
        ],
    }


def report_of(tmp_path, text: str, capsys) -> tuple[int, str]:
    (tmp_path / "run.json").write_text(text)
    code = gputopo(["report", str(tmp_path / "run.json"), "-o", str(tmp_path / "out.html")])
    return code, capsys.readouterr().err


def test_the_valid_document_is_drawn(tmp_path, capsys):
    code, err = report_of(tmp_path, json.dumps(valid_document()), capsys)
    assert (code, err) == (0, "")
    text = (tmp_path / "out.html").read_text()
    assert "180" in text and "NCCL_P2P_DISABLE=1" in text and "requires_gpus(16)" in text and "node0" in text


def _set(doc: dict, path: list, value) -> dict:
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    "path, value, says",
    [
        (["measurements", 0, "key"], ["p2p"], "measurements[0].key: expected a benchmark key"),
        (["measurements", 0, "key"], ["p2p", [1], 2], "measurements[0].key: expected a benchmark key"),
        (["measurements", 0, "what"], ["x"], "measurements[0].what: expected a string"),
        (["measurements", 0, "gbps"], 10**400, "measurements[0].gbps: expected a number or null (from 0 to 1e+06)"),
        (["measurements", 0, "gbps"], "fast", "measurements[0].gbps: expected a number"),
        (["sweeps", 0, "result", "rows", 1, "time_us"], "1e400", "sweeps[0].result.rows[1].time_us: expected a number"),
        (["sweeps", 0, "expected", "gbps"], "1e400", "sweeps[0].expected.gbps: expected a number"),
        (["nccl", "fallbacks"], [{}], "nccl.fallbacks[0].pair: missing"),
        (["nccl", "pairs", 0, "transports"], 3, "nccl.pairs[0].transports: expected a list"),
        (["nccl", "pairs"], ["x"], "nccl.pairs[0]: expected an object"),
        (["checks", 0, "outcome"], 1e300, "checks[0].outcome: expected a string"),
        (["nodes", 0, "topology", "gpus"], 5, "nodes[0].topology.gpus"),
        (["schema"], True, "schema: expected a gputopo JSON report (schema 1)"),
    ],
)
def test_a_document_check_document_accepted_but_report_crashed_on_is_refused_by_its_path(
    tmp_path, capsys, path, value, says
):
    """Each of these was accepted by the old check and crashed the report (exit 3, internal error),
    or (``"schema": true``, ``1e400``) was taken for what it is not."""
    text = json.dumps(_set(valid_document(), path, value))
    text = text.replace('"1e400"', "1e400")  # a JSON number that Python reads as infinity
    code, err = report_of(tmp_path, text, capsys)
    assert code == 2 and says in err and "internal error" not in err
    assert not (tmp_path / "out.html").exists()


# Hypothesis: any mutation of a valid document is drawn or refused by a path, never an internal error.

_VALID = valid_document()
_PATH = re.compile(r"^[a-z_]+(\[\d+\]|\.[A-Za-z_0-9]+)*: ")

_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**450), max_value=10**450)
    | st.integers(min_value=-3, max_value=70000)
    | st.floats(allow_nan=False)
    | st.sampled_from([1e400, -1e400, 0.0, -0.0, 1e-320, 2**53 + 1, 10**400])
    | st.text(max_size=8)
    | st.sampled_from(["p2p", "h2d", "allreduce", "measured", "", "x"])
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["key", "gbps", "pair", "rows", "x"]), inner, max_size=3)
    ),
    max_leaves=8,
)


_ALL_PLACES = [p for p in json_paths(_VALID) if p]


@st.composite
def mutated(draw):
    doc = json.loads(json.dumps(_VALID))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_ALL_PLACES))
        try:
            parent = doc
            for step in path[:-1]:
                parent = parent[step]
            parent[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation took this place away
        how = draw(st.sampled_from(["replace", "delete", "extra"]))
        if how == "replace":
            parent[path[-1]] = draw(_VALUES)
        elif how == "delete":
            del parent[path[-1]]
        elif isinstance(parent[path[-1]], dict):
            parent[path[-1]][draw(st.sampled_from(["key", "gbps", "zz"]))] = draw(_VALUES)
        elif isinstance(parent[path[-1]], list):
            parent[path[-1]].append(draw(_VALUES))
    return doc


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_any_mutation_of_a_valid_document_is_drawn_or_refused_by_a_path(doc):
    text = json.dumps(doc)  # inf as Infinity: refused as strict JSON does; 1e400 as a number too
    for candidate in (doc, json.loads(text.replace("Infinity", "1e400"))):
        try:
            check_document(candidate)
        except ReportError as exc:
            assert _PATH.match(str(exc)), str(exc)
            continue
        assert html_report(candidate).startswith("<!DOCTYPE html>")


def test_any_mutation_through_the_command_never_says_internal_error(tmp_path, capsys):
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(mutated())
    def run(doc):
        code, err = report_of(tmp_path, json.dumps(doc).replace("Infinity", "1e400"), capsys)
        assert code in (0, 2) and "internal error" not in err, err

    run()
