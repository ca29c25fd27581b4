"""nvbandwidth output: the parser against every real sample in ../shared/corpus/nvbandwidth (read in
place), the formats nvbandwidth's sources print (v0.8 output.cpp, inline_common.h, nvbandwidth.cpp),
texts cut anywhere, the refusal of every other tool's output in the corpus, and property tests
(arbitrary text, render -> parse round trips, strict JSON)."""

from __future__ import annotations

import json
import string
import time
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from conftest import CORPUS, NO_CORPUS, corpus_cases, corpus_meta, corpus_samples, corpus_samples_but
from pytest_gputopo.parse.nvbandwidth import (
    Nvbandwidth,
    NvbandwidthParseError,
    NvbMatrix,
    NvbTestcase,
    looks_like_nvbandwidth,
    parse_nvbandwidth,
)
from pytest_gputopo.render.nvbandwidth import render_nvbandwidth

NVB = CORPUS / "nvbandwidth"


SAMPLES = corpus_samples("nvbandwidth")
OTHER_TEXTS = corpus_samples_but("nvbandwidth")


def _matrices(result: Nvbandwidth) -> list[NvbMatrix]:
    return [m for tc in result.testcases for m in tc.matrices]


def _square(result: Nvbandwidth) -> list[NvbMatrix]:
    return [m for m in _matrices(result) if m.rows == m.columns]


def _figures(testcases) -> int:
    """How many numbers these testcases hold: cells and sums."""
    matrices = [m for tc in testcases for m in tc.matrices]
    return sum(v is not None for m in matrices for row in m.cells for v in row) + sum(
        m.sum is not None for m in matrices
    )


def _one_line_refusal(text) -> str:
    with pytest.raises(NvbandwidthParseError) as info:
        parse_nvbandwidth(text)
    message = str(info.value)
    assert message and "\n" not in message and "\r" not in message
    assert isinstance(info.value, ValueError)
    return message


# ----------------------------------------------------------------------------------- corpus


@pytest.mark.parametrize("path", corpus_cases(SAMPLES))
def test_corpus_sample_meets_its_meta(path: Path):
    want = corpus_meta(path)["expected"]
    result = parse_nvbandwidth(path.read_text())

    assert result.version == want["nvbandwidth_version"]
    if "driver_version" in want:
        assert result.driver_version == want["driver_version"]
    assert [tc.name for tc in result.testcases] == want["testcases"]
    assert all(tc.status == "ran" for tc in result.testcases)
    n_devices = len(result.devices) or max(len(m.columns) for m in _matrices(result))
    assert n_devices == want["n_devices"]
    for name, total in want["sum"].items():
        tc = next(t for t in result.testcases if t.name == name)
        # One matrix keyed by the testcase; a bidirectional one's _total.
        matrix = next(m for m in tc.matrices if m.key in (name, name + "_total"))
        assert matrix.sum == pytest.approx(total)
    values = [v for m in _matrices(result) for row in m.cells for v in row if v is not None]
    assert max(values) == pytest.approx(want["max_cell"])
    offdiag = [
        v
        for m in _square(result)
        for i, row in enumerate(m.cells)
        for j, v in enumerate(row)
        if i != j and v is not None
    ]
    assert min(offdiag) == pytest.approx(want["min_offdiag"])
    if want.get("diag") == "N/A":
        assert all(m.cells[i][i] is None for m in _square(result) for i in range(len(m.rows)))
    # Every matrix is whole: a row per GPU (or the one host row), every off-diagonal cell read.
    for m in _matrices(result):
        assert len(m.cells) == len(m.rows) and all(len(row) == len(m.columns) for row in m.cells)
        assert m.unit == "GB/s" or m.unit == "ns"
    assert result.warnings == ()
    json.dumps(result.to_json(), allow_nan=False)
    assert looks_like_nvbandwidth(path.read_text())


@pytest.mark.parametrize("path", corpus_cases(SAMPLES))
def test_corpus_sample_renders_back_to_what_it_reads(path: Path):
    result = parse_nvbandwidth(path.read_text())
    assert parse_nvbandwidth(render_nvbandwidth(result)) == result


def _assert_prefix(part: Nvbandwidth, full: Nvbandwidth, where) -> None:
    """``part`` (read from a cut text) holds nothing ``full`` does not: each value is the full one or
    missing, each list a prefix of the full one."""
    for name in ("version", "driver_version", "cuda_runtime_version"):
        assert getattr(part, name) in (None, getattr(full, name)), (where, name)
    assert part.devices == full.devices[: len(part.devices)], where
    assert len(part.testcases) <= len(full.testcases), where
    for got, real in zip(part.testcases, full.testcases, strict=False):  # here and below: the cut's prefix
        assert got.name == real.name, where
        assert got.status in (real.status, "ran"), where
        assert len(got.matrices) <= len(real.matrices), where
        for m, r in zip(got.matrices, real.matrices, strict=False):
            assert m.key in (r.key, got.name), where
            assert m.title in (r.title, ""), where
            assert m.columns == r.columns[: len(m.columns)], where
            assert m.rows == r.rows[: len(m.rows)], where
            for row, real_row in zip(m.cells, r.cells, strict=False):
                assert len(row) == len(m.columns), where
                assert all(v is None or v == w for v, w in zip(row, real_row, strict=False)), where
            assert m.sum in (None, r.sum), where
    # A cut that lost figures of a testcase it shows says so.
    if _figures(part.testcases) < _figures(full.testcases[: len(part.testcases)]):
        assert part.warnings, where


@pytest.mark.parametrize("path", corpus_cases(SAMPLES))
def test_corpus_sample_cut_anywhere_keeps_what_is_there(path: Path):
    """Published copies are cut at a line's end or mid-line: every cut of a real sample is refused
    (one line) or read into a prefix of the full result, never a wrong value."""
    text = path.read_text()
    full = parse_nvbandwidth(text)
    ends = {i + 1 for i, c in enumerate(text) if c == "\n"}
    accepted = 0
    for cut in sorted(ends | set(range(0, len(text), 3))):
        try:
            part = parse_nvbandwidth(text[:cut])
        except NvbandwidthParseError:
            _one_line_refusal(text[:cut])
            continue
        accepted += 1
        _assert_prefix(part, full, cut)
        json.dumps(part.to_json(), allow_nan=False)
    assert accepted > len(text) // 6  # every cut after the version line is read


def test_other_corpus_texts_are_refused_with_one_line():
    if not OTHER_TEXTS or not SAMPLES:
        pytest.skip(NO_CORPUS)
    for path in OTHER_TEXTS:
        text = path.read_text(errors="replace")
        message = _one_line_refusal(text)
        assert "nvbandwidth" in message, path
        assert not looks_like_nvbandwidth(text), path
    for path in SAMPLES:
        assert looks_like_nvbandwidth(path.read_text())


@pytest.mark.parametrize(
    "folder, says",
    [
        ("ncclperf", ("nccl-tests", "p2pBandwidthLatencyTest")),
        ("nccl", ("nccl-tests", "NCCL_DEBUG=INFO")),
        ("topo", ("nvidia-smi",)),
        ("p2pmatrix", ("nvidia-smi",)),
        ("rocm", ("rocm-smi",)),
        ("nvlink-status", ("nvidia-smi",)),
    ],
)
def test_a_refusal_names_the_tool_the_text_comes_from(folder, says):
    paths = sorted((CORPUS / folder).glob("*.txt")) if (CORPUS / folder).is_dir() else []
    if not paths:
        pytest.skip(NO_CORPUS)
    for path in paths:
        message = _one_line_refusal(path.read_text(errors="replace"))
        assert any(s in message for s in says), (path, message)


# --------------------------------------------------------------- formats the sources print

# v0.8, as output.cpp and inline_common.h print it: the header (CUDA versions as one integer), the
# host name and Device lines, a host->device testcase (one row, a column per GPU), a write testcase on
# three GPUs where GPU 2 has no peer access (N/A), a bidirectional one (three matrices and SUM lines),
# a waived testcase (no name, no Running line), a testcase that threw, an unknown testcase id.
V08 = """\
nvbandwidth Version: v0.8
Built from Git version: v0.8

CUDA Runtime Version: 12040
CUDA Driver Version: 12040
Driver Version: 550.54.15

node1
Device 0: NVIDIA A100-SXM4-80GB (00000000:07:00)
Device 1: NVIDIA A100-SXM4-80GB (00000000:0a:00)
Device 2: NVIDIA A100-PCIE-40GB (00000001:c1:00)

Running host_to_device_memcpy_ce.
memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
           0         1         2
 0     25.12     25.10     24.98

SUM host_to_device_memcpy_ce 75.20

Running device_to_device_memcpy_write_ce.
memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)
           0         1         2
 0       N/A    273.50       N/A
 1    274.01       N/A       N/A
 2       N/A       N/A       N/A

SUM device_to_device_memcpy_write_ce 547.51

Running device_to_device_bidirectional_memcpy_read_ce.
memcpy CE GPU(row) <-> GPU(column) Read1 bandwidth (GB/s)
           0         1         2
 0       N/A    250.10       N/A
 1    249.90       N/A       N/A
 2       N/A       N/A       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_read1 500.00

memcpy CE GPU(row) <-> GPU(column) Read2 bandwidth (GB/s)
           0         1         2
 0       N/A    248.00       N/A
 1    251.00       N/A       N/A
 2       N/A       N/A       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_read2 499.00

memcpy CE GPU(row) <-> GPU(column) Total bandwidth (GB/s)
           0         1         2
 0       N/A    498.10       N/A
 1    500.90       N/A       N/A
 2       N/A       N/A       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_total 999.00

Waived:
Running device_local_copy.
Error: cuMemAlloc failed on device 2
ERROR: Testcase nvlink_magic not found!
NOTE: The reported results may not reflect the full capabilities of the platform.
Performance can vary with software drivers, hardware clocks, and system topology.

""".replace("Waived:\n", "Waived: \n")  # addTestcase prints status + ": " + an empty message

BIDIR = "device_to_device_bidirectional_memcpy_read_ce"


def test_v08_text_reads_every_field():
    result = parse_nvbandwidth(V08)
    assert (result.version, result.driver_version, result.cuda_runtime_version) == ("v0.8", "550.54.15", "12.4")
    assert result.devices == (
        (0, "NVIDIA A100-SXM4-80GB", "00000000:07:00"),
        (1, "NVIDIA A100-SXM4-80GB", "00000000:0a:00"),
        (2, "NVIDIA A100-PCIE-40GB", "00000001:c1:00"),
    )
    assert [(t.name, t.status, t.message) for t in result.testcases] == [
        ("host_to_device_memcpy_ce", "ran", None),
        ("device_to_device_memcpy_write_ce", "ran", None),
        (BIDIR, "ran", None),
        ("", "waived", None),
        ("device_local_copy", "error", "cuMemAlloc failed on device 2"),
        ("nvlink_magic", "error", "Testcase nvlink_magic not found!"),
    ]
    h2d, write, bidir = (t.matrices for t in result.testcases[:3])
    assert h2d == (
        NvbMatrix(
            "host_to_device_memcpy_ce",
            "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
            "GB/s",
            ("0",),
            ("0", "1", "2"),
            ((25.12, 25.10, 24.98),),
            75.20,
        ),
    )
    assert write[0].cells == ((None, 273.50, None), (274.01, None, None), (None, None, None))
    assert (write[0].key, write[0].sum, write[0].rows) == ("device_to_device_memcpy_write_ce", 547.51, ("0", "1", "2"))
    assert [m.key for m in bidir] == [BIDIR + "_read1", BIDIR + "_read2", BIDIR + "_total"]
    assert [m.title.split()[-3] for m in bidir] == ["Read1", "Read2", "Total"]
    assert [m.sum for m in bidir] == [500.00, 499.00, 999.00]
    assert bidir[2].cells[1][0] == 500.90
    assert result.testcases[4].matrices == result.testcases[5].matrices == ()
    assert result.warnings == ()
    data = result.to_json()
    json.dumps(data, allow_nan=False)
    assert data["devices"][2] == {"index": 2, "name": "NVIDIA A100-PCIE-40GB", "bus_id": "00000001:c1:00"}
    assert data["testcases"][1]["matrices"][0]["cells"][0] == [None, 273.5, None]


def test_v08_text_renders_back_byte_for_byte():
    assert render_nvbandwidth(parse_nvbandwidth(V08), hostname="node1") == V08


# v0.10 with --perfFormatter: "&&&& PERF <key> <sum> -ns" (latency) / "+GB/s" (getUnitString).
V10_PERF = """\
nvbandwidth Version: v0.10.0
Built from Git version: v0.10.0

CUDA Runtime Version: 13.2 (13020)
CUDA Driver Version (API): 13.2 (13020)
Driver Version: 595.71.05

Running host_device_latency_sm.
memory latency SM CPU(row) <-> GPU(column) (ns)
           0         1
 0    812.34    790.11

&&&& PERF host_device_latency_sm 1602.45 -ns

Running device_to_device_memcpy_read_ce.
memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0       N/A    395.08
 1    395.05       N/A

&&&& PERF device_to_device_memcpy_read_ce 790.13 +GB/s

NOTE: The reported results may not reflect the full capabilities of the platform.
Performance can vary with software drivers, hardware clocks, and system topology.

"""


def test_perf_formatter_lines_and_latency_units():
    result = parse_nvbandwidth(V10_PERF)
    assert result.cuda_runtime_version == "13.2" and result.devices == ()
    latency, read = (t.matrices[0] for t in result.testcases)
    assert (latency.key, latency.unit, latency.sum, latency.cells) == (
        "host_device_latency_sm",
        "ns",
        1602.45,
        ((812.34, 790.11),),
    )
    assert (read.unit, read.sum) == ("GB/s", 790.13)
    assert result.warnings == ()
    assert render_nvbandwidth(result, perf_formatter=True) == V10_PERF


def test_v10_extra_lines_and_verbose_output_are_skipped():
    text = V10_PERF.replace("&&&& PERF", "SUM").replace(" -ns", "").replace(" +GB/s", "")
    text = text.replace(
        "SUM device_to_device_memcpy_read_ce 790.13\n",
        "SUM device_to_device_memcpy_read_ce 790.13\n"
        "COEFFICIENT_OF_VARIATION device_to_device_memcpy_read_ce 0.00\n"
        "MIN device_to_device_memcpy_read_ce 0.00\nMAX device_to_device_memcpy_read_ce 395.08\n"
        "AVG device_to_device_memcpy_read_ce 395.07\n",
    )
    # --verbose: per-sample lines between the Running line and the description.
    text = text.replace(
        "Running device_to_device_memcpy_read_ce.\n",
        "Running device_to_device_memcpy_read_ce.\n\tSample 0: device 1 -> device 0: 395.05\n"
        "\tSample 0: device 0 -> device 1: 395.08\n",
    )
    result = parse_nvbandwidth(text)
    assert result == parse_nvbandwidth(render_nvbandwidth(result))
    read = result.testcases[1].matrices[0]
    assert read.title == "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)"
    assert (read.sum, read.cells) == (790.13, ((None, 395.08), (395.05, None)))
    assert result.warnings == ()


def test_double_spaced_and_crlf_pastes_read_the_same():
    assert parse_nvbandwidth(V08.replace("\n", "\n\n")) == parse_nvbandwidth(V08)
    assert parse_nvbandwidth(V08.replace("\n", "\r\n")) == parse_nvbandwidth(V08)


def test_multinode_bisect_rows_are_labelled():
    # MultinodeBisectWriteCE: one column, rows "<rank>-><peer>" with ids padded to the widest rank.
    text = (
        "nvbandwidth Version: v0.8\n\nRunning multinode_bisect_write_ce.\n"
        "Bisect benchmarking, simultaneous write CE BW\n"
        "               0\n 0-> 8    123.45\n 1-> 9    123.40\n 8-> 0    120.00\n10-> 2    121.00\n\n"
        "SUM multinode_bisect_write_ce 487.85\n\n"
    )
    m = parse_nvbandwidth(text).testcases[0].matrices[0]
    assert (m.rows, m.columns, m.unit) == (("0-> 8", "1-> 9", "8-> 0", "10-> 2"), ("0",), "")
    assert m.cells == ((123.45,), (123.40,), (120.00,), (121.00,))


def test_bad_cells_end_their_row_and_say_where():
    text = V08.replace(" 1    274.01       N/A       N/A", " 1    274.01      oops     12.00").replace(
        " 0     25.12     25.10     24.98", " 0       nan     25.10      -inf"
    )
    result = parse_nvbandwidth(text)
    assert result.testcases[0].matrices[0].cells == ((None, 25.10, None),)
    assert result.testcases[1].matrices[0].cells[1] == (274.01, None, None)
    assert any("device_to_device_memcpy_write_ce: matrix 1, row 1" in w and "'oops'" in w for w in result.warnings)
    assert any("host_to_device_memcpy_ce: matrix 1, row 0" in w and "'nan'" in w for w in result.warnings)
    assert any("'-inf'" in w for w in result.warnings)
    assert len(result.warnings) == len(set(result.warnings))


def test_a_short_row_keeps_its_cells_and_warns():
    text = V08.replace(" 1    274.01       N/A       N/A", " 1    274.01")
    result = parse_nvbandwidth(text)
    assert result.testcases[1].matrices[0].cells[1] == (274.01, None, None)
    assert any("matrix 1, row 1: 1 of 3 cells" in w for w in result.warnings)


def test_a_row_cut_mid_number_drops_the_partial_cell():
    text = V08[: V08.index(" 0       N/A    273.50") + len(" 0       N/A    27")]
    result = parse_nvbandwidth(text)
    write = result.testcases[1].matrices[0]
    assert write.cells == ((None, None, None),)  # "27" may be "273.50": not read
    assert (write.key, write.sum) == ("device_to_device_memcpy_write_ce", None)
    assert any("last cell '27' may be cut" in w for w in result.warnings)
    assert any("no SUM line" in w for w in result.warnings)
    # A SUM line cut inside its value keeps no sum; a complete one ("%.2f") is read.
    cut_sum = V08[: V08.index("SUM host_to_device_memcpy_ce 75.2") + len("SUM host_to_device_memcpy_ce 75.2")]
    assert parse_nvbandwidth(cut_sum).testcases[0].matrices[0].sum is None
    whole_sum = cut_sum + "0"
    assert parse_nvbandwidth(whole_sum).testcases[0].matrices[0].sum == 75.20


def test_a_fatal_cuda_error_after_running_marks_the_testcase():
    text = V10_PERF.split("Running device_to_device")[0] + (
        "Running device_to_device_memcpy_read_ce.\n[CUDA_ERROR_OUT_OF_MEMORY] out of memory in expression "
        "cuMemAlloc(&buffer, size) in DeviceBuffer() : memcpy.cpp:120\n"
    )
    result = parse_nvbandwidth(text)
    tc = result.testcases[1]
    assert (tc.name, tc.status, tc.matrices) == ("device_to_device_memcpy_read_ce", "error", ())
    assert tc.message.startswith("[CUDA_ERROR_OUT_OF_MEMORY] out of memory")


def test_several_pasted_runs_are_read_in_order():
    second = V10_PERF.replace("host_device_latency_sm", "device_to_device_latency_sm")
    result = parse_nvbandwidth("#####\n" + V10_PERF + "\n#####\n\n" + second)
    assert [t.name for t in result.testcases] == [
        "host_device_latency_sm",
        "device_to_device_memcpy_read_ce",
        "device_to_device_latency_sm",
        "device_to_device_memcpy_read_ce",
    ]
    assert any("several nvbandwidth runs" in w for w in result.warnings)


def test_a_matrix_without_running_line_is_not_read():
    excerpt = V08[V08.index("memcpy CE GPU(row) <- GPU") : V08.index("Running device_to_device_bidirectional")]
    assert "no 'nvbandwidth Version' line" in _one_line_refusal(excerpt)
    result = parse_nvbandwidth("nvbandwidth Version: v0.8\n\n" + excerpt)
    assert result.testcases == ()
    assert any("no 'Running <testcase>.' line" in w for w in result.warnings)


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "no nvbandwidth output"),
        ("hello\nworld\n", "no nvbandwidth output"),
        (
            "Running device_to_device_memcpy_read_ce.\nmemcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)\n",
            "no result matrix after",
        ),
        ("#  Rank  0 Group  0 Pid 1 on n device  0 [0x07] NVIDIA A100\n# Avg bus bandwidth    : 40.6 \n", "nccl-tests"),
        (
            "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n     0 919.67  41.10\n",
            "p2pBandwidthLatencyTest",
        ),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV12\t0-63\nGPU1\tNV12\t X \t0-63\n", "nvidia-smi"),
    ],
)
def test_other_text_is_a_one_line_refusal(text, says):
    assert says in _one_line_refusal(text)
    assert looks_like_nvbandwidth(text) is False


@pytest.mark.parametrize("value", [None, 3, b"nvbandwidth Version: v0.8\n", ["Running x."]])
def test_a_non_str_is_refused(value):
    assert "expected the text" in _one_line_refusal(value)
    assert looks_like_nvbandwidth(value) is False


@pytest.mark.slow
def test_work_is_linear_in_the_text():
    """Hostile texts of ~1 MB: a 1024-column head row under thousands of one-token rows, a huge row
    label, a Device line of parentheses, an unknown testcase id that never ends, many SUM lines."""
    head = " ".join(str(i) for i in range(1500))
    texts = [
        "Running a.\nt (GB/s)\n" + head + "\n" + "0\n" * 300_000,
        "Running a.\nt\n0 1\n" + "0->" * 300_000 + " 1.00\n" + "0 " * 300_000 + "\n",
        "nvbandwidth Version: v0.8\nDevice 0: " + "(" * 500_000 + "0:0:0)\n",
        "ERROR: Testcase " + "x" * 500_000 + " not found!\n" + "ERROR: Testcase index" * 20_000,
        "Running a.\n" + "SUM a 1.00\n" * 80_000 + "1 " * 100_000,
        "nvbandwidth Version: v0.8\nRunning a.\nt (GB/s)\n" + "0 1\n0\n" * 100_000,  # a matrix per 6 bytes
    ]
    for text in texts:
        started = time.process_time()  # this process's CPU: other processes' load stretches the wall clock only
        try:
            result = parse_nvbandwidth(text)
            json.dumps(result.to_json(), allow_nan=False)
            assert len(result.warnings) <= 200
        except NvbandwidthParseError:
            pass
        assert time.process_time() - started < 20, text[:40]


# ------------------------------------------------------------------------------ properties


def _check(result: Nvbandwidth) -> None:
    data = result.to_json()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert all(isinstance(w, str) and w and "\n" not in w for w in result.warnings)
    assert len(set(result.warnings)) == len(result.warnings)
    for m in _matrices(result):
        assert len(m.cells) == len(m.rows) and all(len(row) == len(m.columns) for row in m.cells)
    for tc in result.testcases:
        assert tc.status in ("ran", "waived", "error")


def _parses_or_refuses(text) -> None:
    try:
        result = parse_nvbandwidth(text)
    except NvbandwidthParseError as exc:
        assert str(exc) and "\n" not in str(exc)
        assert looks_like_nvbandwidth(text) is False
        return
    _check(result)
    assert looks_like_nvbandwidth(text) is True


@given(st.text())
def test_arbitrary_text_raises_only_the_parse_error(text):
    _parses_or_refuses(text)


_LINES = (
    V08.splitlines()
    + V10_PERF.splitlines()
    + [
        "COEFFICIENT_OF_VARIATION x 0.00",
        "SUM",
        "&&&& PERF",
        "&&&& PERF k",
        "Running .",
        "Running x.",
        "Device 9:",
        "Device 1: (0:0:0)",
        "ERROR:",
        "Error:",
        "Waived:",
        " 0-> 8    1.00",
        "0->",
        "CUDA Runtime Version: x",
        "CUDA Runtime Version: 99999999999",
        "nvbandwidth Version:",
        "[CUDA_ERROR_X] y",
        " 0       nan       N/A",
    ]
)
_ALPHABET = st.sampled_from(list("0123456789 .-+>:()/NA\n\t\rabcdefxyz&#SUM"))


@given(
    st.lists(st.one_of(st.sampled_from(_LINES), st.text(_ALPHABET, max_size=40), st.text(max_size=8)), max_size=40).map(
        "\n".join
    ),
    st.booleans(),
)
def test_nvbandwidth_like_text_raises_only_the_parse_error(text, newline):
    _parses_or_refuses(text + ("\n" if newline else ""))


@st.composite
def _mutated(draw):
    text = draw(st.sampled_from([p.read_text() for p in SAMPLES] + [V08, V10_PERF]))
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 120)))
        text = text[:i] + draw(st.one_of(st.just(""), st.text(_ALPHABET, max_size=12))) + text[j:]
    return text


@given(_mutated())
def test_mutated_texts_raise_only_the_parse_error(text):
    _parses_or_refuses(text)


# Values nvbandwidth can print: cells and sums with 2 decimals ("%.2f" reads back exactly as k/100).
# A cell keeps a space before it in its setw(10) field below a million; a sum has no field.
_CELL = st.integers(-9999999, 99999999).map(lambda k: k / 100)
_CENTS = st.integers(-(10**6), 10**12).map(lambda k: k / 100)
_TITLES = [
    "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
    "memcpy SM GPU(row) <- GPU(column) bandwidth (GB/s)",
    "memcpy CE GPU(row) <-> GPU(column) Read1 bandwidth (GB/s)",
    "memory latency SM CPU(row) <-> GPU(column) (ns)",
    "Device to Device Latency SM GPU(row) <-> GPU(column) (ns)",
    "Bisect benchmarking, simultaneous write CE BW",
]
_UNITS = {t: ("ns" if t.endswith("(ns)") else "GB/s" if t.endswith("(GB/s)") else "") for t in _TITLES}
_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,24}", fullmatch=True)
_MESSAGES = (
    st.text(string.ascii_letters + string.digits + " .,!:()-", min_size=1, max_size=40).map(str.strip).filter(bool)
)


@st.composite
def _matrix(draw, name: str, n: int) -> NvbMatrix:
    title = draw(st.sampled_from(_TITLES))
    shape = draw(st.sampled_from(["square", "host", "bisect"]))
    if shape == "bisect":  # one column, rows "<rank>-><peer>", ids padded as getPaddedProcessId does
        k = draw(st.integers(2, 12))
        pad = draw(st.sampled_from([0, 2]))
        rows = tuple(f"{i:{pad}d}->{(i + k // 2) % k:{pad}d}".strip() for i in range(k))
        columns = ("0",)
    else:
        rows = tuple(str(i) for i in range(n if shape == "square" else 1))
        columns = tuple(str(i) for i in range(n))
    cells = tuple(tuple(draw(st.lists(st.none() | _CELL, min_size=len(columns), max_size=len(columns)))) for _ in rows)
    key = name + draw(st.sampled_from(["", "_read1", "_read2", "_total", "_write1", "_write2"]))
    return NvbMatrix(key, title, _UNITS[title], rows, columns, cells, draw(_CENTS))


@st.composite
def _testcase(draw, n: int) -> NvbTestcase:
    kind = draw(st.sampled_from(["ran", "ran", "waived", "error", "unknown id"]))
    if kind == "waived":  # printed without its name
        return NvbTestcase("", "waived", draw(st.none() | _MESSAGES), ())
    name = draw(_NAMES)
    if kind == "unknown id":
        return NvbTestcase(name, "error", f"Testcase {name} not found!", ())
    matrices = tuple(draw(st.lists(_matrix(name, n), min_size=1 if kind == "ran" else 0, max_size=3)))
    return NvbTestcase(name, kind, draw(_MESSAGES) if kind == "error" else None, matrices)


@st.composite
def _results(draw) -> Nvbandwidth:
    n = draw(st.integers(1, 8))
    names = st.sampled_from(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB", "GH200"])
    buses = st.none() | st.tuples(st.integers(0, 0xFFFF), st.integers(0, 255), st.integers(0, 31)).map(
        lambda t: f"{t[0]:08x}:{t[1]:02x}:{t[2]:02x}"
    )
    devices = draw(st.sampled_from([(), tuple((i, draw(names), draw(buses)) for i in range(n))]))
    return Nvbandwidth(
        version=draw(st.sampled_from(["v0.6", "v0.8", "v0.9", "v0.10.0"])),
        driver_version=draw(st.sampled_from([None, "550.54.15", "595.71.05"])),
        cuda_runtime_version=draw(st.sampled_from([None, "11.8", "12.4", "12.10", "13.2"])),
        devices=devices,
        testcases=tuple(draw(st.lists(_testcase(n), max_size=5))),
        warnings=(),
    )


@given(_results(), st.booleans())
def test_render_then_parse_round_trips(result, perf):
    text = render_nvbandwidth(result, perf_formatter=perf)
    assert parse_nvbandwidth(text) == result
    data = result.to_json()
    assert json.loads(json.dumps(data, allow_nan=False)) == data


@given(_results())
def test_a_rendered_text_cut_anywhere_keeps_what_is_there(result):
    text = render_nvbandwidth(result)
    for cut in range(0, len(text), max(1, len(text) // 40)):
        try:
            part = parse_nvbandwidth(text[:cut])
        except NvbandwidthParseError:
            continue
        _check(part)
        _assert_prefix(part, result, cut)


def test_to_json_is_strict_even_for_values_built_by_hand():
    nan = NvbMatrix("k", "t (GB/s)", "GB/s", ("0",), ("0", "1"), ((float("nan"), float("inf")),), float("-inf"))
    result = Nvbandwidth("v0.8", None, None, (), (NvbTestcase("k", "ran", None, (nan,)),), ())
    data = json.loads(json.dumps(result.to_json(), allow_nan=False))
    assert data["testcases"][0]["matrices"][0]["cells"] == [[None, None]]
    assert data["testcases"][0]["matrices"][0]["sum"] is None
