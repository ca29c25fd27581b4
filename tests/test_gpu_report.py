"""dev/gpu-report, the one command to run on a real GPU host: here (no GPU) it still writes its report,
says there is no GPU and why, and lists every command it tried; tool output cannot escape its fence."""

import ctypes
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emulated import emulated_libs, make_host, needs_compiler  # noqa: F401  (a fixture)

SCRIPT = Path(__file__).resolve().parent.parent / "dev" / "gpu-report"
VENV_BIN = str(Path(sys.executable).parent)


def _load():
    loader = importlib.machinery.SourceFileLoader("gpu_report", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("gpu_report", loader))
    sys.modules["gpu_report"] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


gpu_report = _load()


def _nvml_here() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def _report(tmp_path, path_dirs, *args):
    """The script as a user runs it (the project's Python), with PATH limited to ``path_dirs``."""
    env = {**os.environ, "PATH": os.pathsep.join(path_dirs)}
    out = tmp_path / "r.md"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "-o", str(out), *args], capture_output=True, text=True, env=env, timeout=120
    )
    return done, out


@pytest.mark.slow
def test_without_a_gpu_the_report_says_so_and_lists_what_it_tried(tmp_path):
    done, out = _report(tmp_path, [VENV_BIN], "--no-tests")  # nvidia-smi is not on this PATH
    assert out.is_file(), done.stderr
    text = out.read_text()
    summary = text.split("## Disagreements")[0]
    if _nvml_here():  # a GPU host: the report compares instead; the rest below still holds
        assert done.returncode in (0, 1), done.stderr
    else:
        assert done.returncode == 3, done.stderr  # documented: written, no GPU
        assert "**no GPU on this host**" in summary
        assert "NVML library not found" in summary
        assert "NVML library not found" in done.stdout
    for tried in (
        "nvidia-smi -L",
        "nvidia-smi --query-gpu=index,name,pci.bus_id,uuid",
        "nvidia-smi topo -m",
        "nvidia-smi topo -p2p r",
        "nvidia-smi topo -p2p w",
        "nvidia-smi nvlink -s",
        "nvidia-smi -q -d COMPUTE",
        "-m pytest_gputopo.probe.host nvml cuda torch",
        "gputopo show",
        "gputopo record -o",
        "pytest tests/gpu",
    ):
        assert tried in text, tried
    assert "`nvidia-smi -L`: not installed" in text
    assert "tests/gpu: no result (not run (--no-tests))" in summary
    assert "CUDA_VISIBLE_DEVICES" in text and "date (UTC)" in text
    assert "## gputopo show" in text and "exit status" in text.split("## gputopo show")[1]


@pytest.mark.slow
def test_hostile_tool_output_stays_in_its_fence(tmp_path):
    """A tool (here a fake nvidia-smi) whose output holds fences and a heading: the report's headings
    are its own, and every hostile line sits inside a code block."""
    markdown_it = pytest.importorskip("markdown_it")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'x ````'\necho '```'\necho '# INJECTED heading'\necho '~~~'\nexit 9\n")
    fake.chmod(0o755)
    done, out = _report(tmp_path, [str(bin_dir), VENV_BIN], "--no-tests")
    assert out.is_file(), done.stderr
    tokens = markdown_it.MarkdownIt().parse(out.read_text())
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings and not any("INJECTED" in h for h in headings)
    fenced = [t for t in tokens if t.type == "fence" and "INJECTED" in t.content]
    assert len(fenced) >= 7  # each nvidia-smi command's output, each in its own block
    assert "`nvidia-smi topo -m`: exit status 9" in out.read_text()


@pytest.mark.parametrize(
    "text", ["```\n# out\n```", "````python\n", "a ``` b", "`" * 12, "~~~\nx", "no newline", "", "```"]
)
def test_fence_cannot_be_closed_by_its_text(text):
    block = gpu_report.fence(text)
    first, *body, last = block.rstrip("\n").split("\n")
    assert len(last) >= 3 and last == "`" * len(last) and first == last + "text"
    assert not any(last in line for line in body)  # no run of backticks in the text is as long as the fence
    markdown_it = pytest.importorskip("markdown_it")
    tokens = markdown_it.MarkdownIt().parse(block + "# after\n")
    assert [t.type for t in tokens][:1] == ["fence"]
    assert tokens[0].content == (text if text.endswith("\n") else text + "\n")
    assert tokens[1].type == "heading_open"  # the block ended where the report ends it


def test_inline_code_cannot_be_closed_by_its_text():
    markdown_it = pytest.importorskip("markdown_it")
    for text in ("a`b", "``x``", "`", "line\nbreak"):
        tokens = markdown_it.MarkdownIt().parseInline(gpu_report.code(text))[0].children
        assert [t.type for t in tokens] == ["code_inline"]
        assert tokens[0].content == text.replace("\n", " ")


def _gone(pid: int) -> bool:
    """``pid`` ended (a zombie that init has yet to reap counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def test_a_hung_command_is_killed_at_its_deadline_with_its_children(tmp_path):
    """The events, not the seconds (a loaded machine takes its time): the command and the child it
    left in the background are killed, and neither lived to finish its 30 s."""
    script = (
        f"echo $$ > {tmp_path}/pids; (sleep 30; touch {tmp_path}/late) & echo $! >> {tmp_path}/pids; "
        f"sleep 30; touch {tmp_path}/done"
    )
    ran = gpu_report.run("hangs", ["sh", "-c", script], timeout_s=1)
    assert ran.status is None and ran.outcome() == "timed out after 1 s: killed"
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 30  # SIGKILL is sent; a busy machine may take a moment to end them
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if not _gone(p)] == []
    assert not (tmp_path / "done").exists() and not (tmp_path / "late").exists()
    assert gpu_report.run("absent", ["gputopo-no-such-tool"]).outcome() == "not installed"


# -- G1: tests/gpu runs NVIDIA's tools where they are installed (issue 32) -------------------------


def _reference_tools():
    path = SCRIPT.parent.parent / "tests" / "gpu" / "test_reference_tools.py"
    spec = importlib.util.spec_from_file_location("reference_tools", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_reference_tools_are_found_on_path_or_in_the_folder_and_missing_ones_are_named(tmp_path, monkeypatch):
    """What dev/gpu-report's docstring and docs/benchmarks.md promise: tests/gpu runs all_reduce_perf and
    nvbandwidth where they are on PATH or in $GPUTOPO_TOOLS, and skips naming the one missing and where
    to put it."""
    tools = _reference_tools()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv(tools.TOOLS_ENV, raising=False)
    with pytest.raises(
        pytest.skip.Exception,
        match=r"all_reduce_perf is not installed: put it on PATH or in a "
        r"folder named by \$GPUTOPO_TOOLS "
        r"\(build it from NVIDIA/nccl-tests\)",
    ):
        tools.tool("all_reduce_perf")
    folder = tmp_path / "tools"
    folder.mkdir()
    monkeypatch.setenv(tools.TOOLS_ENV, str(folder))
    with pytest.raises(
        pytest.skip.Exception, match=rf"nvbandwidth is not installed: \$GPUTOPO_TOOLS={folder} has none"
    ):
        tools.tool("nvbandwidth")
    (folder / "nvbandwidth").write_text("#!/bin/sh\n")
    (folder / "nvbandwidth").chmod(0o755)
    assert tools.tool("nvbandwidth") == str(folder / "nvbandwidth")
    root = SCRIPT.parent.parent
    assert "$GPUTOPO_TOOLS" in (root / "docs" / "benchmarks.md").read_text()
    assert "test_reference_tools.py runs nvbandwidth and all_reduce_perf" in " ".join(SCRIPT.read_text().split())
    for engine in ("run_all_reduce_perf", "parse_nvbandwidth"):  # through the project's own engines
        assert engine in (root / "tests" / "gpu" / "test_reference_tools.py").read_text()


# -- item 1: dev/gpu-check's steps of the GPU path (issue 32) -------------------------------------

STEPS = SCRIPT.parent / "gpu-check-steps"


@pytest.mark.slow
@pytest.mark.skipif(_nvml_here(), reason="this host has NVML: the steps would run, not skip")
def test_gpu_check_steps_run_here_and_each_gpu_step_says_it_was_skipped_and_why(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(STEPS),
            "-o",
            str(tmp_path / "check.md"),
            "--captures",
            str(tmp_path / "captures"),
            "--budget",
            "120",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = (tmp_path / "check.md").read_text()
    no_gpu = "skipped: no GPU on this host: NVML library not found"
    for step in [
        f"numbering, CUDA_VISIBLE_DEVICES {v} |"
        for v in ("unset", "0", "full UUID", "UUID prefix", "0,-1", "empty", "99", "MIG id", "1,0")
    ] + [
        "CUDA_VISIBLE_DEVICES empty",
        "boot record",
        "PCIe generation and width",
        "all-reduce with injected wrong data must fail",
    ]:
        (row,) = [line for line in report.splitlines() if line.startswith(f"| {step}")]
        assert no_gpu in row, row
    (tools,) = [line for line in report.splitlines() if "test_reference_tools.py" in line and line.startswith("| ")]
    assert "| passed |" in tools  # its tests skip themselves, each saying why
    assert "SKIPPED" in (tmp_path / "captures").joinpath(tools.split("`captures/")[1].split("`")[0]).read_text()


def test_gpu_check_steps_skip_what_the_budget_cannot_hold(tmp_path, monkeypatch):
    steps = importlib.util.module_from_spec(
        importlib.util.spec_from_loader(
            "gpu_check_steps", importlib.machinery.SourceFileLoader("gpu_check_steps", str(STEPS))
        )
    )
    steps.__spec__.loader.exec_module(steps)
    monkeypatch.setattr(steps, "host_facts", lambda: (["GPU-a", "GPU-b"], None, []))
    ran = []
    monkeypatch.setattr(steps, "run", lambda argv, timeout_s, env=None, cwd=None: ran.append(argv) or (0, "ok"))
    assert steps.main(["-o", str(tmp_path / "c.md"), "--captures", str(tmp_path / "cap"), "--budget", "0"]) == 0
    report = (tmp_path / "c.md").read_text()
    assert not ran and report.count("| skipped: ") == 17  # every step, none run
    assert report.count("skipped: the budget of 0 s is spent") >= 14
    assert "| numbering, CUDA_VISIBLE_DEVICES MIG id | skipped: no MIG device" in report


@pytest.mark.slow
@needs_compiler
def test_gpu_check_steps_dry_run_on_the_emulated_host_passes_every_step_it_runs(emulated_libs, tmp_path):
    """The steps as a lent GPU runs them, entered on the emulated 8-GPU host (NVML and libcuda
    emulated): the numbering under each CUDA_VISIBLE_DEVICES form, the empty list (no GPU listed, as
    CUDA hides every device: the step used to require GPUs there and failed on every host), and the boot
    record (each run's header must say where CUDA's view came from: the step used to assert nothing).
    The steps that run CUDA kernels skip, saying so."""
    _, host = make_host(tmp_path / "host", emulated_libs, "dgx-a100")
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "PYTEST_ADDOPTS")} | host
    out = tmp_path / "check.md"
    done = subprocess.run(
        [
            sys.executable,
            str(STEPS),
            "-o",
            str(out),
            "--captures",
            str(tmp_path / "cap"),
            "--budget",
            "600",
            "--emulated",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = out.read_text()
    assert done.returncode == 0, report
    rows = {
        line.split(" | ")[0].lstrip("| "): line.split(" | ")[1]
        for line in report.splitlines()
        if line.startswith("| ") and " | " in line
    }
    for value in ("unset", "0", "full UUID", "UUID prefix", "0,-1", "empty", "99", "1,0"):
        assert rows[f"numbering, CUDA_VISIBLE_DEVICES {value}"] == "passed", report
    assert rows["CUDA_VISIBLE_DEVICES empty: no GPU listed, NVML-only or with CUDA's view"] == "passed", report
    assert rows["boot record: probed, from this boot's record, --gputopo-reprobe"] == "passed", report
    assert "the header says \"CUDA's view from this boot's record\": True" in report, report
    # issue 44: cuInit failing keeps NVML's GPUs (the emulated libcuda built by the step, answering 802);
    # the health items run and none fails on a healthy host
    assert (
        rows["cuInit fails (the emulated libcuda answers 802): NVML's GPUs kept, CUDA's failure named"] == "passed"
    ), report
    assert rows["health: the quick check's health, pci and xid items"] == "passed", report
    assert "health[GPU7]: passed: GPU7: no uncorrectable ECC error" in report, report
    for step in (
        "PCIe generation and width",
        "all-reduce with injected wrong data",
        "nccl-tests' all_reduce_perf built",
        "nccl-tests and nvbandwidth",
    ):
        (row,) = [v for k, v in rows.items() if k.startswith(step)]
        assert row == "skipped: needs CUDA kernels: a dry run on the emulated host (--emulated)", report
