"""Runs the plugin was not asked into stay as they would be without it.

A launcher's variables in the environment (torchrun's RANK/WORLD_SIZE, Slurm's job-step variables
with MASTER_ADDR, as training operators and Slurm jobs set them for every process) make the plugin
join the other ranks only when the run uses it; without torch, a run that does use it is judged
alone and says so. A marker name the project registered itself is the project's, never read by the
plugin. An xdist run that asks nothing probes nothing, and one that asks probes once for all its
processes.

Every run here is a real pytest process (``runpytest_subprocess``) so that the environment it meets is
the one a user's shell gives it.
"""

import pytest

from conftest import clear_launch, hide_module, launcher_port, marked_module

# A suite that knows nothing of gputopo, with every common outcome, and a test that proves the run
# imported no torch (the plugin's quiet path costs only its loading).
PLAIN_SUITE = """
import sys
import pytest

def test_passes():
    assert 1 + 1 == 2

def test_no_torch_was_imported():
    assert "torch" not in sys.modules

@pytest.mark.parametrize("n", [1, 2, 3])
def test_parametrized(n):
    assert n > 0

@pytest.mark.skip(reason="the project's own skip")
def test_skipped():
    pass

@pytest.mark.xfail(reason="the project's own xfail", strict=True)
def test_xfails():
    assert False

def test_fails():
    assert False, "the project's own failure"
"""

# torchrun-style and srun-style launches of rank 0 of 2, whose peer never comes.
LAUNCHES = {
    "torchrun": {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"},
    "slurm": {
        "SLURM_PROCID": "0",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_ID": "4242",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "MASTER_ADDR": "127.0.0.1",
    },
}

# A conftest whose probe hook logs each call (process and xdist worker) and answers with a recorded
# machine, so that the tests see exactly when and where the plugin learned the machine.
PROBE_LOG_CONFTEST = """
import os
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_gputopo_probe(config):
    worker = getattr(config, "workerinput", {}).get("workerid", "controller")
    with open(os.environ["GPUTOPO_TEST_PROBE_LOG"], "a") as f:
        f.write(f"{os.getpid()} {worker}\\n")
    from pytest_gputopo.probe import probe_recorded
    return probe_recorded(os.environ.get("GPUTOPO_TEST_MACHINE", "dgx-a100"))
"""

WARNING = (
    "gputopo warning: a launcher's variables say this is rank 0 of 2, but torch is not installed: "
    "this process is judged alone"
)
LEFT_TO_PROJECT = (
    "gputopo: requires_gpus registered by this project (ini file or conftest): those marks are "
    "the project's own, and gputopo does not read them"
)
# A run that waited for its peer (a regression) would end after this with "gputopo: the ranks cannot
# agree" and the plugin's own exit status, which the outcome and output assertions catch: no test
# here times the run (a loaded machine takes its time; waiting is what is asserted against).
RANK_TIMEOUT_S = 3


@pytest.fixture(autouse=True)
def clean_launch_environment(monkeypatch):
    clear_launch(monkeypatch)


def set_launch(monkeypatch, launcher: str) -> None:
    for name, value in LAUNCHES[launcher].items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MASTER_PORT", str(launcher_port()))


def gputopo_lines(result) -> list[str]:
    """The plugin's own lines (the header and its warnings), not pytest's ``plugins:`` line."""
    return [line for line in result.outlines if line.startswith(("gputopo:", "gputopo warning:"))]


@pytest.mark.parametrize("launcher", sorted(LAUNCHES))
def test_a_launchers_variables_leave_a_run_without_gputopo_marks_alone(pytester, monkeypatch, launcher):
    """Rank 0 of a launch whose peer never comes (torchrun's or Slurm's variables in the environment,
    as a training operator sets them for every process): a suite that uses no gputopo marker, fixture
    or machine option runs at once with exactly the outcomes it has without the plugin, imports no
    torch, waits for no rank and prints nothing of the plugin's."""
    set_launch(monkeypatch, launcher)
    pytester.makepyfile(test_plain=PLAIN_SUITE)

    result = pytester.runpytest_subprocess("--gputopo-rank-timeout", str(RANK_TIMEOUT_S))
    without = pytester.runpytest_subprocess("-p", "no:gputopo")

    result.assert_outcomes(passed=5, failed=1, skipped=1, xfailed=1)
    assert result.parseoutcomes() == without.parseoutcomes()
    assert result.ret == without.ret == pytest.ExitCode.TESTS_FAILED
    assert gputopo_lines(result) == []
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_a_launchers_malformed_variables_do_not_matter_to_a_run_without_gputopo_marks(pytester, monkeypatch):
    """Launcher variables the plugin could not read (``RANK=abc``) are a usage error only for a run
    that uses the plugin; a suite without gputopo marks runs as it does without the plugin."""
    monkeypatch.setenv("RANK", "abc")
    monkeypatch.setenv("WORLD_SIZE", "2")
    pytester.makepyfile(test_plain=PLAIN_SUITE)

    result = pytester.runpytest_subprocess()

    result.assert_outcomes(passed=5, failed=1, skipped=1, xfailed=1)
    assert gputopo_lines(result) == []
    pytester.makepyfile(test_marked="import pytest\n@pytest.mark.requires_p2p\ndef test_p2p(): pass\n")
    marked = pytester.runpytest_subprocess("--gputopo-machine", "dgx-a100")
    assert marked.ret == pytest.ExitCode.USAGE_ERROR  # the control: a run that uses the plugin reads them
    marked.stderr.fnmatch_lines(["*RANK='abc'*"])


@pytest.mark.parametrize("launcher", sorted(LAUNCHES))
def test_only_selected_tests_pull_the_plugin_into_a_launch(pytester, monkeypatch, launcher):
    """Under a launcher's variables, gputopo marks on tests the run deselects (``-k``) do not make it
    probe or wait for a rank: what counts is what is selected."""
    set_launch(monkeypatch, launcher)
    log = pytester.path / "probes.log"
    monkeypatch.setenv("GPUTOPO_TEST_PROBE_LOG", str(log))
    pytester.makeconftest(PROBE_LOG_CONFTEST)
    pytester.makepyfile(
        test_mixed="""
import pytest

@pytest.mark.requires_p2p
def test_p2p(): pass

def test_plain(): pass
"""
    )
    result = pytester.runpytest_subprocess("-k", "plain", "--gputopo-rank-timeout", str(RANK_TIMEOUT_S))

    result.assert_outcomes(passed=1, deselected=1)
    assert not log.exists(), log.read_text()
    assert gputopo_lines(result) == []


@pytest.mark.parametrize("launcher", sorted(LAUNCHES))
def test_a_project_marker_of_the_same_name_does_not_pull_the_plugin_into_a_launch(pytester, monkeypatch, launcher):
    """Marks of a name the project registered itself are not the plugin's: under a launcher's
    variables, a suite marked only with them neither probes the machine nor waits for a rank."""
    set_launch(monkeypatch, launcher)
    log = pytester.path / "probes.log"
    monkeypatch.setenv("GPUTOPO_TEST_PROBE_LOG", str(log))
    pytester.makeconftest(
        PROBE_LOG_CONFTEST
        + """
def pytest_configure(config):
    config.addinivalue_line("markers", "requires_gpus(n): the project's own")
"""
    )
    pytester.makepyfile(
        test_own="""
import pytest

@pytest.mark.requires_gpus(64)
def test_own_meaning(): pass
"""
    )
    result = pytester.runpytest_subprocess("--gputopo-rank-timeout", str(RANK_TIMEOUT_S))
    result.assert_outcomes(passed=1)
    assert not log.exists(), log.read_text()
    assert LEFT_TO_PROJECT in result.outlines


@pytest.mark.parametrize("launcher", sorted(LAUNCHES))
@pytest.mark.parametrize("asked_by", ["option", "marker"])
def test_a_launch_without_torch_judges_the_process_alone(pytester, monkeypatch, launcher, asked_by):
    """Where torch is not installed, a run under a launcher's variables that does use the plugin (a
    machine option, or only its markers) is judged on its own machine and says so in a header warning:
    never an INTERNALERROR, never a wait for the other ranks."""
    set_launch(monkeypatch, launcher)
    hide_module(pytester, monkeypatch, "torch")
    pytester.makepyfile(
        test_marked="""
import importlib.util
import pytest

def test_torch_is_hidden():
    assert importlib.util.find_spec("torch") is None  # the stub works: torch is "not installed"

@pytest.mark.requires_gpus(8)
def test_eight(): pass

@pytest.mark.requires_gpus(16)
def test_sixteen(): pass
"""
    )
    args = ["-rs", "--gputopo-rank-timeout", str(RANK_TIMEOUT_S)]
    if asked_by == "option":
        args += ["--gputopo-machine", "dgx-a100"]
    else:  # no option: the selected tests' markers make the run use the plugin, after collection
        monkeypatch.setenv("GPUTOPO_TEST_PROBE_LOG", str(pytester.path / "probes.log"))
        pytester.makeconftest(PROBE_LOG_CONFTEST)
    result = pytester.runpytest_subprocess(*args)

    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    assert "Traceback" not in output
    result.assert_outcomes(passed=2, skipped=1)
    assert result.ret == pytest.ExitCode.OK
    lines = gputopo_lines(result)
    assert lines.count(WARNING) == 1, lines
    assert any(line.startswith("gputopo: 8x NVIDIA A100") for line in lines), lines
    result.stdout.fnmatch_lines(["*requires_gpus(16)*"])  # judged on this process's (recorded) machine


PROJECT_MARKED = """
import pytest

@pytest.mark.requires_gpus("A100")
def test_named_gpu(request):
    assert request.node.get_closest_marker("requires_gpus").args == ("A100",)

@pytest.mark.requires_gpus(4)
def test_four():
    pass

def test_plain():
    pass

@pytest.mark.requires_p2p
def test_p2p():
    pass
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["one_process", "xdist"])
@pytest.mark.parametrize("registered_in", ["conftest", "ini"])
def test_a_marker_the_project_registers_is_left_to_the_project(pytester, registered_in, xdist):
    """A project that registers its own ``requires_gpus`` (in its conftest or its ini file) keeps its
    own meaning: neither ``requires_gpus(4)`` on a one-GPU machine (which gputopo would skip) nor
    ``requires_gpus("A100")`` (which gputopo would reject, aborting the run) is read by the plugin, the
    run says so once (under xdist too, where the workers collect and the controller speaks), and the
    plugin's other markers still gate."""
    if registered_in == "conftest":
        pytester.makeconftest("""
def pytest_configure(config):
    config.addinivalue_line("markers", "requires_gpus(n): the project's own")
""")
    else:
        pytester.makeini("""
[pytest]
markers =
    requires_gpus(n): the project's own
""")
    pytester.makepyfile(test_project=PROJECT_MARKED)
    result = pytester.runpytest_subprocess("--gputopo-machine", "single-gpu", "-rs", "--strict-markers", *xdist)

    result.assert_outcomes(passed=3, skipped=1)  # only requires_p2p is gputopo's: no pair on one GPU
    assert result.ret == pytest.ExitCode.OK
    assert result.outlines.count(LEFT_TO_PROJECT) == 1
    result.stdout.fnmatch_lines(["SKIPPED*test_project.py:*requires_p2p*"])
    assert "bad gputopo marker arguments" not in result.stdout.str() + result.stderr.str()


def test_without_the_projects_registration_the_marker_is_gputopos(pytester):
    """The control: where the project registers nothing of the name, ``requires_gpus(4)`` is the
    plugin's and skips on a one-GPU machine, and the header says nothing of a project's marker."""
    pytester.makepyfile(test_project=marked_module(test_four="requires_gpus(4)", test_plain=""))
    result = pytester.runpytest_subprocess("--gputopo-machine", "single-gpu", "-rs")

    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*test_project.py:*requires_gpus(4)*"])
    assert not [line for line in result.outlines if "registered by this project" in line]


def test_an_unregistered_bad_argument_is_still_a_usage_error(pytester):
    """The control for the abort: without the project's registration, ``requires_gpus("A100")`` is a
    bad argument of the plugin's marker and stops the run naming the test."""
    pytester.makepyfile(
        test_project="""
import pytest

@pytest.mark.requires_gpus("A100")
def test_named_gpu():
    pass
"""
    )
    result = pytester.runpytest_subprocess("--gputopo-machine", "single-gpu")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*bad gputopo marker arguments*", "*test_named_gpu: @pytest.mark.requires_gpus*"])


XDIST_PLAIN = """
import time

import pytest

@pytest.mark.parametrize("n", range(6))
def test_plain(n):
    time.sleep(0.2)
"""

XDIST_MARKED = """
import os
import time

import pytest

def record():
    with open(os.environ["GPUTOPO_TEST_WORKERS_LOG"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
    time.sleep(0.2)  # long enough that both workers get marked tests

@pytest.mark.parametrize("n", range(4))
@pytest.mark.requires_p2p
def test_p2p(n):
    record()

@pytest.mark.parametrize("n", range(4))
@pytest.mark.requires_gpus(4)
def test_four(n):
    record()

@pytest.mark.requires_gpus(16)
def test_sixteen():
    record()
"""


@pytest.mark.parametrize("marked", [False, True], ids=["no_marker", "marked"])
@pytest.mark.slow
def test_an_xdist_run_probes_only_when_asked_and_then_once(pytester, monkeypatch, marked):
    """Under xdist (``-n 2``): a suite without gputopo markers never calls the probe hook, in the
    controller or any worker; a marked suite calls it exactly once across the controller and both
    workers (they share what one learned through the run's folder), and every worker's verdicts are
    taken on that machine."""
    pytest.importorskip("xdist")
    probes = pytester.path / "probes.log"
    workers = pytester.path / "workers.log"
    monkeypatch.setenv("GPUTOPO_TEST_PROBE_LOG", str(probes))
    monkeypatch.setenv("GPUTOPO_TEST_WORKERS_LOG", str(workers))
    pytester.makeconftest(PROBE_LOG_CONFTEST)
    pytester.makepyfile(test_suite=XDIST_MARKED if marked else XDIST_PLAIN)

    result = pytester.runpytest_subprocess("-n", "2")

    if not marked:
        result.assert_outcomes(passed=6)
        assert not probes.exists(), probes.read_text()
        assert gputopo_lines(result) == []
        return
    result.assert_outcomes(passed=8, skipped=1)
    assert set(workers.read_text().split()) == {"gw0", "gw1"}, "both workers ran marked tests"
    calls = probes.read_text().splitlines()
    assert len(calls) == 1, calls
    assert calls[0].split()[1] in {"gw0", "gw1"}  # a worker that needed it, not the controller
    assert sum(line.startswith("gputopo: 8x NVIDIA A100") for line in result.outlines) == 1
