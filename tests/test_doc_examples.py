"""Every runnable example in README.md and docs/*.md does what its doc says, run as a reader pastes it.

A reader copies a block and runs it: a test file or conftest (run here with pytester against the
bundled machine whose outcome the doc describes), a shell command (run in bash, on a recorded machine
or on an emulated GPU host where it speaks of "this host": tests/emulated.py), a CI workflow's steps,
an ini file. A block the doc shows as output is compared with what the command really prints
("..." in the doc stands for text it leaves out). A block that cannot run here -- it needs a GPU to
measure, srun, torchrun on several nodes, the network -- says so in the doc, just before its fence:

    <!-- example: not run (needs srun and two GPU nodes) -->
    <!-- example: not run: nvidia-smi, nvbandwidth (capture on a GPU host; the test gives their files) -->

and the first test here fails for any runnable block that is neither run by a test below nor marked
so, so that a new example cannot go untested silently.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import CORPUS, NO_CORPUS, USER_PYTEST, node_profile
from doc_examples import ROOT, Block, assert_shows, blocks, commands, run_shell, workflow_plan
from emulated import GCC, build_libs, make_host

# ------------------------------------------------------------------------------------------ claims


@dataclass(frozen=True)
class Claim:
    """A doc block a test here runs: the one block of ``path`` that contains ``contains`` (or a test
    elsewhere, ``by``: "tests/test_x.py::test_name", where the feature's own tests run it)."""

    path: str
    contains: str
    by: str | None = None

    @property
    def block(self) -> Block:
        found = [b for b in blocks() if b.path == self.path and self.contains in b.text]
        assert len(found) == 1, f"{self.path}: {len(found)} blocks contain {self.contains!r} (expected one)"
        return found[0]

    @property
    def text(self) -> str:
        return self.block.text


CLAIMS: list[Claim] = []


def doc(path: str, contains: str, by: str | None = None) -> Claim:
    claim = Claim(path, contains, by)
    CLAIMS.append(claim)
    return claim


# Examples the feature's own tests run as written, reading them from the doc.
doc("docs/options.md", "# test_model.py", by="tests/test_plan.py::test_the_documented_plan_is_what_the_plan_prints")
doc("docs/fleet.md", "--machine hgx-h100-pcie-x8", by="tests/test_fleet.py::test_the_documented_example")
doc(
    "docs/fleet.md",
    "srun --nodes=64",
    by="tests/test_fleet_recipes.py::test_the_slurm_recipe_collects_one_report_per_node",
)
doc(
    "docs/fleet.md",
    "actions/upload-artifact@v4",
    by="tests/test_fleet_recipes.py::test_the_actions_recipe_uploads_every_nodes_report_and_the_fleet_reads_them",
)
doc(
    "docs/fleet.md",
    "kind: Job",
    by="tests/test_fleet_recipes.py::test_the_kubernetes_recipe_writes_every_report_and_does_not_retry_a_degraded_node",
)
doc(
    "docs/options.md",
    "$ pytest -q --gputopo-plan",
    by="tests/test_plan.py::test_the_documented_plan_is_what_the_plan_prints",
)
doc(
    "docs/options.md",
    "for m in $(gputopo machines --json",
    by="tests/test_plan.py::test_the_documented_preview_on_every_bundled_machine_runs",
)
doc(
    "docs/distributed.md",
    "--gputopo-plan-json",
    by="tests/test_plan.py::test_the_documented_ci_routing_starts_jobs_only_where_tests_would_run",
)
doc(
    "docs/markers.md",
    "def test_ampere_kernel",
    by="tests/test_arch.py::test_the_documented_arch_example_runs_where_the_doc_says",
)
doc(
    "docs/markers.md",
    "def test_all_reduce(gputopo_rank",
    by="tests/test_ranks.py::test_the_documented_example_runs_as_written",
)
doc(
    "docs/markers.md",
    "$ pytest test_ranks.py -v",
    by="tests/test_ranks.py::test_the_documented_example_runs_as_written",
)
doc(
    "docs/markers.md",
    "def test_pooled_all_reduce(",
    by="tests/test_ranks_pool.py::test_the_documented_pool_example_runs_as_written",
)


def test_every_runnable_example_is_run_here_or_says_why_not():
    """A runnable block (Python, shell, workflow, ini) is run by a test of this module, or its doc
    says it is not run here and why; a note that says so of a block a test runs, or that names a
    command the block does not have, is stale."""
    found = blocks()
    claimed: dict[Block, Claim] = {}
    problems = []
    for claim in CLAIMS:
        matches = [b for b in found if b.path == claim.path and claim.contains in b.text]
        if len(matches) != 1:
            problems.append(f"{claim.path}: {len(matches)} blocks contain {claim.contains!r} (a test runs one)")
        else:
            claimed[matches[0]] = claim
        if claim.by:
            file, name = claim.by.split("::")
            if f"def {name}(" not in (ROOT / file).read_text():
                problems.append(
                    f"{claim.path}: the block with {claim.contains!r} is said to be run by {claim.by}, "
                    "which does not exist"
                )
    for block in found:
        if any(re.match(r"^\s*`{3,}\s+\S", ln) for ln in block.lines):
            problems.append(
                f"{block}: a line in it starts with ``` and goes on: it does not close the block "
                "(the page renders the text after it as code)"
            )
        if block.note is not None and block.not_run is None:
            problems.append(f"{block}: the note {block.note!r} is not 'not run (why)' or 'not run: CMD, ... (why)'")
        if block.kind is None:
            if block.not_run:
                problems.append(f"{block}: marked 'not run' but it is not a runnable block")
            continue
        whole = block.not_run is not None and not block.not_run[0]
        if block in claimed and whole:
            problems.append(f"{block}: a test runs it, but the doc says it is not run")
        elif block not in claimed and not whole:
            problems.append(
                f"{block}: a runnable {block.kind} example that no test runs and the doc does not mark "
                "'<!-- example: not run (why) -->'"
            )
        if block.not_run and block.not_run[0]:
            if block.kind not in ("shell", "workflow"):
                problems.append(f"{block}: 'not run: CMD' names commands of a shell or workflow block only")
            else:
                left_out = (commands if block.kind == "shell" else workflow_plan)(block)[1]
                for command in block.not_run[0]:
                    if not any(c.startswith(command) for c in left_out):
                        problems.append(f"{block}: the note leaves out {command!r}, which no line starts with")
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------------------- running


@dataclass
class Verdict:
    outcome: str  # passed, skipped, failed, error
    message: str  # the skip reason or failure message ("" when passed)


def write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def junit_verdicts(xml: Path) -> dict[str, Verdict]:
    """Each test case's verdict by test name, as JUnit XML records it."""
    verdicts = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        verdicts[case.get("name")] = Verdict("passed", "")
        for outcome in ("skipped", "failure", "error"):
            element = case.find(outcome)
            if element is not None:
                verdicts[case.get("name")] = Verdict(
                    {"failure": "failed"}.get(outcome, outcome),
                    (element.get("message") or "") + "\n" + (element.text or ""),
                )
    return verdicts


def run_files(pytester, files: dict[str, str], *args: str):
    """One in-process pytest run over ``files`` (name -> text, as the doc gives them): its exit
    status, its output, and each test's verdict by name."""
    write(pytester.path, files)
    xml = pytester.path / "doc-example.xml"
    result = pytester.runpytest("-p", "no:cacheprovider", "-rA", f"--junitxml={xml}", *args)
    printed = result.stdout.str() + "\n" + result.stderr.str()
    return int(result.ret), printed, junit_verdicts(xml) if xml.exists() else {}


def run_files_on(env: dict[str, str], folder: Path, files: dict[str, str], *args: str):
    """The same, as a pytest process on a host (``gpu_host``'s environment) in ``folder``."""
    write(folder, files)
    xml = folder / "doc-example.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", f"--junitxml={xml}", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return done.returncode, done.stdout + "\n" + done.stderr, junit_verdicts(xml) if xml.exists() else {}


def only(block: Block, *starts: str) -> Block:
    """The block with only its lines that start with one of ``starts``: some of its commands, as
    written, run on another machine."""
    lines = [ln for ln in block.lines if ln.startswith(starts)]
    assert lines, f"{block}: no line starts with {starts}"
    return dataclasses.replace(block, text="\n".join(lines) + "\n", note=None)


def run_workflow(block: Block, job: str, folder: Path, env: dict[str, str]) -> list[tuple[str, int, str]]:
    """The steps of one job of a CI workflow, as its runner runs them: (command, status, output)."""
    steps = [command for name, command in workflow_plan(block)[0] if name == job]
    assert steps, f"{block}: no step of job {job!r} runs here"
    script = dataclasses.replace(block, info="bash", text="\n".join(steps) + "\n", note=None)
    return [(s.command, s.status, s.printed) for s in run_shell(script, folder, env)]


def outcomes(verdicts: dict[str, Verdict]) -> dict[str, str]:
    return {name: v.outcome for name, v in verdicts.items()}


# What a reader's shell does not have: this suite's own settings, a CI or launcher's variables.
_NOT_A_READERS = ("PYTEST_", "GITHUB_", "SLURM_", "CUDA_", "NCCL_", "GPUTOPO_EMU_")
_LAUNCHER = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "GROUP_WORLD_SIZE", "CI"}


def shell_env(**extra: str) -> dict[str, str]:
    """A reader's shell: this environment's pytest and gputopo first on PATH, none of this suite's
    settings, a terminal 80 columns wide."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_A_READERS) and k not in _LAUNCHER}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["COLUMNS"] = "80"
    env.update(extra)
    return env


needs_compiler = pytest.mark.skipif(GCC is None, reason="no C compiler here to build the emulated GPU host")
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=NO_CORPUS)


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory):
    """``gpu_host(machine, driver=...)``: the environment of a shell on an emulated GPU host serving a
    bundled machine (NVML, libcuda and torch as a real host has them: tests/emulated.py), for the
    examples that speak of "this host"."""
    if GCC is None:
        pytest.skip("no C compiler here to build the emulated GPU host")
    libs = build_libs(tmp_path_factory.mktemp("libs"))

    def enter(machine: str, **personality) -> dict[str, str]:
        _, env = make_host(tmp_path_factory.mktemp("host"), libs, machine, **personality)
        base = shell_env()
        for name in ("LD_LIBRARY_PATH", "PYTHONPATH"):  # the emulated host's libraries first, as make_host lays them
            env[name] = env[name].replace(os.environ.get(name, ""), base.get(name, "")).rstrip(os.pathsep)
        return {**base, **env}

    return enter


# ----------------------------------------------------------------------------------------- README

README_MAIN_JOB = doc("README.md", "pytest examples -v -rs --gputopo-machine hgx-h100-nvlink-down")
README_TEST_FILE = doc("README.md", "# test_parallel.py")
README_HEADER = doc("README.md", "gputopo: 8x NVIDIA H100 80GB HBM3, worst link SYS")
README_SKIPPED = doc("README.md", "SKIPPED [1] test_parallel.py")
README_COMMANDS = doc("README.md", "gputopo machines ")
README_BENCH_MARKERS = doc("README.md", "def test_no_silent_fallback")


def test_readme_main_job_runs_the_examples_on_a_recorded_machine_then_shows_it():
    """The README's first command, run from the checkout as written after its set-up step (this suite
    runs in what dev/setup made): the example suite on hgx-h100-nvlink-down, whose tests that need
    GPU5's NVLinks skip with the pair named, then that machine's matrices."""
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv in this checkout (dev/setup makes it)")
    [step] = run_shell(README_MAIN_JOB.block, ROOT, shell_env())
    assert step.status == 0, step.printed
    assert "4 passed, 2 skipped" in step.printed
    assert_shows(
        [
            "SKIPPED [1] examples/test_interconnect_examples.py:...: requires_nvlink: GPU0-GPU5 are ...",
            "SKIPPED [1] examples/test_interconnect_examples.py:...: requires_link('NV12', gpus=8): GPU0-GPU5...",
            "gputopo: 8x NVIDIA H100 80GB HBM3, worst link SYS (GPU0-GPU5), ...",
            "GPU5  SYS   SYS   SYS   SYS   NODE  X     NODE  NODE  ...",
        ],
        step.printed,
    )


PARALLEL_LEASE_PLAN = doc("docs/parallel.md", "pytest examples --gputopo-plan --gputopo-lease")
PARALLEL_LEASE_PLAN_SHOWN = doc("docs/parallel.md", "gputopo lease plan (simulated)")


def test_the_lease_plan_in_parallel_md_is_what_it_prints():
    """docs/parallel.md's lease plan of the examples on the dgx-a100, run as written from the checkout:
    every line the doc shows is printed, in its order (run without pytest's cache: no durations kept)."""
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv in this checkout (dev/setup makes it)")
    [step] = run_shell(PARALLEL_LEASE_PLAN.block, ROOT, shell_env(PYTEST_ADDOPTS="-p no:cacheprovider"))
    assert step.status == 0, step.printed
    assert_shows(PARALLEL_LEASE_PLAN_SHOWN.block.text, step.printed)


def operators_files(folder: Path) -> None:
    """What the nvidia-smi and nvbandwidth captures the docs show would write on an 8x H100 node:
    topo.txt, p2p_r.txt / p2p_w.txt / p2p.txt (every pair OK), nvlink.txt, nvb.txt."""
    from pytest_gputopo.probe import probe
    from pytest_gputopo.render.smi_topo import render_topo_matrix
    from test_tool_outputs import nvbandwidth_text, nvlink_text

    p2p = (
        "\t"
        + "\t".join(f"GPU{j}" for j in range(8))
        + "\n"
        + "".join(f" GPU{i}\t" + "\t".join("X" if i == j else "OK" for j in range(8)) + "\n" for i in range(8))
        + "\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"
    )
    write(
        folder,
        {
            "topo.txt": render_topo_matrix(probe("hgx-h100")),
            "p2p_r.txt": p2p,
            "p2p_w.txt": p2p,
            "p2p.txt": p2p,
            "nvlink.txt": nvlink_text({}),
            "nvb.txt": nvbandwidth_text(),
        },
    )


def test_readme_test_file_on_the_machine_its_outputs_come_from(pytester):
    """The quickstart's test file on hgx-h100-nvlink-down: the pair tests run, the 8-GPU NV12 test is
    skipped with the line the README shows, under the header it shows."""
    status, printed, verdicts = run_files(
        pytester, {"test_parallel.py": README_TEST_FILE.text}, "--gputopo-machine", "hgx-h100-nvlink-down"
    )
    assert outcomes(verdicts) == {
        "test_data_parallel": "passed",
        "test_tensor_parallel_pair": "passed",
        "test_full_nvswitch_box": "skipped",
        "test_my_own_check": "passed",
    }
    assert status == 0
    assert_shows(README_HEADER.text, printed)
    assert_shows(README_SKIPPED.text, printed)


@pytest.mark.slow
def test_readme_commands_on_a_gpu_host_and_on_one_that_degraded(gpu_host, tmp_path):
    """The README's commands, each as written, on an emulated healthy HGX H100 (the gates pass, the
    node is recorded and shown, operators' text becomes a profile); then the two gates on the same
    node with GPU5's NVLinks down: each stops the run with exit status 8 and names GPU5."""
    block = README_COMMANDS.block
    write(tmp_path, {"test_parallel.py": README_TEST_FILE.text})
    operators_files(tmp_path)
    steps = run_shell(block, tmp_path, gpu_host("hgx-h100", driver="570"))
    for step in steps:  # every line the README gives, as written (those it marks not run aside)
        assert step.status == 0, f"{step.command}\n{step.printed}"
    said = {s.command.split("#")[0].strip(): s.printed for s in steps}
    assert "source NVML" in said["pytest"] and "4 passed" in said["pytest"]
    assert "source recorded:dgx-a100" in said["pytest --gputopo-machine dgx-a100"]
    assert "4 passed" in said['pytest --gputopo-require "gpus>=8,p2p,link>=NV18"']
    assert "4 passed" in said["pytest --gputopo-expect healthy-node.json"]
    assert json.loads((tmp_path / "healthy-node.json").read_text())["topology"]["gpus"][5]["name"]
    assert "GPU0  X     NV18" in said["gputopo show"]
    assert "hgx-h100-nvlink-down" in said["gputopo machines"]
    assert node_profile(tmp_path)["topology"]["published"]  # nvbandwidth's figures

    degraded = run_shell(
        only(block, "pytest --gputopo-require", "pytest --gputopo-expect"),
        tmp_path,
        gpu_host("hgx-h100-nvlink-down", driver="570"),
    )
    for step in degraded:
        assert step.status == 8, f"{step.command}\n{step.printed}"
        assert "GPU5" in step.printed


def test_readme_bandwidth_and_transport_markers(pytester):
    """On dgx-a100 the all-reduce floor is met on its published figure (and says it is recorded) and
    NCCL's P2P is predicted for the NVLink pair; with P2P refused by the platform, NCCL would take SHM
    and the marker says so."""
    status, printed, verdicts = run_files(
        pytester, {"test_train.py": README_BENCH_MARKERS.text}, "--gputopo-machine", "dgx-a100"
    )
    assert outcomes(verdicts) == {"test_training_step": "passed", "test_no_silent_fallback": "passed"}
    assert "PASSED (recorded, not measured) test_train.py::test_training_step" in printed
    status, printed, verdicts = run_files(
        pytester, {"test_train.py": README_BENCH_MARKERS.text}, "--gputopo-machine", "8x-l40s-p2p-disabled"
    )
    assert verdicts["test_no_silent_fallback"].outcome == "skipped"
    assert "would use SHM" in verdicts["test_no_silent_fallback"].message


# ------------------------------------------------------------------------------------ benchmarks.md

BENCH_MARKERS = doc("docs/benchmarks.md", "def test_dataloader")
BENCH_SKIPPED = doc("docs/benchmarks.md", "SKIPPED [1] test_x.py:9: min_p2p_bw(300)")
BENCH_RECORDED_PASS = doc("docs/benchmarks.md", "test_x.py::test_ar PASSED (recorded, not measured)")
BENCH_FIXTURE = doc("docs/benchmarks.md", "def test_my_kernel_bandwidth")
BENCH_CHECK = doc("docs/benchmarks.md", "$ gputopo check -v --level full --machine dgx-a100")


def test_bandwidth_markers_on_a_machine_with_published_figures(pytester):
    """dgx-a100's published figures meet the markers they cover, each saying it is recorded; the
    4-GPU all-reduce has no published figure, so that test skips saying so. A min_p2p_bw(300) skips
    with the line the doc shows."""
    threshold = "import pytest\n" + "\n" * 7 + "@pytest.mark.min_p2p_bw(300)\ndef test_x(): ...\n"  # its line 9
    status, printed, verdicts = run_files(
        pytester, {"test_bw.py": BENCH_MARKERS.text, "test_x.py": threshold}, "--gputopo-machine", "dgx-a100"
    )
    assert outcomes(verdicts) == {
        "test_training_step": "passed",
        "test_tp4": "skipped",
        "test_pipeline_pair": "passed",
        "test_all_pairs_healthy": "passed",
        "test_dataloader": "passed",
        "test_x": "skipped",
    }
    for name in ("test_training_step", "test_pipeline_pair", "test_all_pairs_healthy", "test_dataloader"):
        assert f"PASSED (recorded, not measured) test_bw.py::{name}" in printed
    assert "4 ranks, 1 GiB: no figure (none published for recorded:dgx-a100" in verdicts["test_tp4"].message
    assert_shows(BENCH_SKIPPED.text, printed)


def test_a_pass_on_recorded_figures_says_so(tmp_path):
    """The command the doc quotes, over the test it describes: a min_allreduce_bw(100) test on
    dgx-a100 passes on the published figure, and every output says it was recorded."""
    write(tmp_path, {"test_x.py": "import pytest\n\n@pytest.mark.min_allreduce_bw(100)\ndef test_ar(): ...\n"})
    done = subprocess.run(
        "pytest --gputopo-machine dgx-a100 -v -rA --junitxml=report.xml test_x.py",
        shell=True,
        cwd=tmp_path,
        env=shell_env(),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert_shows(BENCH_RECORDED_PASS.text, done.stdout)
    assert 'name="gputopo_recorded"' in (tmp_path / "report.xml").read_text()


def test_the_measuring_fixture_example_skips_where_it_cannot_measure(tmp_path):
    """gputopo_bench.measure times this host's cuda:0: on a host without a GPU the example skips
    (requires_gpus), and on a recorded machine it skips rather than measure this host for it; the
    shared all-reduce is served in both, recorded on dgx-a100. (Examples that import torch run in a
    pytest process of their own: torch does not survive pytester's in-process runs.)"""
    pytest.importorskip("torch")
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this host has an NVIDIA GPU: the example would measure it")
    status, printed, verdicts = run_files_on(shell_env(), tmp_path, {"test_bench.py": BENCH_FIXTURE.text})
    assert outcomes(verdicts) == {"test_my_kernel_bandwidth": "skipped", "test_uses_the_shared_all_reduce": "passed"}
    assert "requires_gpus(1): 0 visible" in verdicts["test_my_kernel_bandwidth"].message
    status, printed, verdicts = run_files_on(shell_env(), tmp_path, {}, "--gputopo-machine", "dgx-a100")
    assert outcomes(verdicts) == {"test_my_kernel_bandwidth": "skipped", "test_uses_the_shared_all_reduce": "passed"}
    assert "not recorded:dgx-a100" in verdicts["test_my_kernel_bandwidth"].message
    assert "234.89 recorded" in printed


@pytest.mark.slow
def test_check_transcript_on_dgx_a100(tmp_path):
    """`gputopo check -v --level full --machine dgx-a100`, as the doc shows it: the all-reduce item
    passes on the published figure, saying it was recorded; the reports it names are written."""
    [step] = run_shell(BENCH_CHECK.block, tmp_path, shell_env())
    assert step.status == 0, step.printed
    assert_shows(step.shown, step.printed)
    assert (tmp_path / "report.xml").exists() and json.loads((tmp_path / "check.json").read_text())["complete"]


# ----------------------------------------------------------------------------------------- cli.md

CLI_SHOW_LINES = doc("docs/cli.md", "GPU5: NVIDIA H100 80GB HBM3 bus 00000000:AB:00.0")
CLI_SHOW = doc("docs/cli.md", "$ gputopo show --machine 8x-l40s-p2p-disabled")
CLI_RECORD = doc("docs/cli.md", "nvidia-smi topo -m > topo.txt")
CLI_RECORD_SAYS = doc("docs/cli.md", "wrote node.json: 8 GPUs")
doc(
    "docs/cli.md",
    "--smi-query gpus.txt --smi-query gpus.csv -o listed.json\nwrote",
    by="tests/test_smi_listings.py::test_the_documented_recording_of_listings",
)
CLI_PARSE = doc("docs/cli.md", "$ gputopo parse smi-p2p p2p_r.txt")
CLI_PARSE_NCCL_TESTS = doc("docs/cli.md", "gputopo parse nccl-tests all_reduce_perf.log --json")
doc(
    "docs/cli.md",
    "$ gputopo parse nccl-topo topo.xml",
    by="tests/test_cli_parse_nccl_topo.py::test_the_documented_transcript",
)
CLI_REPORT = doc("docs/cli.md", "$ gputopo report run.json -o run.html")


def test_show_prints_a_recorded_machine(tmp_path):
    """`gputopo show --machine 8x-l40s-p2p-disabled` shows the refused P2P status; the per-GPU and
    versions lines the doc quotes are hgx-h100-nvlink-down's GPU5 as show prints it."""
    [step] = run_shell(CLI_SHOW.block, tmp_path, shell_env())
    assert step.status == 0 and "TNS" in step.printed, step.printed
    shown = subprocess.run(
        ["gputopo", "show", "--machine", "hgx-h100-nvlink-down"], env=shell_env(), capture_output=True, text=True
    )
    assert_shows(CLI_SHOW_LINES.text, shown.stdout)


@pytest.mark.slow
def test_record_from_operators_captures(tmp_path):
    """The recording recipe on the files its captures write (an 8x H100 node's): the profile says
    what each file gave, as the doc shows, and pytest and the full check run on it. nvlink -s names
    the GPUs H100s, so their capability is known and the figures are judged: the full check fails
    GPU5's copies, which the capture shows slow, and still draws the page."""
    operators_files(tmp_path)
    steps = run_shell(CLI_RECORD.block, tmp_path, shell_env())
    assert [s.command.split()[:2] for s in steps] == [
        ["gputopo", "record"],
        ["pytest", "--gputopo-machine"],
        ["gputopo", "check"],
    ]
    record, run, check = steps
    assert record.status == 0, record.printed
    assert_shows(CLI_RECORD_SAYS.text, record.printed)
    assert run.status == 5, run.printed  # no test here: pytest's "no tests collected"
    assert check.status == 1 and (tmp_path / "node.html").exists(), check.printed
    failed = {line.split()[1] for line in check.printed.splitlines() if line.startswith("FAILED ")}
    assert failed and all("GPU5" in name for name in failed), check.printed


@needs_corpus
def test_parse_transcript_on_the_corpus_outputs_it_quotes(tmp_path):
    """Each `gputopo parse` of the transcript, on the published outputs it names (p2pmatrix/001,
    nvlink-status/001, nvbandwidth/001, ncclperf/006), prints what the doc shows; nvbandwidth's
    parser refuses a topo -m matrix, naming it."""
    for name, source in (
        ("p2p_r.txt", "p2pmatrix/001.txt"),
        ("nvlink.txt", "nvlink-status/001.txt"),
        ("nvb.txt", "nvbandwidth/001.txt"),
        ("p2p.txt", "ncclperf/006.txt"),
        ("topo.txt", "topo/001.txt"),
    ):
        shutil.copy(CORPUS / source, tmp_path / name)
    steps = run_shell(CLI_PARSE.block, tmp_path, shell_env())
    assert [s.status for s in steps] == [0, 0, 0, 0, 2], [s.printed for s in steps]
    for step in steps:
        assert_shows(step.shown, step.printed)


@needs_corpus
def test_parse_nccl_tests_json(tmp_path):
    shutil.copy(CORPUS / "ncclperf" / "001.txt", tmp_path / "all_reduce_perf.log")
    [step] = run_shell(CLI_PARSE_NCCL_TESTS.block, tmp_path, shell_env())
    assert step.status == 0, step.printed
    assert json.loads(step.printed)["rows"]


def test_report_transcript(tmp_path):
    """`gputopo report run.json -o run.html` on a run's --gputopo-json document of
    hgx-h100-nvlink-down prints the line the doc shows and writes the page."""
    made = subprocess.run(
        [*USER_PYTEST, "--gputopo-machine", "hgx-h100-nvlink-down", "--gputopo-json", "run.json"],
        cwd=tmp_path,
        env=shell_env(),
        capture_output=True,
        text=True,
    )
    assert (tmp_path / "run.json").exists(), made.stdout + made.stderr
    [step] = run_shell(CLI_REPORT.block, tmp_path, shell_env())
    assert step.status == 0, step.printed
    assert_shows(step.shown, step.printed)
    assert "<title>" in (tmp_path / "run.html").read_text()


# -------------------------------------------------------------------------------- distributed.md

DIST_FP8 = doc("docs/distributed.md", "def fp8_capable(topology)")
DIST_FP8_SKIPPED = doc("docs/distributed.md", "SKIPPED [1] test_fp8.py:8:")
DIST_DRIVERS = doc("docs/distributed.md", "def test_same_driver_everywhere")
DIST_ROUTING = doc("docs/distributed.md", "pcie-suite:")


@pytest.mark.slow
def test_a_custom_condition_across_ranks_needs_gpus_to_be_met(tmp_path):
    """The FP8 predicate is unmet on a machine without GPUs (all() of none is True, so it says GPUs
    are needed), skipping at the test's own line as the doc shows; on H100s the test body is reached
    (its all-gather, written as `...`, then fails: there is no process group here)."""
    pytest.importorskip("torch")
    shown = DIST_FP8_SKIPPED.text.replace("rank 1 (node-b) [NVML]", "rank 0 (...) [...]")
    status, printed, verdicts = run_files_on(
        shell_env(), tmp_path, {"test_fp8.py": DIST_FP8.text}, "--gputopo-machine", "no-gpu"
    )
    assert outcomes(verdicts) == {"test_fp8_allgather": "skipped"}, printed
    assert_shows(shown, printed)
    status, printed, verdicts = run_files_on(shell_env(), tmp_path, {}, "--gputopo-machine", "hgx-h100")
    assert outcomes(verdicts) == {"test_fp8_allgather": "failed"}
    assert "all_gather_into_tensor" in verdicts["test_fp8_allgather"].message


def test_every_nodes_driver(pytester):
    status, printed, verdicts = run_files(
        pytester, {"test_drivers.py": DIST_DRIVERS.text}, "--gputopo-machine", "hgx-h100"
    )
    assert outcomes(verdicts) == {"test_same_driver_everywhere": "passed"}


def _example_suite() -> dict[str, str]:
    """A suite to route: the repository's example tests (NVLink, P2P, PCIe-switch tests, one without a marker)."""
    return {"test_interconnect_examples.py": (ROOT / "examples" / "test_interconnect_examples.py").read_text()}


@pytest.mark.slow
def test_routing_jobs_by_interconnect(gpu_host, tmp_path):
    """The workflow's steps on the runners they are meant for, over the example suite: the NVLink
    job passes its gates on a healthy HGX H100 (its reference recorded there, as the doc says) and
    stops with exit status 8 where GPU5 lost its NVLinks; the PCIe job on the dual-socket L40S box
    leaves out the requires_nvlink test and runs the rest, the ones this box cannot host skipped
    with their reasons -- no errors."""
    block = DIST_ROUTING.block
    write(tmp_path, _example_suite())
    healthy = gpu_host("hgx-h100", driver="570")
    (tmp_path / "ci").mkdir()
    recorded = subprocess.run(
        ["gputopo", "record", "-o", "ci/healthy-node.json"], cwd=tmp_path, env=healthy, capture_output=True, text=True
    )
    assert recorded.returncode == 0, recorded.stderr
    [(command, status, printed)] = run_workflow(block, "nvlink-suite", tmp_path, healthy)
    assert status == 0 and "6 passed" in printed, printed
    degraded = gpu_host("hgx-h100-nvlink-down", driver="570")
    [(command, status, printed)] = run_workflow(block, "nvlink-suite", tmp_path, degraded)
    assert status == 8 and "GPU5" in printed, printed

    [(command, status, printed)] = run_workflow(block, "pcie-suite", tmp_path, gpu_host("8x-l40s", driver="550"))
    assert status == 0, printed
    assert "3 passed, 2 skipped, 1 deselected" in printed and "error" not in printed.lower()
    assert_shows(
        [
            "SKIPPED [1] test_interconnect_examples.py:...: requires_link('NV12', gpus=8): GPU0-GPU1 ... PIX...",
            "SKIPPED [1] test_interconnect_examples.py:...: requires_link('PXB', gpus=4): GPU0-GPU2 ... NODE...",
        ],
        printed,
    )


# ------------------------------------------------------------------------------------ markers.md

MARKERS_ERROR = doc("docs/markers.md", "ERROR: bad gputopo marker arguments:")
MARKERS_FACTS = doc("docs/markers.md", "def test_nvls_allreduce")
MARKERS_CC_SKIPPED = doc("docs/markers.md", "SKIPPED [1] test_x.py:3: requires_gpus(8, compute_capability='>=9.0')")
MARKERS_VERSIONS = doc("docs/markers.md", "def test_nvls_reduce_scatter")
MARKERS_STACKED = doc("docs/markers.md", "class TestTensorParallel")
MARKERS_STRICT = doc("docs/markers.md", "def test_four_gpu_allreduce")
MARKERS_STRICT_SKIPPED = doc("docs/markers.md", "SKIPPED [1] test_x.py:3: requires_link('PXB', gpus=4)")
MARKERS_NOT_RUN_LINE = doc("docs/markers.md", "gputopo: 5 tests not run for unmet requirements")
MARKERS_PLACEMENT = doc("docs/markers.md", "def test_placement")
MARKERS_FIELDS = doc("docs/markers.md", "def test_gpus_share_a_numa_node")
MARKERS_CONFTEST = doc("docs/markers.md", "def pytest_gputopo_probe(config, needs)")


def test_a_bad_marker_argument_is_a_usage_error_naming_the_test(pytester):
    """The error the doc quotes, from the test it names: exit status 4, the same lines."""
    test = 'import pytest\n\n@pytest.mark.requires_link("PXQ")\ndef test_pair():\n    pass\n'
    status, printed, _ = run_files(pytester, {"tests/test_tp.py": test})
    assert status == 4
    assert_shows(MARKERS_ERROR.text, printed)


def test_gpu_facts_markers(pytester):
    """On hgx-h100 every GPU-facts test runs; on dgx-a100 only the bf16 one does, the FP8 test
    skipped for compute capability 8.0 and the NVLS test for the model (and multicast, which the
    recording does not give). An 8-GPU compute_capability test skips with the line the doc shows."""
    status, printed, verdicts = run_files(
        pytester, {"test_facts.py": MARKERS_FACTS.text}, "--gputopo-machine", "hgx-h100"
    )
    assert outcomes(verdicts) == dict.fromkeys(
        ("test_fp8_tensor_parallel", "test_bf16_kernel", "test_nvls_allreduce"), "passed"
    )
    cc = 'import pytest\n\n@pytest.mark.requires_gpus(8, compute_capability=">=9.0")\ndef test_x(): ...\n'
    status, printed, verdicts = run_files(
        pytester, {"test_facts.py": MARKERS_FACTS.text, "test_x.py": cc}, "--gputopo-machine", "dgx-a100"
    )
    assert outcomes(verdicts) == {
        "test_fp8_tensor_parallel": "skipped",
        "test_bf16_kernel": "passed",
        "test_nvls_allreduce": "skipped",
        "test_x": "skipped",
    }
    assert "has compute capability 8.0, needs >=9.0" in verdicts["test_fp8_tensor_parallel"].message
    assert "is not 'H100' or 'H200'" in verdicts["test_nvls_allreduce"].message
    assert_shows(MARKERS_CC_SKIPPED.text, printed)


def test_versions_marker_on_a_host_and_on_a_recording_without_them(gpu_host, tmp_path):
    """On a GPU host whose torch gives CUDA 12.x and NCCL 2.2x the versions test runs; a recorded
    machine that does not record them leaves them unknown, and the test skips saying so."""
    status, printed, verdicts = run_files_on(
        gpu_host("hgx-h100", driver="570"), tmp_path, {"test_versions.py": MARKERS_VERSIONS.text}
    )
    assert outcomes(verdicts) == {"test_nvls_reduce_scatter": "passed"}, printed
    status, printed, verdicts = run_files_on(shell_env(), tmp_path, {}, "--gputopo-machine", "hgx-h100")
    assert verdicts["test_nvls_reduce_scatter"].outcome == "skipped"
    assert "is unknown (no source reported it)" in verdicts["test_nvls_reduce_scatter"].message


def test_the_closest_marker_restates_and_keeps_the_rest(pytester):
    """On a 4-GPU Ampere machine every test of the doc's example skips: the class's Hopper condition
    stays on the method whose own requires_gpus(1) restates only the count, and the module's default
    asks for 8 GPUs. On hgx-h100 all run."""
    status, printed, verdicts = run_files(
        pytester, {"test_stacked.py": MARKERS_STACKED.text}, "--gputopo-machine", "4x-a100-40gb"
    )
    assert outcomes(verdicts) == {
        "test_tp4": "skipped",
        "test_one_rank": "skipped",
        "test_p2p": "skipped",
        "test_full_node": "skipped",
    }
    assert verdicts["test_tp4"].message.startswith("requires_gpus(4, arch='hopper'): ")
    assert verdicts["test_one_rank"].message.startswith("requires_gpus(1, arch='hopper'): GPU0 ")
    assert verdicts["test_full_node"].message.startswith("requires_gpus(8): 4 visible")
    status, printed, verdicts = run_files(
        pytester, {"test_stacked.py": MARKERS_STACKED.text}, "--gputopo-machine", "hgx-h100"
    )
    assert set(outcomes(verdicts).values()) == {"passed"}


def test_unmet_skips_on_a_dual_socket_host_and_fails_under_strict(gpu_host, tmp_path):
    """On an L40S host (this host, NVML) the PXB test skips with the line the doc shows; with
    --gputopo-strict it is an error at setup and the run exits with status 1."""
    host = gpu_host("8x-l40s", driver="550")
    status, printed, verdicts = run_files_on(host, tmp_path, {"test_x.py": MARKERS_STRICT.text})
    assert status == 0 and outcomes(verdicts) == {"test_four_gpu_allreduce": "skipped"}
    assert_shows(MARKERS_STRICT_SKIPPED.text, printed)
    status, printed, verdicts = run_files_on(host, tmp_path, {}, "--gputopo-strict")
    assert status == 1 and outcomes(verdicts) == {"test_four_gpu_allreduce": "error"}


def test_the_line_counting_tests_not_run(pytester):
    """The summary line the doc quotes, from the five tests it counts, on 4x-rtx4090."""
    markers = [
        "requires_gpus(8)",
        "requires_link('PXB')",
        "requires_nvlink",
        "requires_p2p",
        "requires_link('NV18', gpus=4)",
    ]
    suite = "import pytest\n" + "".join(f"\n@pytest.mark.{m}\ndef test_{i}(): ...\n" for i, m in enumerate(markers))
    status, printed, verdicts = run_files(pytester, {"test_x.py": suite}, "--gputopo-machine", "4x-rtx4090")
    assert_shows(MARKERS_NOT_RUN_LINE.text, printed)


def test_the_fixture_examples(pytester):
    """On hgx-h100 each fixture example passes; with GPU5's NVLinks down the NVLink test fails
    naming GPU5; on a machine read from nvidia-smi text (no memory, no capability) the memory and
    capability tests skip saying what is unknown."""
    files = {"test_placement.py": MARKERS_PLACEMENT.text, "test_fields.py": MARKERS_FIELDS.text}
    status, printed, verdicts = run_files(pytester, files, "--gputopo-machine", "hgx-h100")
    assert set(outcomes(verdicts).values()) == {"passed"} and len(verdicts) == 5
    status, printed, verdicts = run_files(pytester, files, "--gputopo-machine", "hgx-h100-nvlink-down")
    assert {n for n, v in verdicts.items() if v.outcome != "passed"} == {"test_nvlinks_all_up"}
    assert "GPU5: NVLinks [0, 1, 2" in verdicts["test_nvlinks_all_up"].message
    from pytest_gputopo.probe import probe
    from pytest_gputopo.render.smi_topo import render_topo_matrix

    (pytester.path / "node7.txt").write_text(render_topo_matrix(probe("hgx-h100")))
    status, printed, verdicts = run_files(
        pytester, {"test_fields.py": MARKERS_FIELDS.text}, "--gputopo-machine", "node7.txt"
    )
    assert verdicts["test_big_enough"].message.startswith("GPU0's memory is unknown [text:node7.txt]")
    assert verdicts["test_hopper_or_newer"].message.startswith("needs compute capability 9.0, GPU0 has None")


def test_a_conftest_that_supplies_the_machine(pytester):
    """The conftest's hook gives the run the profile it names, written by `gputopo record`: the
    header and the fixture are that machine's."""
    operators_files(pytester.path)
    (pytester.path / "inventory").mkdir()
    recorded = subprocess.run(
        ["gputopo", "record", "--from-smi", "topo.txt", "--name", "node-a", "-o", "inventory/node-a.json"],
        cwd=pytester.path,
        env=shell_env(),
        capture_output=True,
        text=True,
    )
    assert recorded.returncode == 0, recorded.stderr
    test = "def test_machine(gputopo):\n    assert len(gputopo.gpus) == 8 and str(gputopo.link(0, 1).label) == 'NV18'\n"
    status, printed, verdicts = run_files(pytester, {"conftest.py": MARKERS_CONFTEST.text, "test_inventory.py": test})
    assert outcomes(verdicts) == {"test_machine": "passed"}
    assert "source recorded:node-a (a recorded machine, not this host)" in printed


# --------------------------------------------------------------------------------------- nccl.md

NCCL_MARKERS = doc("docs/nccl.md", "def test_multinode")
NCCL_GATE = doc("docs/nccl.md", 'pytest --gputopo-require "gpus>=8,no-fallback"')
NCCL_PARSE = doc("docs/nccl.md", "gputopo parse nccl-log nccl.log")


def test_transport_markers(pytester):
    """On dgx-a100 NCCL is predicted to take P2P over the NVLink pair; InfiniBand with GPUDirect RDMA
    needs NCCL's own account of a run, which a recorded machine cannot give: skipped, saying so."""
    status, printed, verdicts = run_files(
        pytester, {"test_nccl.py": NCCL_MARKERS.text}, "--gputopo-machine", "dgx-a100"
    )
    assert outcomes(verdicts) == {"test_tp_pair": "passed", "test_multinode": "skipped"}
    assert "needs NCCL's own account of a run" in verdicts["test_multinode"].message


def test_the_no_fallback_gate(tmp_path):
    """The gate, as written, on a runner (PYTEST_GPUTOPO_MACHINE): dgx-a100 passes; on L40S with P2P
    refused by the platform it stops the run with exit status 8, naming the pairs and the cause."""
    write(tmp_path, {"test_ok.py": "def test_ok(): pass\n"})
    [step] = run_shell(NCCL_GATE.block, tmp_path, shell_env(PYTEST_GPUTOPO_MACHINE="dgx-a100"))
    assert step.status == 0, step.printed
    [step] = run_shell(NCCL_GATE.block, tmp_path, shell_env(PYTEST_GPUTOPO_MACHINE="8x-l40s-p2p-disabled"))
    assert step.status == 8, step.printed
    assert "GPU0-GPU1" in step.printed and "SHM" in step.printed and "TNS" in step.printed


def test_reading_an_nccl_log(tmp_path):
    shutil.copy(ROOT / "tests" / "nccl_logs" / "2.21.5-nvlink-2gpu.log", tmp_path / "nccl.log")
    [step] = run_shell(NCCL_PARSE.block, tmp_path, shell_env())
    assert step.status == 0 and "2.21.5" in step.printed and "P2P" in step.printed, step.printed


# ------------------------------------------------------------------------------------ options.md

OPTIONS_INI = doc("docs/options.md", "gputopo_require = gpus>=2,p2p")
OPTIONS_GRAMMAR = doc("docs/options.md", 'EXPR  := TERM ("," TERM)*')
OPTIONS_REQUIRE = doc("docs/options.md", '$ pytest --gputopo-machine 4x-rtx4090 --gputopo-require "gpus>=8,p2p"')
OPTIONS_EXPECT = doc("docs/options.md", "$ pytest --gputopo-machine hgx-h100-pcie-x8 --gputopo-expect hgx-h100")
doc(
    "docs/options.md",
    "$ pytest --gputopo-machine hgx-h100-nvlink-down --gputopo-require",
    by="tests/test_gate_causes.py::test_the_documented_gate_output_is_what_it_prints",
)


def test_options_in_an_ini_file(pytester):
    """The ini file's gate and strict mode: on hgx-h100 the gate passes and the tests run; on
    4x-rtx4090 (P2P refused by the GPU) the gate stops the run with exit status 8."""
    suite = {"pytest.ini": OPTIONS_INI.text, "test_parallel.py": README_TEST_FILE.text}
    status, printed, verdicts = run_files(pytester, suite, "--gputopo-machine", "hgx-h100")
    assert status == 0 and set(outcomes(verdicts).values()) == {"passed"}, printed
    status, printed, verdicts = run_files(pytester, suite, "--gputopo-machine", "4x-rtx4090")
    assert status == 8 and "requires_p2p" in printed, printed


def test_a_malformed_gate_prints_the_grammar(tmp_path):
    done = subprocess.run(
        ["pytest", "--gputopo-require", "gpus>=x"], cwd=tmp_path, env=shell_env(), capture_output=True, text=True
    )
    assert done.returncode == 4
    assert_shows(OPTIONS_GRAMMAR.text, done.stdout + "\n" + done.stderr)


def test_gate_transcripts(tmp_path):
    """The two run-gate transcripts print what the doc shows, and the first's `echo $?` says 8."""
    for claim in (OPTIONS_REQUIRE, OPTIONS_EXPECT):
        steps = run_shell(claim.block, tmp_path, shell_env())
        assert steps[0].status == 8, steps[0].printed
        for step in steps:
            assert_shows(step.shown, step.printed)


# ------------------------------------------------------------------------------------ porting.md

PORTING_LIGHTNING = doc("docs/porting.md", "@pytest.mark.requires_gpus(2, bf16=True)\ndef test_ddp_bf16")
PORTING_TRTLLM = doc("docs/porting.md", "# after\nimport pytest\n\n@pytest.mark.requires_gpus(4, min_memory_gb=80")
PORTING_PREDICATE = doc("docs/porting.md", "def four_80gb_h100s(t)")
PORTING_CI = doc("docs/porting.md", "ada-pcie:")


def test_ported_markers(pytester):
    """The "after" halves: on hgx-h100 both run; on one A100 40GB PCIe-class GPU neither does, each
    saying what the GPU lacks."""
    files = {"test_lightning.py": PORTING_LIGHTNING.text, "test_trtllm.py": PORTING_TRTLLM.text}
    status, printed, verdicts = run_files(pytester, files, "--gputopo-machine", "hgx-h100")
    assert outcomes(verdicts) == {"test_ddp_bf16": "passed", "test_llama_70b_tp4": "passed"}, printed
    status, printed, verdicts = run_files(pytester, files, "--gputopo-machine", "4x-a100-40gb")
    assert outcomes(verdicts) == {"test_ddp_bf16": "passed", "test_llama_70b_tp4": "skipped"}
    assert "needs 80 GB" in verdicts["test_llama_70b_tp4"].message
    status, printed, verdicts = run_files(pytester, files, "--gputopo-machine", "single-gpu")
    assert outcomes(verdicts) == {"test_ddp_bf16": "skipped", "test_llama_70b_tp4": "skipped"}


def test_a_predicate_is_unmet_without_gpus_or_without_memory_facts(pytester):
    """The four-H100 predicate runs the test on hgx-h100 only: A100s, no GPU at all, and a machine
    read from nvidia-smi text (memory unknown) skip it, never an error."""
    status, printed, verdicts = run_files(
        pytester, {"test_fp8.py": PORTING_PREDICATE.text}, "--gputopo-machine", "hgx-h100"
    )
    assert outcomes(verdicts) == {"test_fp8_gemm_allgather": "passed"}
    from pytest_gputopo.probe import probe
    from pytest_gputopo.render.smi_topo import render_topo_matrix

    (pytester.path / "node.txt").write_text(render_topo_matrix(probe("hgx-h100")))
    for machine in ("dgx-a100", "no-gpu", "node.txt"):
        status, printed, verdicts = run_files(pytester, {}, "--gputopo-machine", machine)
        assert outcomes(verdicts) == {"test_fp8_gemm_allgather": "skipped"}, (machine, printed)
        assert verdicts["test_fp8_gemm_allgather"].message.startswith("four 80 GB H100s on every rank: unmet on rank 0")


def test_routing_a_suite_by_gpu_facts(gpu_host, tmp_path):
    """The two jobs on the runners they are labelled for, over a suite of the doc's GPU-facts tests:
    on an HGX H100 (driver 570, CUDA 12.8, torch's NCCL) the gate passes and, strict, every test
    runs; on an 8x L40S (driver 550, CUDA 12.4) the gate passes, the bf16 test runs and the Hopper
    ones skip, each naming what the GPU lacks, with the requirement as a JUnit property."""
    write(tmp_path, {"tests/gpu/test_facts.py": MARKERS_FACTS.text})
    hopper, ada = gpu_host("hgx-h100", driver="570"), gpu_host("8x-l40s", driver="550")
    [(command, status, printed)] = run_workflow(PORTING_CI.block, "hopper-nvls", tmp_path, hopper)
    assert status == 0 and "3 passed" in printed, printed
    [(command, status, printed)] = run_workflow(PORTING_CI.block, "ada-pcie", tmp_path, ada)
    assert status == 0 and "1 passed, 2 skipped" in printed, printed
    verdicts = junit_verdicts(tmp_path / "report.xml")
    assert outcomes(verdicts) == {
        "test_fp8_tensor_parallel": "skipped",
        "test_bf16_kernel": "passed",
        "test_nvls_allreduce": "skipped",
    }
    assert (tmp_path / "report.xml").read_text().count('name="gputopo_unmet"') == 2


# ----------------------------------------------------------------------------- profile-format.md

PROFILE_RECORD = doc("docs/profile-format.md", "gputopo record --from-smi topo.txt --p2p rw:p2p.txt")


@pytest.mark.slow
def test_recording_profiles(gpu_host, tmp_path):
    """Each way of recording a profile, on an HGX H100 host (NVML) and on its operators' text, and
    a run gated on the last one (which, without topo -p2p text, leaves P2P unknown)."""
    operators_files(tmp_path)
    write(tmp_path, {"test_parallel.py": README_TEST_FILE.text})
    steps = run_shell(PROFILE_RECORD.block, tmp_path, gpu_host("hgx-h100", driver="570"))
    assert [s.status for s in steps] == [0, 0, 0, 0], [s.printed for s in steps]
    assert "source NVML" in steps[0].printed
    assert "P2P OK on all 28 pairs, source text:topo.txt" in steps[1].printed
    assert "55 p2p figure(s) recorded" in steps[2].printed
    # the last profile has no topo -p2p text: P2P is unknown, and unknown does not meet requires_p2p
    assert "3 passed, 1 skipped" in steps[3].printed


# ------------------------------------------------------------------------------------- report.md

REPORT_COMMANDS = doc("docs/report.md", "pytest --gputopo-html report.html")
REPORT_GITHUB = doc("docs/report.md", "- uses: actions/upload-artifact@v4")
REPORT_GITLAB = doc("docs/report.md", "gpu-tests:")


def test_report_commands(gpu_host, tmp_path):
    """The report with a run on this host (an HGX H100), and later from a saved JSON document."""
    write(tmp_path, {"test_parallel.py": README_TEST_FILE.text})
    made = subprocess.run(
        ["pytest", "-p", "no:cacheprovider", "--gputopo-machine", "hgx-h100-nvlink-down", "--gputopo-json", "run.json"],
        cwd=tmp_path,
        env=shell_env(),
        capture_output=True,
        text=True,
    )
    assert (tmp_path / "run.json").exists(), made.stdout
    steps = run_shell(REPORT_COMMANDS.block, tmp_path, gpu_host("hgx-h100", driver="570"))
    assert [s.status for s in steps] == [0, 0], [s.printed for s in steps]
    assert "<title>" in (tmp_path / "report.html").read_text() and "<title>" in (tmp_path / "run.html").read_text()


@pytest.mark.parametrize("claim", [REPORT_GITHUB, REPORT_GITLAB], ids=["github", "gitlab"])
@pytest.mark.slow
def test_ci_steps_that_keep_the_reports(claim, tmp_path):
    """The step that checks the node and writes the reports, on a runner whose GPU5 lost its NVLinks
    (a recorded machine standing for the runner, so that nothing is measured here): the check fails
    the job (exit status 1) and the files the artifact step keeps are there."""
    [(job, command)] = workflow_plan(claim.block)[0]
    steps = run_workflow(claim.block, job, tmp_path, shell_env(PYTEST_GPUTOPO_MACHINE="hgx-h100-nvlink-down"))
    [(command, status, printed)] = steps
    assert status == 1 and "nvlink[GPU5]" in printed, printed
    assert json.loads((tmp_path / "gputopo.json").read_text())["complete"]
    assert "<title>" in (tmp_path / "gputopo.html").read_text()


PROFILE_ERRORS = doc(
    "docs/profile-format.md", "ERROR: --gputopo-machine: node.json: field topology.gpus[3].pcie_gen_max"
)


def test_profile_errors_name_the_file_and_field(tmp_path):
    """Each error the doc quotes, from a profile broken that way (a bundled one, edited): a usage
    error (exit status 4) naming the file and the field, or the line and column of bad JSON."""
    base = json.loads((ROOT / "pytest_gputopo" / "machines" / "hgx-h100.json").read_text())

    def edited(change) -> str:
        profile = json.loads(json.dumps(base))
        change(profile["topology"]["gpus"])
        return json.dumps(profile)

    def same_uuid(gpus):
        gpus[0]["uuid"] = gpus[1]["uuid"] = "GPU-5e1c2d3a-12b0-4c2e-8b8f-000000000000"

    broken = [
        edited(lambda gpus: gpus[3].update(pcie_gen_max="five")),
        '{\n "schema": 1,\n "name": "my",,\n}\n',  # line 3, column 15
        edited(lambda gpus: gpus[0].update(numa_node=-1)),
        edited(same_uuid),
    ]
    printed = ""
    for text in broken:
        (tmp_path / "node.json").write_text(text)
        done = subprocess.run(
            ["pytest", "--gputopo-machine", "node.json"], cwd=tmp_path, env=shell_env(), capture_output=True, text=True
        )
        assert done.returncode == 4, done.stdout + done.stderr
        printed += done.stdout + "\n" + done.stderr + "\n"
    assert_shows(PROFILE_ERRORS.text, printed)
