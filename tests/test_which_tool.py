"""``parse.which_tool``, the one recogniser of tools' texts: every real sample (the shared corpus, read in
place, ``tests/captured``, ``tests/smi_q``, ``tests/nccl_logs``) is recognised as the tool that wrote
it, and refused by every other ``gputopo parse`` format naming that tool; ``gputopo record`` picks a
listing's reader by it; arbitrary text never crashes it (hypothesis)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from conftest import CORPUS, NO_CORPUS, run_cli as run
from pytest_gputopo.cli import parse as cli_parse
from pytest_gputopo.parse.smi_q import SmiQParseError
from pytest_gputopo.parse.smi_query import SmiQueryParseError
from pytest_gputopo.parse.text_machine import LISTING_ERRORS, read_listing
from pytest_gputopo.parse.which_tool import TOOLS, reader_name, refusal, tools_in

HERE = Path(__file__).resolve().parent

TOPO_M, TOPO_P2P, SMI_Q, SMI_L = "nvidia-smi topo -m", "nvidia-smi topo -p2p", "nvidia-smi -q", "nvidia-smi -L"
NCCL_TESTS, NCCL_LOG, QUERY = "nccl-tests", "NCCL's log (NCCL_DEBUG=INFO)", "nvidia-smi --query-gpu"
# The corpus's folders and the tool that wrote their samples (ncclperf/: nccl-tests, or its meta's tool).
_FOLDERS = {
    "topo": TOPO_M,
    "p2pmatrix": TOPO_P2P,
    "nccl": NCCL_LOG,
    "ncclperf": NCCL_TESTS,
    "nvbandwidth": "nvbandwidth",
    "nvlink-status": "nvidia-smi nvlink -s",
    "rocm": "rocm-smi",
}
_CAPTURED = {  # tests/captured/h200-driver-580, by the command its README names
    "list.txt": SMI_L,
    "query.csv": QUERY,
    "query-noheader.csv": QUERY,
    "query.xml": "nvidia-smi -q -x",
    "topo-m.txt": TOPO_M,
    "topo-p2p-r.txt": TOPO_P2P,
    "topo-p2p-w.txt": TOPO_P2P,
}
# nccl-tests run with NCCL_DEBUG=INFO prints NCCL's log among its lines: such a sample holds both.
_BOTH = {NCCL_TESTS, NCCL_LOG}


def _corpus_tool(path: Path) -> str:
    said = json.loads(path.with_suffix(".meta.json").read_text())["expected"].get("tool")
    return said if path.parent.name == "ncclperf" and said else _FOLDERS[path.parent.name]


def _samples() -> list[tuple[Path, str]]:
    found = [(p, _corpus_tool(p)) for p in sorted(CORPUS.glob("*/*.txt"))] if CORPUS.is_dir() else []
    found += [(HERE / "captured" / "h200-driver-580" / name, tool) for name, tool in _CAPTURED.items()]
    for path in sorted((HERE / "smi_q").glob("*.txt")):
        tool = SMI_L if path.name.endswith("-L.txt") else SMI_Q
        found.append((path, "nvidia-smi (a GPU it cannot reach)" if path.name.startswith("lost-gpu") else tool))
    found += [(p, NCCL_LOG) for p in sorted((HERE / "nccl_logs").glob("*.log"))]
    return found


SAMPLES = _samples()
_IDS = [f"{p.parent.name}/{p.name}" for p, _ in SAMPLES]


def _names(text: str) -> list[str]:
    return [tool.name for tool in tools_in(text)]


def test_the_samples_are_all_here():
    """Every kind the project's own folders hold, and the corpus's when it is here."""
    kinds = {tool for _, tool in SAMPLES}
    assert {TOPO_M, TOPO_P2P, SMI_Q, SMI_L, QUERY, "nvidia-smi -q -x", NCCL_LOG} <= kinds
    if not CORPUS.is_dir():
        pytest.skip(NO_CORPUS)
    assert set(_FOLDERS.values()) | {"p2pBandwidthLatencyTest"} <= kinds


@pytest.mark.parametrize("path, tool", SAMPLES, ids=_IDS)
def test_each_sample_is_recognised_as_the_tool_that_wrote_it(path, tool):
    names = _names(path.read_text(errors="replace"))
    if tool in _BOTH:
        assert tool in names and set(names) <= _BOTH, names
    else:
        assert names == [tool]


@pytest.mark.parametrize("path, tool", SAMPLES, ids=_IDS)
def test_every_other_reader_refuses_a_sample_naming_its_tool(path, tool, capsys):
    """`gputopo parse FORMAT FILE` of another tool's sample: exit 2, one line naming the tool and what
    to do with the text; the formats of the tools the sample holds read it (or refuse it by their own
    rules, as -q's reader a lost GPU's line)."""
    found = tools_in(path.read_text(errors="replace"))
    first = found[0]
    refused = 0
    for fmt in cli_parse._PARSERS:
        if any(fmt in t.readers for t in found):
            continue
        code, out, err = run(capsys, "parse", fmt, path)
        said = f"this is {first.said}, not {reader_name(fmt)}: {first.where_to()}"
        assert (code, out, err) == (2, "", f"gputopo: {path}: {said}\n"), fmt
        refused += 1
    assert refused >= len(cli_parse._PARSERS) - 3


# rocm-smi --showtopo's weight matrix, as it prints it (corpus rocm/001 is its whole --showtopo): the
# section's title, then the GPUs' weights, 0 where a GPU meets itself.
ROCM_WEIGHTS = """\
================================ Weight between two GPUs =================================
       GPU0         GPU1         GPU2         GPU3
GPU0   0            15           15           15
GPU1   15           0            15           15
GPU2   15           15           0            15
GPU3   15           15           15           0
"""


@pytest.mark.parametrize("titled", [True, False], ids=["with-its-title", "matrix-alone"])
def test_a_rocm_smi_weight_matrix_is_refused_as_rocm_smi_by_the_new_readers(tmp_path, capsys, titled):
    """issue 39 item 4: `gputopo parse smi-q` called a rocm-smi weight matrix "an nvidia-smi topo matrix",
    and `gputopo parse nccl-topo` refused it as bad XML; both now refuse it naming rocm-smi, as the
    older readers do, through the one recogniser."""
    path = tmp_path / "weights.txt"
    path.write_text(ROCM_WEIGHTS if titled else ROCM_WEIGHTS.split("\n", 1)[1])
    for fmt, reader in (("smi-q", "nvidia-smi -q"), ("nccl-topo", "NCCL's topology dump (NCCL_TOPO_DUMP_FILE)")):
        code, out, err = run(capsys, "parse", fmt, path)
        assert (code, out) == (2, ""), err
        assert err == (
            f"gputopo: {path}: this is rocm-smi output (AMD GPUs), not {reader}: "
            f"pytest-gputopo reads NVIDIA machines only\n"
        )
    code, out, err = run(capsys, "parse", "smi-topo", path)
    assert code == 2 and "this is rocm-smi output (AMD GPUs), not nvidia-smi topo -m" in err


@pytest.mark.parametrize(
    "text, tool, says",
    [
        (
            "+-----------------------------------------------------------------------------------------+\n"
            "| NVIDIA-SMI 550.90.07              Driver Version: 550.90.07      CUDA Version: 12.4     |\n",
            "nvidia-smi's summary table",
            "it lists no UUID and no link: give nvidia-smi -q",
        ),
        (
            "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-fde0a018-ad1a-bbec-ccf6-50a9f64bd178)\n"
            "\t Link 0, P2P is supported: true\n\t Link 0, Access to system memory supported: true\n",
            "nvidia-smi nvlink",
            "gputopo reads nvidia-smi nvlink -s",
        ),
        ('<?xml version="1.0"?>\n<system version="1">\n</system>\n', "NCCL's topology dump (NCCL_TOPO_DUMP_FILE)", ""),
        ("\tGPU0\tCPU Affinity\nGPU0\t X \t0-15\n", "nvidia-smi topo", "gputopo parse smi-topo (or smi-p2p)"),
        ("GPU0\t X \tOK\nGPU1\tOK\t X\n", TOPO_P2P, "gputopo parse smi-p2p"),
        ("GPU[0]\t\t: (Topology) Numa Node: 0\n", "rocm-smi", "NVIDIA machines only"),
    ],
)
def test_tools_without_a_sample_here_are_told_too(text, tool, says):
    assert _names(text) == [tool]
    why = refusal(text, "nvbandwidth")
    assert why is not None and why.startswith(f"this is {TOOLS[[t.name for t in TOOLS].index(tool)].said}, not")
    assert says in why and "\n" not in why


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello\nworld\n",
        "GPU0 GPU1\n",  # a header alone says no tool
        "Link 0 is up\n",
        "the name, index and uuid of each GPU\n",
        "NCCL INFOx\n",
    ],
)
def test_text_of_no_known_tool_is_left_to_the_readers_rules(text):
    assert tools_in(text) == () and all(refusal(text, fmt) is None for fmt in cli_parse._PARSERS)


def test_a_reader_reads_a_text_that_holds_its_own_output_among_others():
    """A paste of plain nvidia-smi above its -q report is -q's to read; nccl-tests' with NCCL's log is
    both formats'."""
    both = (HERE / "smi_q" / "hgx-h100-545.txt").read_text()
    summary = "| NVIDIA-SMI 545.23.08              Driver Version: 545.23.08    CUDA Version: 12.3     |\n"
    assert refusal(summary + both, "smi-q") is None
    assert refusal(summary + both, "smi-xml").startswith("this is nvidia-smi's summary table")
    mixed = "host:1:1 [0] NCCL INFO Bootstrap\n#  Avg bus bandwidth    : 40.6\n"
    assert refusal(mixed, "nccl-tests") is None and refusal(mixed, "nccl-log") is None


def test_nvlink_s_is_not_taken_for_l_nor_l_for_nvlink_s():
    listing = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-10f35015-e921-bfab-2eb8-4e9b6664d5f1)\n"
    assert _names(listing) == [SMI_L]
    for link in ("\t Link 0: 26.562 GB/s\n", "\t Link 0: <inactive>\n", "\t Link 0: &lt;inactive&gt;\n"):
        assert _names(listing + link) == ["nvidia-smi nvlink -s"], link


def test_windows_line_ends_are_read_alike():
    text = (HERE / "captured" / "h200-driver-580" / "topo-m.txt").read_text()
    assert _names(text.replace("\n", "\r\n")) == _names(text) == [TOPO_M]


_LISTED = [(p, t) for p, t in SAMPLES if t in (SMI_Q, SMI_L, QUERY, "nvidia-smi -q -x") and "noheader" not in p.name]


@pytest.mark.parametrize("path, tool", _LISTED, ids=[p.name for p, _ in _LISTED])
def test_record_reads_each_listing_by_the_tool_that_wrote_it(path, tool):
    assert read_listing(path.read_text()).tool == tool


def test_record_refuses_another_tools_listing_naming_it():
    with pytest.raises(LISTING_ERRORS, match="this is an NCCL_DEBUG=INFO log, not nvidia-smi --query-gpu"):
        read_listing((HERE / "nccl_logs" / "2.21.5-nvlink-2gpu.log").read_text())
    with pytest.raises(SmiQueryParseError, match="this is rocm-smi output"):
        read_listing(ROCM_WEIGHTS)
    with pytest.raises(SmiQParseError, match="nvidia-smi printed no report"):  # -q's reader explains it
        read_listing((HERE / "smi_q" / "lost-gpu-a-i0.txt").read_text())


def test_every_gputopo_parse_format_is_a_known_tool():
    """Each `gputopo parse` format names what it reads (and a new format, its tool's lines), and every
    tool's readers are formats: one table of tools for every refusal."""
    assert {fmt: reader_name(fmt) for fmt in cli_parse._PARSERS}
    assert {r for tool in TOOLS for r in tool.readers} == set(cli_parse._PARSERS)
    assert len({tool.name for tool in TOOLS}) == len(TOOLS)
    assert all(tool.readers or tool.advice for tool in TOOLS)


# Lines of every sample's opening, and of the clues' shapes, to mix with arbitrary text.
_LINES = sorted(
    {line for path, _ in SAMPLES for line in path.read_text(errors="replace").splitlines()[:40]}
    | {"GPU0 0 1", "GPU1 1 0", "GPU0 X OK", "GPU0 X NV4", "Link 0: 25 GB/s", "index, name, uuid", ", GPU-0000-0000"}
)


@given(
    st.lists(st.sampled_from(_LINES) | st.text(max_size=80), max_size=30), st.sampled_from(sorted(cli_parse._PARSERS))
)
def test_arbitrary_text_never_crashes_the_recogniser(lines, fmt):
    text = "\n".join(lines)
    found = tools_in(text)
    assert all(tool in TOOLS for tool in found)
    why = refusal(text, fmt)
    assert why is None or (why.startswith("this is ") and "\n" not in why and found)


@given(st.one_of(st.text(), st.binary(), st.none(), st.integers()))
def test_anything_not_text_holds_no_tool(value):
    if isinstance(value, str):
        tools_in(value)
    else:
        assert tools_in(value) == () and refusal(value, "smi-q") is None


def test_a_speed_written_with_an_exponent_is_still_nvlink_status():
    """The renderer writes a speed as ``repr`` does (``1.0545370820034256e-208``), and the reader
    reads it: the recogniser, too, takes it for nvlink -s (hypothesis found it in a CI rehearsal)."""
    text = "GPU 0: (UUID: GPU-e3e70682-c209-4cac-629f-6fbed82c07cd)\n\t Link 0: 1.0545370820034256e-208 GB/s\n"
    assert [t.name for t in tools_in(text)] == ["nvidia-smi nvlink -s"]
