"""What operators already run -- ``nvidia-smi topo -p2p`` and ``nvlink -s``, NVIDIA's
nvbandwidth, cuda-samples' p2pBandwidthLatencyTest -- read by ``gputopo parse`` (each refusing the
others' text), taken by ``gputopo record`` into a profile as recorded figures and link states with
their source, served for the machine they describe (never as measured), and drawn in the report.

Which cell is which copy comes from the tools' sources: nvbandwidth v0.8 ``testcases_ce.cpp``
(``DeviceToDeviceWriteCE``: ``value(src, peer) = doMemcpy(srcBuffer, peerBuffer)`` in the source's
context, a copy row -> column pushed by the row's GPU; ``DeviceToDeviceReadCE``: ``PREFER_DST_CONTEXT``,
``doMemcpy(peerBuffer, srcBuffer)``, column -> row issued by the row's GPU: a read, not recorded),
p2pBandwidthLatencyTest.cu (``P2P_WRITE``: ``performP2PCopy(buffers[j], j, buffers[i], i, ...)``, i -> j,
with peer access only where ``cudaDeviceCanAccessPeer``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import pytest_gputopo
from conftest import CORPUS, NO_CORPUS, node_profile, record_node, run_cli as run
from pytest_gputopo.core import schema
from pytest_gputopo.parse.cuda_samples import parse_p2p_bandwidth_latency
from pytest_gputopo.parse.nvbandwidth import Nvbandwidth, NvbMatrix, NvbTestcase, parse_nvbandwidth
from pytest_gputopo.parse.nvlink_status import GpuLinks, LinkState, NvlinkStatus
from pytest_gputopo.parse.published import RecordedFigures, ToolOutputError
from pytest_gputopo.parse.smi_machine import parse_p2p_matrix
from pytest_gputopo.probe import probe
from pytest_gputopo.render.nvbandwidth import render_nvbandwidth
from pytest_gputopo.render.nvlink_status import render_nvlink_status
from pytest_gputopo.render.smi_topo import render_topo_matrix

SLOW = 5  # the GPU whose copies are slow in the nvbandwidth text below


def nvbandwidth_text(n: int = 8) -> str:
    """nvbandwidth v0.10's device-to-device read and write testcases in the order it runs them (read
    first: v0.8 nvbandwidth.cpp, createTestcases), host-to-device, and a testcase gputopo does not
    record, on ``n`` GPUs. write_ce [row][column], a copy row -> column: GPU5's copies slow, GPU1 unable
    to reach GPU0 (N/A). The reads print 200 GB/s: not the copy gputopo measures, never recorded."""

    def push(src, dst):
        if src == dst or (src, dst) == (1, 0):
            return None
        return 120.0 if SLOW in (src, dst) else 395.0 + dst / 100 + src / 1000

    labels = tuple(map(str, range(n)))
    read = NvbMatrix(
        "device_to_device_memcpy_read_ce",
        "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
        "GB/s",
        labels,
        labels,
        tuple(tuple(None if r == c else 200.0 for c in range(n)) for r in range(n)),
        None,
    )
    write = NvbMatrix(
        "device_to_device_memcpy_write_ce",
        "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
        "GB/s",
        labels,
        labels,
        tuple(tuple(push(r, c) for c in range(n)) for r in range(n)),
        None,
    )
    h2d = NvbMatrix(
        "host_to_device_memcpy_ce",
        "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
        "GB/s",
        ("0",),
        labels,
        (tuple(55.0 - (g == SLOW) * 40 for g in range(n)),),
        None,
    )
    local = NvbMatrix(
        "device_local_copy", "memcpy local GPU(column) bandwidth (GB/s)", "GB/s", ("0",), labels, ((1500.0,) * n,), None
    )
    cases = tuple(
        NvbTestcase(
            m.key,
            "ran",
            None,
            (dataclasses.replace(m, sum=round(sum(v for row in m.cells for v in row if v is not None), 2)),),
        )
        for m in (read, write, h2d, local)
    )
    return render_nvbandwidth(Nvbandwidth("v0.10.0", "595.71.05", "13.2", (), cases, ()))


def nvlink_text(down: dict[int, tuple[int, ...]], n: int = 8) -> str:
    """``nvidia-smi nvlink -s`` of an H100 box: 18 links of 26.562 GB/s per GPU, ``down`` inactive."""
    gpus = tuple(
        GpuLinks(
            i,
            "NVIDIA H100 80GB HBM3",
            None,
            tuple(LinkState(k, False, None) if k in down.get(i, ()) else LinkState(k, True, 26.562) for k in range(18)),
        )
        for i in range(n)
    )
    return render_nvlink_status(NvlinkStatus(gpus, ()))


# ------------------------------------------------------------------------------- gputopo record


def test_nvbandwidth_figures_are_recorded_per_pair_and_served_as_recorded(tmp_path, h100_topo, capsys):
    (tmp_path / "nvb.txt").write_text(nvbandwidth_text())
    profile = tmp_path / "node.json"
    code, out, err = record_node(capsys, tmp_path, h100_topo, "--nvbandwidth", tmp_path / "nvb.txt")
    assert code == 0, err
    assert "device_to_device_memcpy_write_ce: 55 p2p figure(s) recorded" in out  # 56 pairs, one N/A
    assert "device_to_device_memcpy_read_ce: not recorded (a read: the receiving GPU issues it" in out
    assert "host_to_device_memcpy_ce: 8 h2d figure(s) recorded" in out
    assert "device_local_copy: not recorded (gputopo measures nothing the same)" in out
    data = json.loads(profile.read_text())
    assert data["sources"][-1]["what"] == "nvbandwidth" and data["sources"][-1]["file"] == str(tmp_path / "nvb.txt")
    figures = {(f["kind"], f.get("src"), f.get("dst"), f.get("gpu")): f for f in data["topology"]["published"]}
    # write_ce cell [row 0][column 7] is GPU0 pushing to GPU7; the read printed before it is not kept
    assert figures["p2p", 0, 7, None]["gbps"] == pytest.approx(395.07)
    assert ("p2p", 1, 0, None) not in figures  # the N/A cell: GPU1 could not write to GPU0
    assert figures["h2d", None, None, SLOW]["gbps"] == 15.0 and figures["h2d", None, None, SLOW]["pinned"] is True
    assert figures["p2p", 0, 7, None]["source"] == (
        f"nvbandwidth v0.10.0 device_to_device_memcpy_write_ce (copy "
        f"engine, GPU(row) pushes to GPU(column)), {tmp_path / 'nvb.txt'}"
    )
    assert figures["h2d", None, None, SLOW]["source"].startswith(
        "nvbandwidth v0.10.0 host_to_device_memcpy_ce (copy engine, pinned host memory to GPU(column)), "
    )

    code, out, err = run(
        capsys,
        "check",
        "--machine",
        str(profile),
        "--level",
        "full",
        "--json",
        str(tmp_path / "run.json"),
        "--html",
        str(tmp_path / "run.html"),
    )
    doc = json.loads((tmp_path / "run.json").read_text())
    got = {tuple(m["key"]): m for m in doc["measurements"]}
    slow = got["p2p", 0, SLOW]
    assert (slow["gbps"], slow["origin"]) == (120.0, "recorded") and "nvbandwidth v0.10.0" in slow["source"]
    assert got["p2p", 0, 1]["gbps"] == 395.01  # write_ce [0][1]: GPU0 pushed it to GPU1
    assert got["h2d", SLOW, True]["gbps"] == 15.0 and got["h2d", SLOW, True]["origin"] == "recorded"
    # topo -m text names no GPU model nor NVLink generation: nothing says what NV18 should give, and
    # the recorded figure is said, not judged (unknown, never "OK")
    assert "recorded, not measured: nvbandwidth v0.10.0 device_to_device_memcpy_write_ce" in out
    assert "not judged: NV18 (no figure for it)" in out and code == 0
    page = (tmp_path / "run.html").read_text()
    assert "120 / ?" in page and "<small>recorded</small>" in page and "<small>measured</small>" not in page


def full_check_on_nvbandwidth_figures(tmp_path, capsys) -> tuple[int, dict]:
    """``gputopo check --level full`` of the bundled hgx-h100 (H100 SXM5, NVLink 4.0) with nvbandwidth_text()'s
    figures recorded in place of its pair-less published one: its exit status and its items by name."""
    data = json.loads((Path(pytest_gputopo.__file__).parent / "machines" / "hgx-h100.json").read_text())
    figures = RecordedFigures(probe("hgx-h100"))
    figures.add_nvbandwidth(parse_nvbandwidth(nvbandwidth_text()), "nvb.txt")
    data["topology"]["published"] = figures.published
    (tmp_path / "node.json").write_text(json.dumps(data))
    code, out, err = run(
        capsys, "check", "--machine", tmp_path / "node.json", "--level", "full", "--json", tmp_path / "run.json"
    )
    return code, {c["check"]: c for c in json.loads((tmp_path / "run.json").read_text())["checks"]}


def test_recorded_figures_are_judged_as_measured_ones_are(tmp_path, capsys):
    """The same figures in a profile that knows its GPUs (bundled hgx-h100: H100 SXM5, NVLink 4.0)."""
    code, checks = full_check_on_nvbandwidth_figures(tmp_path, capsys)
    assert checks[f"p2p_bw[GPU0->GPU{SLOW}]"]["outcome"] == "failed" and code == 1
    assert checks["p2p_bw[GPU0->GPU2]"]["outcome"] == "passed"
    assert "recorded" in checks[f"p2p_bw[GPU0->GPU{SLOW}]"]["message"]


def test_the_full_check_judges_each_direction_of_every_pair(tmp_path, capsys):
    """Issue 32 G6: the full check's one-way copies go both ways, each judged on its own figure
    (nvbandwidth's write_ce [row][column] and [column][row] are two copies): GPU5 -> GPU0 is slow as
    GPU0 -> GPU5 is, and GPU1 -> GPU0, the cell nvbandwidth could not measure, says so."""
    code, checks = full_check_on_nvbandwidth_figures(tmp_path, capsys)
    assert len([name for name in checks if name.startswith("p2p_bw[")]) == 56  # 28 pairs, both ways
    assert checks[f"p2p_bw[GPU{SLOW}->GPU0]"]["outcome"] == "failed"
    assert checks["p2p_bw[GPU2->GPU0]"]["outcome"] == "passed"
    assert checks["p2p_bw[GPU1->GPU0]"]["outcome"] == "skipped" and checks["p2p_bw[GPU0->GPU1]"]["outcome"] == "passed"


D2D = ((None, 10.0), (20.0, None))  # [row][column] of two GPUs
HOST = ((10.0, 20.0),)  # CPU(row) and a column per GPU
TOTAL = "memcpy CE GPU(row) <-> GPU(column) Total bandwidth (GB/s)"


@pytest.mark.parametrize(
    "name, matrices, recorded, says",
    [
        # NVIDIA/nvbandwidth v0.8 testcases_ce.cpp, DeviceToDeviceWriteCE: MemcpyOperation's default
        # PREFER_SRC_CONTEXT, doMemcpy(srcBuffer, peerBuffer): the row's GPU pushes to the column's, as
        # gputopo's copy_ (torch issues it on the source GPU's stream)
        (
            "device_to_device_memcpy_write_ce",
            {"": D2D},
            {("p2p", 0, 1): 10.0, ("p2p", 1, 0): 20.0},
            "2 p2p figure(s) recorded",
        ),
        # DeviceToDeviceReadCE: PREFER_DST_CONTEXT, doMemcpy(peerBuffer, srcBuffer): the row's GPU pulls
        ("device_to_device_memcpy_read_ce", {"": D2D}, {}, "not recorded (a read: the receiving GPU issues it"),
        # testcases_sm.cpp: MemcpyInitiatorSM, a copy kernel on the SMs, not the copy engine
        ("device_to_device_memcpy_write_sm", {"": D2D}, {}, "not recorded (an SM kernel"),
        ("device_to_device_memcpy_read_sm", {"": D2D}, {}, "not recorded (an SM kernel"),
        # HostToDeviceCE / DeviceToHostCE: HostBuffer (cuMemHostAlloc) has no context: the GPU's issues it
        ("host_to_device_memcpy_ce", {"": HOST}, {("h2d", 0): 10.0, ("h2d", 1): 20.0}, "2 h2d figure(s) recorded"),
        ("device_to_host_memcpy_ce", {"": HOST}, {("d2h", 0): 10.0, ("d2h", 1): 20.0}, "2 d2h figure(s) recorded"),
        ("host_to_device_memcpy_sm", {"": HOST}, {}, "not recorded (an SM kernel"),
        ("device_to_host_memcpy_sm", {"": HOST}, {}, "not recorded (an SM kernel"),
        # DeviceToDeviceBidirWriteCE (v0.6 on): VECTOR_BW, each copy in its source's context, both at once;
        # _total = results[0] + results[1], both directions' bytes as p2p_bidir counts them
        (
            "device_to_device_bidirectional_memcpy_write_ce",
            {"_write1": D2D, "_write2": D2D, "_total": ((None, 24.0), (26.0, None))},
            {("p2p_bidir", 0, 1): 24.0, ("p2p_bidir", 1, 0): 26.0},
            "2 p2p_bidir figure(s) recorded",
        ),
        # v0.5 printed one matrix (USE_FIRST_BW): one direction's figure while the other interferes
        ("device_to_device_bidirectional_memcpy_write_ce", {"": D2D}, {}, "not recorded (no Total matrix"),
        (
            "device_to_device_bidirectional_memcpy_read_ce",
            {"_read1": D2D, "_read2": D2D, "_total": D2D},
            {},
            "not recorded (a read",
        ),
        (
            "device_to_device_bidirectional_memcpy_write_sm",
            {"_write1": D2D, "_write2": D2D, "_total": D2D},
            {},
            "not recorded (an SM kernel",
        ),
        ("host_to_device_bidirectional_memcpy_ce", {"": HOST}, {}, "not recorded (gputopo measures nothing the same)"),
        ("all_to_host_memcpy_ce", {"": HOST}, {}, "not recorded (gputopo measures nothing the same)"),
    ],
)
def test_each_nvbandwidth_testcase_is_recorded_as_the_copy_it_makes_or_not_at_all(name, matrices, recorded, says):
    labels = ("0", "1")
    found = tuple(
        NvbMatrix(name + part, TOTAL if part == "_total" else "t", "GB/s", labels[: len(cells)], labels, cells, None)
        for part, cells in matrices.items()
    )
    figures = RecordedFigures(probe("2x-rtx3090-nvlink"))
    figures.add_nvbandwidth(Nvbandwidth("v0.8", None, None, (), (NvbTestcase(name, "ran", None, found),), ()), "f.txt")
    got = {(f["kind"], *(f[k] for k in ("src", "dst", "gpu") if k in f)): f["gbps"] for f in figures.published}
    assert got == recorded
    assert len(figures.notes) == 1 and figures.notes[0].startswith(f"f.txt: {name}: {says}"), figures.notes


def test_a_bidirectional_total_cut_before_its_sum_line_is_still_known_by_its_title():
    """The parser keys a matrix by its SUM line; one cut before it keeps the testcase's name."""
    name = "device_to_device_bidirectional_memcpy_write_ce"
    found = (
        NvbMatrix(name + "_write1", "t", "GB/s", ("0", "1"), ("0", "1"), D2D, None),
        NvbMatrix(name, TOTAL, "GB/s", ("0",), ("0", "1"), ((None, 24.0),), None),
    )
    figures = RecordedFigures(probe("2x-rtx3090-nvlink"))
    figures.add_nvbandwidth(Nvbandwidth("v0.8", None, None, (), (NvbTestcase(name, "ran", None, found),), ()), "f.txt")
    assert [(f["kind"], f["src"], f["dst"], f["gbps"]) for f in figures.published] == [("p2p_bidir", 0, 1, 24.0)]


def test_published_figures_follow_the_gpus_a_process_sees(tmp_path, h100_topo, capsys, monkeypatch):
    (tmp_path / "nvb.txt").write_text(nvbandwidth_text())
    profile = tmp_path / "node.json"
    assert record_node(capsys, tmp_path, h100_topo, "--nvbandwidth", tmp_path / "nvb.txt")[0] == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"3,{SLOW}")
    seen = probe(str(profile))
    pairs = {(f["src"], f["dst"]): f["gbps"] for f in seen.published if f["kind"] == "p2p"}
    assert pairs == {(0, 1): 120.0, (1, 0): 120.0}  # cuda:1 is GPU5: its figures, renumbered; the rest dropped
    assert {f["gpu"]: f["gbps"] for f in seen.published if f["kind"] == "h2d"} == {0: 55.0, 1: 15.0}


def test_nvlink_states_are_recorded_and_a_down_link_fails_the_check(tmp_path, h100_topo, capsys):
    (tmp_path / "nvl.txt").write_text(nvlink_text({SLOW: (7,)}))
    profile = tmp_path / "node.json"
    code, out, err = record_node(capsys, tmp_path, h100_topo, "--nvlink-status", tmp_path / "nvl.txt")
    assert code == 0, err
    # topo -m says NV18 for GPU5's pairs, nvlink -s 17 links up: said, both kept as printed
    assert f"GPU{SLOW}: nvidia-smi nvlink -s ({tmp_path / 'nvl.txt'}) shows 17 links up, a pair shows NV18" in err
    seen = probe(str(profile))
    assert {str(ln.label) for ln in seen.pairs()} == {"NV18"}  # the pairs' counts survive link states without ends
    assert [ln.link for ln in seen.gpus[SLOW].nvlinks if not ln.active] == [7]
    assert seen.gpus[0].active_nvlinks == 18
    code, out, err = run(capsys, "check", "--machine", str(profile), "--json", str(tmp_path / "run.json"))
    checks = {c["check"]: c for c in json.loads((tmp_path / "run.json").read_text())["checks"]}
    assert checks[f"nvlink[GPU{SLOW}]"]["outcome"] == "failed"
    assert "NVLinks [7] are down (17/18 up)" in checks[f"nvlink[GPU{SLOW}]"]["message"]
    assert checks["nvlink[GPU0]"]["outcome"] == "passed" and code == 1


@pytest.mark.parametrize(
    "args, says",
    [
        (["--nvlink-status", "x.txt"], "--nvlink-status goes with --from-smi"),
        (["--from-smi", "TOPO2", "--nvbandwidth", "NVB"], "nvbandwidth saw 8 GPUs and the machine has 2"),
        (
            ["--from-smi", "TOPO2", "--nvlink-status", "TOPO2"],
            "this is an nvidia-smi topo -m matrix, not nvidia-smi nvlink -s",
        ),
        (["--from-smi", "TOPO2", "--nvbandwidth", "TOPO2"], "TOPO2: "),
    ],
)
def test_a_tool_output_that_cannot_describe_the_machine_is_refused(tmp_path, capsys, args, says):
    files = {"TOPO2": tmp_path / "topo2.txt", "NVB": tmp_path / "nvb.txt"}
    files["TOPO2"].write_text(render_topo_matrix(probe("2x-rtx3090-nvlink")))
    files["NVB"].write_text(nvbandwidth_text())
    args = [str(files[a]) if a in files else a for a in args]
    code, out, err = run(capsys, "record", *args, "-o", str(tmp_path / "node.json"))
    assert code == 2 and says.replace("TOPO2", str(files["TOPO2"])) in err and not (tmp_path / "node.json").exists()


P2P_TEST = """[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]
Device: 0, NVIDIA GeForce RTX 3090, pciBusID: 1, pciDeviceID: 0, pciDomainID:0
Device: 1, NVIDIA GeForce RTX 3090, pciBusID: 21, pciDeviceID: 0, pciDomainID:0
P2P Connectivity Matrix
     D\\D     0     1
     0\t     1     1
     1\t     0     1
Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)
   D\\D     0      1 
     0 831.56  11.42 
     1  11.45 832.78 
Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)
   D\\D     0      1 
     0 831.23  52.75 
     1  11.39 833.11 
Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)
   D\\D     0      1 
     0 838.41 101.55 
     1  19.87 839.35 
"""


def test_p2p_test_figures_are_peer_to_peer_only_where_cuda_said_peer_access(tmp_path, capsys):
    """GPU1 cannot reach GPU0 (connectivity 0): its "P2P=Enabled" copy was staged through the host
    by cudaMemcpyPeerAsync, so it is no P2P figure; the P2P=Disabled matrix is the staged copy."""
    (tmp_path / "topo.txt").write_text(render_topo_matrix(probe("2x-rtx3090-nvlink")))
    (tmp_path / "p2p.txt").write_text(P2P_TEST)
    code, out, err = record_node(capsys, tmp_path, tmp_path / "topo.txt", "--p2p-bandwidth", tmp_path / "p2p.txt")
    assert code == 0, err
    figures = {(f["kind"], f["src"], f["dst"]): f["gbps"] for f in node_profile(tmp_path)["topology"]["published"]}
    assert figures == {
        ("p2p_staged", 0, 1): 11.42,
        ("p2p_staged", 1, 0): 11.45,
        ("p2p", 0, 1): 52.75,
        ("p2p_bidir", 0, 1): 101.55,
    }


def test_a_p2p_test_read_is_not_the_push_gputopo_measures(tmp_path, capsys):
    """cuda-samples p2pBandwidthLatencyTest, testUnidirectionalBandwidth: with P2P_READ, cell [i][j] is
    performP2PCopy(buffers[i], i, buffers[j], j, ..., stream[i]) -- GPU i pulls from GPU j on its own
    stream -- where gputopo's copy is pushed by the source (P2P_WRITE: performP2PCopy(buffers[j], j,
    buffers[i], i, ..., stream[i])). A reads matrix alone gives no P2P figure, and the note says why."""
    reads = P2P_TEST.replace("(P2P Writes)", "(P2P Reads)")
    (tmp_path / "topo.txt").write_text(render_topo_matrix(probe("2x-rtx3090-nvlink")))
    (tmp_path / "p2p.txt").write_text(reads)
    code, out, err = record_node(capsys, tmp_path, tmp_path / "topo.txt", "--p2p-bandwidth", tmp_path / "p2p.txt")
    assert code == 0, err
    kinds = {f["kind"] for f in node_profile(tmp_path)["topology"]["published"]}
    assert kinds == {"p2p_staged", "p2p_bidir"}
    assert "(P2P Reads) Matrix (GB/s): not recorded (a read: GPU(row) pulls from GPU(column)" in out


@pytest.mark.skipif(not CORPUS.is_dir(), reason=NO_CORPUS)
def test_a_p2p_test_without_its_connectivity_matrix_records_no_p2p_figure(tmp_path, capsys):
    (tmp_path / "topo.txt").write_text(render_topo_matrix(probe("8x-l40s")))
    sample = CORPUS / "ncclperf" / "006.txt"  # the Bidirectional P2P=Enabled matrix alone
    code, out, err = record_node(capsys, tmp_path, tmp_path / "topo.txt", "--p2p-bandwidth", sample)
    assert code == 0, err
    assert "not recorded: no P2P Connectivity Matrix in the text" in out
    assert node_profile(tmp_path)["topology"]["published"] == []


@pytest.mark.skipif(not CORPUS.is_dir(), reason=NO_CORPUS)
def test_corpus_outputs_of_one_machine_make_one_profile(tmp_path, capsys):
    """corpus topo/001 (8x A100 SXM4, NV12) with nvlink-status/001 (GPU0 of an A100-SXM4-40GB node)."""
    code, out, err = record_node(
        capsys, tmp_path, CORPUS / "topo" / "001.txt", "--nvlink-status", CORPUS / "nvlink-status" / "001.txt"
    )
    assert code == 0, err
    seen = probe(str(tmp_path / "node.json"))
    assert [ln.active for ln in seen.gpus[0].nvlinks] == [True] * 12 and seen.gpus[1].nvlinks == ()
    assert {str(ln.label) for ln in seen.pairs()} == {"NV12"}


# ------------------------------------------------------------------------------- the profile


@pytest.mark.parametrize(
    "figure, says",
    [
        ({"kind": "p2p", "gbps": 1.0, "source": "s", "src": 0}, "published[0].dst: src and dst name a pair"),
        ({"kind": "p2p", "gbps": 1.0, "source": "s", "src": 0, "dst": 0}, "needs two GPUs"),
        ({"kind": "p2p", "gbps": 1.0, "source": "s", "src": 0, "dst": 2}, "published[0].dst: 2 is not from 0 to 1"),
        (
            {"kind": "h2d", "gbps": 1.0, "source": "s", "src": 0, "dst": 1},
            "published[0].src: a figure of kind h2d names no src",
        ),
        ({"kind": "allreduce", "gbps": 1.0, "source": "s", "gpu": 0}, "a figure of kind allreduce names no gpu"),
        ({"kind": "d2h", "gbps": 1.0, "source": "s", "gpu": True}, "published[0].gpu: expected int"),
    ],
)
def test_a_figure_naming_gpus_is_checked_against_the_profile(figure, says):
    data = schema.to_dict(probe("2x-rtx3090-nvlink"))
    data["published"] = [figure]
    with pytest.raises(schema.SchemaError) as caught:
        schema.from_dict(data)
    assert says in str(caught.value)


# ------------------------------------------------------------------------------- gputopo parse

FORMATS = {
    "smi-p2p": "p2pmatrix/001.txt",
    "nvlink-status": "nvlink-status/001.txt",
    "nvbandwidth": "nvbandwidth/001.txt",
    "p2p-bandwidth": "ncclperf/006.txt",
}


@pytest.mark.skipif(not CORPUS.is_dir(), reason=NO_CORPUS)
@pytest.mark.parametrize(
    "fmt, says",
    [
        ("smi-p2p", "OK on 56 of 56 ordered pairs"),
        (
            "nvlink-status",
            "GPU0: NVIDIA A100-SXM4-40GB (GPU-fde0a018-ad1a-bbec-ccf6-50a9f64bd178): 12/12 links up, 25 GB/s",
        ),
        (
            "nvbandwidth",
            "device_to_device_memcpy_read_ce: memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s): 8x8, "
            "395.05 .. 395.25 GB/s, SUM 22126.64",
        ),
        ("p2p-bandwidth", "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s): 8x8, pairs 38.92 .. 50.69"),
    ],
)
def test_parse_reads_each_format_as_its_tool_writes_it(fmt, says, capsys):
    code, out, err = run(capsys, "parse", fmt, str(CORPUS / FORMATS[fmt]))
    assert code == 0 and says in out, err
    code, out, err = run(capsys, "parse", fmt, str(CORPUS / FORMATS[fmt]), "--json")
    assert code == 0 and json.loads(out)


@pytest.mark.skipif(not CORPUS.is_dir(), reason=NO_CORPUS)
@pytest.mark.parametrize(
    "fmt, other",
    [
        (fmt, other)
        for fmt in sorted(FORMATS)
        for other in sorted(set(FORMATS.values()) | {"topo/003.txt", "nccl/003.txt", "ncclperf/001.txt"})
        if other != FORMATS[fmt]
    ],
)
def test_parse_refuses_what_is_not_its_format(fmt, other, capsys):
    code, out, err = run(capsys, "parse", fmt, str(CORPUS / other))
    assert code == 2 and err.startswith(f"gputopo: {CORPUS / other}: ") and len(err.strip().splitlines()) == 1, err


@pytest.mark.skipif(not CORPUS.is_dir(), reason=NO_CORPUS)
@pytest.mark.parametrize("path", sorted((CORPUS / "p2pmatrix").glob("*.txt")) if CORPUS.is_dir() else [])
def test_corpus_p2p_status_matrices_meet_their_meta(path):
    want = json.loads(path.with_suffix(".meta.json").read_text())["expected"]
    matrix = parse_p2p_matrix(path.read_text())
    codes = {c for i, row in enumerate(matrix) for j, c in enumerate(row) if i != j}
    assert len(matrix) == want["n_gpus"] and codes == set(want["offdiag_codes"])
    assert {matrix[i][i] for i in range(len(matrix))} == {want["diag_code"]} and (codes == {"OK"}) == want["all_ok"]


VALUES = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9))
NAMES = st.sampled_from(
    [
        "device_to_device_memcpy_read_ce",
        "device_to_device_memcpy_write_ce",
        "device_to_device_memcpy_write_sm",
        "host_to_device_memcpy_ce",
        "device_to_host_memcpy_sm",
        "all_to_host_memcpy_ce",
    ]
)


@settings(max_examples=150)
@given(st.sampled_from(["2x-rtx3090-nvlink", "4x-rtx4090", "hgx-h100"]), st.integers(1, 9), st.data())
def test_whatever_a_tool_printed_makes_a_profile_that_loads(machine, n, data):
    """Any figures a parsed output holds (0, negative, huge, a GPU count the machine lacks) either are
    refused naming the file or give published figures the profile schema accepts."""
    topology = probe(machine)
    cases = []
    for name in data.draw(st.lists(NAMES, max_size=3)):
        rows = 1 if "host" in name else n
        cells = tuple(tuple(data.draw(VALUES) for _ in range(n)) for _ in range(rows))
        labels = tuple(map(str, range(n)))
        cases.append(
            NvbTestcase(name, "ran", None, (NvbMatrix(name, "t", "GB/s", labels[:rows], labels, cells, None),))
        )
    figures = RecordedFigures(topology)
    try:
        figures.add_nvbandwidth(Nvbandwidth("v0.10.0", None, None, (), tuple(cases), ()), "f.txt")
    except ToolOutputError as exc:
        assert n != len(topology.gpus) and str(exc).startswith("f.txt: nvbandwidth saw")
        return
    loaded = schema.from_dict({**schema.to_dict(topology), "published": figures.published})
    assert len(loaded.published) == len(figures.published)


def test_a_tool_that_saw_other_pci_addresses_is_refused():
    """p2pBandwidthLatencyTest prints each device's PCI address (``Device: %d, %s, pciBusID: %x,
    pciDeviceID: %x, pciDomainID:%x``): output of another machine, or of GPUs numbered otherwise,
    never lends its figures to this profile."""
    topology = probe("2x-rtx3090-nvlink")
    with pytest.raises(
        ToolOutputError,
        match="p2p.txt: p2pBandwidthLatencyTest's device 1 is at 00000000:21:00, "
        "the machine's GPU1 at 00000000:4B:00.0",
    ):
        RecordedFigures(topology).add_p2p_test(parse_p2p_bandwidth_latency(P2P_TEST), "p2p.txt")
    text = P2P_TEST
    for gpu in topology.gpus:
        domain, bus, rest = gpu.pci_bus_id.split(":")
        text = text.replace(
            f"Device: {gpu.index}, NVIDIA GeForce RTX 3090, pciBusID: {('1', '21')[gpu.index]}, "
            f"pciDeviceID: 0, pciDomainID:0",
            f"Device: {gpu.index}, NVIDIA GeForce RTX 3090, pciBusID: "
            f"{int(bus, 16):x}, pciDeviceID: {int(rest[:2], 16):x}, pciDomainID:{int(domain, 16):x}",
        )
    figures = RecordedFigures(topology)
    figures.add_p2p_test(parse_p2p_bandwidth_latency(text), "p2p.txt")
    assert len(figures.published) == 4


# ------------------------------------------------------------------------------- inputs that are not what they
# claim are refused, naming the file (and the line)

# nvidia-smi topo -p2p rw of a 2-GPU machine, verbatim from club-3090#1229
P2P_TWO = " \tGPU0\tGPU1\t\n GPU0\tX\tGNS\t\n GPU1\tGNS\tX\t\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"


@pytest.mark.parametrize("p2p", ["club-3090#1229 (2 GPUs)", "corpus p2pmatrix/001 (8 GPUs)"])
def test_record_refuses_p2p_text_of_another_gpu_count(tmp_path, capsys, h100_topo, p2p):
    """--p2p of a machine with another GPU count is refused, as nvbandwidth's and p2pBandwidthLatencyTest's
    are, not recorded with a warning as statuses for pairs it never saw (or onto other GPUs). The 2-GPU
    text against an 8-GPU machine; the real 8x H100 matrix against a 4-GPU one."""
    if p2p.startswith("corpus"):
        if not CORPUS.is_dir():
            pytest.skip(NO_CORPUS)
        text, topo = (CORPUS / "p2pmatrix" / "001.txt").read_text(), tmp_path / "topo4.txt"
        topo.write_text(render_topo_matrix(probe("4x-rtx4090")))
        says = "saw 8 GPUs and the machine has 4"
    else:
        text, topo, says = P2P_TWO, h100_topo, "saw 2 GPUs and the machine has 8"
    (tmp_path / "p2p.txt").write_text(text)
    for arg in (str(tmp_path / "p2p.txt"), f"rw:{tmp_path / 'p2p.txt'}"):
        code, out, err = record_node(capsys, tmp_path, topo, "--p2p", arg)
        assert code == 2 and not (tmp_path / "node.json").exists(), err
        assert err.startswith(f"gputopo: {tmp_path / 'p2p.txt'}: nvidia-smi topo -p2p {says}: another machine"), err
        assert len(err.strip().splitlines()) == 1
    # The same machine's text is taken.
    (tmp_path / "p2p.txt").write_text(P2P_TWO)
    (tmp_path / "topo2.txt").write_text(render_topo_matrix(probe("2x-rtx3090-nvlink")))
    code, out, err = record_node(capsys, tmp_path, tmp_path / "topo2.txt", "--p2p", tmp_path / "p2p.txt")
    assert code == 0, err


@pytest.mark.parametrize(
    "text, says",
    [
        ("GPU0 GPU0\n", "line 1: the header names GPU0 twice"),
        (
            " \tGPU0\tGPU1\t\n",
            "line 1: no nvidia-smi topology matrix: the header names GPU0, GPU1 and no GPU row follows it",
        ),
        (
            "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n",
            "line 1: no nvidia-smi topology matrix: the header names no GPU",
        ),
    ],
)
def test_record_refuses_a_header_without_a_matrix(tmp_path, capsys, text, says):
    """`GPU0 GPU0`, or a capture cut after its header, is refused, not recorded as a 1-GPU (or 0-GPU) machine."""
    (tmp_path / "topo.txt").write_text(text)
    code, out, err = run(capsys, "record", "--from-smi", str(tmp_path / "topo.txt"), "-o", str(tmp_path / "n.json"))
    assert code == 2 and err.startswith(f"gputopo: {tmp_path / 'topo.txt'}: {says}"), err
    assert not (tmp_path / "n.json").exists()
    for fmt in ("smi-topo", "smi-p2p"):
        code, out, err = run(capsys, "parse", fmt, str(tmp_path / "topo.txt"))
        assert code == 2 and err.startswith(f"gputopo: {tmp_path / 'topo.txt'}: line 1: "), err


def test_parse_names_the_file_and_line_of_a_p2p_or_nvlink_text_that_breaks_its_format(tmp_path, capsys):
    """X off the diagonal, a GPU's second row (topo -p2p) and one UUID under two indices (nvlink -s)
    are refused, not read without a word."""
    shifted = P2P_TWO.replace(" GPU1\tGNS\tX\t", " GPU1\tX\tGNS\t")
    twice = P2P_TWO.replace(" GPU1\tGNS\tX\t\n", " GPU1\tGNS\tX\t\n GPU1\tOK\tX\t\n")
    nvlink = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-fde0a018-ad1a-bbec-ccf6-50a9f64bd178)\n\t Link 0: 25 GB/s\n"
    for fmt, text, says in (
        ("smi-p2p", shifted, "line 3: GPU1's cell in column GPU0 is X"),
        ("smi-p2p", twice, "line 4: a second row for GPU1 (the first is line 3)"),
        ("nvlink-status", nvlink + nvlink.replace("GPU 0:", "GPU 1:"), "line 3: GPU 1 has the UUID of GPU 0 (line 1)"),
    ):
        (tmp_path / "out.txt").write_text(text)
        code, out, err = run(capsys, "parse", fmt, str(tmp_path / "out.txt"))
        assert code == 2 and err.startswith(f"gputopo: {tmp_path / 'out.txt'}: {says}"), err
