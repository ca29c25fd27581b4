"""GPU leases (``--gputopo-lease``) on the emulated GPU host (``tests/emulated.py``: the real
``libnvidia-ml.so.1`` name, NVML serving a recorded machine), and the host-wide locks on their own.

Sources of the behaviours reproduced:
- ``CUDA_VISIBLE_DEVICES`` takes indices, ``GPU-<uuid>`` strings (a unique prefix suffices) and MIG
  ids (CUDA C++ Programming Guide, "CUDA Environment Variables"); CUDA reads it once, at cuInit, so
  a lease is given to a process that starts with it set.
- ``fcntl.flock`` locks belong to the open file description and go when its last descriptor closes
  (flock(2)): a killed holder leaves no stale lock.
- pytest's JUnit writer does not write on a process that has ``config.workerinput``
  (``_pytest/junitxml.py``: ``if xmlpath and not hasattr(config, "workerinput")``), as on xdist's workers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from emulated import CUDA_SEES, emulated_host, emulated_libs  # noqa: F401  (fixtures)
from pytest_gputopo.core import lease_policy
from pytest_gputopo.core.gpu_requirements import GpuRequirement
from pytest_gputopo.plugin import leases as leases_module
from pytest_gputopo.plugin.leases import Leases
from pytest_gputopo.probe.recorded import load_profile
from pytest_gputopo.runtime import gpu_locks

RECORD = """
import json, os, time, pytest

def record(gpus, sleep=0.0):
    start = time.time()
    time.sleep(sleep)
    with open(os.environ["LEASE_LOG"], "a") as log:
        log.write(json.dumps({"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": start,
                              "end": time.time(), "index": [g.index for g in gpus],
                              "uuid": [g.uuid for g in gpus], "pid": os.getpid()}) + "\\n")
"""


def recording_test(name: str, *marks: str, then: str = "") -> str:
    """The source of a test, under each of ``marks`` (``requires_gpus(1)``, ...), that records the GPUs
    it was leased (RECORD's ``record``), then runs the line ``then``."""
    decorators = "".join(f"@pytest.mark.{mark}\n" for mark in marks)
    return f"{decorators}def {name}(gputopo_gpus):\n    record(gputopo_gpus)\n" + (f"    {then}\n" if then else "")


def records_then_never_runs(fits: int, too_many: int) -> str:
    """A test module: a test needing ``fits`` GPUs records them; one needing ``too_many`` never runs."""
    named = {1: "one", 2: "two", 3: "three"}
    return (
        "\nimport pytest\nfrom record import record\n"
        + recording_test(f"test_{named[fits]}", f"requires_gpus({fits})")
        + f"@pytest.mark.requires_gpus({too_many})\ndef test_{named[too_many]}():\n"
        + '    raise AssertionError("never runs")\n'
    )


def lease_log(pytester) -> list[dict]:
    path = pytester.path / "lease.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def leased(pytester, emulated_host, monkeypatch, tmp_path):
    """Enter an emulated host; return the arguments of a leased run with a lock folder of its own."""

    def enter(machine: str, **personality):
        emulated_host(machine, **personality)
        monkeypatch.setenv("LEASE_LOG", str(pytester.path / "lease.log"))
        pytester.makepyfile(record=RECORD)
        return ["--gputopo-lease", f"--gputopo-lease-dir={tmp_path / 'locks'}", "-p", "no:randomly"]

    return enter


def uuids(machine: str) -> list[str]:
    return [g.uuid for g in load_profile(machine).topology.gpus]


@pytest.mark.slow
def test_a_leased_test_sees_its_gpus_alone_renumbered_from_cuda0(pytester, leased):
    args = leased("dgx-a100")
    pytester.makepyfile(
        test_it="""
import os, sys, pytest
from record import record

@pytest.mark.requires_p2p(gpus=2)
def test_pair(gputopo_gpus, gputopo):
    record(gputopo_gpus)
    assert len(gputopo.gpus) == 2  # the machine as the test sees it: its lease
    # told it is a lease's by its environment, forgotten once read (a pytest it starts is none), no option
    assert "PYTEST_GPUTOPO_LEASE_SPEC" not in os.environ and not [a for a in sys.argv if "lease-child" in a]

@pytest.mark.requires_gpus(1)
def test_fails():
    assert 1 + 1 == 3

def test_plain():
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # unmarked: as without leases, in this process
"""
    )
    result = pytester.runpytest_subprocess(*args, "-v", "--junitxml=junit.xml")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_it.py::test_pair PASSED*", "*assert (1 + 1) == 3*"])
    (entry,) = lease_log(pytester)
    assert entry["index"] == [0, 1] and entry["visible"] == ",".join(entry["uuid"])
    assert set(entry["uuid"]) <= set(uuids("dgx-a100")) and entry["pid"] != result.ret
    junit = (pytester.path / "junit.xml").read_text()  # the child's reports reach the run's JUnit writer
    assert junit.count("<testcase") == 3 and "assert (1 + 1) == 3" in junit


@pytest.mark.slow
def test_consecutive_tests_of_a_module_on_one_lease_share_its_process_and_others_get_their_own(pytester, leased):
    """One process per run of consecutive tests of one module that fit one lease: its fixtures live
    as in any pytest run (a module fixture set up once for the tests it kept), its start paid once;
    a test asking for another count of GPUs, or of another module, gets a process of its own."""
    args = leased("dgx-a100")
    body = """
import os, pytest
from record import record

@pytest.fixture(scope="module")
def made():
    with open(os.environ["LEASE_LOG"] + ".fixture", "a") as log:
        log.write(f"{{os.getpid()}}\\n")
    return 1

@pytest.mark.requires_gpus(1)
def test_one_a(gputopo_gpus, made):
    record(gputopo_gpus)

@pytest.mark.requires_gpus(1)
def test_one_b(gputopo_gpus, made):
    record(gputopo_gpus)

@pytest.mark.requires_gpus(1)
def test_one_dies(gputopo_gpus):
    record(gputopo_gpus)
    os._exit(3)

@pytest.mark.requires_gpus(1)
def test_one_after(gputopo_gpus, made):
    record(gputopo_gpus)

@pytest.mark.requires_p2p(gpus=2)
def test_two(gputopo_gpus, made):
    record(gputopo_gpus)
"""
    pytester.makepyfile(test_a=body.format(), test_b=body.format())
    result = pytester.runpytest_subprocess(*args, "-v")
    result.assert_outcomes(passed=8, failed=2)
    result.stdout.fnmatch_lines(["*test_a.py::test_one_dies FAILED*", "*ended with status 3 before the test finished*"])
    pids = [e["pid"] for e in lease_log(pytester)]
    assert len(pids) == 10
    a, b = pids[:5], pids[5:]
    assert (
        a[0] == a[1] == a[2] != a[3] != a[4] and b[0] == b[1] == b[2] != b[3] != b[4]
    )  # the dead one's successor: new
    assert not set(a) & set(b)  # another module: another process
    fixture_pids = (pytester.path / "lease.log.fixture").read_text().split()
    assert len(fixture_pids) == len(set(fixture_pids)) == 6  # once per process that used it
    for pid in set(pids):  # every process ended with its tests
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# What a leased test's process saw: its environment when it started (/proc/self/environ), what its
# conftest saw at import, what the emulated libcuda shows it (cuDeviceGetUuid, CUDA's order).
AHEAD = (
    "import json, os, pytest\n"
    + CUDA_SEES
    + """
def note(gpus):
    with open("/proc/self/environ", "rb") as env:
        started = dict(e.decode().partition("=")[::2] for e in env.read().split(b"\\0") if e)
    with open(os.environ["LEASE_LOG"], "a") as log:
        log.write(json.dumps({"started": started.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid(),
                              "visible": os.environ["CUDA_VISIBLE_DEVICES"], "cuda": cuda_sees(),
                              "uuid": [g.uuid.replace("GPU-", "").replace("-", "") for g in gpus]}) + "\\n")
"""
)
CONFTEST_SEES = """
import os
with open(os.environ["LEASE_LOG"] + ".conftest", "a") as log:
    log.write(f"{os.getpid()} {os.environ.get('CUDA_VISIBLE_DEVICES')}\\n")
"""
TWO_MODULES = {
    "test_a": "import pytest\nfrom ahead import note\n@pytest.mark.requires_gpus(1)\ndef test_one(gputopo_gpus):\n"
    "    note(gputopo_gpus)\n",
    "test_b": "import pytest\nfrom ahead import note\n@pytest.mark.requires_p2p(gpus=2)\n"
    "def test_pair(gputopo_gpus):\n    note(gputopo_gpus)\n",
}


def conftest_saw(pytester) -> dict[int, str]:
    lines = (pytester.path / "lease.log.conftest").read_text().split("\n")
    return {int(pid): seen for pid, _, seen in (line.partition(" ") for line in lines if line)}


@pytest.mark.slow
def test_a_process_started_ahead_takes_its_lease_before_any_conftest_and_sees_it_alone(pytester, leased):
    """A leased test's process starts before its lease (while the test before runs, or while its GPUs
    are waited for), seeing no GPU (``CUDA_VISIBLE_DEVICES`` empty); it takes the lease in the
    plugin's ``pytest_load_initial_conftests``, before any conftest is imported (pytest calls it
    before loading them: ``_pytest/config/__init__.py``, ``Config._preparse``), so the conftest,
    the test and CUDA (cuInit reads the variable: the emulated libcuda applies it there) see the
    lease alone. The first test found its GPUs free: its process started seeing them."""
    args = leased("dgx-a100")
    pytester.makepyfile(ahead=AHEAD, conftest=CONFTEST_SEES, **TWO_MODULES)
    result = pytester.runpytest_subprocess(*args, "-v")
    result.assert_outcomes(passed=2)
    entries = lease_log(pytester)
    assert [len(e["uuid"]) for e in entries] == [1, 2]
    assert [e["started"] for e in entries] == [entries[0]["visible"], ""]  # the second: started ahead
    saw = conftest_saw(pytester)
    for e in entries:
        assert e["cuda"] == e["uuid"] and e["visible"].replace("GPU-", "").replace("-", "") == ",".join(e["uuid"])
        assert saw[e["pid"]] == e["visible"]  # its conftest loaded after the lease came


PLUGIN_LOADS_CUDA = """
import ctypes, os
ctypes.CDLL("libcuda.so.1")  # as a plugin that starts CUDA at import loads it
with open(os.environ["LEASE_LOG"] + ".pids", "a") as log:
    log.write(f"{os.getpid()}\\n")
"""


@pytest.mark.slow
def test_a_process_whose_plugins_loaded_cuda_before_its_lease_refuses_it_and_one_started_seeing_it_runs(
    pytester, leased
):
    """An installed plugin that loads CUDA's driver (``libcuda.so.1``) at import, before the lease
    came, may have started CUDA seeing other devices: the process refuses the lease (it reads
    /proc/self/maps), and the test runs in one started with its lease's ``CUDA_VISIBLE_DEVICES``;
    no process is started ahead again in that run."""
    args = leased("dgx-a100")
    pytester.makepyfile(ahead=AHEAD, conftest=CONFTEST_SEES, cuda_plugin=PLUGIN_LOADS_CUDA, **TWO_MODULES)
    result = pytester.runpytest_subprocess(*args, "-p", "cuda_plugin", "-v")
    result.assert_outcomes(passed=2)
    entries = lease_log(pytester)
    assert [len(e["uuid"]) for e in entries] == [1, 2]
    for e in entries:
        assert e["started"] == e["visible"] and e["cuda"] == e["uuid"]  # started seeing its lease
    pids = [int(p) for p in (pytester.path / "lease.log.pids").read_text().split()]
    assert len(pids) == 4  # the run, the refusing one, and one for each test
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
def test_where_the_plugin_loads_after_conftests_a_process_started_ahead_refuses_its_lease(
    pytester, leased, monkeypatch
):
    """A plugin registered by a conftest (``pytest_plugins``, entry points not loaded) is not there
    when pytest loads the conftests, so the process cannot take its lease before them: it refuses
    it when the plugin first runs (``pytest_cmdline_main``), and the test runs in a process started
    seeing its lease."""
    args = leased("dgx-a100")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(
        ahead=AHEAD,
        conftest=CONFTEST_SEES + 'pytest_plugins = ["pytest_gputopo.plugin.entry"]\n',
        test_a=TWO_MODULES["test_a"],
    )
    result = pytester.runpytest_subprocess(*args, "-v")
    result.assert_outcomes(passed=1)
    (entry,) = lease_log(pytester)
    assert entry["started"] == entry["visible"] and entry["cuda"] == entry["uuid"]
    assert conftest_saw(pytester)[entry["pid"]] == entry["visible"]


@pytest.mark.slow
def test_a_process_started_ahead_for_a_test_that_never_runs_ends_with_the_run(pytester, leased):
    args = leased("dgx-a100")
    pytester.makepyfile(
        pid_plugin="import os\nwith open(os.environ['LEASE_LOG'] + '.pids', 'a') as log:\n"
        "    log.write(f'{os.getpid()}\\n')\n",
        test_a="import pytest\n@pytest.mark.requires_gpus(1)\ndef test_fails():\n    assert False\n",
        test_b="import pytest\n@pytest.mark.requires_gpus(1)\ndef test_never_runs():\n    pass\n",
    )
    result = pytester.runpytest_subprocess(*args, "-p", "pid_plugin", "-x")
    result.assert_outcomes(failed=1)
    pids = [int(p) for p in (pytester.path / "lease.log.pids").read_text().split()]
    assert len(pids) == 3  # the run, test_a's process, the one started ahead for test_b
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
def test_a_kept_lease_goes_back_when_a_waiting_test_reserved_its_gpus(pytester, leased, tmp_path, monkeypatch):
    """Waiting in turn holds for kept leases too: a test is not kept on GPUs another test waits for;
    it takes its turn like any test (here: after the waiter, gone with its process). Whether a test
    keeps the lease is decided before the test before it runs (its fixtures' teardown needs to know),
    so a waiter that comes during that test gets the GPUs one test later."""
    args = leased("dgx-a100")
    monkeypatch.setenv("LOCKS", str(tmp_path / "locks"))
    pytester.makepyfile(
        test_it="""
import json, os, time
import pytest
from record import record
from pytest_gputopo.runtime import gpu_locks

@pytest.mark.requires_gpus(1)
def test_first(gputopo_gpus):
    record(gputopo_gpus)
    ticket = gpu_locks.Ticket(os.environ["LOCKS"], os.getpid(), "other.py::test_all", time.time())
    ticket.reserve([gputopo_gpus[0].uuid])  # kept open: it lives as long as this process

@pytest.mark.requires_gpus(1)
def test_second(gputopo_gpus):
    record(gputopo_gpus)
    holder = gpu_locks.holder(os.environ["LOCKS"], gputopo_gpus[0].uuid)
    assert holder.test.endswith("::test_second")  # the lease kept names the test it is kept for
    with open(os.environ["LEASE_LOG"]) as log:
        first = json.loads(log.readline())
    assert first["end"] <= holder.since <= time.time()  # since this test began, not test_first

@pytest.mark.requires_gpus(1)
def test_third(gputopo_gpus):
    record(gputopo_gpus)
"""
    )
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=3)
    first, second, third = lease_log(pytester)
    assert first["pid"] == second["pid"] != third["pid"]


@pytest.mark.slow
def test_s_and_pdb_reach_a_leased_test(pytester, leased):
    """``-s``: the test's output on the run's terminal, live, and the test reported once (its own
    process's report lines kept apart); ``--pdb``: the debugger opens there, reading the run's input."""
    args = leased("dgx-a100")
    pytester.makepyfile(
        test_it="""
import pytest

@pytest.mark.requires_gpus(1)
def test_prints():
    print("said live by the test")

@pytest.mark.requires_gpus(1)
def test_fails():
    answer = 41
    assert answer == 42
"""
    )
    result = pytester.runpytest_subprocess(*args, "-s", "-k", "prints")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*said live by the test*"])
    assert result.stdout.str().count("test session starts") == 1
    result = pytester.run(
        sys.executable, "-m", "pytest", *args, "--pdb", "-k", "fails", stdin=b"p answer + 1000\nc\n", timeout=120
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*(Pdb) 1041*"])


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_leased_tests_warnings_reach_the_runs_summary(pytester, leased, workers):
    """Raised in the test's own process, summarised by the run (and through an xdist worker to its
    controller); a category of a module the run never imported is named, not imported."""
    args = leased("dgx-a100")
    pytester.makepyfile(
        helper_warnings="class OwnWarning(Warning):\n    pass\n",
        test_it="""
import warnings, pytest

@pytest.mark.requires_gpus(1)
def test_warns():
    from helper_warnings import OwnWarning
    warnings.warn("old api", DeprecationWarning)
    warnings.warn("own kind", OwnWarning)
""",
    )
    result = pytester.runpytest_subprocess(*args, *workers, "-W", "always")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*warnings summary*",
            "test_it.py::test_warns",
            "*DeprecationWarning: old api",
            "*UserWarning: helper_warnings.OwnWarning: own kind",
            "*2 warnings*",
        ]
    )


@pytest.mark.slow
def test_a_test_no_set_could_ever_meet_skips_with_its_reason_and_starts_nothing(pytester, leased):
    args = leased("4x-rtx4090")  # P2P refused on every pair
    pytester.makepyfile(
        test_it="""
import pytest
@pytest.mark.requires_p2p(gpus=2)
def test_pair():
    raise AssertionError("never runs")
@pytest.mark.requires_gpus(5)
def test_five():
    raise AssertionError("never runs")
"""
    )
    result = pytester.runpytest_subprocess(*args, "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*requires_p2p(gpus=2): GPU0-GPU1 cannot do P2P*no other 2 GPUs of the 4 here meet it either*",
            "*needs 5 GPUs, 4 may be leased here*",
        ]
    )
    assert gpu_locks.holder(args[1].split("=", 1)[1], uuids("4x-rtx4090")[0]) is None


def hold(folder: str, gpus: list[str], test: str) -> subprocess.Popen:
    """Another process holding ``gpus``' locks until it is killed."""
    code = (
        "import sys, time\nfrom pytest_gputopo.runtime import gpu_locks\n"
        f"locks = [gpu_locks.GpuLock({folder!r}, u) for u in {gpus!r}]\n"
        f"assert all(l.take(gpu_locks.Holder(__import__('os').getpid(), {test!r}, time.time())) for l in locks)\n"
        "print('held', flush=True)\ntime.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.slow
def test_a_test_no_free_set_meets_waits_then_fails_naming_who_holds_what(pytester, leased, tmp_path):
    args = leased("4x-a100-40gb")
    folder = str(tmp_path / "locks")
    gpu_locks.lock_folder(folder)
    other = hold(folder, uuids("4x-a100-40gb")[1:], "other/test_run.py::test_big")
    waiter = gpu_locks.Ticket(folder, os.getpid(), "other/test_wait.py::test_all", time.time())
    waiter.reserve(uuids("4x-a100-40gb")[2:3])  # a test of another run waiting for GPU2
    try:
        pytester.makepyfile(test_it=records_then_never_runs(1, 2))
        result = pytester.runpytest_subprocess(*args, "--gputopo-lease-timeout=0.5")
    finally:
        waiter.close()
        other.kill()
        other.wait()
    result.assert_outcomes(passed=1, errors=1)  # failed at setup, as a strict marker fails
    # (GPU0 may be named first: held by test_one's process until it has ended)
    result.stdout.fnmatch_lines(
        [
            f"*no free set of 2 GPUs meeting requires_gpus(2) within 0.5 s (--gputopo-lease-timeout); "
            f"held: *GPU1 ({uuids('4x-a100-40gb')[1]}) by pid {other.pid} "
            f"(other/test_run.py::test_big, since *; reserved by tests waiting: pid {os.getpid()} "
            f"(other/test_wait.py::test_all, since *) for GPU2"
        ]
    )
    (entry,) = lease_log(pytester)
    assert entry["uuid"] == uuids("4x-a100-40gb")[:1]  # the one GPU left free
    assert gpu_locks.holder(folder, uuids("4x-a100-40gb")[1]) is None  # the holder killed: its locks went with it


@pytest.mark.slow
def test_two_concurrent_runs_and_their_xdist_workers_never_share_a_gpu(pytester, leased):
    args = leased("4x-a100-40gb")
    pytester.makepyfile(
        test_it="""
import pytest
from record import record
@pytest.mark.parametrize("n", range(4))
@pytest.mark.requires_gpus(1)
def test_one(gputopo_gpus, n):
    record(gputopo_gpus, 0.4)
@pytest.mark.requires_p2p(gpus=2)
def test_two(gputopo_gpus):
    record(gputopo_gpus, 0.4)
"""
    )
    env = dict(os.environ)
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "pytest", *args, "-n", "2", "-q", "-p", "no:cacheprovider"],
            cwd=pytester.path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    for run in runs:
        out = run.communicate(timeout=300)[0]
        assert run.returncode == 0, out
    entries = lease_log(pytester)
    assert len(entries) == 10
    for i, a in enumerate(entries):
        for b in entries[i + 1 :]:
            if set(a["uuid"]) & set(b["uuid"]):
                assert a["end"] <= b["start"] or b["end"] <= a["start"], (a, b)


@pytest.mark.slow
@pytest.mark.parametrize("outer, allowed", [("3,1", [3, 1]), ("GPU-*2,GPU-*0", [2, 0])])
def test_an_outer_cuda_visible_devices_is_respected(pytester, leased, monkeypatch, outer, allowed):
    args = leased("4x-a100-40gb")
    every = uuids("4x-a100-40gb")
    monkeypatch.setenv(
        "CUDA_VISIBLE_DEVICES", ",".join(every[int(e[-1])] if e.startswith("GPU-") else e for e in outer.split(","))
    )
    pytester.makepyfile(test_it=records_then_never_runs(2, 3))
    result = pytester.runpytest_subprocess(*args, "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*needs 3 GPUs, 2 may be leased here*"])
    (entry,) = lease_log(pytester)
    assert sorted(entry["uuid"]) == sorted(every[i] for i in allowed)


@pytest.mark.slow
def test_mig_instances_in_the_outer_cuda_visible_devices_are_never_leased_as_gpus(pytester, leased, monkeypatch):
    args = leased("4x-a100-40gb")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4b8b6ae1-0d1f-5a0e-9b2e-3d9e0a1c2b3f")
    pytester.makepyfile(
        test_it="import pytest\n@pytest.mark.requires_gpus(1)\ndef test_one():\n"
        "    raise AssertionError('never runs')\n"
    )
    result = pytester.runpytest_subprocess(*args, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs 1 GPU, 0 may be leased here*"])


@pytest.mark.parametrize("planted", ["another user's", "group-writable", "a link"])
def test_a_planted_lock_folder_is_refused_before_any_test_runs(pytester, tmp_path, planted):
    folder = tmp_path / "locks"
    if planted == "a link":
        (tmp_path / "elsewhere").mkdir()
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        folder.mkdir()
        if planted == "group-writable":
            folder.chmod(0o770)
        elif os.getuid() == 0:
            os.chown(folder, 65534, 65534)
        else:
            folder = "/"  # root's
    pytester.makepyfile(test_it="def test_a(): pass\n")
    pytester.makeini(f"[pytest]\ngputopo_lease = true\ngputopo_lease_dir = {folder}\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    why = {
        "another user's": "belongs to another user (uid *), who made it first",
        "group-writable": "may be written by users other than its owner (mode 0770)",
        "a link": "is a symbolic link",
    }[planted]
    result.stderr.fnmatch_lines(
        [
            f"*the GPU lease folder {folder} {why} (ini option gputopo_lease_dir in *): GPU "
            f"leases are not taken there; remove it, or point --gputopo-lease-dir (ini "
            f"gputopo_lease_dir, env PYTEST_GPUTOPO_LEASE_DIR) at a folder only you can write"
        ]
    )


def test_leases_place_tests_on_this_host_only(pytester):
    pytester.makepyfile(test_it="def test_a(): pass\n")
    result = pytester.runpytest_subprocess("--gputopo-lease", "--gputopo-machine", "dgx-a100")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--gputopo-lease places tests on this host's GPUs, but --gputopo-machine names another machine (dgx-a100)*"]
    )


LEASE_MODULES = (
    "pytest_gputopo.core.placement",
    "pytest_gputopo.runtime.gpu_locks",
    "pytest_gputopo.plugin.leases",
    "pytest_gputopo.plugin.lease_child",
)


def test_nothing_of_leases_is_imported_without_the_option(pytester):
    """Free until asked: a run with gputopo markers on a recorded machine, without --gputopo-lease."""
    pytester.makeconftest(
        "import sys\ndef pytest_sessionfinish(session):\n"
        f"    print('LEASES', sorted(m for m in {LEASE_MODULES!r} if m in sys.modules))\n"
    )
    pytester.makepyfile(test_it="import pytest\n@pytest.mark.requires_p2p(gpus=2)\ndef test_a(): pass\n")
    result = pytester.runpytest_subprocess("--gputopo-machine", "dgx-a100", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*LEASES []"])


@pytest.mark.slow
def test_n_auto_starts_one_worker_per_gpu_and_unmarked_tests_run_as_today(pytester, leased):
    args = leased("4x-a100-40gb")
    pytester.makepyfile(
        test_it="import os, time\ndef test_plain(request):\n    assert 'CUDA_VISIBLE_DEVICES' not in os.environ\n"
        # when the run's leases began, for every worker's first round (Leases.take)
        "    assert 0 < time.time() - request.config.workerinput['gputopo_lease_run'][0] < 600\n"
    )
    result = pytester.runpytest_subprocess(*args, "-n", "auto")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*4 workers*"])


def test_a_lock_dies_with_its_process_and_says_who_held_it(tmp_path):
    folder = gpu_locks.lock_folder(str(tmp_path / "locks"))
    assert os.stat(folder).st_mode & 0o777 == 0o700
    other = hold(folder, ["GPU-abc"], "t.py::test_x")
    found = gpu_locks.holder(folder, "GPU-abc")
    assert (found.pid, found.test) == (other.pid, "t.py::test_x")
    assert not gpu_locks.GpuLock(folder, "GPU-abc").take(gpu_locks.Holder(os.getpid(), "mine", time.time()))
    other.kill()
    other.wait()
    assert gpu_locks.holder(folder, "GPU-abc") is None
    mine = gpu_locks.GpuLock(folder, "GPU-abc")
    assert mine.take(gpu_locks.Holder(os.getpid(), "mine", time.time()))
    mine.release()
    with pytest.raises(ValueError, match="not a GPU UUID"):
        gpu_locks.GpuLock(folder, "../etc/passwd")


def test_a_lock_handed_on_to_a_process_still_ending_names_its_test_until_that_process_ends(tmp_path):
    """A leased test's process that is told to end holds its GPUs until it has (the descriptor it was
    passed); the run lets its own go meanwhile, and the lock still names the test, not nobody."""
    folder = gpu_locks.lock_folder(str(tmp_path / "locks"))
    mine = gpu_locks.GpuLock(folder, "GPU-abc")
    assert mine.take(gpu_locks.Holder(os.getpid(), "t.py::test_ending", time.time()))
    ending = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, pass_fds=[mine.fd]
    )
    mine.release(handed_on=True)
    found = gpu_locks.holder(folder, "GPU-abc")
    assert (found.pid, found.test) == (os.getpid(), "t.py::test_ending")
    ending.communicate(b"")  # it ends
    assert gpu_locks.holder(folder, "GPU-abc") is None


@pytest.mark.slow
def test_under_xdist_leased_tests_are_handed_out_largest_first_the_others_in_place(pytester, leased):
    args = leased("4x-a100-40gb")
    pytester.makeconftest(
        "import json, os\ndef pytest_collection_finish(session):\n"
        "    if hasattr(session.config, 'workerinput') and not "
        "session.config.pluginmanager.has_plugin('gputopo-lease-child'):  # an xdist worker, not a test's own\n"
        "        with open(os.environ['LEASE_LOG'] + '.order', 'w') as f:\n"
        "            json.dump([i.name for i in session.items], f)\n"
    )
    pytester.makepyfile(
        test_it="""
import pytest
def test_plain_first(): pass
@pytest.mark.requires_gpus(1)
def test_one(): pass
@pytest.mark.requires_versions(nccl=">=0")
def test_versions_only(): pass
@pytest.mark.requires_p2p(gpus=2)
def test_two(): pass
@pytest.mark.requires_gpus(4)
def test_four(): pass
@pytest.mark.requires_gpus(2)
def test_two_more(): pass
def test_plain_last(): pass
"""
    )
    result = pytester.runpytest_subprocess(*args, "-n", "2")
    assert result.ret in (0, 1), result.stdout.str()
    order = json.loads((pytester.path / "lease.log.order").read_text())
    assert order == [
        "test_plain_first",
        "test_four",
        "test_versions_only",
        "test_two",
        "test_two_more",
        "test_one",
        "test_plain_last",
    ]


def test_a_waiting_test_reserves_its_gpus_for_itself_against_later_comers_while_it_lives(tmp_path):
    folder = gpu_locks.lock_folder(str(tmp_path / "locks"))
    mine = gpu_locks.Ticket(folder, os.getpid(), "t.py::test_mine", time.time())
    mine.reserve(["GPU-a", "GPU-b"])
    code = (
        "import sys, time\nfrom pytest_gputopo.runtime import gpu_locks\n"
        f"t = gpu_locks.Ticket({folder!r}, __import__('os').getpid(), 't.py::test_later', time.time())\n"
        "t.reserve(['GPU-b', 'GPU-c'])\nprint('waiting', flush=True)\ntime.sleep(600)\n"
    )
    later = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert later.stdout.readline().strip() == "waiting"
        assert gpu_locks.reserved_before(folder, mine) == set()  # who waits first is served first
        assert gpu_locks.reserved_before(folder, None) == {"GPU-a", "GPU-b", "GPU-c"}  # a newcomer: none of them
        assert sorted(w.test for _, w in gpu_locks.waiters(folder)) == ["t.py::test_later", "t.py::test_mine"]
    finally:
        later.kill()
        later.wait()
    assert gpu_locks.reserved_before(folder, None) == {"GPU-a", "GPU-b"}  # its ticket went with it
    mine.reserve(uuid for uuid in ("GPU-c",))  # as the lease writes it: from a generator
    assert gpu_locks.reserved_before(folder, None) == {"GPU-c"}  # (read twice, it once reserved nothing)
    mine.close()
    assert gpu_locks.reserved_before(folder, None) == set() and not gpu_locks.waiters(folder)


def test_a_runs_test_goes_before_its_waiting_tests_that_come_after_it_and_others_as_they_came(tmp_path):
    """Seen in ``tools/perf/bench_leases.py dgx-a100 2 --timeline`` (29 Nov): the second four-GPU test,
    handed to a worker when its eight-GPU test ended, waited from then, behind two-GPU tests of the
    first round that still waited, and took its GPUs 7.5 s later (GPUs idle meanwhile). A test of a
    run now waits from the earliest turn of the run's waiting tests that come after it in the run's
    order (before them, its place deciding); a test handed out after them (the run hands its tests
    out in order) waits from its own start, so another run's tests are served as they came."""
    folder = gpu_locks.lock_folder(str(tmp_path / "locks"))
    began = time.time() - 10

    def ticket(pid, test, since, place=None, run="run-a"):
        turn = None if place is None else gpu_locks.turn_in(folder, run, since, place)
        return gpu_locks.Ticket(folder, pid, test, since, turn, None if place is None else run)

    two = ticket(2, "t.py::test_two", began, 5)  # the first round waits from the run's start
    other = ticket(3, "other.py::test_other", began + 2)  # another run's (no xdist)
    other_run = ticket(4, "o.py::test_x", began + 3, 0, run="run-b")
    four = ticket(5, "t.py::test_four", began + 4, 2)
    one = ticket(6, "t.py::test_one", began + 6, 9)  # handed out after the test_two: from its own start
    tickets = [two, other, other_run, four, one]
    try:
        assert four.me.turn == (began, 2) and other_run.me.turn == (began + 3, 0) and one.me.turn == (began + 6, 9)
        assert [w.test for _, w in sorted(gpu_locks.waiters(folder), key=lambda found: found[1].place())] == [
            "t.py::test_four",
            "t.py::test_two",
            "other.py::test_other",
            "o.py::test_x",
            "t.py::test_one",
        ]
        for found, gpus in ((other, ["GPU-o"]), (other_run, ["GPU-b"]), (four, ["GPU-f"])):
            found.reserve(gpus)
        assert gpu_locks.reserved_before(folder, one) == {"GPU-o", "GPU-b", "GPU-f"}
        assert gpu_locks.reserved_before(folder, four) == set()
        two.close()  # served: a test placed before test_one now waits from test_one's turn
        tickets.append(three := ticket(7, "t.py::test_three", began + 8, 7))
        assert three.me.turn == (began + 6, 7)
    finally:
        for found in tickets:
            found.close()


REQS = pytest.StashKey[list]()


def fake_item(name: str, gpus: int = 1) -> SimpleNamespace:
    """A test of ``t.py`` asking for ``gpus`` GPUs, as the leases read one."""
    stash = {REQS: [(GpuRequirement(gpus=gpus), False)]}
    return SimpleNamespace(nodeid=f"t.py::{name}", path="t.py", stash=stash, get_closest_marker=lambda _: None)


@pytest.fixture
def bare_leases(tmp_path, monkeypatch):
    """``Leases`` of a run on ``4x-a100-40gb``, its lock folder its own, no process started ahead
    (``started``: the tests it would have started one for), no xdist."""
    topology = load_profile("4x-a100-40gb").topology
    settings = SimpleNamespace(lease_timeout_s=30, lease_memory_gib=None, lease_memory_measured=False)
    run = SimpleNamespace(config=SimpleNamespace(getoption=lambda *_: False), topology=topology, settings=settings)
    leases = Leases(run, REQS, gpu_locks.lock_folder(str(tmp_path / "locks")), figures=None)
    leases.started_ahead = []
    monkeypatch.setattr(leases, "prestart", leases.started_ahead.append)
    return leases


def hold_here(leases, indices) -> list:
    """This process holds GPUs ``indices``' locks (flock: another open file of the same file conflicts)."""
    held = [gpu_locks.GpuLock(leases.folder, leases.demands.uuids[i]) for i in indices]
    for lock in held:
        assert lock.take(gpu_locks.Holder(1, "other.py::test_holding", time.time()))
    return held


def test_a_set_that_frees_goes_first_to_the_tests_waiting_before(bare_leases, monkeypatch):
    """A waiter's reservation is as old as its last look: one that reserved other GPUs (or none)
    before a set freed may want that set, and looks again within POLL_S. A test behind it takes a
    set once every test before it has looked since it freed, or once it has been free ``GRACE_S``
    (bench_leases, 29 Nov: a two-GPU test took two of the four GPUs a four-GPU test before it had
    not reserved yet, and the four-GPU test waited a round); with nobody before it, at once."""
    leases, item = bare_leases, fake_item("test_late")
    monkeypatch.setattr(lease_policy, "GRACE_S", 0.5)
    held = hold_here(leases, (0, 2, 3))
    one = leases.demands.placer_of(item)[0]
    before = gpu_locks.Ticket(leases.folder, 2, "other.py::test_before", time.time() - 10)  # reserved nothing yet
    try:
        began, wall = time.monotonic(), time.time()
        lease = leases.taker.take(item, one)
        assert time.monotonic() - began >= 0.5 and lease.indices == (1,)  # GPU1 free all along
        # since it took it, not since it began to wait: waiters reserve the GPUs held longest
        assert gpu_locks.holder(leases.folder, leases.demands.uuids[1]).since >= wall + 0.5
        lease.release()
        monkeypatch.setattr(lease_policy, "GRACE_S", 600.0)
        before.reserve([], looked=time.time() + 5)  # it looked after GPU1 freed: it did not want it
        lease = leases.taker.take(item, one)
        assert lease.indices == (1,)
        lease.release()
        before.close()
        lease = leases.taker.take(item, one)  # nobody waits before it: at once, whatever the grace
        assert lease.indices == (1,)
        lease.release()
    finally:
        before.close()
        for lock in held:
            lock.release()


def test_a_ticket_rewritten_at_every_look_never_vanishes_from_a_readers_view(tmp_path):
    """A waiter rewrites its ticket at every look (``looked``). Truncated then written, a reader
    between the two saw an empty file, skipped it as one being made, and for that look took GPUs
    it had reserved; written in one write, a read racing it may still return part of each record
    (Linux copies page-cache pages to readers without the writer's lock: 8 torn reads in 233,000),
    so a reader reads again. Failed 5 of 6 runs with one write but no second read, all before."""
    folder = gpu_locks.lock_folder(str(tmp_path / "locks"))
    done = tmp_path / "done"
    code = (
        "import time\nfrom pytest_gputopo.runtime import gpu_locks\n"
        f"t = gpu_locks.Ticket({folder!r}, 7, 't.py::test_' + 'x' * 60, time.time())\n"
        "print('in', flush=True)\n"
        "for n in range(20000):\n"
        "    t.reserve(['GPU-a'] * (n % 5), looked=time.time())  # longer and shorter records\n"
        f"open({str(done)!r}, 'w').close()\n"
        "time.sleep(600)\n"  # its ticket stays while the reader finishes
    )
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "in"
        looks = 0
        while not done.exists():
            assert [w.pid for _, w in gpu_locks.waiters(folder)] == [7]
            looks += 1
        assert looks  # (it looked while the writer wrote)
    finally:
        writer.kill()
        writer.wait()


def test_a_lease_is_kept_for_the_next_test_unless_a_test_waiting_before_it_reserved_its_gpus(bare_leases):
    """Under xdist the next test would wait in its place in the run's order: a test of the run
    placed after it that reserved the lease's GPUs does not take them back (it used to: every
    waiter did, and the next test then paid a process start for the same GPUs), one before it does."""
    leases = bare_leases
    began = time.time() - 5
    leases.taker.xdist_run, leases.taker._order = (began, "run-a"), {"t.py::test_two_a": 3, "t.py::test_two_b": 4}
    lease = leases.taker.take(fake_item("test_two_a", 2), leases.demands.placer_of(fake_item("test_two_a", 2))[0])
    uuids = [g.uuid for g in lease.gpus]
    later = gpu_locks.Ticket(leases.folder, 2, "t.py::test_one", began, (began, 9), "run-a")
    earlier = None
    try:
        later.reserve(uuids[:1])
        assert leases.keeps(lease, fake_item("test_two_b", 2), "t.py")
        earlier = gpu_locks.Ticket(leases.folder, 3, "t.py::test_four", began, (began, 1), "run-a")
        earlier.reserve(uuids[1:])
        assert not leases.keeps(lease, fake_item("test_two_b", 2), "t.py")
    finally:
        for ticket in (later, earlier):
            if ticket is not None:
                ticket.close()
        lease.release()


def test_a_waiting_tests_process_is_started_ahead_once_it_is_next_in_line(bare_leases, monkeypatch):
    """Started ahead while its GPUs are waited for, once no test before it holds back any of them
    (its reservation whole); not while it waits behind others, its process idle among the starts
    of the tests that run first (bench_leases: eight processes started at once on two cores, and
    the first test began later)."""
    leases, item = bare_leases, fake_item("test_one")
    held = hold_here(leases, range(4))
    before = gpu_locks.Ticket(leases.folder, 2, "other.py::test_four", time.time() - 10)
    before.reserve(leases.demands.uuids)
    monkeypatch.setattr(leases.taker, "timeout_s", 0.3)
    try:
        assert leases.taker.take(item, leases.demands.placer_of(item)[0]) is None  # (its timeout)
        assert leases.started_ahead == []
        before.close()
        assert leases.taker.take(item, leases.demands.placer_of(item)[0]) is None
        assert leases.started_ahead and all(started is item for started in leases.started_ahead)
    finally:
        before.close()
        for lock in held:
            lock.release()


def test_a_process_that_cannot_be_started_ahead_is_no_tests_failure(bare_leases, monkeypatch):
    """Started ahead while another test runs: its start failing (too many open files) must not
    fail or end that test; the test it was for starts its own when it comes, and says why there."""
    leases = bare_leases

    def cannot_start(*_):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(leases_module, "LeaseProcess", cannot_start)
    Leases.prestart(leases, fake_item("test_next"))  # the method itself (the fixture records calls)
    assert leases.spare is None


def test_a_runs_first_round_is_served_in_the_runs_order_after_those_that_waited_before_it_began(tmp_path):
    """Under xdist each worker's first leased test waits in its place in the run's order (largest
    first), not in the order the workers reached the folder, and before the run's later tests;
    a test of another run that waited before this run began is served before all of them."""
    folder = gpu_locks.lock_folder(str(tmp_path / "locks"))
    began = time.time()
    earlier = gpu_locks.Ticket(folder, 1, "other.py::test_waited_before", began - 5)
    # written 1.0 and 1.1 s after the run began, each waiting from its start (Leases.take)
    small = gpu_locks.Ticket(folder, 2, "t.py::test_one_gpu", began, (began, 7), "run")  # came first
    large = gpu_locks.Ticket(folder, 3, "t.py::test_eight_gpus", began, (began, 0), "run")
    later = gpu_locks.Ticket(folder, 4, "t.py::test_later", began + 1.05)
    for ticket, gpus in ((earlier, ["GPU-e"]), (small, ["GPU-s"]), (large, ["GPU-l"]), (later, ["GPU-x"])):
        ticket.reserve(gpus)
    try:
        assert gpu_locks.reserved_before(folder, earlier) == set()
        assert gpu_locks.reserved_before(folder, large) == {"GPU-e"}
        assert gpu_locks.reserved_before(folder, small) == {"GPU-e", "GPU-l"}
        assert gpu_locks.reserved_before(folder, later) == {"GPU-e", "GPU-l", "GPU-s"}
        with open(later.path, "w") as planted:  # a turn that is not two numbers: not read
            planted.write('{"pid": 4, "test": "x", "since": 1.0, "reserved": [], "turn": [1]}')
        assert {w.test for _, w in gpu_locks.waiters(folder)} == {
            "other.py::test_waited_before",
            "t.py::test_one_gpu",
            "t.py::test_eight_gpus",
        }
    finally:
        for ticket in (earlier, small, large, later):
            ticket.close()


@pytest.mark.slow
@pytest.mark.parametrize("letters", ["-rs", "-ra", "-rA"])
def test_a_leased_test_that_skips_is_summed_up_as_in_place(pytester, leased, letters):
    """Issue 40 item 4: a leased test that skips crashed the run's summary under -rs, -ra or -rA. The
    relayed report's long form came back from JSON as a list; pytest's terminal asserts a tuple
    (_pytest/terminal.py, ``_folded_skips``: ``assert isinstance(event.longrepr, tuple)``), and the run
    printed a traceback instead of its summary and exited 1. Without leases: 1 skipped, exit 0."""
    args = leased("dgx-a100")
    pytester.makepyfile(
        test_it="""
import pytest

@pytest.mark.requires_gpus(1)
def test_skips():
    pytest.skip("not today")
"""
    )
    summaries = []
    for lease in (args, []):
        result = pytester.runpytest_subprocess(*lease, letters)
        assert result.ret == 0, result.stdout.str()[-3000:]
        result.assert_outcomes(skipped=1)
        summaries.append([ln for ln in result.stdout.lines if ln.startswith("SKIPPED")])
    assert summaries[0] == summaries[1] and "not today" in summaries[0][0], summaries


@pytest.mark.slow
def test_leased_tests_keep_their_own_gpus_figures_and_the_report_names_their_gpus(pytester, leased, monkeypatch):
    """Issue 40 items 1 and 2: each lease's process numbers its GPUs from cuda:0 and shared the run's
    figure folder by index, so two ``min_p2p_bw(100, gpus=2)`` tests on leases (0,1) and (2,3) made one
    measurement between them and got one verdict (a slow pair passed on a fast pair's figure), and the
    report named the wrong GPUs. The engine here is slow (10 GB/s) only on pairs with physical GPU0
    (named by UUID: what CUDA_VISIBLE_DEVICES holds in the lease's process)."""
    args = leased("dgx-a100")
    ids = uuids("dgx-a100")
    slow = {f"{kind}-{a}-{b}": 10.0 for kind in ("p2p", "p2p_bidir") for a in ids for b in ids if ids[0] in (a, b)}
    monkeypatch.setenv("PYTEST_GPUTOPO_TEST_FAULTS", json.dumps({"copy_gbps": {"p2p": 200.0, **slow}}))
    pytester.makepyfile(
        test_it="""
import pytest
from record import record

@pytest.mark.min_p2p_bw(100, gpus=2)
def test_a(gputopo_gpus):
    record(gputopo_gpus)

@pytest.mark.min_p2p_bw(100, gpus=2)
def test_b(gputopo_gpus):
    record(gputopo_gpus)
"""
    )
    result = pytester.runpytest_subprocess(*args, "-n", "2", "-rs", "--gputopo-json", "run.json")
    result.assert_outcomes(passed=1, skipped=1)
    (ran,) = lease_log(pytester)
    assert ids[0] not in ran["uuid"], ran  # the test that passed had the fast pair
    doc = json.loads((pytester.path / "run.json").read_text())
    figures = {tuple(m["key"][1:]): m["gbps"] for m in doc["measurements"] if m["key"][0] == "p2p"}
    where = {u: i for i, u in enumerate(ids)}
    fast = tuple(sorted(where[u] for u in ran["uuid"]))
    assert figures[fast] == 200.0, figures
    slow_pairs = [pair for pair in figures if 0 in pair]
    assert slow_pairs and all(figures[p] == 10.0 for p in slow_pairs), figures


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["in one process", "xdist"])
def test_a_figure_a_leased_tests_process_measures_reaches_the_runs_report(pytester, leased, monkeypatch, workers):
    """Issue 40 item 2: a leased ``min_p2p_bw`` test's figure vanished: without leases the JSON had the
    measurement; with leases ``measurements`` was empty (the lease process's figures were never sent
    back), and the terminal had no line for it. Now they reach the run's record, numbered as the run
    numbers its GPUs, and its terminal, as an xdist worker's do (``progress.Relayed``)."""
    args = leased("dgx-a100")
    monkeypatch.setenv("PYTEST_GPUTOPO_TEST_FAULTS", json.dumps({"copy_gbps": 200.0}))
    temp = pytester.path / "temp"  # the run's own folders are made here, and must be gone at its end
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    pytester.makepyfile(
        test_it="""
import pytest
from record import record

@pytest.mark.min_p2p_bw(100, gpus=2)
def test_a(gputopo_gpus):
    record(gputopo_gpus)
"""
    )
    result = pytester.runpytest_subprocess(*args, *workers, "--gputopo-json", "run.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["gputopo: GPU?->GPU? copy, P2P: 200 GB/s in *"])
    (ran,) = lease_log(pytester)
    where = {u: i for i, u in enumerate(uuids("dgx-a100"))}
    doc = json.loads((pytester.path / "run.json").read_text())
    copies = [m for m in doc["measurements"] if m["key"][0] == "p2p"]
    assert [m["key"][1:] for m in copies] == [[where[ran["uuid"][0]], where[ran["uuid"][1]]]], copies
    assert copies[0]["gbps"] == 200.0 and doc["lost_measurements"] == []
    assert list(temp.glob("pytest-gputopo-run-*")) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "options", [["--lf", "--lfnf=none"], ["--lf"], ["--ff"], ["--nf"], ["--sw"]], ids=lambda o: " ".join(o)
)
def test_options_that_select_by_the_cache_select_as_in_place(pytester, leased, monkeypatch, options):
    """Issue 40 item 3: after a failure was fixed, ``--lf --lfnf=none`` ran 1 test and passed without
    leases; with leases the test FAILED "did not collect it": its process got the run's arguments but
    a cache of its own, and deselected it. The run selects by its cache; the lease's process runs what
    it is sent."""
    args = leased("dgx-a100")
    body = """
import os, pytest

@pytest.mark.requires_gpus(1)
def test_gpu():
    assert os.environ.get("FIXED") == "1"

def test_plain():
    pass
"""
    pytester.makepyfile(test_it=body)
    outcomes = []
    for lease in (args, []):
        shutil.rmtree(pytester.path / ".pytest_cache", ignore_errors=True)
        monkeypatch.delenv("FIXED", raising=False)
        pytester.runpytest_subprocess(*lease).assert_outcomes(passed=1, failed=1)
        monkeypatch.setenv("FIXED", "1")
        again = pytester.runpytest_subprocess(*lease, *options)
        outcomes.append((again.ret, again.parseoutcomes()))
    assert outcomes[0] == outcomes[1], outcomes


@pytest.mark.slow
def test_a_leased_tests_tmp_path_lies_in_the_runs_basetemp_and_stays(pytester, leased):
    """Issue 40 item 3: a leased test's ``tmp_path`` ignored ``--basetemp`` and was deleted at the end
    of the run. It lies inside the run's basetemp, kept as the run's own are."""
    args = leased("dgx-a100")
    pytester.makepyfile(
        test_it="""
import pytest

@pytest.mark.requires_gpus(1)
def test_gpu(tmp_path):
    (tmp_path / "left.txt").write_text("gpu")

def test_plain(tmp_path):
    (tmp_path / "left.txt").write_text("plain")
"""
    )
    base = pytester.path / "bt"
    pytester.runpytest_subprocess(*args, f"--basetemp={base}").assert_outcomes(passed=2)
    left = sorted(p.read_text() for p in base.rglob("left.txt"))
    assert left == ["gpu", "plain"], list(base.rglob("*"))


@pytest.mark.slow
def test_breakpoint_in_a_leased_test_under_s_reads_the_runs_input(pytester, leased):
    """Issue 40 item 3: ``breakpoint()`` in a leased test failed with ``BdbQuit`` even under ``-s``
    (its process read /dev/null; only ``--pdb`` gave it the run's input). Under ``-s`` it reads the
    run's input, as in place: here "c", and the test goes on."""
    args = leased("dgx-a100")
    pytester.makepyfile(
        test_it="""
import pytest

@pytest.mark.requires_gpus(1)
def test_gpu():
    breakpoint()
    assert True
"""
    )
    outcomes = []
    for lease in (args, []):
        done = pytester.run(sys.executable, "-m", "pytest", *lease, "-s", "-p", "no:cacheprovider", stdin=b"c\n")
        outcomes.append((done.ret, done.parseoutcomes()))
    assert outcomes[0] == outcomes[1] == (0, {"passed": 1}), outcomes


@pytest.mark.slow
def test_a_leased_tests_process_that_dies_before_its_setup_errors_once(pytester, leased):
    """A lease's process that ended before the test's setup (a conftest that exits where it sees
    its lease) was reported twice, an ERROR at setup and a FAILED call; as in place, a setup that
    did not pass has no call: one ERROR."""
    args = leased("dgx-a100")
    pytester.makeconftest(
        "import os\nif os.environ.get('CUDA_VISIBLE_DEVICES', '').startswith('GPU-'):\n    os._exit(5)\n"
    )
    pytester.makepyfile(test_it="import pytest\n@pytest.mark.requires_gpus(1)\ndef test_gpu():\n    pass\n")
    result = pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)


@pytest.mark.slow
def test_a_conftest_or_fixture_that_sets_cuda_visible_devices_in_a_leased_process_fails_its_test(pytester, leased):
    """Issue 42 item 4: a conftest that still rotated ``CUDA_VISIBLE_DEVICES`` (Triton's and
    flash-attention's set it from the xdist worker's number) silently overrode the lease: the test ran
    on GPU 1 while GPU 0 was locked for it. Now the leased test fails, saying who set what."""
    args = leased("dgx-a100")
    pytester.makeconftest('import os\nos.environ["CUDA_VISIBLE_DEVICES"] = "1"  # a round robin of one\n')
    pytester.makepyfile(
        test_it="""
import os, pytest

@pytest.mark.requires_gpus(1)
def test_after_the_conftest():
    pass

def test_plain():
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"  # the run's own process: the conftest's business
"""
    )
    result = pytester.runpytest_subprocess(*args, "-rA")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "CUDA_VISIBLE_DEVICES is '1' in this leased test's process, not its lease's 'GPU-*': a conftest or "
            "the test's module set it after the lease was taken, so CUDA would use GPUs this test does not hold.*",
            "ERROR test_it.py::test_after_the_conftest - Failed: CUDA_VISIBLE_DEVICES is *",
        ]
    )
    (pytester.path / "conftest.py").unlink()
    (pytester.path / "test_it.py").write_text(
        "import pytest\n"
        "@pytest.fixture\n"
        "def own_gpu(monkeypatch):\n"
        "    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '3')\n"
        "@pytest.mark.requires_gpus(1)\n"
        "def test_with_a_fixture(own_gpu):\n"
        "    pass\n"
    )
    result = pytester.runpytest_subprocess(*args, "-rA")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*CUDA_VISIBLE_DEVICES is '3' in this leased test's process*: a fixture set it*"])


MEETS = """
import os, time
from pathlib import Path

import pytest
from record import record

MEET = Path(os.environ["MEET_DIR"])


@pytest.mark.parametrize("n", range(3))
@pytest.mark.requires_gpus(1)
def test_small(gputopo_gpus, n):
    (MEET / f"in-{n}").write_text("")
    deadline = time.monotonic() + 60  # a hang guard: the first two meet at once when leases share the GPU
    while len(list(MEET.glob("in-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    record(gputopo_gpus, sleep=0.5)
"""


@pytest.mark.slow
def test_with_a_memory_budget_leased_tests_share_a_gpu_as_far_as_its_memory_holds(pytester, leased, monkeypatch):
    """Issue 42 item 1: on the one 80 GB GPU, tests of 30 GiB (and a context's 1 GiB each) run two at a
    time, never three (93 GiB)."""
    args = leased("single-gpu")
    monkeypatch.setenv("MEET_DIR", str(pytester.mkdir("meet")))
    pytester.makepyfile(test_meet=MEETS)
    result = pytester.runpytest_subprocess(*args, "-n", "3", "--gputopo-lease-memory", "30")
    result.assert_outcomes(passed=3)
    entries = lease_log(pytester)
    assert len({e["uuid"][0] for e in entries}) == 1 and len(entries) == 3
    at_once = max(sum(1 for e in entries if e["start"] <= other["start"] < e["end"]) for other in entries)
    assert at_once == 2, entries  # two shared the GPU; the third waited for room


@pytest.mark.slow
def test_a_budget_no_gpu_here_could_hold_skips_with_the_figures(pytester, leased):
    args = leased("single-gpu")
    pytester.makepyfile(test_big="import pytest\n@pytest.mark.requires_gpus(1)\ndef test_big():\n    pass\n")
    result = pytester.runpytest_subprocess(*args, "--gputopo-lease-memory", "80", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*--gputopo-lease-memory 80: each GPU it holds needs 80 GiB and a CUDA context's 1 GiB, 81 GiB;"
            " the GPUs here have 80.0 GiB*"
        ]
    )


@pytest.mark.slow
def test_a_tests_own_memory_budget_shares_the_gpu_and_a_bad_one_is_a_usage_error(pytester, leased, monkeypatch):
    """``@pytest.mark.lease_memory(gib)``: the test's own budget, without the run's option; ``None``
    holds whole GPUs even where the run gives a budget."""
    args = leased("single-gpu")
    monkeypatch.setenv("MEET_DIR", str(pytester.mkdir("meet")))
    pytester.makepyfile(
        test_meet=MEETS.replace(
            "@pytest.mark.requires_gpus(1)", "@pytest.mark.lease_memory(30)\n@pytest.mark.requires_gpus(1)"
        )
    )
    result = pytester.runpytest_subprocess(*args, "-n", "3")
    result.assert_outcomes(passed=3)
    entries = lease_log(pytester)
    at_once = max(sum(1 for e in entries if e["start"] <= other["start"] < e["end"]) for other in entries)
    assert at_once == 2, entries
    pytester.makepyfile(test_meet="import pytest\n@pytest.mark.lease_memory('lots')\ndef test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_meet.py::test_x: @pytest.mark.lease_memory: give one number of GiB*"])


# A module whose tests log the GPU shares they see (``shares``), before its tests.
KEPT_HEAD = """
import os, pytest
from record import record
from pytest_gputopo.runtime import gpu_shares

def shares(gpus):
    with open(os.environ["SHARES_LOG"], "a") as log:
        log.write(repr([s.budget_gib for s in gpu_shares.shares(os.environ["LOCKS"], gpus[0].uuid)]) + "\\n")

"""


@pytest.mark.slow
def test_a_lease_with_a_budget_is_kept_for_a_next_test_within_it_and_shrinks_to_its_budget(
    pytester, leased, monkeypatch, tmp_path
):
    """Leases x keeping the process for the next test of the module: the next test keeps the share and
    the process where its budget is within the lease's, and the share then says its budget (its GPU's
    share record, and the JSON report); a test asking more (or whole GPUs) gets a process of its own."""
    args = leased("single-gpu")
    monkeypatch.setenv("SHARES_LOG", str(pytester.path / "shares.log"))
    monkeypatch.setenv("LOCKS", str(tmp_path / "locks"))
    tests = (
        recording_test("test_a", "lease_memory(10)", "requires_gpus(1)"),
        recording_test("test_b", "lease_memory(10)", "requires_gpus(1)"),
        recording_test("test_c", "lease_memory(5)", "requires_gpus(1)", then="shares(gputopo_gpus)"),
        recording_test("test_d", "lease_memory(20)", "requires_gpus(1)"),
        recording_test("test_e", "requires_gpus(1)"),
    )
    pytester.makepyfile(test_kept=KEPT_HEAD + "\n".join(tests))
    result = pytester.runpytest_subprocess(*args, f"--gputopo-json={pytester.path / 'r.json'}")
    result.assert_outcomes(passed=5)
    pids = [e["pid"] for e in lease_log(pytester)]
    assert pids[0] == pids[1] == pids[2] and len({pids[2], pids[3], pids[4]}) == 3, pids
    assert (pytester.path / "shares.log").read_text() == "[5.0]\n"
    budgets = [e["budget_gib"] for e in json.loads((pytester.path / "r.json").read_text())["leased"]]
    assert budgets == [10, 10, 5, 20, None]


def test_a_waiting_test_with_a_budget_reserves_its_share_not_the_whole_gpu(bare_leases):
    """Its ticket says its budget: the tests behind it see a share reserved (``lease_policy.open_to``
    leaves the GPU open to a budget that fits beside it), where before every reservation kept GPUs
    whole; a ticket without one (an older run's) still keeps them whole, and one whose budget is no
    budget is no ticket."""
    leases = bare_leases
    uuid0, uuid1 = leases.demands.uuids[:2]
    sharing = gpu_locks.Ticket(leases.folder, 2, "other.py::test_sharing", time.time() - 5)
    whole = gpu_locks.Ticket(leases.folder, 3, "other.py::test_whole", time.time() - 4)
    bad = gpu_locks.Ticket(leases.folder, 4, "other.py::test_bad", time.time() - 3)
    try:
        sharing.reserve([uuid0], time.time(), 10.0)
        whole.reserve([uuid1], time.time())
        bad.me = bad.me._replace(reserved=(uuid1,), budget_gib=-1.0)
        bad._write(bad.fd)
        ahead = {w.place[2]: dict(w.reserved) for w in leases.taker.look(None).ahead}
        assert ahead == {2: {0: 10.0}, 3: {1: None}}
        one = fake_item("test_small")
        assert lease_policy.open_to(5.0, [0, 1], leases.taker.look(None)) == {0}  # GPU1 kept whole
        assert lease_policy.open_to(None, [0, 1], leases.taker.look(None)) == set()  # an exclusive test: neither
        assert "other.py::test_sharing" in leases.taker.who_holds_what(leases.demands.placer_of(one)[0], ())
        assert "for GPU0 with 10 GiB each" in leases.taker.who_holds_what(leases.demands.placer_of(one)[0], ())
    finally:
        for ticket in (sharing, whole, bad):
            ticket.close()
