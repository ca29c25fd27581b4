"""The ``gputopo`` command, run as a user runs it."""

import json
import subprocess
import sys

import pytest

from conftest import BUNDLED_MACHINES, CORPUS, NO_CORPUS
from pytest_gputopo import cli
from pytest_gputopo.probe import probe

TOPO = CORPUS / "topo"
P2P_RW_GNS = " \tGPU0\tGPU1\t\n GPU0\tX\tGNS\t\n GPU1\tGNS\tX\t\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"


def gputopo(*args):
    """Run the installed console script's code in a subprocess (as a user would)."""
    return subprocess.run([sys.executable, "-m", "pytest_gputopo.cli", *args], capture_output=True, text=True)


def test_show_a_recorded_machine():
    out = gputopo("show", "--machine", "dgx1-v100")
    assert out.returncode == 0, out.stderr
    assert "source recorded:dgx1-v100 (a recorded machine, not this host)" in out.stdout
    assert "P2P read/write status (as the profile records them; U where no source gave one):" in out.stdout
    assert "NV# " in out.stdout


def test_show_json_is_the_profile_topology_form():
    out = gputopo("show", "--machine", "hgx-h100-nvlink-down", "--json")
    data = json.loads(out.stdout)
    assert data["source"] == {"kind": "recorded", "name": "hgx-h100-nvlink-down", "detail": data["source"]["detail"]}
    assert data["source_text"].startswith("recorded:hgx-h100-nvlink-down")
    assert len(data["gpus"]) == 8 and len(data["links"]) == 28


def test_show_this_host_without_a_gpu_says_why(capsys):
    if probe(None).gpus:
        pytest.skip("this host has GPUs")
    assert cli.main(["show"]) == 0
    assert "gputopo: no GPU (" in capsys.readouterr().out


def test_machines_lists_the_bundled_ones():
    out = gputopo("machines")
    names = [line.split()[0] for line in out.stdout.splitlines()]
    assert set(BUNDLED_MACHINES) <= set(names)


def test_record_from_smi_text_keeps_unknowns_unknown(tmp_path, pytester):
    topo = tmp_path / "topo.txt"
    topo.write_text(
        (TOPO / "021.txt").read_text()
        if TOPO.is_dir()
        else "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-63\t0\nGPU1\tPHB\t X \t0-63\t0\n"
    )
    out = tmp_path / "node.json"
    assert cli.main(["record", "--from-smi", str(topo), "-o", str(out)]) == 0
    profile = json.loads(out.read_text())
    assert profile["name"] == "node" and profile["sources"][0]["file"] == str(topo)
    link = profile["topology"]["links"][0]
    assert link["pcie"] == "PHB" and link["p2p"]["read"] == "U"
    gpu = profile["topology"]["gpus"][0]
    assert gpu["pci_bus_id"] is None and gpu["name"] is None
    # Unknown P2P does not satisfy requires_p2p, and the reason says so.
    pytester.makepyfile("import pytest\n@pytest.mark.requires_p2p\ndef test_x(): pass\n")
    result = pytester.runpytest("--gputopo-machine", str(out), "-rs")
    result.stdout.fnmatch_lines(["*requires_p2p: GPU0-GPU1 P2P status is unknown*recorded:node*"])


def test_record_from_smi_text_with_p2p_text(tmp_path):
    topo = tmp_path / "topo.txt"
    topo.write_text("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-63\t0\nGPU1\tPHB\t X \t0-63\t0\n")
    p2p = tmp_path / "p2p.txt"
    p2p.write_text(P2P_RW_GNS)
    out = tmp_path / "node.json"
    assert cli.main(["record", "--from-smi", str(topo), "--p2p", f"rw:{p2p}", "-o", str(out)]) == 0
    p = json.loads(out.read_text())["topology"]["links"][0]["p2p"]
    assert (p["read"], p["write"], p["nvlink"]) == ("GNS", "GNS", "U")


def test_record_from_nvml_without_a_gpu_is_a_clear_error(tmp_path, capsys):
    if probe(None).gpus:
        pytest.skip("this host has GPUs")
    assert cli.main(["record", "-o", str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err.startswith("gputopo: no GPU to record: ")


@pytest.mark.skipif(not TOPO.is_dir(), reason=NO_CORPUS)
def test_parse_smi_topo_json():
    out = gputopo("parse", "smi-topo", str(TOPO / "042.txt"), "--json")
    data = json.loads(out.stdout)
    assert data["matrix"][0] == ["X", "NV4", "SYS", "SYS"]
    assert data["nics"] == ["mlx5_0"] and data["gpus"][2]["numa_affinity"] == "1"


@pytest.mark.parametrize("content", ["", "hello\nworld\n", "\x00\xff binary", "Legend:\n  X = Self\n"])
def test_unreadable_text_exits_2_with_one_line(tmp_path, content):
    f = tmp_path / "topo.txt"
    f.write_bytes(content.encode("latin-1"))
    out = gputopo("parse", "smi-topo", str(f))
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (["parse", "smi-topo", "/nonexistent/topo.txt"], "cannot read"),
        (["show", "--machine", "dgx-z900"], "unknown machine 'dgx-z900'; bundled machines:"),
        (["record", "-o", "/tmp/x.json", "--p2p", "p.txt"], ""),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    out = gputopo(*args)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert message in out.stderr


NCCL_CORPUS = CORPUS / "nccl"


@pytest.mark.skipif(not NCCL_CORPUS.is_dir(), reason=NO_CORPUS)
def test_parse_nccl_log_json():
    out = gputopo("parse", "nccl-log", str(NCCL_CORPUS / "003.txt"), "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 0 and data["transports"] == ["P2P", "SHM"] and data["gdrdma"] is False
    assert {"channel", "src_rank", "dst_rank", "transport", "detail"} <= set(data["connections"][0])


@pytest.mark.parametrize("machine,status", [("hgx-h100", 0), ("8x-l40s-p2p-disabled", 1)])
def test_check_command_reports_like_pytest(tmp_path, machine, status):
    out = gputopo(
        "check", "--machine", machine, "--json", str(tmp_path / "c.json"), "--junitxml", str(tmp_path / "c.xml")
    )
    assert out.returncode == status, out.stdout[-2000:]
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["source"].startswith(f"recorded:{machine}") and doc["checks"]
    assert (tmp_path / "c.xml").read_text().count("<testcase") == len(doc["checks"])


def test_spec_prints_every_figure_with_its_source():
    data = json.loads(gputopo("spec", "--json").stdout)
    assert data and all(row["source"] for row in data)
    assert any(row["item"] == "Gen4" and 31 < row["gbps"] < 32 for row in data)


def test_text_that_is_no_nccl_log_is_refused(tmp_path):
    """`gputopo parse nccl-log` refuses text that is no NCCL log, never exit 0 with an empty document."""
    path = tmp_path / "build.log"
    path.write_text("make: Entering directory '/src'\ncc -O2 -c x.c\n")
    result = gputopo("parse", "nccl-log", str(path))
    assert result.returncode == 2 and result.stdout == ""
    assert f"gputopo: {path}: no NCCL log: not one line NCCL writes" in result.stderr
    path.write_text("host:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n")
    assert gputopo("parse", "nccl-log", str(path)).returncode == 0


def test_a_reader_that_goes_away_is_not_an_error():
    """`gputopo spec --json | head` ends quietly, not with "internal error (BrokenPipeError)" (exit 3).
    Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError (Python docs, "Note
    on SIGPIPE" in the signal module): the command ends quietly, as a writer ended by SIGPIPE."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_gputopo.cli", "spec", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # the reader is gone before the first write
    err = proc.stderr.read().decode()
    assert (proc.wait(), err) == (141, "")


def test_parse_nccl_tests_says_its_wrong_data(tmp_path):
    """nccl-tests' own verdict on the data (#wrong in-place, the FAILED out-of-bounds
    line, src/common.cu) is said, not only the figures."""
    text = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"  # noqa: E501 (all_reduce_perf's own line)
        "     1048576        262144     float     sum      -1    30.12   34.81   34.81      0    29.90   35.07   35.07      3\n"  # noqa: E501
        "# Out of bounds values : 1 FAILED\n# Avg bus bandwidth    : 34.94 \n#\n"
    )
    (tmp_path / "out.txt").write_text(text)
    out = gputopo("parse", "nccl-tests", str(tmp_path / "out.txt"))
    assert out.returncode == 0, out.stderr
    assert "wrong data: nccl-tests reported 3 wrong elements in-place, 'Out of bounds values : 1 FAILED'" in out.stdout


@pytest.mark.parametrize(
    "p2p_arg, says",
    [
        ("w:{garbage}", "{garbage}: "),
        ("z:{good}", "--p2p 'z:{good}': 'z' before ':' is no capability letter (r read, w write, n nvlink, a atomics)"),
        ("rq:{good}", "'q' before ':' is no capability letter"),
    ],
)
def test_record_p2p_errors_name_the_letter_or_the_file_at_fault(tmp_path, p2p_arg, says):
    """A garbage --p2p file is blamed by its own name, not on the valid --from-smi file, and a bad
    capability letter is named, not a bare "cannot read"."""
    topo = tmp_path / "topo.txt"
    topo.write_text("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-63\t0\nGPU1\tPHB\t X \t0-63\t0\n")
    good, garbage = tmp_path / "p2p.txt", tmp_path / "garbage.txt"
    good.write_text(P2P_RW_GNS)
    garbage.write_text("hello\nworld\n")
    names = {"good": str(good), "garbage": str(garbage)}
    out = gputopo("record", "--from-smi", str(topo), "--p2p", p2p_arg.format(**names), "-o", str(tmp_path / "x.json"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert says.format(**names) in out.stderr
    assert str(topo) not in out.stderr
