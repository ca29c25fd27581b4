"""Markers and run-gate terms for the facts real suites gate on (memory, compute
capability and architecture, model, bf16, multicast/NVLS, driver/CUDA/NCCL versions), explicit GPU
sets, and stacked markers (the closest wins), on bundled machines; an unknown fact is never met."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from allreduce_double import one_size_result
from conftest import BUNDLED_MACHINES
from pytest_gputopo.core import gpu_requirements, hardware, requirements as reqs
from pytest_gputopo.core.expressions import parse_expression
from pytest_gputopo.probe import probe
from pytest_gputopo.probe.recorded import bundled_names, load_profile

GATE_EXIT_STATUS = 8

# 4 A100 SXM4 40GB on a rented node, as `nvidia-smi topo -m` prints it (the format of corpus topo/039):
# text gives link classes only, no memory, capability or versions.
TOPO_TEXT = """\
        GPU0    GPU1    GPU2    GPU3
GPU0     X      NV12    NODE    NODE 
GPU1    NV12     X      NODE    NODE
GPU2    NODE    NODE     X      NV10
GPU3    NODE    NODE    NV10     X  
"""


def run(pytester, machine, src, *args):
    pytester.makepyfile(test_marked="import pytest\n" + src)
    return pytester.runpytest("--gputopo-machine", machine, "-rs", *args)


@pytest.mark.parametrize(
    "machine, marker, says",
    [
        (
            "hgx-h100",
            "requires_gpus(8, min_memory_gb=80, compute_capability='>=9.0', arch='hopper', model='H100', "
            "bf16=True, multicast=True)",
            None,
        ),
        (
            "dgx-a100",
            "requires_gpus(8, compute_capability='>=9.0')",
            "requires_gpus(8, compute_capability='>=9.0'): GPU0 (NVIDIA A100-SXM4-80GB) has compute capability 8.0, "
            "needs >=9.0; GPU1 (NVIDIA A100-SXM4-80GB) has compute capability 8.0, needs >=9.0; GPU2 * and 5 more GPUs",
        ),
        (
            "dgx1-v100",
            "requires_gpus(bf16=True)",
            "requires_gpus(1, bf16=True): GPU0 (Tesla V100-SXM2-32GB) has no native bf16 (compute capability 7.0), "
            "needs one with",
        ),
        (
            "4x-rtx4090",
            "requires_gpus(2, min_memory_gb=40)",
            "requires_gpus(2, min_memory_gb=40): GPU0 (NVIDIA GeForce RTX 4090) has 25.8 GB of memory, "
            "needs 40 GB; GPU1 *",
        ),
        ("4x-rtx4090", "requires_gpus(4, arch='ada', model=['L40S', 'RTX 4090'])", None),
        (
            "4x-rtx4090",
            "requires_gpus(arch='>=hopper')",
            "requires_gpus(1, arch='>=hopper'): GPU0 (NVIDIA GeForce RTX 4090) is Ada (compute capability 8.9), "
            "needs >=hopper",
        ),
        ("2x-rtx-pro-6000", "requires_gpus(2, arch='blackwell', compute_capability='>=12.0', min_memory_gb=96)", None),
        ("hgx-h100", "requires_gpus(8, model='NVIDIA H100*HBM3')", None),
        (
            "dgx-a100",
            "requires_gpus(model='*A100*40GB')",
            "requires_gpus(1, model='*A100*40GB'): GPU0 (NVIDIA A100-SXM4-80GB) is not '*A100*40GB'",
        ),
        (
            "2x-rtx-pro-6000",
            "requires_gpus(model='H100')",
            "requires_gpus(1, model='H100'): GPU0 (NVIDIA RTX PRO 6000 Blackwell Workstation Edition) is not 'H100'",
        ),
        (
            "dgx-a100",
            "requires_gpus(multicast=True)",
            "requires_gpus(1, multicast=True): GPU0 (NVIDIA A100-SXM4-80GB) multicast (NVLS) support is unknown*",
        ),
        ("4x-rtx4090", "requires_gpus([0, 5])", "requires_gpus([0, 5]): needs GPU5, 4 visible"),
        ("hgx-h100-nvlink-down", "requires_nvlink(gpus=[0, 4])", None),
        (
            "hgx-h100-nvlink-down",
            "requires_nvlink(gpus=[0, 5])",
            "requires_nvlink(gpus=[0, 5]): GPU0-GPU5 are linked by SYS, not NVLink",
        ),
        (
            "hgx-h100-nvlink-down",
            "requires_gpus([4, 5], multicast=True)",
            "requires_gpus([4, 5], multicast=True): GPU5 (NVIDIA H100 80GB HBM3) multicast (NVLS) support is unknown*",
        ),
        ("hgx-h100", "requires_versions(driver='>=535')", None),
        (
            "hgx-h100",
            "requires_versions(driver='>=575,<600')",
            "requires_versions(driver='>=575,<600'): the NVIDIA driver (driver) is 570.124.06, needs >=575,<600",
        ),
        (
            "hgx-h100",
            "requires_versions(nccl='>=2.18', cuda='>=12.4')",
            "requires_versions(cuda='>=12.4', nccl='>=2.18'): the NCCL torch loads (nccl) is unknown (no source "
            "reported it)",
        ),
        ("2x-rtx3090-nvlink", "requires_versions(cuda='>=11.0', driver='==470.*')", None),
        ("4x-a100-40gb", "requires_gpus(4, min_memory_gb=40, arch='ampere')", None),
        ("gb200-tray", "requires_gpus(4, min_memory_gb=180, arch='>=blackwell', model='GB200', bf16=True)", None),
        ("gb200-tray", "requires_versions(driver='>=580', cuda='>=13.0')", None),
        (
            "gb200-tray",
            "requires_gpus(4, multicast=True)",
            "requires_gpus(4, multicast=True): GPU0 (NVIDIA GB200) multicast (NVLS) support is unknown*",
        ),
        (
            "4x-a100-40gb",
            "requires_gpus(2, min_memory_gb=80)",
            "requires_gpus(2, min_memory_gb=80): GPU0 (NVIDIA A100-SXM4-40GB) has 42.9 GB of memory, needs 80 GB; "
            "GPU1 (NVIDIA A100-SXM4-40GB) has 42.9 GB of memory, needs 80 GB",
        ),
        (
            "4x-a100-40gb",
            "requires_nvlink(gpus=[2, 3], min_links=12)",
            "requires_nvlink(gpus=[2, 3], min_links=12): GPU2-GPU3 are linked by NV10, needs NV12",
        ),
    ],
)
def test_each_fact_marker_on_bundled_machines(pytester, machine, marker, says):
    result = run(pytester, machine, f"@pytest.mark.{marker}\ndef test_x(): pass\n")
    if says is None:
        result.assert_outcomes(passed=1)
        return
    result.assert_outcomes(skipped=1)
    literal = "".join({"[": "[[]", "]": "[]]"}.get(c, c) for c in says)  # fnmatch reads [..] as a set
    result.stdout.fnmatch_lines([f"SKIPPED [[]1[]] test_marked.py:2: {literal} [[]recorded:{machine}*"])


def test_an_unknown_fact_is_never_met_and_strict_fails(pytester):
    """nvidia-smi text has no memory, capability, model or versions: each condition is unknown,
    said, and a failure under strict."""
    (pytester.path / "a100x4.txt").write_text(TOPO_TEXT)
    src = (
        "@pytest.mark.requires_gpus(min_memory_gb=1)\ndef test_memory(): pass\n"
        "@pytest.mark.requires_gpus(compute_capability='>=1.0')\ndef test_cc(): pass\n"
        "@pytest.mark.requires_gpus(arch='>=kepler')\ndef test_arch(): pass\n"
        "@pytest.mark.requires_gpus(model='A100')\ndef test_model(): pass\n"
        "@pytest.mark.requires_gpus(bf16=False)\ndef test_bf16(): pass\n"
        "@pytest.mark.requires_versions(driver='>=1')\ndef test_driver(): pass\n"
        "@pytest.mark.requires_gpus(4)\ndef test_count(): pass\n"
    )
    result = run(pytester, "a100x4.txt", src)
    result.assert_outcomes(passed=1, skipped=6)
    result.stdout.fnmatch_lines_random(
        [
            "*requires_gpus(1, min_memory_gb=1): GPU0 (unnamed) memory is unknown (no source reported it)*",
            "*GPU0 (unnamed) compute capability is unknown*",
            "*GPU0 (unnamed) architecture is unknown (compute capability unknown)*",
            "*GPU0 (unnamed) model is unknown*",
            "*GPU0 (unnamed) bf16 support is unknown*",
            "*the NVIDIA driver (driver) is unknown*",
        ]
    )
    strict = run(pytester, "a100x4.txt", src, "--gputopo-strict")
    strict.assert_outcomes(passed=1, errors=6)  # failed in setup, as pytest.fail there reports


def test_a_profile_that_records_versions_is_judged_on_them(pytester, tmp_path):
    profile = json.loads(Path(load_profile("hgx-h100").path).read_text())
    profile["name"] = "hgx-h100-versions"
    profile["topology"].update(cuda_driver_version="12.8", cuda_runtime_version="12.6", nccl_version="2.21.5")
    path = pytester.path / "hgx-h100-versions.json"
    path.write_text(json.dumps(profile))
    src = (
        "@pytest.mark.requires_versions(nccl='>=2.18', cuda='>=12.4', cuda_runtime='~=12.1')\n"
        "def test_new(): pass\n"
        "@pytest.mark.requires_versions(nccl='>=2.23')\ndef test_newer(): pass\n"
    )
    result = run(pytester, str(path), src)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        ["*requires_versions(nccl='>=2.23'): the NCCL torch loads (nccl) is 2.21.5, needs >=2.23*"]
    )


def test_an_unmet_fact_is_a_junit_property(pytester):
    src = "@pytest.mark.requires_gpus(compute_capability='>=9.0')\ndef test_x(): pass\n"
    run(pytester, "dgx-a100", src, "--junitxml=out.xml").assert_outcomes(skipped=1)
    xml = (pytester.path / "out.xml").read_text()
    assert 'name="gputopo_unmet" value="requires_gpus(1, compute_capability=\'&gt;=9.0\')"' in xml


def test_bad_fact_arguments_name_the_test(pytester):
    src = (
        "@pytest.mark.requires_gpus(compute_capability='9.0')\ndef test_cc(): pass\n"
        "@pytest.mark.requires_versions(nccl='newest')\ndef test_nccl(): pass\n"
    )
    result = run(pytester, "hgx-h100", src)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines_random(
        [
            "*test_marked.py::test_cc: @pytest.mark.requires_gpus: compute_capability: '9.0' is not a version "
            "specifier such as '>=2.18' or '>=12.1,<13' (write '>=9.0' or '==9.0')*",
            "*test_marked.py::test_nccl: @pytest.mark.requires_versions: nccl: 'newest' is not a version specifier*",
        ]
    )


# ---------------------------------------------------------------------------------------------
# Run gates


def test_fact_gate_terms_pass_on_a_machine_that_meets_them(pytester):
    result = run(
        pytester,
        "hgx-h100",
        "def test_a(): pass\n",
        "--gputopo-require",
        "gpus>=8,memory>=80,cc>=9.0,arch>=hopper,model=H100,bf16,multicast,driver>=535",
    )
    result.assert_outcomes(passed=1)


def test_fact_gate_terms_name_every_gpu_and_unknown_is_unmet(pytester):
    result = run(pytester, "dgx-a100", "def test_a(): pass\n", "--gputopo-require", "cc>=9.0@2,memory>=80,nccl>=2.18")
    assert result.ret == GATE_EXIT_STATUS
    # Each GPU that falls short is a cause, its finding the evidence; a version stands alone.
    result.stdout.fnmatch_lines(
        [
            "gputopo: this machine does not meet the run's requirements [[]recorded:dgx-a100*]:",
            "  - GPU0: has compute capability 8.0, needs >=9.0",
            "      requires_gpus(2, compute_capability='>=9.0'): GPU0 (NVIDIA A100-SXM4-80GB) has compute capability "
            "8.0, needs >=9.0",
            "  - GPU1: has compute capability 8.0, needs >=9.0",
            "      requires_gpus(2, compute_capability='>=9.0'): GPU1 *",
            "  - requires_versions(nccl='>=2.18'): the NCCL torch loads (nccl) is unknown (no source reported it)",
        ]
    )
    assert "min_memory_gb" not in result.stdout.str()  # 85.9e9 bytes are 80 GB as GPUs are sold


def test_a_gate_term_on_a_machine_without_gpus_is_unmet(pytester):
    result = run(pytester, "no-gpu", "def test_a(): pass\n", "--gputopo-require", "memory>=1")
    assert result.ret == GATE_EXIT_STATUS
    result.stdout.fnmatch_lines(["  - requires_gpus(min_memory_gb=1): no GPU to judge: 0 visible*"])


@pytest.mark.parametrize(
    "text, built",
    [
        ("memory>=40@4", gpu_requirements.GpuRequirement(gpus=4, min_memory_gb=40)),
        ("cc~=9.0", gpu_requirements.GpuRequirement(compute_capability="~=9.0")),
        ("arch=ampere", gpu_requirements.GpuRequirement(arch="ampere")),
        ("model=RTX 4090", gpu_requirements.GpuRequirement(model="RTX 4090")),
        ("bf16@2", gpu_requirements.GpuRequirement(gpus=2, bf16=True)),
        ("cuda_runtime>=12.1", gpu_requirements.VersionRequirement(cuda_runtime=">=12.1")),
        ("driver==570.*", gpu_requirements.VersionRequirement(driver="==570.*")),
    ],
)
def test_gate_terms_build_the_markers_requirements(text, built):
    """One requirement class per fact: a gate term and a marker judge alike."""
    assert parse_expression(text) == (built,)


@pytest.mark.parametrize(
    "text, says",
    [
        ("memory>40", "memory takes '>='"),
        ("arch>=hoper", "arch must be one of"),
        ("nccl", "nccl takes an operator and a version"),
        ("cc>=", "nothing after"),
        ("nccl>=2.18@2", "'@N' does not apply to nccl"),
        ("bf16>=1", "bf16 takes no operator"),
        ("gpus", "gpus takes '>='"),
        ("speed>=9", "unknown term 'speed'"),
    ],
)
def test_bad_gate_terms_say_why(text, says):
    """A term that cannot be read says why, and the grammar (docs/options.md shows the same)."""
    with pytest.raises(reqs.RequirementError, match=says):
        parse_expression(text)


# ---------------------------------------------------------------------------------------------
# Stacked markers: the closest restates what it says, and keeps every condition it does not


def test_a_methods_marker_restates_the_count_of_its_classs_marker_of_the_same_name(pytester):
    src = (
        "pytestmark = pytest.mark.requires_gpus(8)\n"
        "@pytest.mark.requires_gpus(4)\n"
        "class TestBig:\n"
        "    def test_class_level(self): pass\n"
        "    @pytest.mark.requires_gpus(1)\n"
        "    def test_one(self): pass\n"
        "    @pytest.mark.requires_p2p\n"
        "    def test_other_name(self): pass\n"
        "def test_module_level(): pass\n"
    )
    result = run(pytester, "2x-rtx3090-nvlink", src, "-v")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines_random(
        [
            "*::TestBig::test_one PASSED*",  # its own count (1), not the class's (4) nor the module's (8)
            "*::TestBig::test_class_level SKIPPED (requires_gpus(4)*",  # the class's, not the module's
            "*::TestBig::test_other_name SKIPPED (requires_gpus(4)*",  # another name does not replace it
            "*::test_module_level SKIPPED (requires_gpus(8)*",
        ]
    )


CLASS_MEMORY_METHOD_COUNT = """
@pytest.mark.requires_gpus(min_memory_gb=80)
class TestBigMemory:
    @pytest.mark.requires_gpus(4)
    def test_four(self): pass
"""


@pytest.mark.parametrize("machine", bundled_names())
def test_a_closer_marker_never_drops_a_condition(pytester, machine):
    """TensorRT-LLM's class ``skip_less_device_memory`` with a method ``skip_less_device`` ports to a
    class ``requires_gpus(min_memory_gb=80)`` and a method ``requires_gpus(4)``. The method's marker
    used to replace the class's whole, and the test ran on 4x A100 40 GB. On every bundled machine it
    now runs exactly where 4 GPUs of 80 GB (1e9 bytes) each are visible."""
    topology = probe(machine)
    gpus = topology.gpus[:4]
    fits = len(gpus) == 4 and all(g.memory_total_bytes is not None and g.memory_total_bytes >= 80e9 for g in gpus)
    result = run(pytester, machine, CLASS_MEMORY_METHOD_COUNT, "-rs")
    result.assert_outcomes(**({"passed": 1} if fits else {"skipped": 1}))
    if not fits:
        result.stdout.fnmatch_lines(["*requires_gpus(4, min_memory_gb=80)*"])


def test_a_closer_marker_of_another_kind_keeps_the_farther_ones_arguments(pytester):
    src = (
        "@pytest.mark.min_p2p_bw(10000, strict=True)\n"
        "class TestFast:\n"
        "    @pytest.mark.min_p2p_bw(gpus=2)\n"
        "    def test_pair(self): pass\n"
    )
    result = run(pytester, "dgx-a100", src, "-rA")
    # the class's 10000 GB/s and strict=True (a failed setup), on the method's two GPUs
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*min_p2p_bw(10000, gpus=2)*"])


def test_a_bad_marker_on_a_class_is_named_even_where_a_method_restates_it(pytester):
    src = (
        "@pytest.mark.requires_gpus(min_memory=80)\n"
        "class TestX:\n"
        "    @pytest.mark.requires_gpus(4)\n"
        "    def test_four(self): pass\n"
    )
    result = run(pytester, "dgx-a100", src)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*TestX::test_four: @pytest.mark.requires_gpus: (on an enclosing class or module)*min_memory*"]
    )


def test_several_markers_of_one_name_on_one_test_all_apply(pytester):
    src = "@pytest.mark.requires_link('NV')\n@pytest.mark.requires_link('PIX', gpus=[0, 2])\ndef test_both(): pass\n"
    result = run(pytester, "4x-rtx4090", src)
    result.assert_outcomes(skipped=1)


# ---------------------------------------------------------------------------------------------
# The facts themselves


def test_architecture_names_follow_the_compute_capability():
    assert [hardware.architecture(cc) for cc in ("7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0")] == [
        "volta",
        "turing",
        "ampere",
        "ampere",
        "ada",
        "hopper",
        "blackwell",
        "blackwell",
    ]
    assert hardware.architecture("13.0") is None and hardware.architecture(None) is None  # newer: unknown
    assert hardware.bf16("8.0") is True and hardware.bf16("7.5") is False and hardware.bf16("x") is None


def test_versions_compare_as_pip_compares_them():
    assert hardware.satisfies("570.124.06", ">=535") and not hardware.satisfies("2.9.6", ">=2.18")
    assert hardware.satisfies("N/A", ">=1") is None and hardware.satisfies(None, ">=1") is None
    assert hardware.satisfies("12.8", ">=12.1,<13") and hardware.satisfies("2.27.0a1", ">=2.26")


def test_bundled_machines_carry_the_facts_the_markers_read():
    """Every bundled machine with GPUs says memory, capability and model; the HGX H100 says multicast."""
    for name in BUNDLED_MACHINES:
        for gpu in probe(name).gpus:
            assert gpu.memory_total_bytes and gpu.compute_capability and gpu.name, (name, gpu.index)
    assert all(g.multicast for g in probe("hgx-h100").gpus)
    assert probe("hgx-h100-nvlink-down").gpus[5].multicast is None


def test_the_options_doc_shows_the_grammar_the_plugin_prints():
    from pytest_gputopo.core.expressions import REQUIRE_GRAMMAR

    doc = (Path(__file__).parents[1] / "docs" / "options.md").read_text()
    for line in REQUIRE_GRAMMAR.splitlines():
        assert line.split("  ")[-1].strip() in doc, line


# ---------------------------------------------------------------------------------------------
# gputopo_ranks outside a launcher: this process is rank 0 alone


def test_a_custom_condition_outside_a_launcher(pytester):
    src = (
        "def test_fp8(gputopo_ranks):\n"
        "    gputopo_ranks.require(lambda t: float(t.gpus[0].compute_capability) >= 8.9, 'FP8 tensor cores')\n"
        "def test_unknown(gputopo_ranks):\n"
        "    gputopo_ranks.require(lambda t: None, 'a fact nobody knows')\n"
        "def test_met(gputopo_ranks):\n"
        "    gputopo_ranks.require(lambda t: len(t.gpus) == 8, 'eight GPUs')\n"
        "    assert [v.rank for v in gputopo_ranks.views] == [0] and len(gputopo_ranks.nodes) == 1\n"
    )
    result = run(pytester, "dgx-a100", src, "--junitxml=out.xml")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines_random(
        [
            "*FP8 tensor cores: unmet on rank 0 (*) [[]recorded:dgx-a100 (a recorded machine, not this host)[]]",
            "*a fact nobody knows: unmet on rank 0*",  # None is unknown: never met
        ]
    )
    assert 'name="gputopo_unmet" value="FP8 tensor cores"' in (pytester.path / "out.xml").read_text()
    run(pytester, "dgx-a100", src, "--gputopo-strict").assert_outcomes(passed=1, failed=2)


def test_every_marker_the_docs_show_is_valid():
    """docs/porting.md and docs/markers.md show markers to paste: each one is read as the plugin reads it."""
    import re

    from pytest_gputopo.plugin.markers import MARKERS, from_marker

    docs = Path(__file__).parents[1] / "docs"
    seen = 0
    for page in ("porting.md", "markers.md"):
        text = (docs / page).read_text()
        for name, args in re.findall(r"pytest\.mark\.(\w+)\(([^()]*(?:\([^()]*\)[^()]*)*)\)", text):
            if name in MARKERS:
                bound = eval(f"(lambda *a, **k: (a, k))({args})")  # the docs' own text, nothing else
                from_marker(name, *bound)
                seen += 1
    assert seen >= 20


def test_gputopo_show_says_each_fact_the_markers_judge():
    from pytest_gputopo.render.report import gpu_lines

    lines = gpu_lines(probe("hgx-h100-nvlink-down"))
    assert lines[5] == (
        "GPU5: NVIDIA H100 80GB HBM3 bus 00000000:AB:00.0 85.5 GB, compute 9.0 (Hopper), "
        "PCIe Gen5 x16 (max Gen5 x16), 0/18 NVLinks up"
    )  # multicast unknown: not claimed
    assert lines[4].endswith("18/18 NVLinks up, multicast yes")
    assert lines[-1] == "versions: driver 570.124.06, CUDA (driver) 12.8, CUDA runtime (torch) 12.9, NCCL (torch) ?"


# ---------------------------------------------------------------------------------------------
# An all-reduce on named GPUs


def test_an_allreduce_on_named_gpus_runs_one_rank_per_named_gpu(monkeypatch):
    """min_allreduce_bw(gpus=[0, 5]) is measured on GPU0 and GPU5 (the worker puts rank r on
    devices[r], bench/allreduce_worker.py), and judged against the links among those two."""
    from pytest_gputopo.bench import allreduce
    from pytest_gputopo.bench.suite import BenchSettings, BenchSuite
    from pytest_gputopo.core import collectives, keys, model

    seen = []

    def fake_run(n, sizes, *, log_nccl=False, devices=None, **kw):
        seen.append((n, devices, log_nccl))
        return one_size_result(n, kw["judge_size"], algbw_gbps=20.0, busbw_gbps=20.0)

    monkeypatch.setattr(allreduce, "run_allreduce", fake_run)
    host = dataclasses.replace(probe("hgx-h100-nvlink-down"), source=model.Source("nvml"))  # as if measured here
    suite = BenchSuite(host, BenchSettings())
    key = suite.allreduce_key((0, 5), None)
    assert key == keys.AllReduce(2, key.size_bytes, (0, 5))
    assert suite.get(key).gbps == 20.0
    assert seen == [(2, [0, 5], False), (2, [0, 5], True)]  # the timed run, and NCCL's logged one
    over_pcie = collectives.allreduce_expected_busbw(host, 2, (0, 5))
    over_nvlink = collectives.allreduce_expected_busbw(host, 2, (0, 4))
    assert "PCIe" in over_pcie.label and over_nvlink.gbps > 5 * over_pcie.gbps
    assert collectives.allreduce_expected_busbw(host, 2, (0, 9)) is None  # no GPU9: nothing to expect


def test_a_recorded_machine_has_no_published_figure_for_named_gpus(pytester):
    """A published all-reduce figure says how many GPUs, never which: it does not stand for GPU0+GPU5."""
    result = run(pytester, "hgx-h100", "@pytest.mark.min_allreduce_bw(100, gpus=[0, 5])\ndef test_x(): pass\n")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*min_allreduce_bw(100, gpus=[[]0, 5[]]): all-reduce busbw, 2 ranks on GPU0, GPU5, "
            "* no figure (none published for recorded:hgx-h100*"
        ]
    )
