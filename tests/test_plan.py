"""``--gputopo-plan``: a dry run that shows each selected test's verdict and why, on this host or a
named machine, runs no test body and no benchmark, and agrees with the run it previews."""

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

SUITE = """
import pytest

def ran(name):
    open("ran-" + name, "w").close()

def test_plain(): ran("plain")

@pytest.mark.requires_gpus(8)
def test_eight(): ran("eight")

@pytest.mark.requires_nvlink
def test_nvlink(): ran("nvlink")

@pytest.mark.requires_nvlink(strict=True)
def test_nvlink_strict(): ran("nvlink_strict")

@pytest.mark.min_p2p_bw(gpus=2)
def test_p2p_bw(): ran("p2p_bw")

@pytest.mark.min_allreduce_bw()
def test_allreduce(): ran("allreduce")

@pytest.mark.requires_nccl_transport("P2P")
def test_transport(): ran("transport")
"""


def _plan(pytester, *args) -> dict:
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-plan-json", "plan.json", *args)
    assert result.ret == 0, result.stdout.str()
    return json.loads((pytester.path / "plan.json").read_text())


def _run_verdicts(pytester, *args, why: dict | None = None) -> dict:
    """Each test's verdict as the real run reports it in JUnit XML (and, into ``why``, its message)."""
    pytester.runpytest("-p", "no:cacheprovider", "--junitxml", "run.xml", *args)
    verdicts = {}
    for case in ET.parse(pytester.path / "run.xml").getroot().iter("testcase"):
        nodeid = f"test_suite.py::{case.get('name')}"
        if (found := case.find("skipped")) is not None:
            verdicts[nodeid] = "skip"
        elif (found := case.find("error")) is not None or (found := case.find("failure")) is not None:
            verdicts[nodeid] = "broken" if "broken node" in found.get("message", "") else "fail"
        else:
            verdicts[nodeid] = "run"
        if why is not None:
            why[nodeid] = "" if found is None else found.get("message", "")
    return verdicts


@pytest.mark.parametrize("machine", ["hgx-h100-nvlink-down", "8x-l40s", "single-gpu", "dgx-a100", "hgx-h100"])
@pytest.mark.parametrize("strict", [[], ["--gputopo-strict"]], ids=["", "strict"])
def test_a_plan_gives_each_test_the_verdict_the_run_gives_it(pytester, machine, strict):
    """Previewing a suite on a machine says, per test, what the run on that machine does: the same
    requirement on the same figure (recorded ones included) gets the same verdict, and no body runs.
    A figure the machine's profile does not record is one its node would measure: the plan says
    unknown where a run here, with no such figure, says so and does not run the test."""
    pytester.makepyfile(test_suite=SUITE)
    doc = _plan(pytester, "--gputopo-machine", machine, *strict)
    assert not list(pytester.path.glob("ran-*")), "a plan ran a test body"
    planned = {t["nodeid"]: t["verdict"] for t in doc["tests"]}
    why: dict = {}
    ran = _run_verdicts(pytester, "--gputopo-machine", machine, *strict, why=why)
    for nodeid, verdict in planned.items():
        if verdict == "unknown":
            assert ran[nodeid] in ("skip", "fail") and "no figure (none published for" in why[nodeid], (nodeid, why)
            ran[nodeid] = "unknown"
    assert planned == ran
    assert doc["machine"] == f"recorded:{machine}" and doc["this_host"] is False
    assert doc["counts"] == {v: list(planned.values()).count(v) for v in ("run", "skip", "fail", "broken", "unknown")}


def test_the_plan_names_each_verdict_and_why(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-plan", "--gputopo-machine", "hgx-h100-nvlink-down")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*= gputopo plan =*",
            "RUN test_suite.py::test_plain - no gputopo marker",
            "RUN test_suite.py::test_eight - requires_gpus(8): met",
            "SKIP test_suite.py::test_nvlink - requires_nvlink: GPU0-GPU5 are linked by SYS, not NVLink; *",
            "FAIL (strict) test_suite.py::test_nvlink_strict - requires_nvlink: GPU0-GPU5 are linked by SYS*",
            "UNKNOWN test_suite.py::test_p2p_bw - min_p2p_bw(gpus=2): would measure GPU0->GPU1 copy, P2P on the node "
            "(no figure recorded) [recorded:hgx-h100-nvlink-down (a recorded machine, not this host)]",
            "gputopo plan on recorded:hgx-h100-nvlink-down (a recorded machine, not this host): 2 run, 2 skip, "
            "1 fail (strict), 2 unknown (would measure); no test ran (--gputopo-plan)",
            "*no tests ran*",
        ]
    )
    assert not list(pytester.path.glob("ran-*"))


def test_a_test_that_would_pass_on_recorded_figures_says_so(pytester):
    """Nothing is measured on a recorded machine: a plan that lets a bandwidth test run says which
    recorded figure it rests on, as the run does."""
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--gputopo-plan", "--gputopo-machine", "dgx-a100", "-k", "p2p_bw"
    )
    result.stdout.fnmatch_lines(
        [
            "RUN test_suite.py::test_p2p_bw - min_p2p_bw(gpus=2): met on recorded figures, not "
            "measured here: GPU0->GPU1 copy, P2P: recorded 272.0 GB/s, needed 210.0*"
        ]
    )


def test_the_plan_is_of_the_selected_tests(pytester):
    """-k, -m and other plugins' deselection apply first, as in the run."""
    pytester.makepyfile(test_suite=SUITE)
    doc = _plan(pytester, "--gputopo-machine", "8x-l40s", "-k", "nvlink")
    assert [t["nodeid"] for t in doc["tests"]] == ["test_suite.py::test_nvlink", "test_suite.py::test_nvlink_strict"]


def test_the_json_plan_says_what_decides_each_test(pytester):
    pytester.makepyfile(test_suite=SUITE)
    doc = _plan(pytester, "--gputopo-machine", "single-gpu", "-k", "eight or plain")
    assert doc["schema"] == 1 and doc["strict"] is False and doc["gate"] == []
    assert doc["tests"] == [
        {
            "nodeid": "test_suite.py::test_plain",
            "verdict": "run",
            "reason": "no gputopo marker",
            "requirement": None,
            "requirement_verdict": None,
            "would_measure": [],
        },
        {
            "nodeid": "test_suite.py::test_eight",
            "verdict": "skip",
            "reason": "requires_gpus(8): 1 visible [recorded:single-gpu (a recorded machine, not this host)]",
            "requirement": "requires_gpus(8)",
            "requirement_verdict": "unmet",
            "would_measure": [],
        },
    ]


# A recorded machine passes for this host (source nvml, nothing published), as in test_verdicts.py;
# BenchSuite._run, the one place a benchmark runs, logs every call and returns the test's figures.
GPU_HOST = """
import dataclasses, json, os
import pytest
from pytest_gputopo.core import model
from pytest_gputopo.bench import suite as bench_suite

@pytest.hookimpl(tryfirst=True)
def pytest_gputopo_probe(config):
    from pytest_gputopo.probe import probe_recorded
    topo = probe_recorded("hgx-h100")
    return dataclasses.replace(topo, source=model.Source("nvml"), published=())

def fake_run(self, key):
    with open("measured.log", "a") as f:
        f.write(key.describe() + "\\n")
    figures = json.loads(os.environ.get("GPUTOPO_TEST_FIGURES", "{}"))
    gbps, error = figures.get(key.kind, (None, "not measured in this test"))
    return gbps, {}, error

bench_suite.BenchSuite._run = fake_run
"""

ON_THIS_HOST = """
import pytest

@pytest.mark.min_p2p_bw(gpus=2)
def test_p2p_bw(): pass

@pytest.mark.min_p2p_bw(gpus=16)
def test_sixteen(): pass

@pytest.mark.requires_nccl_transport("P2P", gpus=2)
def test_transport(): pass

@pytest.mark.requires_nccl_transport("SHM", gpus=2)
def test_shm(): pass

@pytest.mark.requires_nvlink
def test_nvlink(): pass
"""


def test_a_requirement_that_needs_a_benchmark_says_what_it_would_measure(pytester):
    """On a GPU host the plan measures nothing: a verdict that rests on a measurement is unknown,
    naming the measurement; every test that rests on NCCL's own run names it (not the prediction)."""
    pytester.makeconftest(GPU_HOST)
    pytester.makepyfile(test_suite=ON_THIS_HOST)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--gputopo-plan", "--gputopo-plan-json", "plan.json"
    )
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "UNKNOWN test_suite.py::test_p2p_bw - min_p2p_bw(gpus=2): would measure GPU0->GPU1 copy, P2P",
            "SKIP test_suite.py::test_sixteen - min_p2p_bw(gpus=16): needs 16 GPUs, 8 visible*",
            "UNKNOWN test_suite.py::test_transport - requires_nccl_transport('P2P', gpus=2): would measure NCCL's "
            "transports among 8 GPUs*",
            "UNKNOWN test_suite.py::test_shm - requires_nccl_transport('SHM', gpus=2): would measure NCCL's "
            "transports*",
            "RUN test_suite.py::test_nvlink - requires_nvlink: met",
            "gputopo plan on this host (NVML): 1 run, 1 skip, 3 unknown (would measure); no test ran (--gputopo-plan)",
        ]
    )
    assert not (pytester.path / "measured.log").exists(), "a plan ran a benchmark"
    doc = json.loads((pytester.path / "plan.json").read_text())
    assert doc["this_host"] is True and doc["machine"] == "NVML"
    assert doc["tests"][0]["would_measure"] == ["GPU0->GPU1 copy, P2P"]


@pytest.mark.parametrize("gbps, verdict", [(400.0, "RUN"), (1.0, "SKIP")])
@pytest.mark.slow
def test_a_figure_at_hand_is_judged_as_the_run_judges_it(pytester, monkeypatch, gbps, verdict):
    """A figure kept in pytest's cache (--gputopo-cache) is judged as the run would judge it."""
    pytester.makeconftest(GPU_HOST)
    pytester.makepyfile(test_suite="import pytest\n@pytest.mark.min_p2p_bw(gpus=2)\ndef test_p2p_bw(): pass\n")
    monkeypatch.setenv("GPUTOPO_TEST_FIGURES", json.dumps({"p2p": [gbps, None], "p2p_staged": [0.5, None]}))
    pytester.runpytest_subprocess("--gputopo-cache").assert_outcomes(**{"passed" if verdict == "RUN" else "skipped": 1})
    (pytester.path / "measured.log").unlink()
    result = pytester.runpytest_subprocess("--gputopo-cache", "--gputopo-plan", "-rA")
    result.stdout.fnmatch_lines([f"{verdict} test_suite.py::test_p2p_bw - min_p2p_bw(gpus=2)*"])
    assert not (pytester.path / "measured.log").exists()


def test_a_plan_exits_0_whatever_it_finds(pytester):
    """The plan is the result: a test that would fail (strict) does not make the plan fail."""
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--gputopo-plan", "--gputopo-machine", "single-gpu", "--gputopo-strict"
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["gputopo plan on recorded:single-gpu *: 1 run, 5 fail (strict), 1 unknown (would measure); no test ran*"]
    )


def test_an_unmet_run_gate_is_the_plan_no_test_would_run(pytester):
    """The run would stop at its gate: so does the plan, with the gate's exit status, saying so, and
    its JSON says why for CI to route on."""
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--gputopo-plan-json",
        "plan.json",
        "--gputopo-machine",
        "hgx-h100-nvlink-down",
        "--gputopo-require",
        "link>=NV12",
    )
    assert result.ret == 8
    result.stdout.fnmatch_lines(
        [
            "gputopo plan on recorded:hgx-h100-nvlink-down *: the run gate is unmet: no test "
            "would run (exit status 8); no test ran (--gputopo-plan-json)"
        ]
    )
    doc = json.loads((pytester.path / "plan.json").read_text())
    assert doc["tests"] == [] and "requires_link('NV12'): GPU0-GPU5 are linked by SYS" in doc["gate"]
    assert not list(pytester.path.glob("ran-*"))


def test_a_collection_error_stops_a_plan_as_it_stops_a_run(pytester):
    pytester.makepyfile(test_suite=SUITE, test_broken="import nowhere_to_be_found\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-plan", "--gputopo-machine", "dgx-a100")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "gputopo plan" not in result.stdout.str()


def test_collect_only_shows_the_plan_too(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--collect-only", "-q", "--gputopo-plan", "--gputopo-machine", "dgx-a100"
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "test_suite.py::test_plain",
            "*= gputopo plan =*",
            "RUN test_suite.py::test_plain*",
            "gputopo plan on recorded:dgx-a100 *: 7 run; no test ran (--gputopo-plan)",
        ]
    )


def test_health_checks_are_one_line_of_the_plan(pytester):
    pytester.makepyfile(test_suite="def test_plain(): pass\n")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--gputopo-plan", "--gputopo-check", "--gputopo-machine", "dgx-a100"
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "RUN test_suite.py::test_plain - no gputopo marker",
            "RUN gputopo-check - * health checks (--gputopo-check quick): each outcome is the check's",
        ]
    )
    assert "RUN gputopo-check::" not in result.stdout.str()


@pytest.mark.parametrize(
    "variables, ini, source",
    [
        pytest.param({"PYTEST_GPUTOPO_PLAN": "1"}, "", "environment variable PYTEST_GPUTOPO_PLAN", id="env"),
        pytest.param({}, "gputopo_plan = true", "ini option gputopo_plan in *", id="ini"),
        pytest.param(
            {"PYTEST_GPUTOPO_PLAN_JSON": "plan.json"},
            "",
            "environment variable PYTEST_GPUTOPO_PLAN_JSON",
            id="json-env",
        ),
    ],
)
def test_the_plan_has_three_surfaces_and_names_the_one_that_asked(pytester, monkeypatch, variables, ini, source):
    """A plan runs no test, so a stray ini key or variable must show where it came from."""
    pytester.makepyfile(test_suite=SUITE)
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", "dgx-a100")
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"gputopo plan on recorded:dgx-a100 *: 7 run; no test ran ({source})"])
    assert not list(pytester.path.glob("ran-*"))
    # --gputopo-no-plan runs the tests whatever ini or environment say
    pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", "dgx-a100", "--gputopo-no-plan").assert_outcomes(
        passed=7
    )
    assert len(list(pytester.path.glob("ran-*"))) == 7


def test_xdist_has_nothing_to_distribute_in_a_plan(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-plan", "-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--gputopo-plan: a plan runs no test, so xdist has nothing to distribute; plan "
            "without -n/--dist (add -n 0 where the ini file sets -n)"
        ]
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-plan", "-n", "0", "--gputopo-machine", "dgx-a100")
    assert result.ret == 0


def test_a_plan_is_not_run_by_every_rank_of_a_launch(pytester, monkeypatch):
    for name, value in {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-plan")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--gputopo-plan: this is rank 1 of 2 (torchrun or srun); a plan runs no test: "
            "run it once, without the launcher"
        ]
    )


def test_an_unwritable_plan_file_is_a_usage_error_before_collection(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-plan-json", "missing/plan.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gputopo-plan-json: cannot write missing/plan.json*"])


def test_a_plan_file_that_cannot_be_written_at_the_end_is_a_usage_error_after_the_plan(pytester):
    """The plan is still shown; the exit status says the file CI would route on is missing."""
    (pytester.path / "out").mkdir()
    pytester.makeconftest("import shutil\ndef pytest_collection_finish(session):\n    shutil.rmtree('out')\n")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--gputopo-plan-json", "out/plan.json", "--gputopo-machine", "dgx-a100"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["gputopo plan on recorded:dgx-a100 *: 7 run; no test ran (--gputopo-plan-json)"])
    result.stderr.fnmatch_lines(["*gputopo: cannot write the plan to out/plan.json: *"])


def test_a_plan_line_escapes_what_a_profile_says(pytester, tmp_path):
    """A GPU's name from a profile is printed escaped: no plan line is one a CI runner acts on."""
    machines = Path(__file__).resolve().parents[1] / "pytest_gputopo" / "machines"
    doc = json.loads((machines / "4x-rtx4090.json").read_text())
    doc["name"] = "x\n::add-mask::y"
    doc["topology"]["gpus"][0]["name"] = "RTX\r\n::error::pwn\x1b[2J"
    (tmp_path / "hostile.json").write_text(json.dumps(doc))
    pytester.makepyfile(test_x="import pytest\n@pytest.mark.requires_gpus(model='A100')\ndef test_a(): pass\n")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--gputopo-plan", "--gputopo-machine", str(tmp_path / "hostile.json")
    )
    assert result.ret == 0
    for line in result.stdout.lines:
        assert not line.lstrip().startswith("::") and "\x1b" not in line and "\r" not in line, repr(line)
    assert "RTX\\r\\n::error::pwn\\x1b[2J" in result.stdout.str()


# The documents' examples, run as written.
DOCS = Path(__file__).resolve().parents[1] / "docs"
BIN = Path(sys.executable).parent  # pytest and gputopo of this environment
needs_jq = pytest.mark.skipif(shutil.which("jq") is None, reason="no jq here (the recipes use it)")


def _block(text: str, start: str) -> str:
    """The fenced block whose first line starts with ``start``."""
    lines = text.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.startswith(start) and lines[i - 1].startswith("```"))
    end = next(i for i in range(first, len(lines)) if lines[i].startswith("```"))
    return "".join(lines[first:end])


def _sh(script: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **env},
        timeout=300,
    )


def test_the_documented_plan_is_what_the_plan_prints(pytester):
    doc = (DOCS / "options.md").read_text()
    (pytester.path / "test_model.py").write_text(_block(doc, "# test_model.py"))
    shown = _block(doc, "$ pytest -q --gputopo-plan").splitlines()
    assert len(shown) == 8
    args = shlex.split(shown[0][len("$ pytest") :])
    printed = pytester.runpytest("-p", "no:cacheprovider", *args).stdout.lines
    assert [line for line in printed if line in shown[1:]] == shown[1:]


@needs_jq
@pytest.mark.slow
def test_the_documented_preview_on_every_bundled_machine_runs(pytester):
    doc = (DOCS / "options.md").read_text()
    (pytester.path / "test_model.py").write_text(_block(doc, "# test_model.py"))
    done = _sh(_block(doc, "for m in $(gputopo machines"), pytester.path)
    assert done.returncode == 0, done.stderr
    from pytest_gputopo.probe.recorded import bundled_names

    assert [line.split()[3] for line in done.stdout.splitlines()] == [f"recorded:{m}" for m in bundled_names()]


@needs_jq
def test_the_documented_ci_routing_starts_jobs_only_where_tests_would_run(pytester):
    doc = (DOCS / "distributed.md").read_text()
    recipe = _block(doc[doc.index("### Route jobs by the plan") :], "# .github/workflows/gpu.yml")
    script = textwrap.dedent(recipe.split("run: |\n", 1)[1].split("  gpu:\n", 1)[0])
    machines = Path(__file__).resolve().parents[1] / "pytest_gputopo" / "machines"
    (pytester.path / "ci").mkdir()
    shutil.copy(machines / "hgx-h100.json", pytester.path / "ci" / "gpu-8x-nvlink.json")
    shutil.copy(machines / "8x-l40s.json", pytester.path / "ci" / "gpu-pcie.json")
    pytester.makepyfile(test_tp="import pytest\n@pytest.mark.requires_nvlink\ndef test_tensor_parallel(): pass\n")
    output = pytester.path / "github_output"
    done = _sh(script, pytester.path, GITHUB_OUTPUT=str(output))
    assert done.returncode == 0, done.stdout + done.stderr
    assert output.read_text() == 'pools=["gpu-8x-nvlink"]\n'


@needs_jq
def test_the_documented_ci_routing_keeps_the_jobs_of_bandwidth_tests_where_the_profile_has_no_figures(pytester):
    """A pool recorded once with `gputopo record` has no figures: its GPU runner would measure them. A
    suite of bandwidth tests alone must still get that pool's job (the plan says unknown, not skip),
    and a pool whose topology rules a test out still gets none for it."""
    doc = (DOCS / "distributed.md").read_text()
    recipe = _block(doc[doc.index("### Route jobs by the plan") :], "# .github/workflows/gpu.yml")
    script = textwrap.dedent(recipe.split("run: |\n", 1)[1].split("  gpu:\n", 1)[0])
    machines = Path(__file__).resolve().parents[1] / "pytest_gputopo" / "machines"
    (pytester.path / "ci").mkdir()
    nvlink = json.loads((machines / "hgx-h100.json").read_text())
    nvlink["topology"]["published"] = []  # as `gputopo record` writes a node: no published figures
    (pytester.path / "ci" / "gpu-8x-nvlink.json").write_text(json.dumps(nvlink))
    shutil.copy(machines / "8x-l40s.json", pytester.path / "ci" / "gpu-pcie.json")  # publishes none either
    pytester.makepyfile(
        test_bw="import pytest\n"
        "@pytest.mark.min_allreduce_bw(50)\ndef test_allreduce(): pass\n"
        "@pytest.mark.min_p2p_bw(20, gpus=2)\ndef test_p2p(): pass\n"
    )
    output = pytester.path / "github_output"
    done = _sh(script, pytester.path, GITHUB_OUTPUT=str(output))
    assert done.returncode == 0, done.stdout + done.stderr
    assert output.read_text() == 'pools=["gpu-8x-nvlink","gpu-pcie"]\n'
    plan = json.loads((pytester.path / "plan-gpu-pcie.json").read_text())
    assert plan["counts"]["unknown"] == 2 and plan["counts"]["skip"] == 0
    assert {t["verdict"] for t in plan["tests"]} == {"unknown"}
    assert all(t["would_measure"] and "on the node (no figure recorded)" in t["reason"] for t in plan["tests"])

    # a pool whose topology rules the test out gets no job for it
    pytester.makepyfile(test_tp="import pytest\n@pytest.mark.requires_nvlink\ndef test_tensor_parallel(): pass\n")
    (pytester.path / "test_bw.py").unlink()
    done = _sh(script, pytester.path, GITHUB_OUTPUT=str(output))
    assert done.returncode == 0, done.stdout + done.stderr
    assert output.read_text().splitlines()[-1] == 'pools=["gpu-8x-nvlink"]'
