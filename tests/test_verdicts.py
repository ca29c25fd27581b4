"""One figure, one verdict: a min_*_bw marker and a check item judge a measured figure by the same
threshold rule, and wrong data is a broken node (a failure, never a skip) in both.

No GPU here: a conftest makes a recorded machine pass for this host (source ``nvml``, nothing
published) and replaces ``BenchSuite._run`` -- the one place a benchmark runs -- by figures the
test chooses, so the plugin's own judging runs unchanged on them.
"""

import json
from html.parser import HTMLParser

import pytest

from pytest_gputopo.core import keys

CONFTEST = """
import dataclasses, json, os
import pytest
from pytest_gputopo.core import model
from pytest_gputopo.bench import suite as bench_suite

@pytest.hookimpl(tryfirst=True)
def pytest_gputopo_probe(config):
    from pytest_gputopo.probe import probe_recorded
    topo = probe_recorded(os.environ["GPUTOPO_TEST_MACHINE"])
    return dataclasses.replace(topo, source=model.Source("nvml"), published=())

def fake_run(self, key):
    figures = json.loads(os.environ["GPUTOPO_TEST_FIGURES"])
    gbps, error, *detail = figures.get(key.kind, (None, "not measured in this test"))
    return gbps, (detail[0] if detail else {}), error

if "GPUTOPO_TEST_FIGURES" in os.environ:
    bench_suite.BenchSuite._run = fake_run
"""


@pytest.fixture
def gpu_host(pytester, monkeypatch):
    def run(machine, figures, src, *args):
        monkeypatch.setenv("GPUTOPO_TEST_MACHINE", machine)
        monkeypatch.setenv("GPUTOPO_TEST_FIGURES", json.dumps(figures))
        pytester.makeconftest(CONFTEST)
        pytester.makepyfile(test_bw=src)
        return pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", "--gputopo-json", "out.json", *args)

    return run


def _checks(pytester) -> dict:
    doc = json.loads((pytester.path / "out.json").read_text())
    return {c["check"]: c for c in doc["checks"]}


def judge_allreduce(gpu_host, figure: list, *args):
    """A test marked ``min_allreduce_bw()`` and the full check's all-reduce item, both on ``figure``
    ([GB/s, error, detail]) of an 8-GPU all-reduce on hgx-h100 at 16 GiB."""
    src = "import pytest\n@pytest.mark.min_allreduce_bw()\ndef test_allreduce(): pass\n"
    size = ("--gputopo-allreduce-size", "16G")
    return gpu_host("hgx-h100", {"allreduce": figure}, src, *size, "--gputopo-check=full", "-k", "allreduce", *args)


@pytest.mark.slow
def test_marker_and_check_item_judge_one_all_reduce_figure_alike(gpu_host, pytester):
    """One figure, one verdict: 300 GB/s on 8x H100 SXM at 16 GiB reaches 0.6 x 450 = 270 but misses
    the published per-SKU floor of 440, so the marker fails as the check item does (they once
    disagreed)."""
    result = judge_allreduce(gpu_host, [300.0, None])
    result.stdout.fnmatch_lines(
        [
            "*min_allreduce_bw(): all-reduce busbw, 8 ranks, 16 GiB: measured 300* GB/s, "
            "needed 440.0 (published H100 SXM 8-GPU all-reduce floor)*"
        ]
    )
    assert _checks(pytester)["allreduce_bw"]["outcome"] == "failed"
    assert "needed 440.0" in _checks(pytester)["allreduce_bw"]["message"]


@pytest.mark.slow
def test_a_floor_that_assumes_nvls_does_not_judge_a_run_nccl_took_without_it(gpu_host, pytester):
    """The per-SKU floor of 8x H100 (440 GB/s) is above what a ring reaches: it assumes NVLink SHARP.
    When NCCL's log says the all-reduce took another algorithm (``nvls`` False), the floor ratio x the
    expected figure judges it, in the marker and the check alike."""
    result = judge_allreduce(gpu_host, [300.0, None, {"nvls": False, "algo": "RING"}])
    result.assert_outcomes(passed=1)  # the test; the check's item is counted apart
    result.stdout.fnmatch_lines(["gputopo check: 1 passed"])
    assert "needed 440" not in _checks(pytester)["allreduce_bw"]["message"]


@pytest.mark.slow
def test_an_explicit_floor_rules_marker_and_check_alike(gpu_host, pytester):
    result = judge_allreduce(gpu_host, [300.0, None], "--gputopo-floor-allreduce", "0.6")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["gputopo check: 1 passed"])
    assert _checks(pytester)["allreduce_bw"]["outcome"] == "passed"


def test_a_p2p_copy_slower_than_staging_fails_marker_and_check_alike(gpu_host, pytester):
    """A P2P copy slower than the same copy staged through the host fails ``min_p2p_bw`` as it fails
    the check item: one rule (``core.judgement``) judges both."""
    src = "import pytest\n@pytest.mark.min_p2p_bw(gpus=2)\ndef test_p2p(): pass\n"
    result = gpu_host(
        "hgx-h100",
        {"p2p": [400.0, None], "p2p_staged": [420.0, None]},
        src,
        "--gputopo-check=full",
        "--gputopo-strict",
        "-k",
        "test_p2p or p2p_bw",
    )
    result.stdout.fnmatch_lines(
        [
            "*min_p2p_bw(gpus=2): GPU0->GPU1 copy, P2P: measured 400* GB/s, slower than the "
            "same copy staged through the host (420.0 GB/s): not P2P*"
        ]
    )
    check = _checks(pytester)["p2p_bw[GPU0->GPU1]"]
    assert check["outcome"] == "failed" and "slower than staging through the host (420.00 GB/s)" in check["message"]


@pytest.mark.slow
def test_a_figure_nothing_can_judge_is_unknown_in_marker_and_check(gpu_host, pytester):
    """A figure no expectation judges (gloo's CPU all-reduce) is unknown in both: the check item is
    skipped with the reason (it once passed, "not judged"), the marker unmet."""
    src = "import pytest\n@pytest.mark.min_allreduce_bw()\ndef test_allreduce(): pass\n"
    result = gpu_host(
        "hgx-h100",
        {"allreduce": [1.5, None]},
        src,
        "--gputopo-check=full",
        "--gputopo-allreduce-backend",
        "gloo",
        "-k",
        "allreduce",
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED allreduce_bw: not judged: *gloo on CPUs*", "gputopo check: 1 skipped"])
    check = _checks(pytester)["allreduce_bw"]
    assert check["outcome"] == "skipped" and "not judged: gloo on CPUs" in check["message"]
    result.stdout.fnmatch_lines(["*min_allreduce_bw(): *no expected bandwidth is known for gloo on CPUs*"])


class _TitledCells(HTMLParser):
    """Each table cell's title (its figure in words) -> its data-state (the verdict it shows)."""

    def __init__(self):
        super().__init__()
        self.states = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "td" and "data-state" in attrs:
            self.states[attrs.get("title", "")] = attrs["data-state"]


def _html_state(path, what: str) -> str:
    parser = _TitledCells()
    parser.feed(path.read_text())
    (state,) = [s for title, s in parser.states.items() if title.startswith(what + ";")]
    return state


@pytest.mark.parametrize(
    "p2p,staged,marker,check,state",
    [
        (400.0, 100.0, "met", "passed", {"met"}),
        (400.0, 420.0, "unmet", "failed", {"staged"}),  # reaches its floor, but slower than staging: no P2P
        (300.0, None, "unmet", "failed", {"below"}),  # under 0.7 x 450 GB/s (NVLink 4.0 x 18)
    ],
)
@pytest.mark.slow
def test_one_figure_gets_one_verdict_in_the_marker_the_check_the_json_and_the_html(
    gpu_host, pytester, p2p, staged, marker, check, state
):
    """One P2P figure on one machine: the marker, the check item, the JSON report's measurement and
    its HTML cell all say the verdict the one rule (``core.judgement``) gave -- the HTML reads it
    from the document and never judges again, so it cannot call "met" a copy the marker found
    slower than staging through the host."""
    figures = {"p2p": [p2p, None], **({"p2p_staged": [staged, None]} if staged is not None else {})}
    src = "import pytest\n@pytest.mark.min_p2p_bw(gpus=2)\ndef test_p2p(): pass\n"
    gpu_host("hgx-h100", figures, src, "--gputopo-check=full", "-k", "test_p2p or p2p_bw", "--gputopo-html", "out.html")
    doc = json.loads((pytester.path / "out.json").read_text())
    (verdict,) = [v for v in doc["verdicts"] if v["test"].endswith("test_p2p")]
    assert verdict["verdict"] == marker
    assert _checks(pytester)["p2p_bw[GPU0->GPU1]"]["outcome"] == check
    (entry,) = [m for m in doc["measurements"] if m["key"] == ["p2p", 0, 1]]
    assert {entry["state"]} == state
    assert entry["expected"]["needed_gbps"] == pytest.approx(0.7 * 450)
    assert {_html_state(pytester.path / "out.html", "GPU0->GPU1 copy, P2P")} <= state | {"above"}


def test_wrong_data_fails_the_marker_even_when_not_strict(gpu_host, pytester):
    """Wrong data from a benchmark is a broken node, not a skip: the marker fails (at setup, without
    --gputopo-strict), as the check item does."""
    src = "import pytest\n@pytest.mark.min_allreduce_bw(0.001)\ndef test_allreduce(): pass\n"
    result = gpu_host(
        "dgx-a100",
        {"allreduce": [250.0, "12 wrong elements after the all-reduce"]},
        src,
        "--gputopo-check=full",
        "-k",
        "allreduce",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == 1 and "skipped" not in outcomes and "passed" not in outcomes
    result.stdout.fnmatch_lines(
        [
            "*broken node: min_allreduce_bw(0.001): all-reduce busbw, 8 ranks, 1 GiB: "
            "measured 250* GB/s; data wrong: 12 wrong elements after the all-reduce*"
        ]
    )
    assert _checks(pytester)["allreduce_bw"]["outcome"] == "failed"


# ------------------------------------------------------------------ PCIe read at idle


def _idle(name: str):
    """A recorded machine as NVML reads it at idle: every GPU's current link at Gen1, as NVIDIA GPUs
    drop to save power (`nvidia-smi --help-query-gpu`: the current link generation and width "may be
    reduced when the GPU is not in use"; `nvidia-smi -q -d PCIE` shows Max and Current)."""
    import dataclasses

    from pytest_gputopo.probe import probe_recorded

    t = probe_recorded(name)
    return dataclasses.replace(t, gpus=tuple(dataclasses.replace(g, pcie_gen_current=1) for g in t.gpus))


def test_expectations_use_the_links_maximum_not_the_idle_generation():
    """An idle H100 (its link at Gen1) keeps the expected host->device and P2P figures of its Gen5 x16 link."""
    from pytest_gputopo.core import spec
    from pytest_gputopo.probe import probe_recorded

    idle = _idle("hgx-h100")
    assert spec.pcie_line_rate(idle.gpus[0]).label == "PCIe Gen5 x16"
    healthy = probe_recorded("hgx-h100").gpus[0]
    assert spec.h2d_expected(idle.gpus[0], True) == spec.h2d_expected(healthy, True)
    assert spec.p2p_expected(idle, 0, 1) == spec.p2p_expected(probe_recorded("hgx-h100"), 0, 1)


def test_an_idle_gpu_is_no_regression():
    """--gputopo-expect does not call an idle GPU's Gen1 a regression against its own healthy
    reference: only the maximum and the width are compared."""
    from pytest_gputopo.core.regressions import regressions
    from pytest_gputopo.probe import probe_recorded

    assert regressions(probe_recorded("hgx-h100"), _idle("hgx-h100")) == []
    assert regressions(probe_recorded("hgx-h100"), probe_recorded("hgx-h100-pcie-x8")) == [
        "GPU2 PCIe link trained down: x8 of x16 (the reference's width; Gen3 of Gen5)"
    ]


# ------------------------------------------------------------------ nccl-tests' own verdict

NCCL_TESTS = """\
# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  1073741824     268435456     float     sum      -1   4829.1  222.35  389.11      0   4790.7  224.13  392.23  {ip_wrong}
# Out of bounds values : {oob} {verdict}
# Avg bus bandwidth    : 390.67
#
"""  # noqa: E501 (the tool's own lines, verbatim)


@pytest.mark.parametrize(
    "ip_wrong,oob,verdict,error",
    [
        (0, 0, "OK", None),
        (3, 0, "FAILED", "nccl-tests reported 3 wrong elements in-place"),
        (0, 5, "FAILED", "nccl-tests reported 'Out of bounds values : 5 FAILED'"),
    ],
)
def test_nccl_tests_figure_and_verdict_are_its_own(monkeypatch, ip_wrong, oob, verdict, error):
    """In-place #wrong and a FAILED "Out of bounds" line fail the run, and the figure is nccl-tests'
    own, not the larger of out-of-place and in-place. nccl-tests (src/common.cu) prints per-placement #wrong,
    ends with "# Out of bounds values : N OK|FAILED" and reports "# Avg bus bandwidth" over every
    cell; any wrong value fails, and the figure is the one it reports."""
    import dataclasses

    from pytest_gputopo.bench import nccl_tests
    from pytest_gputopo.bench.suite import BenchSettings, BenchSuite
    from pytest_gputopo.core import model
    from pytest_gputopo.parse.nccl_tests import parse_nccl_tests
    from pytest_gputopo.probe import probe_recorded

    text = NCCL_TESTS.format(ip_wrong=ip_wrong, oob=oob, verdict=verdict)
    monkeypatch.setattr(nccl_tests, "run_all_reduce_perf", lambda *a, **k: parse_nccl_tests(text))
    host = dataclasses.replace(probe_recorded("hgx-h100"), source=model.Source("nvml"), published=())
    suite = BenchSuite(host, BenchSettings(allreduce_engine="nccl-tests", nccl_tests_binary="all_reduce_perf"))
    gbps, detail, got = suite._run(keys.AllReduce(8, 2**30))
    assert gbps == 390.67 and got == error


@pytest.mark.slow
def test_nccl_tests_wrong_data_fails_marker_and_check_item(pytester, monkeypatch, tmp_path):
    """Issues 8.12, 8.13: nccl-tests that found wrong data exits with testNumResults (7) after its
    summary (src/common.cu run(); main's TESTCHECK). That exit read as "no figure", so the marker only
    skipped. Run end to end through a fake all_reduce_perf: the marker fails (not strict) and the
    check item fails, both on the data, with the figure nccl-tests reported."""
    import sys
    import textwrap

    folder = tmp_path / "bin"
    folder.mkdir()
    text = NCCL_TESTS.format(ip_wrong=3, oob=1, verdict="FAILED") + " .. node1 pid 1: Test failure common.cu:1453\n"
    binary = folder / "all_reduce_perf"
    binary.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write({text!r})\nsys.exit(7)\n")
    binary.chmod(0o755)
    monkeypatch.setenv("NCCL_TESTS_BIN_PATH", str(folder))
    monkeypatch.setenv("GPUTOPO_TEST_MACHINE", "hgx-h100")
    monkeypatch.delenv("GPUTOPO_TEST_FIGURES", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_bw=textwrap.dedent("""\
        import pytest
        @pytest.mark.min_allreduce_bw(0.001)
        def test_allreduce(): pass
        """)
    )
    result = pytester.runpytest_subprocess(
        "-rA",
        "-p",
        "no:cacheprovider",
        "--gputopo-json",
        "out.json",
        "--gputopo-allreduce-engine",
        "nccl-tests",
        "--gputopo-check=full",
        "-k",
        "allreduce",
    )
    result.stdout.fnmatch_lines(
        [
            "*broken node: min_allreduce_bw(0.001): all-reduce busbw, 8 ranks, 1 GiB: "
            "measured 390.7 GB/s; data wrong: nccl-tests reported 3 wrong elements in-place, "
            "'Out of bounds values : 1 FAILED'*"
        ]
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == 1 and "skipped" not in outcomes and "passed" not in outcomes
    assert _checks(pytester)["allreduce_bw"]["outcome"] == "failed"
    assert "data wrong: nccl-tests reported 3 wrong elements" in _checks(pytester)["allreduce_bw"]["message"]


NCCL_RUN_WRONG = {
    "nccl_transports": [
        None,
        None,
        {"pairs": {"0-1": ["P2P"]}, "wrong": 5, "log": {"transports": ["P2P"], "families": ["P2P"], "gdrdma": False}},
    ]
}


def test_wrong_data_in_nccls_own_run_fails_the_transport_marker(gpu_host):
    """NCCL's account is taken from a small all-reduce whose data are checked; when they come back
    wrong the transport marker fails (a broken node), whatever transport NCCL reported."""
    src = "import pytest\n@pytest.mark.requires_nccl_transport('P2P', gpus=2)\ndef test_p2p(): pass\n"
    result = gpu_host("hgx-h100", NCCL_RUN_WRONG, src)
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == 1 and "skipped" not in outcomes and "passed" not in outcomes
    result.stdout.fnmatch_lines(
        [
            "*broken node: requires_nccl_transport('P2P', gpus=2): NCCL's transports among "
            "8 GPUs*: 5 wrong elements after the all-reduce*"
        ]
    )


def test_wrong_data_fails_the_run_gate(gpu_host):
    """The no-fallback gate rests on NCCL's run; wrong data there is a broken node."""
    result = gpu_host("hgx-h100", NCCL_RUN_WRONG, "def test_x(): pass\n", "--gputopo-require", "no-fallback")
    assert result.ret == 8
    result.stdout.fnmatch_lines(["*- broken node: no-fallback: NCCL's transports among 8 GPUs*: 5 wrong elements*"])


# ------------------------------------------------------------------ --gputopo-expect and CUDA_VISIBLE_DEVICES


@pytest.mark.parametrize(
    "visible,machine,ret,lines",
    [
        # GPUs 0-3 of a healthy node against the node's own reference: no regression
        ("0,1,2,3", "hgx-h100", 0, []),
        # GPUs 4-7 of the node whose GPU5 lost its NVLinks: named GPU5, as nvidia-smi numbers it
        (
            "4,5,6,7",
            "hgx-h100-nvlink-down",
            8,
            [
                "*expected as hgx-h100: GPU5 has 0 active NVLinks, the reference 18*",
                "*expected as hgx-h100: GPU4-GPU5 are linked by NODE, the reference by NV18*",
            ],
        ),
    ],
)
def test_expect_compares_the_physical_gpus_the_job_sees(pytester, monkeypatch, visible, machine, ret, lines):
    """A job seeing GPUs 0-3 of a healthy node passes against the node's own reference (fewer GPUs
    are no regression when they are the ones the job sees), and GPUs 4-7 of a degraded node name GPU5
    as nvidia-smi does, not "GPU1"."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    pytester.makepyfile(test_x="def test_x(): pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", machine, "--gputopo-expect", "hgx-h100")
    assert result.ret == ret
    result.stdout.fnmatch_lines(lines)
    assert "GPU1 has 0 active NVLinks" not in result.stdout.str()


def test_expect_takes_nvidia_smi_text_as_machine_does(pytester):
    """--gputopo-expect accepts a `.txt` matrix, as --gputopo-machine does."""
    from pytest_gputopo.probe import probe_recorded
    from pytest_gputopo.render.smi_topo import render_topo_matrix

    (pytester.path / "healthy.txt").write_text(render_topo_matrix(probe_recorded("hgx-h100")))
    pytester.makepyfile(test_x="def test_x(): pass\n")
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--gputopo-machine", "hgx-h100-nvlink-down", "--gputopo-expect", "healthy.txt"
    )
    assert result.ret == 8
    result.stdout.fnmatch_lines(["*expected as healthy.txt: GPU0-GPU5 are linked by SYS, the reference by NV18*"])
