"""``nvidia-smi nvlink -s``: the parser against every real sample in ../shared/corpus (read in place),
texts written here in the shapes nvidia-smi prints (V100, several GPUs, all links inactive, lost tabs,
Windows line ends), cuts, refusals of every other kind of text, and property tests with the renderer."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from hypothesis import assume, given, strategies as st

from conftest import CORPUS, NO_CORPUS, corpus_cases, corpus_meta, corpus_samples, corpus_samples_but
from pytest_gputopo.parse.nvlink_status import (
    ALL_INACTIVE_LINE,
    MAX_GPU_INDEX,
    MAX_LINK,
    GpuLinks,
    LinkState,
    NvlinkStatus,
    NvlinkStatusParseError,
    parse_nvlink_status,
)
from pytest_gputopo.render.nvlink_status import format_gbps, render_nvlink_status

NVLINK = CORPUS / "nvlink-status"


SAMPLES = corpus_samples("nvlink-status")
OTHER_TEXTS = corpus_samples_but("nvlink-status")


def _check(status: NvlinkStatus) -> None:
    """What every parse returns: GPUs with unique indices in range, each with unique links in range,
    active exactly when a positive finite speed was read; one-line warnings; strict JSON."""
    assert status.gpus and any(g.links or g.all_inactive for g in status.gpus)
    indices = [g.index for g in status.gpus]
    assert len(set(indices)) == len(indices) and all(0 <= i <= MAX_GPU_INDEX for i in indices)
    for gpu in status.gpus:
        numbers = [link.link for link in gpu.links]
        assert len(set(numbers)) == len(numbers) and all(0 <= n <= MAX_LINK for n in numbers)
        for link in gpu.links:
            assert link.active == (link.gbps is not None)
            assert link.gbps is None or (math.isfinite(link.gbps) and link.gbps > 0)
        assert gpu.active_links + gpu.inactive_links == len(gpu.links)
        assert gpu.uuid is None or gpu.uuid.startswith("GPU-")
    assert all(isinstance(w, str) and w and "\n" not in w for w in status.warnings)
    assert len(set(status.warnings)) == len(status.warnings)
    json.dumps(status.to_json(), allow_nan=False)


def _refused(text) -> str:
    with pytest.raises(NvlinkStatusParseError) as info:
        parse_nvlink_status(text)
    message = str(info.value)
    assert message and "\n" not in message
    return message


# ------------------------------------------------------------------------------------ corpus


def test_corpus_has_samples():
    if not NVLINK.is_dir():
        pytest.skip(NO_CORPUS)
    assert SAMPLES


@pytest.mark.parametrize("path", corpus_cases(SAMPLES))
def test_corpus_sample_meets_its_meta(path: Path):
    meta = corpus_meta(path)
    status = parse_nvlink_status(path.read_text())
    _check(status)
    want = meta["expected"]["gpus"]
    assert len(status.gpus) == len(want)
    for gpu, expect in zip(status.gpus, want, strict=True):
        assert (gpu.index, gpu.name, gpu.uuid) == (expect["index"], expect["name"], expect["uuid"])
        assert len(gpu.links) == expect["n_links"]
        assert sorted({link.gbps for link in gpu.links if link.active}) == pytest.approx(
            sorted(expect["link_speeds_gbps"])
        )
        assert gpu.inactive_links == expect["inactive_links"]
        assert [link.link for link in gpu.links] == list(range(len(gpu.links)))
    if not meta.get("truncated") and not meta.get("mangled"):
        assert not status.warnings
    # What the renderer writes for a parsed real sample reads back the same.
    assert parse_nvlink_status(render_nvlink_status(status)) == status


@pytest.mark.parametrize("path", corpus_cases(SAMPLES))
def test_corpus_sample_rendered_as_printed(path: Path):
    """Unmangled samples are nvidia-smi's own bytes: the renderer writes them back, to the byte."""
    meta = corpus_meta(path)
    if meta.get("truncated") or meta.get("mangled"):
        pytest.skip("the publication altered this sample")
    text = path.read_text()
    assert render_nvlink_status(parse_nvlink_status(text)) == text.rstrip("\n") + "\n"


@pytest.mark.parametrize("path", corpus_cases(OTHER_TEXTS))
def test_every_other_corpus_text_is_refused(path: Path):
    _refused(path.read_text(errors="replace"))


# ---------------------------------------------------------------- formats nvidia-smi prints

V100 = """\
GPU 0: Tesla V100-SXM2-32GB (UUID: GPU-0a1b2c3d-0000-1111-2222-333344445555)
\t Link 0: 25.781 GB/s
\t Link 1: 25.781 GB/s
\t Link 2: 25.781 GB/s
\t Link 3: <inactive>
\t Link 4: 25.781 GB/s
\t Link 5: <inactive>
"""

SEVERAL = """\
GPU 0: NVIDIA GB200 (UUID: GPU-11111111-2222-3333-4444-555555555555)
\t Link 0: 53.125 GB/s
\t Link 1: 53.125 GB/s
\t Link 2: 53.125 GB/s
GPU 1: NVIDIA GB200 (UUID: GPU-66666666-7777-8888-9999-aaaaaaaaaaaa)
\t Link 0: 53.125 GB/s
\t Link 1: <inactive>
\t Link 2: 53.125 GB/s
GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbbbbbb-cccc-dddd-eeee-ffffffffffff)
\t Link 0: 26.562 GB/s
"""

ALL_INACTIVE = f"""\
GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-12345678-abcd-ef01-2345-6789abcdef01)
\t {ALL_INACTIVE_LINE}
GPU 1: NVIDIA GeForce RTX 3090 (UUID: GPU-87654321-abcd-ef01-2345-6789abcdef01)
\t {ALL_INACTIVE_LINE}
"""

NVIDIA_SMI_L = """\
GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-fde0a018-ad1a-bbec-ccf6-50a9f64bd178)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-0b1e7e62-1cc6-4d6b-9f3a-3a2f6a8f0c11)
  MIG 1g.5gb      Device  0: (UUID: MIG-2e4c9c1e-4b1f-5a6f-9d0e-1f2a3b4c5d6e)
"""

WRITTEN = [V100, SEVERAL, ALL_INACTIVE]


def test_v100_decimal_speeds_and_inactive_links():
    status = parse_nvlink_status(V100)
    _check(status)
    assert not status.warnings
    (gpu,) = status.gpus
    assert (gpu.index, gpu.name, gpu.uuid) == (0, "Tesla V100-SXM2-32GB", "GPU-0a1b2c3d-0000-1111-2222-333344445555")
    assert gpu.links[3] == LinkState(3, False, None)
    assert gpu.links[0] == LinkState(0, True, 25.781)
    assert (gpu.active_links, gpu.inactive_links, gpu.all_inactive) == (4, 2, False)
    assert render_nvlink_status(status) == V100


def test_several_gpus_in_order():
    status = parse_nvlink_status(SEVERAL)
    _check(status)
    assert not status.warnings
    assert [g.index for g in status.gpus] == [0, 1, 2]
    assert [len(g.links) for g in status.gpus] == [3, 3, 1]
    assert [g.inactive_links for g in status.gpus] == [0, 1, 0]
    assert status.gpus[2].name == "NVIDIA H100 80GB HBM3"
    assert status.gpus[2].links == (LinkState(0, True, 26.562),)
    assert render_nvlink_status(status) == SEVERAL


def test_all_links_inactive_line():
    status = parse_nvlink_status(ALL_INACTIVE)
    _check(status)
    assert not status.warnings
    assert [(g.index, g.all_inactive, g.links, g.inactive_links) for g in status.gpus] == [
        (0, True, (), 0),
        (1, True, (), 0),
    ]
    assert render_nvlink_status(status) == ALL_INACTIVE
    # The spelling varies ("inActive", "Nvlink", no space after "NVML:") and the indent is often lost.
    text = "GPU 2: NVIDIA B200 (UUID: GPU-xxx)\nNVML:Unable to retrieve Nvlink information as all links are INACTIVE\n"
    status = parse_nvlink_status(text)
    assert status.gpus[0].all_inactive and status.gpus[0].uuid == "GPU-xxx"


def test_lost_tabs_and_expanded_tabs_read_the_same():
    want = parse_nvlink_status(SEVERAL)
    for mangle in (
        lambda s: s.replace("\t ", ""),
        lambda s: s.replace("\t ", "         "),
        lambda s: s.replace("\t ", " "),
        lambda s: s.replace("\t", "    "),
        lambda s: "\n".join("  " + line for line in s.splitlines()),
    ):
        assert parse_nvlink_status(mangle(SEVERAL)) == want


def test_windows_line_ends_and_blank_lines():
    for text in (SEVERAL.replace("\n", "\r\n"), SEVERAL.replace("\n", "\r"), SEVERAL.replace("\n", "\n\n")):
        assert parse_nvlink_status(text) == parse_nvlink_status(SEVERAL)


def test_one_gpu_of_many_and_a_gpu_without_nvlink():
    """``-i 3`` prints GPU 3 alone; a GPU without NVLink gets its header and nothing under it."""
    text = "GPU 3: NVIDIA A100-SXM4-80GB (UUID: GPU-33333333-3333-3333-3333-333333333333)\n\t Link 0: 25 GB/s\n"
    assert [g.index for g in parse_nvlink_status(text).gpus] == [3]
    status = parse_nvlink_status("GPU 0: Tesla T4 (UUID: GPU-aaaa)\n" + text)
    assert [(g.index, g.links) for g in status.gpus][0] == (0, ())
    assert not status.warnings


def test_header_without_name_or_uuid():
    status = parse_nvlink_status("GPU 0:\n\t Link 0: 25 GB/s\nGPU 1: Tesla V100\n\t Link 0: <inactive>\n")
    assert [(g.name, g.uuid) for g in status.gpus] == [(None, None), ("Tesla V100", None)]
    assert not status.warnings
    # Elided or cut UUIDs are not UUIDs; the name is still read.
    status = parse_nvlink_status(
        "GPU 3: Tesla V100-SXM2-32GB (UUID: ...)\n\t Link 0: 25.781 GB/s\n"
        "GPU 4: Tesla V100-SXM2-32GB (UUID: GPU-12ab\n\t Link 0: 25.781 GB/s\n"
    )
    assert [(g.name, g.uuid) for g in status.gpus] == [("Tesla V100-SXM2-32GB", None)] * 2
    assert any("line 1" in w and "not a GPU UUID" in w for w in status.warnings)
    assert any("line 3" in w and "cut short" in w for w in status.warnings)


def test_unreadable_lines_are_warnings_naming_the_line():
    v100 = V100.replace("\t Link 2: 25.781 GB/s", "\t Link 2, P2P is supported: true")
    text = "$ nvidia-smi nvlink -s\n....\n" + v100 + "\t Link 6: Remote Device 00000000:08:00.0: Link 51\n"
    status = parse_nvlink_status(text)
    _check(status)
    assert [link.link for link in status.gpus[0].links] == [0, 1, 3, 4, 5]
    assert [w.split(":")[0] for w in status.warnings] == ["line 1", "line 2", "line 6", "line 10"]


@pytest.mark.parametrize(
    "line, says",
    [
        ("Link 64: 25 GB/s", "above 63"),
        ("Link 99999999999999999999999: 25 GB/s", "above 63"),
        ("Link 7: 0 GB/s", "not a positive number"),
        ("Link 7: -25 GB/s", "not a positive number"),
        ("Link 7: nan GB/s", "not a positive number"),
        ("Link 7: inf GB/s", "not a positive number"),
        ("Link 7: N/A GB/s", "not a positive number"),
        ("Link 7: 1e999 GB/s", "not a positive number"),
        ("Link 7: ２５ GB/s", "not a positive number"),
        ("Link 7: 25 Gb/s", "not '<speed> GB/s'"),
        ("Link 7: 25", "not '<speed> GB/s'"),
        ("Link 7:", "no state"),
    ],
)
def test_bad_link_lines_are_warnings_not_links(line, says):
    status = parse_nvlink_status(V100 + line + "\n")
    assert len(status.gpus[0].links) == 6
    assert any(w.startswith("line 8: ") and says in w for w in status.warnings), status.warnings


def test_limits_are_inclusive_and_larger_is_a_warning():
    status = parse_nvlink_status(
        f"GPU {MAX_GPU_INDEX}: X\n\t Link {MAX_LINK}: 25 GB/s\nGPU {MAX_GPU_INDEX + 1}: X\n\t Link 0: 25 GB/s\n"
    )
    assert [(g.index, [link.link for link in g.links]) for g in status.gpus] == [(MAX_GPU_INDEX, [MAX_LINK])]
    assert any("line 3" in w and "GPU index 1024" in w for w in status.warnings)


def test_inactive_as_publications_print_it():
    for spelled in ("<inactive>", "<INACTIVE>", "&lt;inactive&gt;", "inactive"):
        status = parse_nvlink_status(f"GPU 0: X\n\t Link 0: {spelled}\n")
        assert status.gpus[0].links == (LinkState(0, False, None),)


def test_duplicates_are_warnings_and_the_last_is_kept():
    text = V100 + "\t Link 1: <inactive>\n" + SEVERAL.replace("GPU 2:", "GPU 0:")
    status = parse_nvlink_status(text)
    _check(status)
    assert [g.index for g in status.gpus] == [0, 1]  # GPU 0 keeps its first place, holds its last listing
    assert status.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert any("GPU 0 link 1 is listed twice" in w for w in status.warnings)
    assert any("GPU 0 is listed twice" in w for w in status.warnings)
    status = parse_nvlink_status(V100 + "\t Link 1: <inactive>\n")
    assert status.gpus[0].links[1] == LinkState(1, False, None)
    assert [link.link for link in status.gpus[0].links] == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("sample", ["V100", "corpus nvlink-status/001"])
def test_one_uuid_under_two_gpu_indices_is_refused_naming_the_lines(sample):
    """Two GPUs with one UUID are refused, not read as two GPUs. A UUID names one GPU (NVML's
    nvmlDeviceGetUUID, nvlink -s's header ``GPU <i>: <name> (UUID: GPU-...)``): the same GPU under
    two indices is captures joined whose GPUs were numbered otherwise, so neither index can be trusted."""
    if sample == "V100":
        text = V100
    elif SAMPLES:
        text = (NVLINK / "001.txt").read_text()  # nvidia-smi nvlink -s -i 0 of an A100-SXM4-40GB node
    else:
        pytest.skip(NO_CORPUS)
    text = text.rstrip("\n") + "\n"
    again = len(text.splitlines()) + 1
    message = _refused(text + text.replace("GPU 0:", "GPU 3:", 1))
    assert message.startswith(f"line {again}: GPU 3 has the UUID of GPU 0 (line 1), GPU-"), message
    # The same GPU listed twice under its own index stays a warning (the last listing kept).
    status = parse_nvlink_status(text + text)
    assert [g.index for g in status.gpus] == [0] and any("GPU 0 is listed twice" in w for w in status.warnings)


def test_cut_anywhere_keeps_the_links_read_so_far():
    texts = WRITTEN + [p.read_text() for p in SAMPLES]
    for text in texts:
        full = parse_nvlink_status(text)
        for cut in range(len(text) + 1):
            try:
                status = parse_nvlink_status(text[:cut])
            except NvlinkStatusParseError as exc:
                assert "\n" not in str(exc)
                continue
            _check(status)
            assert len(status.gpus) <= len(full.gpus)
            *done, last = status.gpus
            assert tuple(done) == full.gpus[: len(done)]
            truth = full.gpus[len(done)]
            assert last.index == truth.index and last.links == truth.links[: len(last.links)]
            assert last.name is None or truth.name.startswith(last.name)
            assert last.uuid in (None, truth.uuid)
            assert last.all_inactive in (False, truth.all_inactive)


# ------------------------------------------------------------------------------------ refusals


def test_nvidia_smi_list_is_refused_naming_it():
    assert "this is nvidia-smi -L output (a list of GPUs), not nvidia-smi nvlink -s" in _refused(NVIDIA_SMI_L)
    assert "nvidia-smi -L" in _refused(NVIDIA_SMI_L.replace("\n", "\r\n"))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "   ",
        "hello",
        "\t Link 0: 25 GB/s\n\t Link 1: 25 GB/s\n",
        f"{ALL_INACTIVE_LINE}\n",
        "GPU 0: X\n\t Link 0: nan GB/s\n",
        "GPU 00000000:07:00.0\n    Product Name : NVIDIA A100\n",
        "GPU 0: NVIDIA A100 (UUID: GPU-a)\n\t Link 0, P2P is supported: true\n"
        "\t Link 0, Access to system memory supported: true\n",
        "GPU 0: NVIDIA A100 (UUID: GPU-a)\n\t Link 3: Remote Device 00000000:08:00.0: Link 51\n",
        "GPU 0: NVIDIA GB200 (UUID: GPU-a)\n\t NVLE: disabled\n\t Firmware Version:\n\t\t MSE: 14:4:0\n",
        "        GPU0    GPU1\nGPU0     X      NV12\nGPU1    NV12     X\n",
    ],
)
def test_texts_that_are_not_nvlink_status_are_refused(text):
    _refused(text)


@pytest.mark.parametrize("value", [None, 3, b"GPU 0: X\n\t Link 0: 25 GB/s\n", ["GPU 0: X"]])
def test_a_non_str_is_refused(value):
    assert type(value).__name__ in _refused(value)


def test_long_lines_and_many_lines_stay_fast_and_bounded():
    """Nothing in the format needs backtracking: a long hostile line is read in linear time, and a
    long foreign text gets a bounded list of warnings."""
    hostile = [
        "GPU 1: " + "(UUID:" * 20000,
        "Link 0:" + " " * 100000 + "x",
        "all " * 50000,
        "MIG " + "Device 1" * 20000,
        "Link 0: " + "9" * 100000 + " GB/s",
        "GPU " + "9" * 100000 + ":",
    ]
    text = "\n".join(["GPU 0: X", "\t Link 0: 25 GB/s"] + hostile + ["junk"] * 5000)
    started = time.process_time()  # this process's CPU: other processes' load stretches the wall clock only
    status = parse_nvlink_status(text)
    assert time.process_time() - started < 5
    _check(status)
    assert len(status.warnings) <= 101 and status.warnings[-1].endswith("more warnings")


# ---------------------------------------------------------------------------------- properties


def _parses_or_refuses(text: str) -> None:
    try:
        status = parse_nvlink_status(text)
    except NvlinkStatusParseError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    _check(status)


@given(st.text())
def test_arbitrary_text_raises_only_the_parse_error(text):
    _parses_or_refuses(text)


_PIECES = st.sampled_from((V100 + SEVERAL + ALL_INACTIVE + NVIDIA_SMI_L).splitlines())
_ALPHABET = st.sampled_from(list("0123456789 .-+eE:/()<>GPULinkBsactive\t\r\n-UIDNVMLA"))


@given(st.lists(st.one_of(_PIECES, st.text(_ALPHABET, max_size=60)), max_size=40).map("\n".join))
def test_format_like_text_raises_only_the_parse_error(text):
    _parses_or_refuses(text)


@st.composite
def _mutated(draw):
    text = draw(st.sampled_from(WRITTEN + [p.read_text() for p in SAMPLES]))
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 40)))
        text = text[:i] + draw(st.one_of(st.just(""), st.text(_ALPHABET, max_size=12), st.text(max_size=4))) + text[j:]
    return text


@given(_mutated())
def test_mutated_texts_raise_only_the_parse_error(text):
    _parses_or_refuses(text)


_GBPS = st.one_of(
    st.integers(1, 200_000).map(lambda x: x / 1000),
    st.floats(min_value=0, max_value=1e300, exclude_min=True, allow_nan=False, allow_infinity=False),
)
_LINK = st.tuples(st.booleans(), _GBPS).map(lambda t: (t[0], t[1] if t[0] else None))
_NAME = st.text(st.sampled_from(list("ABCDEFGHIJKLMNOPQRSTUVWXYZabcxyz0123456789 -_.")), max_size=30).map(
    lambda s: s.strip() or None
)
_UUID = st.one_of(st.none(), st.uuids().map(lambda u: f"GPU-{u}"))


@st.composite
def _gpu(draw, index: int) -> GpuLinks:
    numbers = draw(st.lists(st.integers(0, MAX_LINK), unique=True, max_size=20))
    links = tuple(LinkState(n, *draw(_LINK)) for n in numbers)
    return GpuLinks(index, draw(_NAME), draw(_UUID), links, draw(st.booleans()))


@st.composite
def _statuses(draw) -> NvlinkStatus:
    indices = draw(st.lists(st.integers(0, MAX_GPU_INDEX), unique=True, min_size=1, max_size=8))
    gpus = tuple(draw(_gpu(i)) for i in indices)
    assume(any(g.links or g.all_inactive for g in gpus))
    return NvlinkStatus(gpus)


@given(_statuses())
def test_render_then_parse_round_trips(status):
    text = render_nvlink_status(status)
    assert parse_nvlink_status(text) == status
    # With the tabs lost, as publications print it, it reads the same.
    assert parse_nvlink_status(text.replace("\t ", "")) == status
    assert parse_nvlink_status(text.replace("\n", "\r\n")) == status


@given(_statuses())
def test_to_json_is_strict_json(status):
    data = status.to_json()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    for gpu, got in zip(status.gpus, data["gpus"], strict=True):
        assert got["index"] == gpu.index and len(got["links"]) == len(gpu.links)
        assert (got["active_links"], got["inactive_links"]) == (gpu.active_links, gpu.inactive_links)


def test_to_json_of_a_hand_built_status_with_a_bad_speed_is_still_strict():
    status = NvlinkStatus((GpuLinks(0, None, None, (LinkState(0, True, float("nan")),)),))
    assert status.to_json()["gpus"][0]["links"][0]["gbps"] is None
    json.dumps(status.to_json(), allow_nan=False)


def test_render_speed_format_and_refusal():
    assert [format_gbps(x) for x in (25.0, 25.781, 53.125, 26.562, 300)] == ["25", "25.781", "53.125", "26.562", "300"]
    with pytest.raises(ValueError, match="GPU 0 link 2"):
        render_nvlink_status(NvlinkStatus((GpuLinks(0, "X", None, (LinkState(2, True, None),)),)))
    assert render_nvlink_status(NvlinkStatus(())) == ""
