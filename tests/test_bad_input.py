"""Nothing lost, nothing crashes: every file and option the plugin reads is untrusted
input. A bad one is a usage error naming its source before any test runs; a report that cannot be
written never hides the run's own outcome."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from conftest import USER_PYTEST, wait_for_file
from pytest_gputopo.runtime import environ as runtime, files

FAILING = "def test_fails():\n    assert False\n\ndef test_passes():\n    pass\n"


def gputopo(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "pytest_gputopo.cli", *args], capture_output=True, text=True, timeout=timeout
    )


# ---------------------------------------------------------------------------------------------
# --gputopo-json


def test_a_json_path_that_cannot_be_written_is_a_usage_error_before_any_test(pytester):
    """Refused before any test runs, not only ``F`` and the write error at the end (no FAILURES, exit 4)."""
    pytester.makepyfile(test_f=FAILING)
    result = pytester.runpytest("--gputopo-machine", "hgx-h100", "--gputopo-json", "nodir/x.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gputopo-json: cannot write nodir/x.json: no folder *nodir*"])
    assert "test_fails" not in result.stdout.str()
    pytester.mkdir("adir")
    result = pytester.runpytest("--gputopo-machine", "hgx-h100", "--gputopo-json", "adir")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gputopo-json: cannot write adir: it is a folder"])


def test_a_report_lost_at_the_end_keeps_pytests_summary_and_exit_status(pytester, monkeypatch):
    """A disk that fills after the start: the error is reported, the failures and the exit status
    are pytest's own."""
    pytester.makepyfile(test_f=FAILING)

    def full_disk(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "write_text", full_disk)
    result = pytester.runpytest("--gputopo-machine", "hgx-h100", "--gputopo-json", "x.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*FAILURES*",
            "*ERROR: --gputopo-json: cannot write x.json: No space left on device*",
            "*short test summary info*",
            "*1 failed, 1 passed*",
        ]
    )


def test_the_report_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """Written to a temporary file and renamed; a failure midway leaves the previous
    report as it was, and no temporary file. The new file gets the umask's mode, as open() gives."""
    path = tmp_path / "r.json"
    path.write_text('{"good": true}\n')

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        files.write_text(str(path), json.dumps({"new": 1}))
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"good": True}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    files.write_text(str(tmp_path / "n.json"), '{"new": 1}\n')
    assert (tmp_path / "n.json").stat().st_mode & 0o777 == 0o666 & ~files._umask()


# ---------------------------------------------------------------------------------------------
# Files that are not regular files


@pytest.fixture
def odd_paths(tmp_path):
    fifo = tmp_path / "topo.txt"
    os.mkfifo(fifo)
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    big = tmp_path / "big.txt"
    with open(big, "wb") as handle:
        handle.truncate(files.MAX_INPUT_BYTES + 1)
    return {"fifo": str(fifo), "loop": str(loop), "zero": "/dev/zero", "big": str(big), "folder": str(tmp_path)}


@pytest.mark.parametrize(
    "kind, says",
    [
        ("fifo", "it is a FIFO"),
        ("zero", "it is a device"),
        ("big", "larger than 64 MiB"),
        ("folder", "it is a folder"),
        ("loop", "cannot read: Too many levels of symbolic links"),
    ],
)
def test_only_regular_files_of_a_sane_size_are_read(odd_paths, kind, says):
    """/dev/zero, a FIFO or a symlink loop is refused for what it is, not a MemoryError ("internal
    error"), a read blocked forever, or "no such machine profile file"."""
    path = odd_paths[kind]
    out = gputopo("parse", "smi-topo", path)
    assert out.returncode == 2 and says in out.stderr and "internal error" not in out.stderr, out.stderr
    if kind in ("fifo", "loop"):
        out = gputopo("show", "--machine", path)
        assert out.returncode == 2 and says in out.stderr, out.stderr


def test_an_nccl_conf_file_that_is_a_fifo_does_not_hang_the_header(tmp_path, monkeypatch):
    """NCCL_CONF_FILE at a FIFO does not hang the header's prediction."""
    fifo = tmp_path / "nccl.conf"
    os.mkfifo(fifo)
    monkeypatch.setenv("NCCL_CONF_FILE", str(fifo))
    environ, conf_files = runtime.nccl_inputs()
    assert str(fifo) not in [path for path, _ in conf_files]


# ---------------------------------------------------------------------------------------------
# Options


@pytest.mark.parametrize(
    "option, value",
    [
        ("--gputopo-bench-timeout", "nan"),
        ("--gputopo-bench-timeout", "inf"),
        ("--gputopo-bench-timeout", "1e309"),
        ("--gputopo-bench-timeout", "-5"),
        ("--gputopo-rank-timeout", "nan"),
        ("--gputopo-cache-max-age", "inf"),
        ("--gputopo-allreduce-world-size", "1" + "0" * 26),
        ("--gputopo-allreduce-world-size", "²"),
        ("--gputopo-allreduce-size", "1" + "0" * 26),
        ("--gputopo-allreduce-size", "²"),
        ("--gputopo-bench-timeout", "١٢"),
        ("--gputopo-bench-budget", "0"),
        ("--gputopo-bench-budget", "3601"),
    ],
)
def test_every_numeric_option_is_finite_and_in_range_at_start(pytester, option, value):
    """Each is refused at start, not accepted to fail later inside a benchmark, or never."""
    pytester.makepyfile(test_f=FAILING)
    result = pytester.runpytest("--gputopo-machine", "hgx-h100", f"{option}={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option}: *is not a*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_each_option_says_its_range(pytester):
    pytester.makepyfile(test_f=FAILING)
    result = pytester.runpytest("--gputopo-machine", "hgx-h100", "--gputopo-bench-timeout=inf")
    result.stderr.fnmatch_lines(["*--gputopo-bench-timeout: 'inf' is not a number above 0 and at most 604800"])


@pytest.mark.parametrize("surface", ["env", "ini", "ini -o"])
def test_a_boolean_setting_is_checked_at_start_whatever_runs(pytester, monkeypatch, surface):
    """``PYTEST_GPUTOPO_CACHE=garbage`` is refused even when no benchmark runs, and an ini value from
    ``-o`` is named as such (not "in None")."""
    pytester.makepyfile(test_f="def test_x(): pass\n")
    args = ["--gputopo-machine", "hgx-h100"]
    if surface == "env":
        monkeypatch.setenv("PYTEST_GPUTOPO_CACHE", "garbage")
        expected = "*environment variable PYTEST_GPUTOPO_CACHE: 'garbage' is not a boolean*"
    elif surface == "ini":
        pytester.makeini("[pytest]\ngputopo_cache = maybe\n")
        expected = "*ini option gputopo_cache in *tox.ini: 'maybe' is not a boolean*"
    else:
        args += ["-o", "gputopo_strict=maybe"]
        expected = "*ini option gputopo_strict (-o): 'maybe' is not a boolean*"
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])


# ---------------------------------------------------------------------------------------------
# Marker arguments


@pytest.mark.parametrize(
    "args, says",
    [
        ("min_allreduce_bw(float('nan'))", "gbps must be a number above 0 and at most 1e+06"),
        ("min_allreduce_bw(float('inf'))", "gbps must be a number above 0 and at most 1e+06"),
        ("min_p2p_bw(10**400)", "gbps must be a number above 0 *got an integer of 1329 bits"),
        ("min_allreduce_bw(50, size=10**400)", "size (bytes) must be an integer from 4 to 1099511627776"),
        ("requires_gpus(10**400)", "n must be a number of GPUs from 0 to 1024"),
        ("requires_nvlink(min_links=10**6)", "min_links must be an integer from 1 to 36"),
    ],
)
def test_a_marker_argument_no_machine_can_meet_is_an_error_not_a_verdict(pytester, args, says):
    """``min_allreduce_bw(float("nan"))`` (every comparison with NaN is False, so it would pass on every
    machine) and ``10**400`` (an OverflowError in ``float()``) are usage errors."""
    pytester.makepyfile(test_f=f"import pytest\n@pytest.mark.{args}\ndef test_x(): pass\n")
    result = pytester.runpytest("--gputopo-machine", "hgx-h100")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*test_x: @pytest.mark.{args.split('(')[0]}: {says}*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


# ---------------------------------------------------------------------------------------------
# Numbers from anywhere: one reader (pytest_gputopo.core.numtext), ASCII digits, a stated range


@pytest.mark.parametrize("visible", ["²", "9" * 5000, "١"])
def test_cuda_visible_devices_that_names_no_device_stops_the_list_with_a_warning(pytester, monkeypatch, visible):
    """``CUDA_VISIBLE_DEVICES=²`` (``"²".isdigit()`` is true, ``int("²")`` raises) or a 5000-digit
    index is no INTERNALERROR. CUDA stops its list at an entry that
    names no device; so does the plugin, saying so."""
    pytester.makepyfile(test_f="import pytest\n@pytest.mark.requires_gpus(1)\ndef test_x(): pass\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    result = pytester.runpytest("--gputopo-machine", "hgx-h100", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*CUDA_VISIBLE_DEVICES=*CUDA sees only the devices before it*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize(
    "term, says",
    [
        ("gpus>=²", "gpus>= must be an integer from 0 to 1024, got ²"),
        ("p2p@" + "9" * 5000, "@N must be an integer from 1 to 1024, got 99999999999999999999..."),
        ("nvlink>=" + "1" * 401, "nvlink>= must be an integer from 1 to 36"),
        ("gpus>=١٢", "gpus>= must be an integer from 0 to 1024"),
        ("memory>=4e1", "min_memory_gb must be a number of GB"),
        ("cc>=nine", "is not a version specifier"),
    ],
)
def test_require_numbers_are_ascii_and_in_range(pytester, term, says):
    pytester.makepyfile(test_f="def test_x(): pass\n")
    result = pytester.runpytest("--gputopo-machine", "hgx-h100", "--gputopo-require", term)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert says in result.stderr.str()
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


@pytest.mark.parametrize(
    "env, says",
    [
        (
            {"MASTER_PORT": "65535"},
            "MASTER_PORT='65535' is not a port from 1 to 65534 (pytest-gputopo's store listens on MASTER_PORT+1)",
        ),
        ({"MASTER_PORT": "-5"}, "MASTER_PORT='-5' is not a port from 1 to 65534"),
        ({"MASTER_PORT": "65535", "TORCHELASTIC_USE_AGENT_STORE": "True"}, None),
        ({"RANK": "١"}, "RANK='١' is not an integer from 0 to 2147483647"),
        ({"WORLD_SIZE": "9" * 5000}, "WORLD_SIZE='9999999999999999999999999999999999999999' is not an integer"),
    ],
)
def test_launcher_variables_are_read_by_the_one_number_reader(monkeypatch, env, says):
    """``MASTER_PORT=65535`` or ``-5`` under torchrun is a usage error naming the variable, before any
    store is opened (not exit 9 with a pybind signature dump from TCPStore)."""
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "29500", **env}.items():
        monkeypatch.setenv(name, value)
    if says is None:
        assert runtime.launch().master_port == 65535  # torchrun's own store at MASTER_PORT: no +1
        return
    with pytest.raises(ValueError) as excinfo:
        runtime.launch()
    assert f"environment variable {says}" in str(excinfo.value)


def test_a_bad_master_port_is_a_usage_error_of_the_run(pytester, monkeypatch):
    pytester.makepyfile(test_f="def test_x(): pass\n")
    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "65535"}.items():
        monkeypatch.setenv(name, value)
    result = pytester.runpytest("--gputopo-machine", "hgx-h100")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*environment variable MASTER_PORT='65535' is not a port from 1 to 65534*"])


# ---------------------------------------------------------------------------------------------
# The report survives the run's end


def test_sigterm_mid_run_leaves_the_report_so_far(pytester):
    """SIGTERM (a CI cancel, ``timeout``) during a benchmark still leaves a JSON report: it is
    written again after each test that added a measurement, marked ``"complete": false`` until the
    end -- with no signal handler in the user's process."""
    import signal

    started = pytester.path / "started"
    pytester.makepyfile(
        test_f=f"""
import pathlib, time, pytest

@pytest.mark.min_allreduce_bw(1)
def test_a(): pass

def test_b():
    pathlib.Path({str(started)!r}).write_text("")
    time.sleep(120)
"""
    )
    proc = subprocess.Popen(
        [*USER_PYTEST, "--gputopo-machine", "dgx-a100", "--gputopo-json", "out.json"],
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_file(started, 60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM  # pytest's own response: no handler of ours
    finally:
        proc.kill()
    doc = json.loads((pytester.path / "out.json").read_text())
    assert doc["complete"] is False
    assert [m["key"][0] for m in doc["measurements"]] == ["allreduce"]


def test_a_finished_run_says_its_report_is_complete(pytester):
    pytester.makepyfile(test_f="def test_x(): pass\n")
    pytester.runpytest("--gputopo-machine", "hgx-h100", "--gputopo-json", "out.json").assert_outcomes(passed=1)
    assert json.loads((pytester.path / "out.json").read_text())["complete"] is True


# ---------------------------------------------------------------------------------------------
# Small ones


def test_a_small_threshold_is_not_printed_as_needed_0_0():
    from pytest_gputopo.core.fact_requirements import BandwidthRequirement
    from pytest_gputopo.core.judgement import Judgement, Measured, Threshold
    from pytest_gputopo.core.spec import Figure
    from pytest_gputopo.probe import probe

    requirement = BandwidthRequirement(metric="allreduce", gbps=0.001)
    judged = Judgement(
        Measured(0.0005, "measured", "all-reduce"), Threshold(None, "gloo", 0.8, Figure(0.001, "the marker"))
    )
    verdict = requirement.judge(probe("hgx-h100"), [judged])
    assert "needed 0.001" in verdict.reason and "needed 0.0 " not in verdict.reason


def test_an_odd_allreduce_size_is_named_as_measured(pytester):
    """``--gputopo-allreduce-size 5`` was labelled "5 B" while 4 B (one float32) were measured."""
    from pytest_gputopo.bench.suite import BenchSettings

    assert BenchSettings(size_bytes=5).judge_size(None) == 4
    assert BenchSettings().judge_size(2**20 + 3) == 2**20


def test_an_empty_entry_that_drops_devices_warns(monkeypatch):
    from pytest_gputopo.core import model

    gpus = [model.Gpu(i, uuid=f"GPU-{i}") for i in range(4)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,,2")
    vis = runtime.visible_gpus(gpus)
    assert vis.order == (1,) and any("empty entry; CUDA sees only the devices before it" in w for w in vis.warnings)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2,")
    vis = runtime.visible_gpus(gpus)
    assert vis.order == (1, 2) and vis.warnings == ()


def test_an_empty_environment_variable_is_unset_as_an_empty_ini_key(pytester, monkeypatch):
    pytester.makepyfile(test_f="def test_x(): pass\n")
    monkeypatch.setenv("PYTEST_GPUTOPO_BENCH_TIMEOUT", "")
    pytester.runpytest("--gputopo-machine", "hgx-h100").assert_outcomes(passed=1)


# ---------------------------------------------------------------------------------------------
# Property tests over every parser of settings

numberish = st.text(alphabet="0123456789+-.eE xnaifIN²١_", max_size=30) | st.text(max_size=30)


@given(numberish, st.booleans())
def test_any_option_text_is_a_number_in_range_or_a_usage_error(raw, integer):
    from pytest_gputopo.plugin import options

    try:
        value = options.parse_number(raw, "--gputopo-x", integer=integer, maximum=604800)
    except pytest.UsageError as exc:
        assert str(exc).startswith("--gputopo-x: ")
    else:
        assert 0 < value <= 604800 and (type(value) is int if integer else True)


@given(numberish)
def test_the_number_reader_accepts_only_ascii_in_range(raw):
    from pytest_gputopo.core import numtext

    value = numtext.read_int(raw, 0, 1024)
    assert value is None or (0 <= value <= 1024 and raw.strip().lstrip("+-").isascii())
    number = numtext.read_number(raw, 0, 1e6)
    assert number is None or 0 <= number <= 1e6


@given(
    st.text(max_size=40)
    | st.lists(
        st.sampled_from(
            [
                "gpus>=",
                "p2p",
                "@",
                "nvlink>=",
                "link>=",
                "NV",
                ",",
                "9",
                "0",
                "²",
                " ",
                "no-fallback",
                "SYS",
                "memory>=",
                "cc",
                "~=",
                "arch=",
                "hopper",
                "model=",
                "*",
                "bf16",
                "multicast",
                "nccl",
                "cuda_runtime",
                "==",
                "<",
                ".",
                "2.18",
            ]
        ),
        max_size=8,
    ).map("".join)
)
def test_any_require_expression_is_requirements_or_a_requirement_error(text):
    from pytest_gputopo.core.expressions import parse_expression
    from pytest_gputopo.core.requirements import RequirementError

    try:
        parse_expression(text)
    except RequirementError:
        pass


anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.sets(st.integers(), max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=6,
)


@given(
    st.sampled_from(["requires_gpus", "requires_versions", "requires_p2p", "min_p2p_bw"]),
    st.dictionaries(
        st.sampled_from(
            [
                "n",
                "gpus",
                "min_memory_gb",
                "compute_capability",
                "arch",
                "model",
                "bf16",
                "multicast",
                "driver",
                "cuda",
                "cuda_runtime",
                "nccl",
                "strict",
            ]
        ),
        anything,
        max_size=3,
    ),
)
def test_any_marker_argument_is_a_requirement_or_a_requirement_error(name, kwargs):
    """Whatever a user passes (lists, sets, NaN, dicts), collection says what is wrong with
    it, never crashes (an unhashable specifier once escaped as an INTERNALERROR)."""
    from pytest_gputopo.core.requirements import RequirementError
    from pytest_gputopo.plugin.markers import from_marker

    try:
        from_marker(name, (), kwargs)
    except RequirementError:
        pass


# What os.environ can hold: text without NUL or lone surrogates, and bytes that are not
# UTF-8, which Python shows decoded with surrogateescape (os.fsdecode).
@given(
    st.text(alphabet="0123456789,-GPUgpuMIa² ", max_size=20)
    | st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
    | st.binary(max_size=20).filter(lambda raw: b"\x00" not in raw).map(os.fsdecode)
)
def test_any_cuda_visible_devices_is_a_device_list(visible):
    from pytest_gputopo.core import model

    gpus = [model.Gpu(i, uuid=f"GPU-{i}abc") for i in range(4)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CUDA_VISIBLE_DEVICES", visible)
        vis = runtime.visible_gpus(gpus)
    assert len(set(vis.order)) == len(vis.order) and all(0 <= i < 4 for i in vis.order)
