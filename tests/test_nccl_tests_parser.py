"""nccl-tests output: the parser against every real sample in ../shared/corpus (read in place), the
formats the nccl-tests sources print, property tests, and the all_reduce_perf runner driven by fake
executables written at test time."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from conftest import CORPUS, NO_CORPUS, corpus_cases, corpus_meta, corpus_samples
from pytest_gputopo.bench import nccl_tests as nt
from pytest_gputopo.bench.nccl_tests import NcclTestsRunError
from pytest_gputopo.parse.cuda_samples import P2PParseError, parse_p2p_bandwidth_latency
from pytest_gputopo.parse.nccl_tests import (
    NcclTestsParseError,
    NcclTestsResult,
    NcclTestsRow,
    Result,
    parse_nccl_tests,
    parse_nccl_tests_all,
)
from pytest_gputopo.render.nccl_tests import render_nccl_tests, sweep_table
from pytest_gputopo.runtime.environ import find_all_reduce_perf
from pytest_gputopo.runtime.procs import BenchTimeout

NCCLPERF = CORPUS / "ncclperf"


def _is_p2p(meta: dict) -> bool:
    return meta.get("expected", {}).get("tool") == "p2pBandwidthLatencyTest"


PERF_SAMPLES = corpus_samples("ncclperf", lambda m: not _is_p2p(m))
P2P_SAMPLES = corpus_samples("ncclperf", _is_p2p)
# NCCL_DEBUG=INFO logs in nccl/ that also hold a result table (their meta says so).
LOGS_WITH_TABLE = corpus_samples("nccl", lambda m: m.get("expected", {}).get("contains_perf_table"))
ALL_TEXTS = corpus_samples("ncclperf") + corpus_samples("nccl")


def _all_results(result: NcclTestsResult) -> list[Result]:
    return [r for row in result.rows for r in row.results()]


# ------------------------------------------------------------------------------- corpus: tables


def test_corpus_samples_are_all_classified():
    if not NCCLPERF.is_dir():
        pytest.skip(NO_CORPUS)
    assert len(PERF_SAMPLES) + len(P2P_SAMPLES) == len(list(NCCLPERF.glob("*.txt")))
    assert PERF_SAMPLES and P2P_SAMPLES


@pytest.mark.parametrize("path", corpus_cases(PERF_SAMPLES + LOGS_WITH_TABLE))
def test_corpus_table_meets_its_meta(path: Path):
    meta = corpus_meta(path)
    want = meta["expected"]
    text = path.read_text()
    result = parse_nccl_tests(text)

    assert result.avg_busbw_gbps == pytest.approx(want["avg_bus_bandwidth"])
    assert result.max_busbw_gbps() == pytest.approx(want["max_busbw_in_table"])
    if "rows" in want or "perf_rows" in want:
        assert len(result.rows) == want.get("rows", want.get("perf_rows"))
    assert result.nranks == want["n_ranks"]
    # Every published sample ends with "Out of bounds values : 0 OK".
    assert (result.out_of_bounds, result.ok) == (0, True)
    if "max_busbw_out_of_place" in want:
        oop = max(row.out_of_place.busbw_gbps for row in result.rows)
        assert oop == pytest.approx(want["max_busbw_out_of_place"])
    if "min_size_bytes" in want:
        assert min(row.size_bytes for row in result.rows) == want["min_size_bytes"]
        assert max(row.size_bytes for row in result.rows) == want["max_size_bytes"]
    if "zero_size_rows" in want:
        assert sum(row.size_bytes == 0 for row in result.rows) == want["zero_size_rows"]
    if str(want.get("validation", "")).startswith("off"):
        assert all(r.wrong is None for r in _all_results(result))
    if want.get("old_nccl_tests_format"):
        assert all(r.wrong is None and r.error is not None for r in _all_results(result))
        assert any("'error' column" in w for w in result.warnings)
    else:
        assert not result.warnings
    if "columns" in want:
        assert all((row.redop is not None) == ("redop" in want["columns"]) for row in result.rows)
    if want.get("no_root_column"):
        assert all(row.root is None for row in result.rows)
    if "error_column_values" in want:  # "2e-07 (float error instead of #wrong count)"
        value = float(want["error_column_values"].split()[0])
        assert {r.error for r in _all_results(result)} == {value}
    # The collective is named only when the text names the binary (a command line or a header).
    if "_perf" in text:
        assert result.collective == want["test"].split()[0].removesuffix("_perf")
    else:
        assert result.collective is None
    # Every row is a whole row of this format: both placements, all numbers read.
    for row in result.rows:
        assert row.count is not None and row.type == "float"
        assert row.out_of_place is not None and row.in_place is not None
        for r in row.results():
            assert None not in (r.time_us, r.algbw_gbps, r.busbw_gbps)
    json.dumps(result.to_json(), allow_nan=False)


@pytest.mark.parametrize("path", corpus_cases(PERF_SAMPLES))
def test_corpus_table_cut_anywhere_keeps_what_is_there(path: Path):
    """Published copies are cut mid-line: every cut of a real sample yields the parse error or a
    prefix of the full table, whose last row may lack cells but never holds a wrong one."""
    text = path.read_text()
    full = parse_nccl_tests(text).rows
    for cut in range(0, len(text), 7):
        try:
            rows = parse_nccl_tests(text[:cut]).rows
        except NcclTestsParseError:
            continue
        assert rows[:-1] == full[: len(rows) - 1]
        last, truth = rows[-1], full[len(rows) - 1]
        assert (last.size_bytes, last.count, last.type) == (truth.size_bytes, truth.count, truth.type)
        for got, real in ((last.out_of_place, truth.out_of_place), (last.in_place, truth.in_place)):
            for name in ("time_us", "algbw_gbps", "busbw_gbps", "wrong", "error"):
                value = getattr(got, name, None) if got else None
                assert value is None or value == getattr(real, name), (cut, name)


# --------------------------------------------------------------------------- corpus: p2p samples


@pytest.mark.parametrize("path", corpus_cases(P2P_SAMPLES))
def test_corpus_p2p_sample_is_refused_by_the_nccl_parser(path: Path):
    with pytest.raises(NcclTestsParseError, match="p2pBandwidthLatencyTest"):
        parse_nccl_tests(path.read_text())


@pytest.mark.parametrize("path", corpus_cases(P2P_SAMPLES))
def test_corpus_p2p_sample_meets_its_meta(path: Path):
    want = corpus_meta(path)["expected"]
    p2p = parse_p2p_bandwidth_latency(path.read_text())
    assert sorted(p2p.matrices) == sorted(want["sections_present"])
    assert p2p.n_gpus == want["n_gpus"]
    bidir = "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)"
    assert p2p.offdiag_max(bidir) == pytest.approx(want["p2p_enabled_bidir_max_offdiag"])
    assert p2p.offdiag_min(bidir) == pytest.approx(want["p2p_enabled_bidir_min_offdiag"])
    assert p2p.diag_max(bidir) == pytest.approx(want["diag_max"])
    assert not p2p.warnings


@pytest.mark.parametrize("path", corpus_cases(ALL_TEXTS))
def test_every_corpus_text_parses_or_is_refused_cleanly(path: Path):
    text = path.read_text(errors="replace")
    try:
        for result in parse_nccl_tests_all(text):
            assert result.rows
    except NcclTestsParseError as exc:
        assert "\n" not in str(exc) and str(exc)
    try:
        parse_p2p_bandwidth_latency(text)
    except P2PParseError:
        pass


# ------------------------------------------------------- formats the nccl-tests sources print

HEADER_2X = """\
# nThread 1 nGpus 2 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   4242 on      node1 device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid   4242 on      node1 device  1 [0x0a] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""  # noqa: E501 (the tool's own lines, verbatim)
ROWS_2X = """\
     1048576        262144     float     sum      -1    30.12   34.81   34.81      0    29.90   35.07   35.07      0
     2097152        524288     float     sum      -1    45.50   46.09   46.09      0    45.10   46.50   46.50      0
"""
FOOTER_2X = """\
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 40.6175 
#
"""


def test_modern_table_reads_every_field():
    result = parse_nccl_tests("./build/all_reduce_perf -b 1M -e 2M -g 2\n" + HEADER_2X + ROWS_2X + FOOTER_2X)
    assert result.collective == "all_reduce"
    assert result.nranks == 2
    assert result.rows[0] == NcclTestsRow(
        size_bytes=1048576,
        count=262144,
        type="float",
        redop="sum",
        root=-1,
        out_of_place=Result(30.12, 34.81, 34.81, 0),
        in_place=Result(29.90, 35.07, 35.07, 0),
    )
    assert (result.avg_busbw_gbps, result.out_of_bounds, result.ok) == (40.6175, 0, True)
    assert result.max_busbw_gbps() == 46.50
    assert result.warnings == ()


def test_to_json_has_the_documented_shape():
    data = parse_nccl_tests(HEADER_2X + ROWS_2X + FOOTER_2X).to_json()
    assert {"rows", "avg_busbw_gbps", "max_busbw_gbps", "out_of_bounds", "warnings"} <= set(data)
    row = data["rows"][1]
    assert (row["size_bytes"], row["count"], row["type"], row["redop"]) == (2097152, 524288, "float", "sum")
    assert row["in_place"] == {"time_us": 45.10, "algbw_gbps": 46.50, "busbw_gbps": 46.50, "wrong": 0, "error": None}
    assert data["max_busbw_gbps"] == 46.50
    json.dumps(data, allow_nan=False)


def test_launcher_prefixes_are_stripped():
    text = HEADER_2X + ROWS_2X + FOOTER_2X
    for prefix in ("[1,0]<stdout>:", " 0: ", "node1: "):
        tagged = "".join(prefix + line for line in text.splitlines(keepends=True))
        assert parse_nccl_tests(tagged) == parse_nccl_tests(text), prefix


def test_wrong_elements_and_failed_summaries_make_ok_false():
    bad_row = ROWS_2X.replace("      0    29.90", "     17    29.90")
    result = parse_nccl_tests(HEADER_2X + bad_row + FOOTER_2X.replace("0 OK", "1 FAILED"))
    assert result.rows[0].out_of_place.wrong == 17
    assert (result.out_of_bounds, result.ok) == (1, False)
    # A row with #wrong > 0 is a failure even if the summary was lost.
    assert parse_nccl_tests(HEADER_2X + bad_row).ok is False
    # NCCL_TESTS_MIN_BW adds OK/FAILED to the average line.
    low = FOOTER_2X.replace("40.6175 ", "40.6175 FAILED")
    assert parse_nccl_tests(HEADER_2X + ROWS_2X + low).ok is False
    assert parse_nccl_tests(HEADER_2X + ROWS_2X + FOOTER_2X.replace("40.6175 ", "40.6175 OK")).ok is True


def test_a_low_average_is_no_wrong_data():
    """nccl-tests' "Avg bus bandwidth : X FAILED" judges the figure against the user's
    NCCL_TESTS_MIN_BW (src/util.cu writeResultFooter), not the data: it is not read as wrong data."""
    low = parse_nccl_tests(HEADER_2X + ROWS_2X + FOOTER_2X.replace("40.6175 ", "40.6175 FAILED"))
    assert (low.ok, low.data_ok, low.wrong_data()) == (False, True, None)
    wrong = parse_nccl_tests(
        HEADER_2X + ROWS_2X.replace("35.07      0", "35.07      3") + FOOTER_2X.replace("0 OK", "1 FAILED")
    )
    assert (wrong.ok, wrong.data_ok) == (False, False)
    assert wrong.wrong_data() == "nccl-tests reported 3 wrong elements in-place, 'Out of bounds values : 1 FAILED'"


def test_a_million_wrong_elements_printed_with_g_is_a_count():
    """#wrong is printed with "%6g" (src/util.cu writeBenchmarkLineBody), so from a million up it
    reads "1.04858e+06"; that cell is read, so the wrong data are seen."""
    row = ROWS_2X.splitlines()[0].replace("35.07      0", "35.07  1.04858e+06") + "\n"
    result = parse_nccl_tests(HEADER_2X + row)
    assert result.rows[0].in_place.wrong == 1048580
    assert result.data_ok is False and "1048580 wrong elements in-place" in result.wrong_data()


def test_no_summary_means_ok_unknown_and_a_warning():
    result = parse_nccl_tests(HEADER_2X + ROWS_2X)
    assert (result.ok, result.avg_busbw_gbps, result.out_of_bounds) == (None, None, None)
    assert any("no summary" in w for w in result.warnings)


def test_na_nan_and_minus_one_cells_are_none():
    rows = "        4096          1024     float    none       0    25.72    0.16    0.16    N/A    25.62    -nan     N/A     -1\n"
    result = parse_nccl_tests(HEADER_2X + rows + FOOTER_2X)
    row = result.rows[0]
    assert row.out_of_place == Result(25.72, 0.16, 0.16, None)
    assert row.in_place == Result(25.62, None, None, None)
    assert any("'-nan'" in w for w in result.warnings)


def test_new_columns_bitdiff_per_iteration_and_timestamp_are_skipped():
    text = textwrap.dedent("""\
        # nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22803
        # Collective test starting: reduce_scatter_perf_mpi
        #  Rank  0 Group  0 Pid 1 on n device  0 [0000:07:00] NVIDIA H100
        #       size         count      type   redop    root     time   algbw   busbw  #wrong  #bitdiff    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong  #bitdiff    i_min    i_max    i_p99    i_cv%   timestamp
        #        (B)    (elements)                               (us)  (GB/s)  (GB/s)                        (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)
            8388608       2097152     float     sum      -1   100.10   83.80   73.33       0         0    98.00   102.00   101.50     1.20    99.90   83.97   73.47       0         0    97.00   101.00   100.80     1.10  2026-07-01 10:00:00
        # Out of bounds values : 0 OK
        # Bitwise mismatches   : 0 OK
        # Avg bus bandwidth    : 73.4 
        #
        # Collective test concluded: reduce_scatter_perf_mpi
        """)  # noqa: E501 (the tool's own lines, verbatim)
    result = parse_nccl_tests(text)
    assert result.collective == "reduce_scatter"
    assert result.rows[0].out_of_place == Result(100.10, 83.80, 73.33, 0)
    assert result.rows[0].in_place == Result(99.90, 83.97, 73.47, 0)
    assert (result.ok, result.nranks, result.warnings) == (True, 1, ())
    assert parse_nccl_tests(text.replace("Bitwise mismatches   : 0 OK", "Bitwise mismatches   : 3 FAILED")).ok is False


def test_oldest_format_bytes_n_op_res_with_one_placement():
    # nccl-tests of 2017 (reduce_perf): "bytes N type op root" and only an out-of-place group.
    text = textwrap.dedent("""\
        #                                         out-of-place
        #      bytes             N    type      op    root    time  algbw  busbw      res
            1048576        262144   float     sum       0   51.20   20.48  20.48  0e+00
            2097152        524288   float     sum       0   80.10   26.18  26.18  1e-03*
        """)
    result = parse_nccl_tests(text)
    assert [(r.size_bytes, r.redop, r.root) for r in result.rows] == [(1048576, "sum", 0), (2097152, "sum", 0)]
    assert result.rows[1].out_of_place == Result(80.10, 26.18, 26.18, None, 1e-03)
    assert result.rows[1].in_place is None
    assert any("above nccl-tests' threshold" in w for w in result.warnings)


def test_columns_are_inferred_when_the_header_was_cut_off():
    result = parse_nccl_tests(ROWS_2X + FOOTER_2X)
    assert [r.size_bytes for r in result.rows] == [1048576, 2097152]
    assert result.rows[0].root == -1 and result.rows[0].in_place.busbw_gbps == 35.07
    assert any("columns inferred" in w for w in result.warnings)
    # Old rows without root and with a float error column.
    old = (
        "    33554432       8388608     float     sum    19902    1.69    2.53  2e-07    19898    1.69    2.53  2e-07\n"
    )
    row = parse_nccl_tests(old).rows[0]
    assert (row.redop, row.root, row.in_place.error, row.in_place.wrong) == ("sum", None, 2e-07, None)


def test_a_row_cut_mid_line_keeps_its_whole_cells():
    text = (
        HEADER_2X
        + ROWS_2X
        + "     4194304       1048576     float     sum      -1    70.20   59.75   59.75      0    70.1"
    )
    result = parse_nccl_tests(text)
    last = result.rows[-1]
    assert last.out_of_place == Result(70.20, 59.75, 59.75, 0)
    assert last.in_place is None  # "70.1" may be the start of "70.15": dropped
    assert any("cut short" in w for w in result.warnings)


def test_lines_interleaved_inside_the_table_are_skipped():
    noise = (
        "node1:4242:4250 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 7000 - Init COMPLETE\n"
        "8 more processes have sent help message help-mtl-ofi.txt / OFI call fail\n"
        "user@node1:~/nccl-tests$ \n"
    )
    first, second = ROWS_2X.splitlines(keepends=True)
    assert (
        parse_nccl_tests(HEADER_2X + first + noise + second + FOOTER_2X).rows
        == parse_nccl_tests(HEADER_2X + ROWS_2X + FOOTER_2X).rows
    )


def test_nranks_falls_back_to_nccl_info_lines():
    header = "\n".join(line for line in HEADER_2X.splitlines() if "Rank" not in line) + "\n"
    info = "".join(
        f"h:1:2 [{r}] NCCL INFO comm 0x{r} rank {r} nranks 4 cudaDev {r} - Init COMPLETE\n" for r in range(4)
    )
    assert parse_nccl_tests(info + header + ROWS_2X + FOOTER_2X).nranks == 4
    assert parse_nccl_tests(header + ROWS_2X + FOOTER_2X).nranks is None


def test_several_runs_in_one_log():
    second = HEADER_2X.replace("float", "half") + ROWS_2X.replace("float", " half") + FOOTER_2X
    text = (
        "$ ./build/all_reduce_perf -g 2\n"
        + HEADER_2X
        + ROWS_2X
        + FOOTER_2X
        + "$ ./build/all_gather_perf -g 2\n"
        + second
    )
    runs = parse_nccl_tests_all(text)
    assert [r.collective for r in runs] == ["all_reduce", "all_gather"]
    assert [r.rows[0].type for r in runs] == ["float", "half"]
    first = parse_nccl_tests(text)
    assert first.rows == runs[0].rows and any("2 runs" in w for w in first.warnings)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "no nccl-tests result table"),
        ("hello\nworld\n", "no nccl-tests result table"),
        (HEADER_2X, "no result row"),
        (FOOTER_2X, "summary lines found"),
        ("Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D     0      1\n", "p2pBandwidthLatencyTest"),
    ],
)
def test_no_table_is_a_one_line_parse_error(text, reason):
    with pytest.raises(NcclTestsParseError, match=reason) as info:
        parse_nccl_tests(text)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


# ------------------------------------------------------------------------- p2p (hand-written)

P2P_TEXT = """\
[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]
Device: 0, NVIDIA GeForce RTX 4090, pciBusID: 1, pciDeviceID: 0, pciDomainID:0
Device: 1, NVIDIA GeForce RTX 4090, pciBusID: 25, pciDeviceID: 0, pciDomainID:0
P2P Connectivity Matrix
     D\\D     0     1
     0\t     1     1
     1\t     1     1
Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)
   D\\D     0      1 
     0 909.69  21.55 
     1  21.49 915.23 
Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)
   D\\D     0      1 
     0 919.67  41.10 
     1  40.95 
P2P=Disabled Latency Matrix (us)
   GPU     0      1 
     0   1.40  13.21 
     1  12.88   1.38 

   CPU     0      1 
     0   2.41   6.55 
     1   6.47   2.39 
"""


def test_p2p_matrices_latency_halves_and_cut_rows():
    p2p = parse_p2p_bandwidth_latency(P2P_TEXT)
    assert set(p2p.matrices) == {
        "P2P Connectivity Matrix",
        "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)",
        "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)",
        "P2P=Disabled Latency Matrix (us)",
        "P2P=Disabled Latency Matrix (us) [CPU]",
    }
    assert p2p.n_gpus == 2
    bidir = p2p.matrices["Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)"]
    assert bidir == ((919.67, 41.10), (40.95, None))
    assert p2p.offdiag_max("Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)") == 41.10
    assert p2p.matrices["P2P=Disabled Latency Matrix (us) [CPU]"][1] == (6.47, 2.39)
    assert any("row 1 has 1 of 2" in w for w in p2p.warnings)
    with pytest.raises(P2PParseError):
        parse_p2p_bandwidth_latency(HEADER_2X + ROWS_2X)


# ------------------------------------------------------------------------------ properties


def _check_result(result: NcclTestsResult) -> None:
    json.dumps(result.to_json(), allow_nan=False)
    for row in result.rows:
        assert isinstance(row.size_bytes, int) and row.size_bytes >= 0
        assert row.out_of_place is not None or row.in_place is not None
    assert all(isinstance(w, str) and w for w in result.warnings)


def _parses_or_refuses(text: str) -> None:
    """Both parsers either read ``text`` into well-formed results or refuse it with their own error."""
    try:
        for result in parse_nccl_tests_all(text):
            _check_result(result)
    except NcclTestsParseError:
        pass
    try:
        parse_p2p_bandwidth_latency(text)
    except P2PParseError:
        pass


@given(st.text())
def test_arbitrary_text_raises_only_the_parse_error(text):
    _parses_or_refuses(text)


TABLE_ALPHABET = st.sampled_from(list("0123456789 .-+eE#/:N/A\n\tabcdefghijklmnopqrstuvwxyz*[]<>"))


@given(
    st.lists(
        st.one_of(
            st.text(TABLE_ALPHABET, max_size=120), st.sampled_from((HEADER_2X + ROWS_2X + FOOTER_2X).splitlines())
        )
    ).map("\n".join)
)
def test_table_like_text_raises_only_the_parse_error(text):
    try:
        for result in parse_nccl_tests_all(text):
            _check_result(result)
    except NcclTestsParseError:
        pass


_REAL_TEXTS = [p.read_text() for p in PERF_SAMPLES + P2P_SAMPLES] or [HEADER_2X + ROWS_2X + FOOTER_2X, P2P_TEXT]


@st.composite
def _mutated_samples(draw):
    text = draw(st.sampled_from(_REAL_TEXTS))
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 200)))
        piece = draw(st.one_of(st.just(""), st.text(TABLE_ALPHABET, max_size=20), st.text(max_size=5)))
        text = text[:i] + piece + text[j:]
    return text


@given(_mutated_samples())
def test_mutated_real_samples_raise_only_the_parse_errors(text):
    _parses_or_refuses(text)


# The numbers as each nccl-tests version prints them (the text printf writes, read as a float):
# up to v2.17.2 (src/common.cu BenchTime) the time has 2, 1 or 0 decimals below 100, 10^4 and above,
# bandwidths "%6.2f"; from v2.17.3 (src/util.cu getFloatStr) every figure gets the most decimals
# (2, 1, 0) that fit its width (time 7, bandwidths 6), then an exponent ("1.0e+08", "1e+06").
def _printed(*parts):
    return st.one_of(*parts).map(float)


_LEGACY_TIME = _printed(
    st.integers(0, 9999).map(lambda x: f"{x / 100:.2f}"),
    st.integers(1000, 99999).map(lambda x: f"{x / 10:.1f}"),
    st.integers(10000, 10**8).map(str),
)
_LEGACY_BW = _printed(st.integers(0, 10**6).map(lambda x: f"{x / 100:.2f}"))
_CURRENT_TIME = _printed(
    st.integers(0, 999999).map(lambda x: f"{x / 100:.2f}"),
    st.integers(100000, 999999).map(lambda x: f"{x / 10:.1f}"),
    st.integers(100000, 9999999).map(str),
    st.tuples(st.integers(10, 99), st.integers(7, 12)).map(lambda m: f"{m[0] / 10:.1f}e+{m[1]:02d}"),
)
_CURRENT_BW = _printed(
    st.integers(0, 99999).map(lambda x: f"{x / 100:.2f}"),
    st.integers(10000, 99999).map(lambda x: f"{x / 10:.1f}"),
    st.integers(10000, 999999).map(str),
    st.tuples(st.integers(1, 9), st.integers(6, 9)).map(lambda m: f"{m[0]}e+{m[1]:02d}"),
)
_VERSIONS = {None: (_CURRENT_TIME, _CURRENT_BW), (2, 13, 9): (_LEGACY_TIME, _LEGACY_BW)}


def _rows(version):
    time, bw = _VERSIONS[version]
    # #wrong: "%5g" / "%6g", exact up to 10^6.
    cells = st.builds(Result, time | st.none(), bw | st.none(), bw | st.none(), st.integers(0, 10**6) | st.none())
    return st.builds(
        NcclTestsRow,
        st.integers(0, 2**40),
        st.integers(0, 2**38),
        st.sampled_from(["float", "half", "bfloat16", "int8", "double"]),
        st.sampled_from(["sum", "prod", "min", "max", "avg", "none"]),
        st.integers(-1, 64),
        cells,
        cells,
    )


@given(
    data=st.data(),
    version=st.sampled_from(sorted(_VERSIONS, key=str)),
    oob=st.integers(0, 100),
    avg=st.floats(0, 1e4, allow_nan=False).map(lambda x: float(f"{x:g}")),
    nranks=st.integers(1, 16),
    collective=st.sampled_from([None, "all_reduce", "all_gather", "alltoall"]),
)
def test_render_then_parse_round_trips(data, version, oob, avg, nranks, collective):
    """The renderer prints each version's format (the current one by default) and the
    parser reads both."""
    rows = data.draw(st.lists(_rows(version), min_size=1, max_size=12))
    wrong = any(r.wrong for row in rows for r in row.results())
    result = NcclTestsResult(
        collective=collective,
        rows=tuple(rows),
        avg_busbw_gbps=avg,
        out_of_bounds=oob,
        ok=oob == 0 and not wrong,
        nranks=nranks,
        data_ok=oob == 0 and not wrong,
    )
    assert parse_nccl_tests(render_nccl_tests(result, version=version)) == result


_FIGURES = NcclTestsResult(
    "all_reduce",
    (
        NcclTestsRow(
            1 << 30,
            1 << 28,
            "float",
            "sum",
            -1,
            Result(1234.56, 1234.56, 8.5, 0),
            Result(12345.67, 99.994, 0.5, 1048576),
        ),
    ),
)


# What render_nccl_tests prints of _FIGURES: its header's two lines, then the row. By default today's
# format, not that of nccl-tests <= 2.16 (src/common.cu BenchTime: "%7.1f" from 100 us, "%7.0f" from
# 10^4 us). From v2.17.3 (commit 00f5281) nccl-tests prints every figure with getFloatStr (src/util.cu
# at v2.19.6: the most decimals, 2 then 1 then 0, that fit the column, time 7, bandwidths 6) and #wrong
# with "%6g" (writeBenchmarkLineBody); the header widens #wrong to "%6s" (writeResultHeader). v2.13.9's
# src/common.cu BenchTime: time "%7.2f" / "%7.1f" from 100 / "%7.0f" from 10^4, bandwidths "%6.2f",
# #wrong "%5g"; its header prints "#wrong" as " %6s", units "%5s". Lines: those formats applied by hand.
PRINTED = {
    "current-get-float-str": (
        {},
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ",
        "  1073741824     268435456     float     sum      -1  1234.56  1234.6    8.50       0  12345.7   99.99    0.50  1.04858e+06",
    ),
    "v2.13.9": (
        {"version": (2, 13, 9)},
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
        "  1073741824     268435456     float     sum      -1   1234.6  1234.56    8.50      0    12346   99.99    0.50  1.04858e+06",
    ),
}


@pytest.mark.parametrize("version, header, units, row", PRINTED.values(), ids=PRINTED)
def test_render_prints_each_version_as_it_printed(version, header, units, row):
    assert render_nccl_tests(_FIGURES, **version).splitlines()[-4:-1] == [header, units, row]


def test_render_changed_its_format_at_2_17_3():
    assert render_nccl_tests(_FIGURES, version=(2, 17, 2)) == render_nccl_tests(_FIGURES, version=(2, 13, 9))
    assert render_nccl_tests(_FIGURES, version=(2, 17, 3)) == render_nccl_tests(_FIGURES)


def _sweep(world_size: int, wrongs: list[int]) -> dict:
    rows = [
        {
            "size_bytes": 4096 << i,
            "count": 1024 << i,
            "time_us": 100.0,
            "algbw_gbps": 1.0,
            "busbw_gbps": 1.0,
            "wrong": w,
        }
        for i, w in enumerate(wrongs)
    ]
    return {
        "origin": "measured",
        "host": "node1",
        "devices": None,
        "worker_pids": list(range(100, 100 + world_size)),
        "sizes": {"begin": 4096, "end": rows[-1]["size_bytes"], "factor": 2},
        "expected": {"gbps": None, "basis": "gloo on CPUs"},
        "result": {"rows": rows, "dtype": "float32", "world_size": world_size, "backend": "gloo"},
    }


def test_a_sweep_counts_out_of_bounds_values_as_nccl_tests_does():
    """ "Out of bounds values" counts checks as nccl-tests does, not the sizes with wrong data:
    CheckData adds 1 to its thread's errors when the GPUs that thread checks hold a wrong element,
    and run() sums errors over threads and (MPI_Allreduce) over processes (src/common.cu at v2.13.9
    and v2.19.6). The sweep runs one process per rank, so nccl-tests would count one per rank whose
    check failed, per size; the sweep keeps wrong elements summed over ranks, which fixes that count
    only when each size has at most one wrong element (or one rank). Otherwise the table gives the
    floor and says so."""

    def oob(text):
        return [line for line in text.splitlines() if "Out of bounds" in line]

    assert oob(sweep_table(_sweep(2, [0, 1, 1]))) == ["# Out of bounds values : 2 FAILED"]
    assert oob(sweep_table(_sweep(1, [5]))) == ["# Out of bounds values : 1 FAILED"]
    assert oob(sweep_table(_sweep(2, [0, 0]))) == ["# Out of bounds values : 0 OK"]
    text = sweep_table(_sweep(2, [0, 4, 1]))
    assert oob(text) == [
        "# Out of bounds values : 2 FAILED",
        "# gputopo: Out of bounds values counts, per size, the ranks whose check found wrong "
        "elements; this sweep kept them summed over ranks, so 2 is a floor (at most 3)",
    ]
    assert parse_nccl_tests(text).out_of_bounds == 2


def test_render_refuses_rows_the_modern_table_cannot_show():
    with pytest.raises(ValueError, match="size 8"):
        render_nccl_tests(NcclTestsResult(None, (NcclTestsRow(8),)))


# ----------------------------------------------------------------------------------- runner

SAMPLE_TEXT = HEADER_2X + ROWS_2X + FOOTER_2X


def _fake(tmp_path: Path, body: str, name: str = "all_reduce_perf") -> str:
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


def _env(**extra) -> dict:
    return {**os.environ, **extra}


def _running(pid: int) -> bool:
    """True while ``pid`` is a live process (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _wait_gone(pids, within_s: float = 30.0) -> list[int]:  # returns as soon as they are gone
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if _running(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return alive


def test_argv_is_one_size_with_the_check_on():
    assert nt.all_reduce_perf_argv("/x/all_reduce_perf", 8, 1 << 30, iters=50, warmup=10) == [
        "/x/all_reduce_perf",
        "-b",
        "1073741824",
        "-e",
        "1073741824",
        "-f",
        "2",
        "-g",
        "8",
        "-n",
        "50",
        "-w",
        "10",
        "-c",
        "1",
    ]
    for bad in ({"n_gpus": 0}, {"size_bytes": -1}, {"iters": 0}, {"warmup": -1}, {"n_gpus": True}):
        args = {"n_gpus": 2, "size_bytes": 8, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            nt.all_reduce_perf_argv(
                "b", args["n_gpus"], args["size_bytes"], iters=args.get("iters", 20), warmup=args.get("warmup", 5)
            )


def test_runner_passes_the_flags_and_parses_the_output(tmp_path):
    text_file = tmp_path / "out.txt"
    text_file.write_text(SAMPLE_TEXT)
    binary = _fake(
        tmp_path,
        """\
        import os, sys
        open(os.environ["FAKE_ARGV"], "w").write("\\n".join(sys.argv[1:]))
        sys.stdout.write(open(os.environ["FAKE_TEXT"]).read())
        """,
    )
    argv_file = tmp_path / "argv"
    result = nt.run_all_reduce_perf(
        binary,
        2,
        1 << 20,
        iters=7,
        warmup=3,
        timeout_s=60,
        env=_env(FAKE_TEXT=str(text_file), FAKE_ARGV=str(argv_file)),
    )
    assert result == parse_nccl_tests(SAMPLE_TEXT)
    assert argv_file.read_text().split("\n") == [
        "-b",
        "1048576",
        "-e",
        "1048576",
        "-f",
        "2",
        "-g",
        "2",
        "-n",
        "7",
        "-w",
        "3",
        "-c",
        "1",
    ]


@pytest.mark.skipif(not PERF_SAMPLES, reason=NO_CORPUS)
def test_runner_reads_a_real_sample_as_printed(tmp_path):
    sample = PERF_SAMPLES[0]
    binary = _fake(tmp_path, f"import sys; sys.stdout.write(open({str(sample)!r}).read())\n")
    assert nt.run_all_reduce_perf(binary, 8, 8, timeout_s=60) == parse_nccl_tests(sample.read_text())


def test_runner_nonzero_exit_raises_with_the_tail(tmp_path):
    binary = _fake(
        tmp_path,
        """\
        import sys
        print("some setup line")
        print("node1: Test NCCL failure common.cu:954 'unhandled cuda error'", file=sys.stderr)
        sys.exit(3)
        """,
    )
    with pytest.raises(NcclTestsRunError, match=r"(?s)exited with status 3.*unhandled cuda error"):
        nt.run_all_reduce_perf(binary, 2, 8, timeout_s=60)


WRONG_RUN = (
    HEADER_2X
    + ROWS_2X.replace("35.07      0", "35.07      3")
    + """\
# Out of bounds values : 1 FAILED
# Avg bus bandwidth    : 40.6175 
#
# Collective test concluded: all_reduce_perf
 .. node1 pid 4242: Test failure common.cu:1453
"""
)


def test_runner_wrong_data_is_a_result_not_a_run_error(tmp_path):
    """A finished run with wrong data exits with testNumResults (7) after its summary (nccl-tests
    src/common.cu: run() returns it when errors[0], main's TESTCHECK prints "Test failure"): a result
    with its figure and its wrong data, so a marker fails, not a run error that only skips."""
    text_file = tmp_path / "out.txt"
    text_file.write_text(WRONG_RUN)
    binary = _fake(
        tmp_path,
        """\
        import os, sys
        sys.stdout.write(open(os.environ["FAKE_TEXT"]).read())
        sys.exit(7)
        """,
    )
    result = nt.run_all_reduce_perf(binary, 2, 1 << 20, timeout_s=60, env=_env(FAKE_TEXT=str(text_file)))
    assert result.avg_busbw_gbps == 40.6175
    assert result.wrong_data() == "nccl-tests reported 3 wrong elements in-place, 'Out of bounds values : 1 FAILED'"
    assert any("exited with status 7" in w for w in result.warnings)
    # A run cut short (no summary) with status 7, or another status, is still a run error.
    text_file.write_text(HEADER_2X + ROWS_2X)
    with pytest.raises(NcclTestsRunError, match="exited with status 7"):
        nt.run_all_reduce_perf(binary, 2, 1 << 20, timeout_s=60, env=_env(FAKE_TEXT=str(text_file)))


# One 1 MiB all_reduce_perf -g 2 run whose in-place data came back wrong (3 elements), as two versions
# print it: each line is its printf format applied by hand.
# nccl-tests tag v2.13.9, src/common.cu: run() prints the summary, "%s\n" of ncclGetLastError (an
# empty line), then `exit(EXIT_FAILURE)` because errors[0] != 0: status 1.
WRONG_V2_13_9 = """\
# nThread 1 nGpus 2 minBytes 1048576 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   4242 on      node1 device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid   4242 on      node1 device  1 [0x0a] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
     1048576        262144     float     sum      -1    123.5    8.49    8.49      0    123.4    8.50    8.50      3
# Out of bounds values : 1 FAILED
# Avg bus bandwidth    : 8.495 
#

"""  # noqa: E501 (the tool's own lines, verbatim)
# nccl-tests tag v2.19.6 (since v2.17.3, commit 00f5281): src/util.cu writeResultFooter, finalizeFooter
# and writeErrors, then run() returns testNumResults and main's TESTCHECK prints "Test failure" and
# returns it: status 7.
WRONG_V2_19_6 = """\
# nccl-tests version 2.19.6 nccl-headers=22807 nccl-library=22807
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 1048576 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid   4242 on      node1 device  0 [0000:07:00] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid   4242 on      node1 device  1 [0000:0a:00] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong 
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         
     1048576        262144     float     sum      -1   123.45    8.49    8.49       0   123.40    8.50    8.50       3
# Out of bounds values : 1 FAILED
# Avg bus bandwidth    : 8.495 
#
# Collective test concluded: all_reduce_perf
#

 .. node1 pid 4242: Test failure common.cu:1454
"""  # noqa: E501 (the tool's own lines, verbatim)
_EXITING = """\
    import os, sys
    sys.stdout.write(open(os.environ["FAKE_TEXT"]).read())
    sys.exit(int(os.environ["FAKE_STATUS"]))
    """


@pytest.mark.parametrize("text, status", [(WRONG_V2_13_9, 1), (WRONG_V2_19_6, 7)], ids=["v2.13.9", "v2.19.6"])
def test_runner_wrong_data_is_a_result_whatever_the_version_exits_with(tmp_path, text, status):
    """Up to v2.17.2 a finished run with wrong data ends with exit(EXIT_FAILURE), status 1
    (tag v2.13.9 src/common.cu, end of run()); commit 00f5281 (v2.17.3) made it testNumResults, 7.
    Both are read as nccl-tests' verdict, so on older nccl-tests too the result has its figure and
    the marker fails on a broken node instead of skipping."""
    (tmp_path / "out.txt").write_text(text)
    env = _env(FAKE_TEXT=str(tmp_path / "out.txt"), FAKE_STATUS=str(status))
    result = nt.run_all_reduce_perf(_fake(tmp_path, _EXITING), 2, 1 << 20, timeout_s=60, env=env)
    assert (result.avg_busbw_gbps, result.rows[0].in_place.wrong) == (8.495, 3)
    assert result.wrong_data() == "nccl-tests reported 3 wrong elements in-place, 'Out of bounds values : 1 FAILED'"
    assert any(f"exited with status {status}" in w for w in result.warnings)


@pytest.mark.parametrize("status", [1, 7])
def test_runner_a_run_that_did_not_finish_is_an_error_whatever_it_exits_with(tmp_path, status):
    """Status 1 is also testInternalError (src/common.h testResult_t) from a run that failed early:
    without the summary nccl-tests prints only at its end, or with a summary that says OK, the
    status is no verdict on the data and the run stays an error."""
    cut = WRONG_V2_13_9[: WRONG_V2_13_9.index("# Out of bounds")] + " .. node1 pid 4242: Test failure common.cu:892\n"
    all_ok = WRONG_V2_13_9.replace("      3\n", "      0\n").replace("1 FAILED", "0 OK")
    for text in (cut, all_ok):
        (tmp_path / "out.txt").write_text(text)
        env = _env(FAKE_TEXT=str(tmp_path / "out.txt"), FAKE_STATUS=str(status))
        with pytest.raises(NcclTestsRunError, match=f"exited with status {status}"):
            nt.run_all_reduce_perf(_fake(tmp_path, _EXITING), 2, 1 << 20, timeout_s=60, env=env)


def test_runner_output_without_table_raises_run_error(tmp_path):
    binary = _fake(tmp_path, 'print("# nThread 1 nGpus 2 ...")\n')
    with pytest.raises(NcclTestsRunError, match="no nccl-tests result table") as info:
        nt.run_all_reduce_perf(binary, 2, 8, timeout_s=60)
    assert isinstance(info.value.__cause__, NcclTestsParseError)


def test_runner_missing_binary_raises_run_error(tmp_path):
    with pytest.raises(NcclTestsRunError, match="cannot start"):
        nt.run_all_reduce_perf(str(tmp_path / "nope"), 2, 8, timeout_s=5)


def _spawning_sleeper(tmp_path: Path, ignore_term: bool, setsid: bool = False) -> tuple[str, Path]:
    pids = tmp_path / "pids"
    binary = _fake(
        tmp_path,
        f"""\
        import os, signal, subprocess, sys, time
        if {ignore_term!r}:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                 start_new_session={setsid!r})
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        print("# nThread 1 nGpus 2", flush=True)
        time.sleep(600)
        """,
    )
    return binary, pids


def _started_pids(pids_file: Path) -> list[int]:
    return [int(p) for p in pids_file.read_text().split()] if pids_file.exists() else []


@pytest.mark.parametrize("ignore_term", [False, True], ids=["sigterm", "sigkill-after-grace"])
def test_runner_timeout_kills_the_whole_group(tmp_path, ignore_term):
    binary, pids_file = _spawning_sleeper(tmp_path, ignore_term)
    try:
        # the timeout ended it (not the fake's 600 s sleep) and killed both: the events, not the seconds
        with pytest.raises(BenchTimeout, match=r"did not finish within 1 s(?s:.*)# nThread"):
            nt.run_all_reduce_perf(binary, 2, 8, timeout_s=1, grace_s=0.5)
        pids = _started_pids(pids_file)
        assert len(pids) == 2  # the fake and the child it started
        assert _wait_gone(pids) == []
    finally:
        for pid in _started_pids(pids_file):  # never leave our own fakes running
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")
def test_runner_timeout_ends_a_helper_that_left_the_group(tmp_path):
    """A helper a wrapper of nccl-tests starts with ``setsid`` is not left orphaned after the
    deadline (killpg does not reach another session): the run goes through
    ``bench.reaper``, a child subreaper (prctl(2) PR_SET_CHILD_SUBREAPER) that ends it too."""
    binary, pids_file = _spawning_sleeper(tmp_path, ignore_term=False, setsid=True)
    try:
        with pytest.raises(BenchTimeout):
            nt.run_all_reduce_perf(binary, 2, 8, timeout_s=1, grace_s=0.5)
        pids = _started_pids(pids_file)
        assert len(pids) == 2
        assert _wait_gone(pids) == []
    finally:
        for pid in _started_pids(pids_file):
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_finished_run_leaves_no_helper_behind(tmp_path):
    pids = tmp_path / "pids"
    text_file = tmp_path / "out.txt"
    text_file.write_text(SAMPLE_TEXT)
    binary = _fake(
        tmp_path,
        f"""\
        import os, subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        open({str(pids)!r}, "w").write(str(child.pid))
        sys.stdout.write(open(os.environ["FAKE_TEXT"]).read())
        """,
    )
    try:
        nt.run_all_reduce_perf(binary, 2, 1 << 20, timeout_s=60, env=_env(FAKE_TEXT=str(text_file)))
        assert _wait_gone(_started_pids(pids)) == []
    finally:
        for pid in _started_pids(pids):
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------------------- find binary


def _exe(folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "all_reduce_perf"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def test_find_all_reduce_perf_order(tmp_path):
    on_path = _exe(tmp_path / "bin")
    named = _exe(tmp_path / "nccl-tests" / "build")
    dcgm = _exe(tmp_path / "dcgm")
    assert (
        find_all_reduce_perf({"NCCL_TESTS_BIN_PATH": str(Path(named).parent), "PATH": str(tmp_path / "bin")}) == named
    )
    assert find_all_reduce_perf({"DCGM_NCCL_TESTS_BIN_PATH": str(Path(dcgm).parent)}) == dcgm
    # A variable naming a folder without the binary falls through to PATH.
    assert find_all_reduce_perf({"NCCL_TESTS_BIN_PATH": str(tmp_path), "PATH": str(tmp_path / "bin")}) == on_path
    assert find_all_reduce_perf({"PATH": str(tmp_path / "empty")}) is None
    assert find_all_reduce_perf({}) is None


def test_find_all_reduce_perf_skips_a_file_that_is_not_executable(tmp_path):
    (tmp_path / "all_reduce_perf").write_text("not a program")
    assert find_all_reduce_perf({"NCCL_TESTS_BIN_PATH": str(tmp_path)}) is None
