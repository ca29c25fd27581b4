"""``@pytest.mark.ranks(n)``: a test's body run as n ranks spawned by torch.multiprocessing, for real on
the CPUs with gloo (loopback only), through real pytest runs (``runpytest_subprocess``; a usage error,
which spawns nothing, in this process).

Sources the behaviour rests on (installed torch):
- torch/multiprocessing/spawn.py: ``start_processes(..., join=False)`` returns the ``ProcessContext``
  whose ``processes`` the plugin supervises; ``_wrap`` sets the rank's parent-death signal;
  ``ProcessContext.join`` would end the other ranks at the first failure (why it is not used).
- torch/distributed/elastic/multiprocessing/api.py: ``PContext.start`` registers SIGTERM, SIGINT,
  SIGHUP, SIGQUIT handlers in the caller (why the plugin does not call elastic's ``start_processes``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from conftest import clear_launch, hide_module

pytest.importorskip("torch")

# Each rank writes its pid where the test can find it, so that the test can see none outlived the run.
PIDS = """
import os

def note_pid(folder, rank):
    with open(os.path.join(folder, f"pid-{os.getppid()}-{rank}-{os.getpid()}"), "w"):
        pass
"""


def rank_pids(folder) -> list[int]:
    return [int(p.name.rsplit("-", 1)[1]) for p in folder.iterdir() if p.name.startswith("pid-")]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not; it would be reaped by its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "0", *args)


def run_here(pytester, *args):
    """A run that stops at collection with a usage error, in this process: it spawns and imports
    nothing, so a process of its own would only cost its start."""
    return pytester.runpytest("-p", "no:cacheprovider", "-n", "0", *args)


@pytest.fixture
def pid_folder(pytester, monkeypatch):
    folder = pytester.mkdir("pids")
    monkeypatch.setenv("RANKS_TEST_PIDS", str(folder))
    pytester.makepyfile(pidnote=PIDS)
    return folder


RANKS_SUITE = """
import os
import signal

import pytest
import torch
import torch.distributed as dist

from pidnote import note_pid


@pytest.fixture(scope="module")
def config():
    return {"lr": 0.5}


@pytest.mark.ranks(2)
@pytest.mark.parametrize("scale", [1, 10])
def test_all_reduce(gputopo_rank, tmp_path, config, scale):
    note_pid(os.environ["RANKS_TEST_PIDS"], gputopo_rank.rank)
    assert (gputopo_rank.world_size, gputopo_rank.local_rank, gputopo_rank.device, gputopo_rank.gpus) == \\
        (2, gputopo_rank.rank, "cpu", ())
    assert dist.get_backend() == "gloo" and dist.get_rank() == gputopo_rank.rank
    assert os.environ["RANK"] == str(gputopo_rank.rank) and os.environ["WORLD_SIZE"] == "2"
    t = torch.tensor([float(gputopo_rank.rank + 1) * scale])
    dist.all_reduce(t)
    assert t.item() == 3.0 * scale and config == {"lr": 0.5}
    (tmp_path / f"rank{gputopo_rank.rank}").write_text("one folder for all ranks")


class TestInAClass:
    def setup_method(self):
        self.base = 40

    @pytest.mark.ranks(2)
    def test_method(self, gputopo_rank):
        assert self.base + gputopo_rank.world_size == 42


@pytest.mark.ranks(2)
def test_one_rank_fails(gputopo_rank):
    note_pid(os.environ["RANKS_TEST_PIDS"], gputopo_rank.rank)
    expected = 0
    assert gputopo_rank.rank == expected


@pytest.mark.ranks(2)
def test_one_rank_exits(gputopo_rank):
    note_pid(os.environ["RANKS_TEST_PIDS"], gputopo_rank.rank)
    if gputopo_rank.rank == 1:
        os._exit(3)
    dist.barrier()


@pytest.mark.ranks(2)
def test_one_rank_segfaults(gputopo_rank):
    note_pid(os.environ["RANKS_TEST_PIDS"], gputopo_rank.rank)
    if gputopo_rank.rank == 0:
        os.kill(os.getpid(), signal.SIGSEGV)
    dist.barrier()


@pytest.mark.ranks(2)
def test_every_rank_skips(gputopo_rank):
    pytest.skip("not on this backend")
"""


@pytest.mark.slow
def test_ranks_pass_fail_and_die_each_named_in_every_report(pytester, pid_folder):
    """The body runs as two gloo ranks with its fixtures, parametrize and a class's instance; a failing
    rank, a rank that exits and a rank killed by a signal fail their test naming the rank with its
    assertion, exit status or signal, in the terminal, JUnit XML and the JSON report; no rank outlives
    its test."""
    pytester.makepyfile(test_suite=RANKS_SUITE)
    result = run(pytester, "-rA", "--junitxml=junit.xml", "--gputopo-json=report.json")
    result.assert_outcomes(passed=3, failed=3, skipped=1)
    result.stdout.fnmatch_lines(
        [  # each failure's first line: every rank that did not pass, and why
            "ranks(2): rank 1 failed: AssertionError: assert 1 == 0",
            "ranks(2): *rank 1 died: exited with status 3 before its body ended",
            "ranks(2): rank 0 died: killed by SIGSEGV (exit status -11) before its body ended*",
            "SKIPPED [[]1[]] test_suite.py:*: ranks(2): rank 0 skipped: not on this backend",
        ]
    )
    text = result.stdout.str()
    # the failed rank's own traceback, with pytest's assertion rewriting, under its own heading
    assert re.search(
        r"--- rank 1 of 2: failed\nTraceback.*\n  File .*test_suite\.py\", line \d+, in "
        r"test_one_rank_fails\n    assert gputopo_rank\.rank == expected\n"
        r"AssertionError: assert 1 == 0\n \+  where 1 = RankInfo\(rank=1",
        text,
    ), text
    assert "rank 0 of 2: failed" not in text.split("test_one_rank_fails")[1].split("____")[0]
    # the killed rank's native stack too, as torch's own harness asks for it (c10's FatalSignalHandler)
    assert re.search(r"SIGSEGV\(11\), PID: \d+, Thread \d+:", text.split("_ test_one_rank_segfaults _", 1)[1]), text

    cases = {c.get("name"): c for c in ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")}
    failure = cases["test_one_rank_exits"].find("failure")
    assert "rank 1 died: exited with status 3" in failure.get("message")
    props = [
        json.loads(p.get("value"))
        for p in cases["test_one_rank_segfaults"].iter("property")
        if p.get("name") == "gputopo_rank_failed"
    ]
    assert {(p["rank"], p["outcome"], p["exit_status"]) for p in props} >= {(0, "died", -11)}

    document = json.loads((pytester.path / "report.json").read_text())
    failed = {(r["test"].split("::")[-1], r["rank"], r["outcome"]) for r in document["ranks_failed"]}
    assert ("test_one_rank_fails", 1, "failed") in failed and ("test_one_rank_exits", 1, "died") in failed
    assert not any(r[0].startswith("test_all_reduce") for r in failed)

    assert len(rank_pids(pid_folder)) == 10
    assert [pid for pid in rank_pids(pid_folder) if alive(pid)] == []


HANG = """
import os
import time

import pytest
import torch.distributed as dist

from pidnote import note_pid


def wait_in_sleep():
    time.sleep(600)


@pytest.mark.ranks(2, timeout=20)
def test_hangs(gputopo_rank):
    note_pid(os.environ["RANKS_TEST_PIDS"], gputopo_rank.rank)
    if gputopo_rank.rank == 1:
        wait_in_sleep()
    dist.barrier()


@pytest.mark.ranks(2, timeout=8)
def test_both_hang(gputopo_rank):
    note_pid(os.environ["RANKS_TEST_PIDS"], gputopo_rank.rank)
    wait_in_sleep()
"""


@pytest.mark.slow
def test_a_hanging_rank_fails_its_test_with_every_live_ranks_stack(pytester, pid_folder):
    """A rank waiting in a collective is failed by its group's timeout (15 s of the test's 20: the
    collective's own error, naming what it waited for), the rank that never came is ended 3 s later
    with its stack; ranks stuck outside any collective are ended at the test's deadline."""
    pytester.makepyfile(test_hang=HANG)
    result = run(pytester)
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    hangs = text.split("_ test_hangs _")[1].split("_ test_both_hang _")[0]
    assert (
        "ranks(2, timeout=20): rank 0 failed first: RuntimeError: [" in hangs
        and "Timed out waiting 15000ms for recv operation to complete; rank 1 stuck: still running 3 s after "
        "rank 0 failed; ended by gputopo"
        in hangs
    ), text
    rank1 = hangs.split("--- rank 1 of 2: stuck")[1]
    assert re.search(r'File ".*test_hang\.py", line \d+ in wait_in_sleep', rank1), text
    rank0 = hangs.split("--- rank 0 of 2: failed")[1].split("--- rank 1")[0]
    assert re.search(r"line \d+, in barrier", rank0) and "test_hangs" in rank0, text
    both = text.split("_ test_both_hang _")[1]
    assert (
        "ranks(2, timeout=8): rank 0 timed out: still running after 8 s (the test's timeout); ended by "
        "gputopo; rank 1 timed out" in both
    ), text
    assert re.search(r'File ".*test_hang\.py", line \d+ in wait_in_sleep', both.split("--- rank 1 of 2")[1]), text
    assert len(rank_pids(pid_folder)) == 4 and [pid for pid in rank_pids(pid_folder) if alive(pid)] == []


SHARED_FATE = """
import time

import pytest
import torch
import torch.distributed as dist


@pytest.mark.ranks(3, timeout=300)
def test_one_raises(gputopo_rank):
    if gputopo_rank.rank == 1:
        raise ValueError("rank 1 gives up at once")
    if gputopo_rank.rank == 0:
        time.sleep(600)
    dist.all_reduce(torch.ones(1))
"""


@pytest.mark.slow
def test_a_rank_that_fails_ends_the_test_on_every_rank_far_inside_its_timeout(pytester):
    """Shared fate: rank 1 raises at its first line; rank 2, in a collective with it, fails on its own
    (gloo: the peer's connection closed), rank 0, sleeping, is ended 3 s later -- not at the test's
    300 s. The report says which rank failed first and that the others were ended for it."""
    pytester.makepyfile(test_fate=SHARED_FATE)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    headline = next(line for line in text.splitlines() if line.startswith("ranks(3, timeout=300): "))
    assert headline.startswith(
        "ranks(3, timeout=300): rank 0 stuck: still running 3 s after rank 1 failed; ended by gputopo; "
        "rank 1 failed first: ValueError: rank 1 gives up at once; rank 2 failed: RuntimeError: "
    ), text
    assert "timed out" not in headline


def test_a_test_that_skips_spawns_nothing(pytester):
    """The gating markers are judged first: a ranks test unmet on the machine is skipped with the
    reason and no rank is spawned (torch is not even imported)."""
    pytester.makepyfile(
        test_gated="""
import pytest

@pytest.mark.ranks(2, backend="nccl")
def test_nccl(gputopo_rank):
    raise AssertionError("spawned")

@pytest.mark.requires_p2p
@pytest.mark.ranks(2, backend="gloo")
def test_gloo_gated(gputopo_rank):
    raise AssertionError("spawned")

@pytest.mark.ranks(4)
def test_four(gputopo_rank):
    raise AssertionError("spawned")
"""
    )
    pytester.makeconftest("""
import sys

def pytest_sessionfinish(session):
    print("modules:", sorted(m for m in ("torch", "pytest_gputopo.plugin.ranks_run") if m in sys.modules))
""")
    result = run(pytester, "-rs", "--gputopo-machine", "no-gpu", "-k", "not four")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*ranks(2, backend='nccl'): one GPU per rank, needs 2 GPUs, 0 visible*",
            "*requires_p2p: needs 2 GPUs to form a pair, 0 visible*",
        ]
    )
    assert "modules: []" in result.stdout.str()
    result = run(pytester, "-rs", "--gputopo-machine", "single-gpu", "-k", "four")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*ranks(4): one GPU per rank, needs 4 GPUs, 1 visible*"])
    assert "modules: []" in result.stdout.str()


def test_a_ranks_test_on_cpus_needs_nothing_of_the_machine(pytester):
    """Without a GPU the ranks run on the CPUs: the marker is met; under a plan it says it would run."""
    from pytest_gputopo.plugin.markers import from_marker
    from pytest_gputopo.probe import probe

    no_gpu, dgx = probe("no-gpu"), probe("dgx-a100")
    ranks, _ = from_marker("ranks", (2,), {})
    assert ranks.evaluate(no_gpu).ok and ranks.backend_on(no_gpu) == "gloo" and not ranks.on_gpus(no_gpu)
    assert ranks.evaluate(dgx).ok and ranks.backend_on(dgx) == "nccl" and ranks.on_gpus(dgx)
    gloo, _ = from_marker("ranks", (16,), {"backend": "gloo"})
    assert gloo.evaluate(dgx).ok and not gloo.on_gpus(dgx)
    assert not from_marker("ranks", (16,), {})[0].evaluate(dgx).ok


@pytest.mark.parametrize(
    "problem",
    ["NVIDIA driver not loaded", "no permission to use NVML", "nvidia-ml-py (module pynvml) is not installed"],
)
def test_ranks_never_fall_back_to_the_cpus_where_nvml_failed_on_a_host_that_may_have_gpus(problem):
    """Only a host with no NVIDIA driver has no GPU for certain: where NVML failed, the GPUs may be
    there, and ranks run on gloo would pass a test on a GPU node that cannot run it. Unknown, then
    (skipped, or failed under strict), unless the test names its backend."""
    from pytest_gputopo.core.model import NO_DRIVER, Source, Topology
    from pytest_gputopo.plugin.markers import from_marker

    failed = Topology(source=Source("nvml"), problem=problem)
    verdict = from_marker("ranks", (2,), {})[0].evaluate(failed)
    assert not verdict.ok and verdict.unknown
    assert verdict.reason == (
        f"ranks(2): whether this host has GPUs for the ranks is unknown ({problem}); "
        f"backend='gloo' runs them on the CPUs"
    )
    assert from_marker("ranks", (2,), {"backend": "gloo"})[0].evaluate(failed).ok
    assert not from_marker("ranks", (2,), {"backend": "nccl"})[0].evaluate(failed).ok
    assert from_marker("ranks", (2,), {})[0].evaluate(Topology(source=Source("nvml"), problem=NO_DRIVER)).ok


@pytest.mark.parametrize(
    "marker, says",
    [
        ("ranks(0)", "n (ranks) must be an integer from 1 to 1024, got 0"),
        ("ranks(2, timeout=0)", "timeout must be a number of seconds above 0 and at most 86400, got 0"),
        ("ranks(2, backend='nc cl')", "backend must be a torch.distributed backend name such as 'nccl' or 'gloo'"),
        (
            "ranks(2, 30)",
            "too many positional arguments; signature: ranks(n, *, timeout=None, backend=None, pool=None, strict=None)",
        ),
        ("ranks()", "missing a required argument: 'n'"),
    ],
)
def test_a_bad_argument_is_a_usage_error_naming_the_test(pytester, marker, says):
    pytester.makepyfile(test_bad=f"import pytest\n@pytest.mark.{marker}\ndef test_x(gputopo_rank): pass\n")
    result = run_here(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*test_bad.py::test_x: @pytest.mark.ranks: {says}*"])


def test_a_backend_torch_lacks_and_more_ranks_than_the_memory_holds_stop_before_any_rank_starts(pytester, pid_folder):
    """torch's own ``is_backend_available`` (torch/distributed/distributed_c10d.py: built in, or
    registered with ``Backend.register_backend``; a composite string part by part) is asked in the
    pytest process: a typo fails at once, naming what the installed torch has. More ranks than the
    host's memory holds (256 MiB each before the body allocates) are unmet: skipped, failed when
    strict. No rank starts for either (no pid noted)."""
    pytester.makeconftest(
        "from pytest_gputopo.bench import sweep\nsweep.available_memory = lambda: 2**30  # 1 GiB: 4 ranks\n"
    )
    pytester.makepyfile(
        test_checked=PIDS.replace("import os", "import os\nimport pytest")
        + """
@pytest.mark.ranks(2, backend="bogus")
def test_bogus(gputopo_rank):
    note_pid(os.environ["RANKS_TEST_PIDS"], gputopo_rank.rank)

@pytest.mark.ranks(2, backend="cpu:gloo,cuda:bogus")
def test_bogus_part(gputopo_rank):
    note_pid(os.environ["RANKS_TEST_PIDS"], gputopo_rank.rank)

@pytest.mark.ranks(5, backend="gloo")
def test_five(gputopo_rank):
    note_pid(os.environ["RANKS_TEST_PIDS"], gputopo_rank.rank)

@pytest.mark.ranks(5, backend="gloo", strict=True)
def test_five_strict(gputopo_rank):
    note_pid(os.environ["RANKS_TEST_PIDS"], gputopo_rank.rank)
"""
    )
    result = run(pytester, "-rA")
    result.assert_outcomes(failed=3, skipped=1)
    text = result.stdout.str()
    torch_version = __import__("torch").__version__
    bogus = f"ranks(2, backend='bogus'): the installed torch {torch_version} has no backend 'bogus'"
    assert f"{bogus}; available here: gloo\n" in text, text
    assert "ranks(2, backend='cpu:gloo,cuda:bogus'): the installed torch" in text, text
    memory = (
        "5 ranks need about 1.2 GiB of this host's memory before their body allocates anything (256 MiB "
        "each: python and torch), and 1.0 GiB is available"
    )
    assert f"SKIPPED [1] test_checked.py:16: ranks(5, backend='gloo'): {memory}" in text, text
    assert re.search(rf"_ test_five_strict _+\nranks\(5, backend='gloo'\): {re.escape(memory)}", text), text
    assert rank_pids(pid_folder) == []


@pytest.mark.parametrize(
    ("n", "available", "fits"), [(4, 2**30, True), (5, 2**30, False), (1024, 24 * 2**30, False), (1024, None, True)]
)
def test_the_ranks_fit_the_hosts_memory_at_256_mib_each_and_unknown_memory_bounds_nothing(n, available, fits):
    from pytest_gputopo.core.ranks_requirement import RanksRequirement

    assert (RanksRequirement(n=n).memory_shortfall(available) is None) is fits


WORLD_SIZES = """
import json
import os

import pytest
import torch
import torch.distributed as dist


@pytest.mark.ranks([1, 2])
@pytest.mark.parametrize("scale", [1, 3])
def test_sizes(gputopo_rank, scale):
    t = torch.ones(1) * scale
    dist.all_reduce(t)
    assert t.item() == scale * gputopo_rank.world_size == scale * dist.get_world_size()


@pytest.mark.ranks([2, 1], backend="gloo")
class TestSized:
    @pytest.mark.ranks(timeout=60)
    def test_method(self, gputopo_rank):
        assert os.environ["WORLD_SIZE"] == str(gputopo_rank.world_size)
"""


@pytest.mark.slow
def test_a_list_of_world_sizes_is_one_test_per_size_each_run_at_its_size(pytester):
    """``ranks([1, 2])``: one test id per size (DeepSpeed's ``world_size = [1, 2, 4]``), by pytest's
    parametrize, beside the test's own parameters; a class's list reaches its methods, whose own marks
    add to it."""
    pytester.makepyfile(test_sizes=WORLD_SIZES)
    result = run(pytester, "-v", "-p", "no:randomly")
    result.assert_outcomes(passed=6)
    passed = [line.split()[0] for line in result.stdout.lines if line.endswith("%]") and " PASSED " in line]
    assert passed == [
        "test_sizes.py::test_sizes[ranks1-1]",
        "test_sizes.py::test_sizes[ranks1-3]",
        "test_sizes.py::test_sizes[ranks2-1]",
        "test_sizes.py::test_sizes[ranks2-3]",
        "test_sizes.py::TestSized::test_method[ranks2]",
        "test_sizes.py::TestSized::test_method[ranks1]",
    ], result.stdout.str()


LOUD = """
import os
import sys

import pytest


@pytest.mark.ranks(2)
def test_loud(gputopo_rank):
    if gputopo_rank.rank == 0:
        print("hello from rank 0")
        print("a warning from rank 0", file=sys.stderr)
    else:
        for i in range(200_000):
            print(f"line {i:06d} of rank 1, padded to fifty bytes ..........")
        os.system("echo from a child of rank 1")  # what the rank starts writes to the same file
        assert False, "rank 1 says no"
"""


@pytest.mark.slow
def test_a_ranks_output_goes_into_the_report_capped_and_is_kept_whole(pytester):
    """10 MB from a rank: the report shows its first 16 KiB and last 48 KiB, says how much it left out
    and where the whole of it is (under pytest's basetemp); a short stream goes in whole, under a line
    naming its rank. A process the rank started writes to the same stream."""
    pytester.makepyfile(test_loud=LOUD)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    captured_out = text.split("Captured stdout call")[1].split("Captured stderr call")[0]
    assert "----- rank 0 of 2, stdout -----\nhello from rank 0\n" in captured_out, text[-3000:]
    assert "----- rank 1 of 2, stdout -----\nline 000000 of rank 1" in captured_out
    cut = re.search(r"\[\.\.\. (\d+) bytes not shown: the whole stdout of rank 1 is (\S+)\]", captured_out)
    assert cut, captured_out[:2000]
    whole = cut.group(2)
    line = len("line 000000 of rank 1, padded to fifty bytes ..........\n")
    assert os.path.getsize(whole) == 200_000 * line + len("from a child of rank 1\n") == int(cut.group(1)) + 64 * 1024
    assert whole.startswith(str(pytester.path)), whole
    assert captured_out.rstrip(" -").endswith("fifty bytes ..........\nfrom a child of rank 1\n")
    assert len(captured_out) < 70 * 1024
    assert "----- rank 0 of 2, stderr -----\na warning from rank 0" in text.split("Captured stderr call")[1]
    assert "rank 1 failed: AssertionError: rank 1 says no" in text


ASYNC = """
import asyncio
import os

import pytest
import torch
import torch.distributed as dist


@pytest.mark.ranks(2)
async def test_awaited(gputopo_rank):
    await asyncio.sleep(0)
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == 2
    open(os.path.join(os.environ["RANKS_TEST_PIDS"], f"awaited{gputopo_rank.rank}"), "w").close()


@pytest.mark.ranks(2)
async def test_awaited_fails(gputopo_rank):
    await asyncio.sleep(0)
    assert gputopo_rank.rank == 0, "an async body's assert"
"""


def test_an_async_ranks_test_is_awaited_in_each_rank_never_passed_unrun(pytester, pid_folder):
    """An ``async def`` body returns a coroutine: each rank runs it (``asyncio.run``), so its assert
    counts; a coroutine left un-awaited would pass a test that never ran."""
    pytester.makepyfile(test_async=ASYNC)
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    assert "rank 1 failed: AssertionError: an async body's assert" in result.stdout.str()
    assert sorted(p.name for p in pid_folder.iterdir() if p.name.startswith("awaited")) == ["awaited0", "awaited1"]


def test_each_world_size_is_judged_at_its_own_size(pytester):
    """On a recorded 4-GPU machine ``ranks([2, 8])`` plans its 2 to run and its 8 to skip (the plan runs
    nothing: the same judgement the run makes at setup)."""
    pytester.makepyfile(test_w="import pytest\n@pytest.mark.ranks([2, 8])\ndef test_x(gputopo_rank): pass\n")
    result = run_here(pytester, "--gputopo-plan", "--gputopo-machine", "4x-a30")
    text = result.stdout.str()
    assert "RUN test_w.py::test_x[ranks2] - ranks(2): met" in text, text
    assert "SKIP test_w.py::test_x[ranks8] - ranks(8): one GPU per rank, needs 8 GPUs, 4 visible" in text, text


@pytest.mark.parametrize(
    "marker, says",
    [
        ("ranks([])", "n (ranks) must list at least one world size, got []"),
        ("ranks([2, 2])", "n (ranks) lists a world size twice: [2, 2]"),
        ("ranks([2, 0])", "each world size in n (ranks) must be an integer from 1 to 1024, got 0"),
    ],
)
def test_a_bad_list_of_world_sizes_is_a_usage_error_naming_the_test(pytester, marker, says):
    pytester.makepyfile(test_bad=f"import pytest\n@pytest.mark.{marker}\ndef test_x(gputopo_rank): pass\n")
    result = run_here(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"test_bad.py::test_x: @pytest.mark.ranks: {says}" in result.stderr.str()


def test_a_list_of_world_sizes_added_after_collection_is_a_usage_error(pytester):
    pytester.makeconftest(
        "import pytest\n"
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        item.add_marker(pytest.mark.ranks([1, 2]))\n"
    )
    pytester.makepyfile(test_late="def test_x(gputopo_rank): pass\n")
    result = run_here(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "test_late.py::test_x: @pytest.mark.ranks([1, 2]): a list of world sizes makes one test per size"
        in result.stderr.str()
    )


def test_two_ranks_marks_on_one_test_are_a_usage_error(pytester):
    pytester.makepyfile(
        test_bad="import pytest\n@pytest.mark.ranks(2)\n@pytest.mark.ranks(4)\ndef test_x(gputopo_rank): pass\n"
    )
    result = run_here(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_bad.py::test_x: @pytest.mark.ranks: 2 marks on one test; give it one*"])


def test_ranks_on_a_unittest_method_is_a_usage_error_naming_the_test(pytester):
    """Issue 43: unittest runs a TestCase's method itself (pytest's TestCaseFunction calls the case,
    _pytest/unittest.py), never through pytest_pyfunc_call where the ranks start: it ran once, in the
    pytest process, without a process group. A method of a plain class still runs as ranks."""
    pytester.makepyfile(
        test_bad="""
import unittest, pytest

class TestCase(unittest.TestCase):
    @pytest.mark.ranks(2, backend="gloo")
    def test_x(self):
        pass

class TestPlain:
    @pytest.mark.ranks(2, backend="gloo")
    def test_y(self, gputopo_rank):
        pass
"""
    )
    result = run_here(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*test_bad.py::TestCase::test_x: @pytest.mark.ranks: a unittest.TestCase method is run by unittest itself*"]
    )
    assert "TestPlain" not in result.stderr.str()


def test_a_fixture_value_that_cannot_be_pickled_fails_naming_the_fixture(pytester):
    pytester.makepyfile(
        test_lock="""
import threading
import pytest

@pytest.fixture
def lock():
    return threading.Lock()

@pytest.mark.ranks(2)
def test_locked(gputopo_rank, lock):
    pass
"""
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_lock.py::test_locked: fixture 'lock' (lock) cannot be sent to the ranks: "
            "cannot pickle '_thread.lock' object. A ranks test's fixture values are made once*"
        ]
    )


def test_gputopo_rank_outside_a_ranks_test_and_inside_a_fixture(pytester):
    pytester.makepyfile(
        test_misuse="""
import pytest

def test_plain(gputopo_rank):
    pass

@pytest.fixture
def per_rank(gputopo_rank):
    return gputopo_rank.rank

@pytest.mark.ranks(1)
def test_fixture_per_rank(per_rank):
    pass
"""
    )
    result = run(pytester, "-rA")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        [
            "*test_misuse.py::test_plain: the fixture gputopo_rank is given to the ranks of a test marked "
            "@pytest.mark.ranks(n) only*",
            "*gputopo_rank.rank exists in the ranks only: a fixture is made once, in the pytest process*",
        ]
    )


@pytest.mark.parametrize("launcher", ["torchrun", "slurm"])
def test_inside_a_launcher_a_ranks_test_is_refused(pytester, monkeypatch, launcher):
    """Under torchrun or srun the pytest process is already a rank: its ranks test fails with the
    reason, spawning nothing (torch hidden: the launch's exchange is not what is tested here)."""
    from test_quiet_runs import set_launch

    clear_launch(monkeypatch)
    set_launch(monkeypatch, launcher)
    hide_module(pytester, monkeypatch, "torch")
    pytester.makepyfile(test_in_launch="import pytest\n@pytest.mark.ranks(2)\ndef test_x(gputopo_rank): pass\n")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*ranks(2): this pytest is already rank 0 of 2 of a launch (torchrun, srun): a "
            "ranks test starts its own ranks; run it in a pytest started without a launcher"
        ]
    )


@pytest.mark.slow
def test_the_documented_example_runs_as_written(pytester):
    """docs/markers.md's ranks example, as written, in the file its transcript names, on a machine
    without a GPU: two gloo ranks per test, and the lines the doc shows (``$ pytest test_ranks.py -v``)."""
    import subprocess
    import sys

    from doc_examples import assert_shows, blocks

    [example] = [b for b in blocks() if b.path == "docs/markers.md" and "def test_all_reduce(gputopo_rank" in b.text]
    [shown] = [b for b in blocks() if b.path == "docs/markers.md" and "$ pytest test_ranks.py -v" in b.text]
    (pytester.path / "test_ranks.py").write_text(example.text)
    command = shown.text.splitlines()[0].removeprefix("$ ").split()
    done = subprocess.run(
        [sys.executable, "-m", *command, "-p", "no:cacheprovider", "-n", "0", "--gputopo-machine", "no-gpu"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert_shows(shown.text.splitlines()[1:], done.stdout)


def test_free_until_asked_a_deselected_ranks_test_starts_and_imports_nothing(pytester):
    """Without a selected ranks test, nothing of the ranks is imported or started: a file whose ranks
    test is deselected runs its other test with neither torch nor the ranks' modules loaded."""
    pytester.makepyfile(
        test_mixed="""
import sys
import pytest

@pytest.mark.ranks(2)
def test_ranks(gputopo_rank):
    pass

def test_plain():
    pass
"""
    )
    pytester.makeconftest("""
import sys

def pytest_sessionfinish(session):
    print("modules:", sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")
                             or m.rsplit(".", 1)[-1] in ("ranks_run", "rank_body", "rank_procs")))
""")
    result = run(pytester, "-k", "plain")
    result.assert_outcomes(passed=1)
    assert "modules: []" in result.stdout.str()


HUNG_IN_EXIT = """
import atexit, os, time

import pytest

from pidnote import note_pid


@pytest.mark.ranks(2, timeout=300)
def test_fails_then_hangs_in_exit(gputopo_rank):
    note_pid(os.environ["RANKS_TEST_PIDS"], gputopo_rank.rank)
    if gputopo_rank.rank == 1:
        atexit.register(time.sleep, 600)  # as a failed NCCL communicator's teardown hangs
        assert gputopo_rank.rank == 0, "rank 1's own error"
"""


@pytest.mark.slow
def test_a_failed_rank_that_hangs_in_exit_is_reported_by_its_own_error_not_as_timed_out(pytester, pid_folder):
    """Issue 41 item 4: a failed rank that hangs in exit (NVIDIA/nccl #1013, #1777) was reported "timed
    out" only after the whole timeout (here 300 s), its own error lost. Once it has written its result
    and not ended for ``EXIT_GRACE_S``, it is ended and reported by its own error, and where it hung."""
    pytester.makepyfile(test_hung=HUNG_IN_EXIT)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "rank 1 failed: AssertionError: rank 1's own error" in text and "then hung in exit" in text, text
    assert "timed out" not in text, text
    assert re.search(r"line \d+ in sleep|in _run_exitfuncs|Current thread", text.split("then hung in exit")[-1]), text
    assert len(rank_pids(pid_folder)) == 2 and [pid for pid in rank_pids(pid_folder) if alive(pid)] == []


DEAF = """
import os, signal, time

import pytest

from pidnote import note_pid


@pytest.mark.ranks(2, timeout=300)
def test_deaf_to_sigint(gputopo_rank):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a rank blocked inside CUDA does not act on it
    note_pid(os.environ["RANKS_TEST_PIDS"], gputopo_rank.rank)
    time.sleep(600)
"""


@pytest.mark.slow
def test_ranks_die_with_a_pytest_killed_outright_even_deaf_to_sigint(pytester, pid_folder, monkeypatch):
    """Issue 41: torch's parent-death signal for a rank is SIGINT (torch/multiprocessing/spawn.py
    ``_wrap``), which a rank blocked inside CUDA does not act on: after pytest was killed such ranks
    ran on, on GPUs whose lease had gone. Each rank now asks for SIGKILL (prctl(2) PR_SET_PDEATHSIG)."""
    pytester.makepyfile(test_deaf=DEAF)
    monkeypatch.setenv("TMPDIR", str(pytester.path))  # the killed run's ranks folder stays here
    run_ = pytester.popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "test_deaf.py"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120  # a hang guard
        while len(rank_pids(pid_folder)) < 2:
            assert time.monotonic() < deadline and run_.poll() is None, "the ranks never began"
            time.sleep(0.05)
        run_.kill()
        run_.wait()
        while any(alive(pid) for pid in rank_pids(pid_folder)):
            assert time.monotonic() < deadline, "a rank outlived the pytest that started it"
            time.sleep(0.05)
    finally:
        for pid in rank_pids(pid_folder):
            if alive(pid):
                os.kill(pid, 9)


SETSID_HELPER = """
import os, subprocess, sys

import pytest

from pidnote import note_pid


@pytest.mark.ranks(2)
def test_starts_a_detached_helper(gputopo_rank):
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    note_pid(os.environ["RANKS_TEST_PIDS"], 100 + gputopo_rank.rank)  # (the rank's own: a name apart)
    with open(os.path.join(os.environ["RANKS_TEST_PIDS"], f"pid-helper-{gputopo_rank.rank}-{helper.pid}"), "w"):
        pass
"""


@pytest.mark.slow
def test_a_ranks_detached_helper_ends_with_it_even_when_the_test_passes(pytester, pid_folder):
    """Issue 41: a rank's ``setsid`` helper outlived even a passing test (it leaves the rank's process
    group, which is what was ended). Each rank is a child subreaper (prctl(2) PR_SET_CHILD_SUBREAPER)
    and ends what left its group when its body is done."""
    pytester.makepyfile(test_helper=SETSID_HELPER)
    run(pytester).assert_outcomes(passed=1)
    helpers = [int(p.name.rsplit("-", 1)[1]) for p in pid_folder.iterdir() if p.name.startswith("pid-helper-")]
    assert len(helpers) == 2 and [pid for pid in helpers if alive(pid)] == []
