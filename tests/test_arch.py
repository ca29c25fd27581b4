"""``requires_gpus(arch=...)``: the comparisons users write (``"<blackwell"``, ``"!=hopper"``, ``">=ada"``,
several joined by ",", lists), judged by the compute capability's place among the architectures, so a
GPU newer than the plugin's table still compares where its number decides, and is unknown where not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gputopo.core import hardware
from pytest_gputopo.core.gpu_requirements import GpuRequirement
from pytest_gputopo.core.model import Gpu
from pytest_gputopo.core.requirements import RequirementError
from pytest_gputopo.probe.recorded import load_profile

TABLE = [f"{major}.{minor}" for _, ccs in hardware.ARCHITECTURES for major, minor in ccs]
NEWER = ["10.2", "12.2", "13.0", "15.1"]  # not in the table: inside Blackwell's span, or past the table
OLDER = ["1.3", "2.0", "2.1"]  # Tesla, Fermi: before the table
GAPS = ["7.6", "7.9", "9.5", "9.9"]  # between two architectures: either, or one between


def meets(cc, arch):
    return hardware.arch_meets(cc, hardware.arch_spec(arch))


def test_the_table_lists_architectures_in_the_order_of_their_capabilities():
    """Comparing by a capability's place assumes NVIDIA numbers capabilities in architecture order."""
    spans = [(min(ccs), max(ccs)) for _, ccs in hardware.ARCHITECTURES]
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False))


# TensorRT-LLM's architecture skips compare GPU0's SM number, major * 10 + minor (which orders as the
# capability does while minors stay below 10, as every capability NVIDIA has named does):
# NVIDIA/TensorRT-LLM tests/integration/defs/conftest.py @ 81e729a4e64d8c7659bf8fb9f54016db6dc05c2e
#   (get_sm_version from torch.cuda.get_device_properties(0); skip_pre_ada, skip_pre_hopper,
#   skip_pre_blackwell, skip_post_blackwell, skip_no_hopper) and
# NVIDIA/TensorRT-LLM tests/unittest/utils/util.py @ 0249976575050d2c624a5f285683c66de311a3b7
#   (getSMVersion from cuDeviceGet(0); skip_non_ada_unittest, skip_neither_ada_nor_hopper_unittest,
#   force_ampere without TLLM_TEST_IGNORE_ARCH).
# Each entry: the arch= spelling that ports it, and when the original runs the test.
TRT_LLM_ARCH = {
    "skip_pre_ada": (">=ada", lambda sm: not sm < 89),
    "skip_pre_hopper": (">=hopper", lambda sm: not sm < 90),
    "skip_pre_blackwell": (">=blackwell", lambda sm: not sm < 100),
    "skip_post_blackwell": ("<blackwell", lambda sm: not sm >= 100),
    "skip_no_hopper": ("hopper", lambda sm: not sm != 90),
    "skip_non_ada_unittest": ("ada", lambda sm: not sm != 89),
    "skip_neither_ada_nor_hopper_unittest": (["ada", "hopper"], lambda sm: not (sm != 90 and sm != 89)),
    "force_ampere": (">=ampere,<=ada", lambda sm: not (sm < 80 or sm > 89)),
}
# The skips that single out capabilities within an architecture are compute_capability specifiers:
# util.py's skip_blackwell (sm == 100 or sm == 103) and skip_blackwell_geforce (sm == 120), conftest.py's
# skip_post_blackwell_ultra (sm >= 103) and skip_no_sm120 (sm != 120), same commits as above.
TRT_LLM_CC = {
    "skip_blackwell": ("!=10.0,!=10.3", lambda sm: not (sm == 100 or sm == 103)),
    "skip_blackwell_geforce": ("!=12.0", lambda sm: not sm == 120),
    "skip_post_blackwell_ultra": ("<10.3", lambda sm: not sm >= 103),
    "skip_no_sm120": ("==12.0", lambda sm: not sm != 120),
}


def sm(cc):
    major, minor = hardware.capability(cc)
    return major * 10 + minor


@pytest.mark.parametrize("skip", sorted(TRT_LLM_ARCH))
def test_tensorrt_llm_arch_skips_port_exactly_for_every_named_newer_and_older_capability(skip):
    """A port of TensorRT-LLM's SM comparison runs where the original runs, on every capability the
    table names, on newer ones (13.0) and older ones; in a gap between two architectures (9.5) it is
    unknown or agrees, never the opposite verdict."""
    arch, runs = TRT_LLM_ARCH[skip]
    for cc in TABLE + NEWER + OLDER:
        assert meets(cc, arch) is runs(sm(cc)), (skip, cc)
    for cc in GAPS:
        assert meets(cc, arch) in (None, runs(sm(cc))), (skip, cc)


@pytest.mark.parametrize("skip", sorted(TRT_LLM_CC))
def test_tensorrt_llm_capability_skips_port_exactly_as_compute_capability(skip):
    """Skips of single capabilities (sm 100 and 103, not all of Blackwell) are compute_capability specifiers."""
    spec, runs = TRT_LLM_CC[skip]
    for cc in TABLE + NEWER + OLDER + GAPS:
        assert hardware.satisfies(cc, spec) is runs(sm(cc)), (skip, cc)


@pytest.mark.parametrize(
    "arch, verdict",
    [
        (">=hopper", True),
        (">=blackwell", True),
        (">ada", True),
        ("!=hopper", True),
        ("<=ampere", False),
        ("<blackwell", False),
        ("==hopper", False),
        (">=ampere,<=ada", False),
        ("blackwell", None),
        ("==blackwell", None),
        ("!=blackwell", None),
        (">blackwell", None),
        ("<=blackwell", None),
        (["hopper", ">=blackwell"], True),
        (["hopper", "blackwell"], None),
    ],
)
def test_a_capability_newer_than_the_table_compares_where_its_number_decides(arch, verdict):
    """13.0 is Blackwell or a newer architecture: at least Hopper, not older than Blackwell, not Hopper;
    whether it is Blackwell cannot be known, so an equality with Blackwell is unknown (never met)."""
    assert meets("13.0", arch) is verdict


def test_a_capability_inside_an_architectures_span_is_that_architecture():
    """10.2 lies between 10.0 and 10.3, both Blackwell: it is Blackwell."""
    assert meets("10.2", "blackwell") is True and meets("10.2", ">hopper") is True
    assert hardware.arch_text("10.2") == "Blackwell"


def test_a_capability_between_two_architectures_is_unknown_where_they_differ():
    """9.5 is Hopper, Blackwell or one between: at least Hopper, older than Blackwell unknown."""
    assert meets("9.5", ">=hopper") is True and meets("9.5", "<=blackwell") is True
    assert meets("9.5", "<blackwell") is None and meets("9.5", "hopper") is None
    assert meets("9.5", "ada") is False
    assert hardware.arch_text("9.5") == "Hopper, Blackwell or one between"


def test_an_unknown_capability_meets_no_comparison():
    for arch in (">=kepler", "!=hopper", "<blackwell", ["ada", "!=ada"]):
        assert meets(None, arch) is None and meets("N/A", arch) is None


def test_a_list_is_any_and_a_comma_is_all():
    assert meets("8.0", ["ampere", "hopper"]) and meets("9.0", ["ampere", "hopper"])
    assert meets("8.9", ">=ampere,<hopper") and not meets("9.0", ">=ampere,<hopper")
    assert not meets("8.0", ">=hopper,<=ampere")  # a contradiction holds nowhere


@pytest.mark.parametrize(
    "arch, kept",
    [
        ("Hopper", ("hopper",)),
        (" >= hopper ", (">=hopper",)),
        ("<Blackwell", ("<blackwell",)),
        ([">=ampere, <= ada", "HOPPER"], (">=ampere,<=ada", "hopper")),
        (("ada", "==hopper"), ("ada", "==hopper")),
    ],
)
def test_arch_is_kept_lowercase_without_spaces(arch, kept):
    assert GpuRequirement(arch=arch).arch == kept


@pytest.mark.parametrize(
    "arch",
    [
        "hoper",
        "~=hopper",
        "=hopper",
        "=>hopper",
        ">=",
        "",
        "hopper,",
        ",hopper",
        "hopper blackwell",
        [],
        ["hopper", 9],
        9.0,
        {"hopper"},
        "sm90",
    ],
)
def test_a_bad_arch_says_how_to_write_one(arch):
    with pytest.raises(RequirementError, match="arch must be one of kepler, .* with an optional comparison"):
        GpuRequirement(arch=arch)


def test_a_gpu_that_falls_short_is_named_with_what_it_is():
    req = GpuRequirement(arch="<blackwell")
    assert req.check_gpu(Gpu(0, compute_capability="10.0")) == [
        "is Blackwell (compute capability 10.0), needs <blackwell"
    ]
    assert req.check_gpu(Gpu(0, compute_capability="13.0")) == [
        "is Blackwell or newer (compute capability 13.0, not in the plugin's table), needs <blackwell"
    ]
    assert GpuRequirement(arch="blackwell").check_gpu(Gpu(0, compute_capability="13.0")) == [
        "architecture is unknown (compute capability 13.0, not in the plugin's table: Blackwell or newer), "
        "needs blackwell"
    ]
    assert req.check_gpu(Gpu(0, compute_capability="9.0")) == []
    assert str(GpuRequirement(arch=["<blackwell", "!=ada"])) == "requires_gpus(arch=['<blackwell', '!=ada'])"


# ---------------------------------------------------------------------------------------------
# On recorded machines, through the marker


def run(pytester, machine, src, *args):
    pytester.makepyfile(test_arch_marked="import pytest\n" + src)
    return pytester.runpytest("--gputopo-machine", machine, "-rs", *args)


MARKED = """\
@pytest.mark.requires_gpus(arch="<blackwell")
def test_pre_blackwell(): pass
@pytest.mark.requires_gpus(arch="!=hopper")
def test_not_hopper(): pass
@pytest.mark.requires_gpus(arch=">=ampere,<=ada")
def test_ampere_or_ada(): pass
@pytest.mark.requires_gpus(arch=["volta", ">=hopper"])
def test_volta_or_hopper_on(): pass
"""


@pytest.mark.parametrize(
    "machine, passed",
    [
        ("hgx-h100", {"test_pre_blackwell", "test_volta_or_hopper_on"}),
        ("gb200-tray", {"test_not_hopper", "test_volta_or_hopper_on"}),
        ("4x-a100-40gb", {"test_pre_blackwell", "test_not_hopper", "test_ampere_or_ada"}),
        ("8x-l40s", {"test_pre_blackwell", "test_not_hopper", "test_ampere_or_ada"}),
        ("dgx1-v100", {"test_pre_blackwell", "test_not_hopper", "test_volta_or_hopper_on"}),
        ("2x-rtx-pro-6000", {"test_not_hopper", "test_volta_or_hopper_on"}),
    ],
)
def test_arch_comparisons_on_bundled_machines(pytester, machine, passed):
    result = run(pytester, machine, MARKED, "-v")
    ran = {
        r.nodeid.split("::")[-1]
        for r in result.reprec.getreports("pytest_runtest_logreport")
        if r.when == "call" and r.passed
    }
    assert ran == passed
    result.assert_outcomes(passed=len(passed), skipped=4 - len(passed))


def test_a_skipped_gpu_says_its_architecture(pytester):
    result = run(pytester, "hgx-h100", MARKED)
    result.stdout.fnmatch_lines(
        [
            "*requires_gpus(1, arch='!=hopper'): GPU0 (NVIDIA H100 80GB HBM3) is Hopper "
            "(compute capability 9.0), needs !=hopper*"
        ]
    )


def newer_machine(pytester, cc="13.0"):
    """gb200-tray as if its GPUs reported a capability the plugin's table does not name."""
    profile = json.loads(Path(load_profile("gb200-tray").path).read_text())
    profile["name"] = "newer-gpus"
    for gpu in profile["topology"]["gpus"]:
        gpu["compute_capability"] = cc
    path = pytester.path / "newer-gpus.json"
    path.write_text(json.dumps(profile))
    return str(path)


def test_a_gpu_newer_than_the_table_runs_at_least_tests_and_skips_older_than_tests(pytester):
    """A 13.0 GPU runs a test for Hopper or later, skips one for before Blackwell, and an equality with
    Blackwell is unknown: skipped (failed under --gputopo-strict, as every unmet one), never run on a guess."""
    src = (
        "@pytest.mark.requires_gpus(4, arch='>=hopper')\ndef test_hopper_or_later(): pass\n"
        "@pytest.mark.requires_gpus(arch='<blackwell')\ndef test_pre_blackwell(): pass\n"
        "@pytest.mark.requires_gpus(arch='blackwell')\ndef test_blackwell(): pass\n"
    )
    machine = newer_machine(pytester)
    result = run(pytester, machine, src)
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines_random(
        [
            "*requires_gpus(1, arch='<blackwell'): GPU0 (NVIDIA GB200) is Blackwell or newer (compute capability "
            "13.0, not in the plugin's table), needs <blackwell*",
            "*requires_gpus(1, arch='blackwell'): GPU0 (NVIDIA GB200) architecture is unknown (compute capability "
            "13.0, not in the plugin's table: Blackwell or newer), needs blackwell*",
        ]
    )
    run(pytester, machine, src, "--gputopo-strict").assert_outcomes(passed=1, errors=2)


def test_a_bad_arch_is_a_usage_error_naming_the_test(pytester):
    result = run(pytester, "hgx-h100", "@pytest.mark.requires_gpus(arch='~=hopper')\ndef test_bad(): pass\n")
    assert result.ret != 0
    result.stderr.fnmatch_lines(
        ["*test_arch_marked.py::test_bad: @pytest.mark.requires_gpus: arch must be one of kepler, *got '~=hopper'"]
    )


# ---------------------------------------------------------------------------------------------
# docs/markers.md, as a reader pastes it

DOC = Path(__file__).parents[1] / "docs" / "markers.md"


def documented_block():
    from doc_examples import blocks

    found = [b for b in blocks() if b.path == "docs/markers.md" and "def test_ampere_kernel" in b.text]
    assert len(found) == 1
    return found[0].text


@pytest.mark.parametrize(
    "machine, passed",
    [
        ("hgx-h100", {"test_fp8_gemm", "test_engine_build", "test_fp8_rowwise"}),
        ("4x-a100-40gb", {"test_engine_build", "test_ampere_kernel"}),
        ("gb200-tray", {"test_fp8_gemm"}),
    ],
)
def test_the_documented_arch_example_runs_where_the_doc_says(pytester, machine, passed):
    pytester.makepyfile(test_archdoc=documented_block())
    result = pytester.runpytest("--gputopo-machine", machine)
    ran = {
        r.nodeid.split("::")[-1]
        for r in result.reprec.getreports("pytest_runtest_logreport")
        if r.when == "call" and r.passed
    }
    assert ran == passed
    assert f"On `{machine}`" in DOC.read_text() or f"on `{machine}`" in DOC.read_text()


def test_the_documented_table_of_newer_capabilities_is_what_the_plugin_judges():
    """Each row of the doc's table (13.0, 10.2, 9.5): what holds, what does not, what is unknown."""
    rows = [
        ln
        for ln in DOC.read_text().splitlines()
        if ln.startswith("| ") and "| Blackwell" in ln or ln.startswith("| in a gap")
    ]
    assert len(rows) == 3
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        cc = cells[0].split("(")[1].split(",")[0].split(")")[0]
        assert hardware.arch_text(cc).lower() in cells[1].lower().replace(" a newer architecture", " newer")
        for column, verdict in zip(cells[2:], (True, False, None), strict=True):
            for arch in column.split("`")[1::2]:
                assert meets(cc, json.loads(arch)) is verdict, (cc, arch)
