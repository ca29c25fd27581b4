"""The plugin in real pytest sessions (pytester) against bundled recorded machines."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CORPUS, NO_CORPUS, marked_module
from pytest_gputopo.plugin.run import GATE_EXIT_STATUS

MARKED = marked_module(
    test_eight="requires_gpus(8)",
    test_p2p="requires_p2p",
    test_nvlink="requires_nvlink",
    test_pxb='requires_link("PXB")',
    test_nv18_first_four='requires_link("NV18", gpus=4)',
    test_plain="",
)


def run(pytester, machine, *args, src=MARKED):
    pytester.makepyfile(test_marked=src)
    return pytester.runpytest("--gputopo-machine", machine, "-rs", *args)


# Each bundled machine: how many of MARKED's six tests it skips (the others pass), and the lines that say why.
MACHINES_SAY = [
    pytest.param(
        "hgx-h100",
        0,
        [
            "gputopo: 8x *H100*, worst link NV18 (GPU0-GPU1), P2P OK on all 28 pairs, "
            "source recorded:hgx-h100 (a recorded machine, not this host)"
        ],
        id="healthy-nvswitch-box-runs-everything",
    ),
    pytest.param(
        "hgx-h100-nvlink-down",
        2,
        [
            "*requires_nvlink: GPU0-GPU5 are linked by *, not NVLink*recorded:hgx-h100-nvlink-down*",
            "*requires_link('PXB'): GPU*-GPU5 are linked by *",
        ],
        id="gpu-that-lost-its-nvlinks-is-named",
    ),
    pytest.param(
        "4x-rtx4090",
        5,
        ["*requires_p2p: GPU0-GPU1 cannot do P2P (read GPU not supported*"],
        id="pcie-only-box-without-p2p",
    ),
    pytest.param(
        "8x-l40s-p2p-disabled",
        4,
        ["*requires_p2p: GPU0-GPU1 cannot do P2P (read topology not supported*"],
        id="p2p-disabled-twin",
    ),
    pytest.param(
        "8x-l40s",
        3,
        ["*requires_link('PXB'): GPU*-GPU* are linked by SYS*"],
        id="dual-socket-box-names-the-sys-pair",
    ),
    pytest.param(
        "no-gpu",
        5,
        [
            "gputopo: no GPU (NVML library not found*); source recorded:no-gpu*",
            "*requires_gpus(8): 0 visible (NVML library not found*",
        ],
        id="no-gpu-machine-says-why-and-runs-the-rest",
    ),
]


@pytest.mark.parametrize("machine, skipped, says", MACHINES_SAY)
def test_each_machine_runs_what_it_can_and_says_why_not(pytester, machine, skipped, says):
    result = run(pytester, machine)
    result.assert_outcomes(passed=6 - skipped, skipped=skipped)
    result.stdout.fnmatch_lines(says)


def test_this_host_without_nvml(pytester):
    """This machine (and CI) has no NVIDIA driver: the real NVML path says so."""
    pytest.importorskip("pynvml")
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this host has NVML; the no-driver path is tested on recorded machines")
    except pynvml.NVMLError:
        pass
    pytester.makepyfile(test_marked=MARKED)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=5)
    result.stdout.fnmatch_lines(["gputopo: no GPU (*); source NVML"])


@pytest.mark.parametrize("how", ["cli", "ini", "env", "marker"])
def test_strict_mode_fails_unmet_tests(pytester, monkeypatch, how):
    src = MARKED
    args = []
    if how == "cli":
        args = ["--gputopo-strict"]
    elif how == "ini":
        pytester.makeini("[pytest]\ngputopo_strict = true\n")
    elif how == "env":
        monkeypatch.setenv("PYTEST_GPUTOPO_STRICT", "1")
    else:
        src = MARKED.replace("@pytest.mark.requires_p2p\n", "@pytest.mark.requires_p2p(strict=True)\n")
    result = run(pytester, "4x-rtx4090", *args, src=src)
    outcomes = result.parseoutcomes()
    # Strict unmet fails the test at setup (before its fixtures run): pytest reports an error.
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    if how == "marker":
        assert outcomes.get("errors") == 1 and outcomes.get("skipped") == 4
    else:
        assert outcomes.get("errors") == 5
    result.stdout.fnmatch_lines(["*requires_p2p: GPU0-GPU1 cannot do P2P*"])


def test_marker_strict_false_beats_the_option(pytester):
    src = "import pytest\n@pytest.mark.requires_gpus(16, strict=False)\ndef test_x(): pass\n"
    result = run(pytester, "hgx-h100", "--gputopo-strict", src=src)
    result.assert_outcomes(skipped=1)


def test_summary_counts_skips_per_requirement(pytester):
    result = run(pytester, "4x-rtx4090")
    result.stdout.fnmatch_lines(
        [
            "gputopo: 5 tests not run for unmet requirements: *requires_gpus(8) x1*"
            "requires_nvlink x1*requires_p2p x1*recorded:4x-rtx4090*"
        ]
    )


def test_verbose_header_shows_the_matrix(pytester):
    result = run(pytester, "dgx1-v100", "-v")
    result.stdout.fnmatch_lines(
        ["*GPU0*GPU1*GPU7*CPU Affinity*", "GPU0 * X *NV*", "P2P read/write status (as the profile records them;*"]
    )


def test_cuda_visible_devices_applies_to_a_recorded_machine(pytester, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    src = "import pytest\n@pytest.mark.requires_nvlink\ndef test_x(gputopo):\n    assert len(gputopo.gpus) == 4\n"
    run(pytester, "hgx-h100-nvlink-down", src=src).assert_outcomes(passed=1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,0")
    result = run(pytester, "hgx-h100-nvlink-down", src=src)
    result.stdout.fnmatch_lines(["*requires_nvlink: GPU0-GPU1 are linked by*"])


def test_fixture_helpers(pytester):
    src = """
def test_helpers(gputopo):
    assert str(gputopo.link(0, 1).label) == "NV12"
    assert gputopo.p2p(0, 7) is True
    assert gputopo.pairs_worse_than("NV12") == []
    assert len(gputopo.pairs_worse_than("NV18")) == 28
    assert gputopo.recorded and gputopo.source.name == "dgx-a100"
"""
    run(pytester, "dgx-a100", src=src).assert_outcomes(passed=1)


# ------------------------------------------------------------------ run gates


def test_require_gate_passes_on_a_machine_that_meets_it(pytester):
    run(pytester, "hgx-h100", "--gputopo-require", "gpus>=8,p2p,link>=NV18").assert_outcomes(passed=6)


def test_require_gate_stops_before_collection_naming_each_cause_then_its_pairs(pytester):
    """An unmet gate collects none of the run's tests: each cause is a failed test instead, the
    machine first (here no pair can do P2P, and none is linked at PXB), then what stands alone."""
    result = run(pytester, "4x-rtx4090", "--gputopo-require", "gpus>=8,p2p,link>=PXB")
    assert result.ret == GATE_EXIT_STATUS
    result.stdout.fnmatch_lines(
        [
            "gputopo: this machine does not meet the run's requirements [[]recorded:4x-rtx4090*]:",
            "  - the machine: all 6 pairs of the 4 GPUs fail requires_p2p: cannot do P2P*; all 6 pairs of the 4 GPUs "
            "fail requires_link('PXB'): are linked by NODE (6 pairs)",
            "      requires_p2p: GPU0-GPU1 cannot do P2P*",
            "*",
            "      requires_p2p: GPU2-GPU3 cannot do P2P*",
            "*",
            "  - requires_gpus(8): 4 visible",
            "gputopo: the run's tests are not collected; 2 causes, each a failed test gputopo-gate::<cause>",
        ]
    )
    result.assert_outcomes(failed=2)
    assert "test_marked" not in result.stdout.str()  # the run's own tests are not even collected


def test_require_gate_from_ini_and_env(pytester, monkeypatch):
    pytester.makeini("[pytest]\ngputopo_require = gpus>=16\n")
    pytester.makepyfile(test_a="def test_a(): pass")
    assert pytester.runpytest("--gputopo-machine", "dgx-a100").ret == GATE_EXIT_STATUS
    monkeypatch.setenv("PYTEST_GPUTOPO_REQUIRE", "gpus>=8")  # env beats ini
    assert pytester.runpytest("--gputopo-machine", "dgx-a100").ret == 0
    # the command line beats env
    assert pytester.runpytest("--gputopo-machine", "dgx-a100", "--gputopo-require", "gpus>=9").ret == GATE_EXIT_STATUS


def test_malformed_require_is_a_usage_error_with_the_grammar(pytester):
    result = run(pytester, "hgx-h100", "--gputopo-require", "gpus>8")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gputopo-require: term 'gpus>8': gpus takes '>='*", "*TERM  :=*"])


@pytest.mark.parametrize(
    "machine,expected",
    [
        (
            "hgx-h100-nvlink-down",
            [
                "*expected as hgx-h100: GPU5 has 0 active NVLinks, the reference 18*",
                "*expected as hgx-h100: GPU0-GPU5 are linked by *, the reference by NV18*",
            ],
        ),
        (
            "hgx-h100-pcie-x8",
            ["*expected as hgx-h100: GPU2 PCIe link trained down: x8 of x16 (the reference's width;*"],
        ),
    ],
)
def test_expect_gate_catches_a_degraded_node(pytester, machine, expected):
    result = run(pytester, machine, "--gputopo-expect", "hgx-h100")
    assert result.ret == GATE_EXIT_STATUS
    result.stdout.fnmatch_lines(expected)


def test_expect_gate_passes_on_a_healthy_node(pytester):
    run(pytester, "hgx-h100", "--gputopo-expect", "hgx-h100").assert_outcomes(passed=6)


def test_expect_gate_with_a_recorded_profile_file(pytester):
    # A reference recorded once with `gputopo record` on the healthy node.
    ref = pytester.path / "healthy.json"
    from pytest_gputopo.probe import probe_recorded
    from pytest_gputopo.probe.recorded import profile_dict

    ref.write_text(json.dumps(profile_dict("healthy", probe_recorded("8x-l40s"))))
    result = run(pytester, "8x-l40s-p2p-disabled", "--gputopo-expect", str(ref))
    assert result.ret == GATE_EXIT_STATUS
    result.stdout.fnmatch_lines(["*expected as healthy: GPU0-GPU1 P2P lost (the reference can do P2P)*"])


# ------------------------------------------------------------------ bad input


def test_bad_marker_arguments_name_the_test(pytester):
    src = (
        "import pytest\n@pytest.mark.requires_link('PXQ')\ndef test_bad(): pass\n"
        "@pytest.mark.requires_gpus('two')\ndef test_worse(): pass\n"
    )
    result = run(pytester, "hgx-h100", src=src)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*test_marked.py::test_bad: @pytest.mark.requires_link: unknown link label 'PXQ'*",
            "*test_marked.py::test_worse: @pytest.mark.requires_gpus: n must be a number of GPUs from 0 to 1024*",
        ]
    )


def test_unknown_machine_lists_the_bundled_ones(pytester):
    result = run(pytester, "dgx-z900")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gputopo-machine: unknown machine 'dgx-z900'; bundled machines: *dgx-a100*"])


def test_malformed_profile_names_file_and_field(pytester):
    bad = pytester.path / "bad.json"
    from pytest_gputopo.probe.recorded import load_profile

    profile = json.loads(open(load_profile("dgx-a100").path).read())
    profile["topology"]["gpus"][3]["pcie_gen_max"] = "five"
    bad.write_text(json.dumps(profile))
    result = run(pytester, str(bad))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{bad}: field topology.gpus[[]3].pcie_gen_max: expected int, got 'five'*"])
    bad.write_text('{"schema": 1,\n "name": "x",\n "topology": {,}}')
    result = run(pytester, str(bad))
    result.stderr.fnmatch_lines([f"*{bad}:3:*not valid JSON*"])


def test_bad_env_boolean_names_the_variable(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_GPUTOPO_STRICT", "maybe")
    result = run(pytester, "hgx-h100")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*environment variable PYTEST_GPUTOPO_STRICT: 'maybe' is not a boolean*"])


def test_contradictory_options(pytester):
    result = run(pytester, "hgx-h100", "--gputopo-strict", "--gputopo-no-strict")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gputopo-strict and --gputopo-no-strict contradict each other*"])


def test_markers_are_registered_with_their_signatures(pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.requires_gpus(n=1, min_memory_gb=None, compute_capability=None, arch=None, model=None, "
            "bf16=None, multicast=None, healthy=None, strict=False): *",
            "@pytest.mark.requires_versions(driver=None, cuda=None, cuda_runtime=None, nccl=None, strict=False): *",
            "@pytest.mark.requires_p2p(gpus=None, strict=False): *",
            "@pytest.mark.requires_nvlink(gpus=None, min_links=1, strict=False): *",
            "@pytest.mark.requires_link(cls, gpus=None, strict=False): *",
        ]
    )


# ------------------------------------------------------------------ processes


def test_xdist_workers_receive_the_topology_and_never_probe(pytester):
    pytest.importorskip("xdist")
    pytester.makeconftest("""
import os
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_gputopo_probe(config):
    with open(os.path.join(str(config.rootpath), "probes.log"), "a") as f:
        f.write("probe\\n")
""")
    pytester.makepyfile(test_marked=MARKED)
    result = pytester.runpytest_subprocess("-n", "2", "--gputopo-machine", "4x-rtx4090", "-rs")
    result.assert_outcomes(passed=1, skipped=5)
    assert (pytester.path / "probes.log").read_text().count("probe") == 1
    result.stdout.fnmatch_lines(["gputopo: 5 tests not run for unmet requirements:*"])


def test_loading_the_plugin_imports_neither_torch_nor_pynvml():
    code = (
        "import sys, importlib.metadata as md\n"
        "[e for e in md.entry_points(group='pytest11') if e.name == 'gputopo'][0].load()\n"
        "print(sorted(m for m in ('torch', 'pynvml', 'pytest_gputopo.plugin.ranks_run', "
        "'pytest_gputopo.plugin.rank_body', 'pytest_gputopo.runtime.rank_procs') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_recorded_run_imports_no_torch(pytester):
    pytester.makepyfile(test_a="import sys\ndef test_a():\n    assert 'torch' not in sys.modules\n")
    pytester.runpytest_subprocess("--gputopo-machine", "dgx-a100").assert_outcomes(passed=1)


def test_unhashable_marker_arguments_are_still_validated(pytester):
    src = "import pytest\n@pytest.mark.requires_p2p(gpus=[2, 2])\ndef test_x(): pass\n"
    result = run(pytester, "hgx-h100", src=src)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_x: @pytest.mark.requires_p2p: gpus lists GPU2 twice*"])


@pytest.mark.parametrize("problem", ["no permission to use NVML", "NVIDIA driver not loaded"])
def test_a_machine_without_nvml_access_says_why(pytester, problem):
    from pytest_gputopo.probe.recorded import load_profile

    profile = json.loads(open(load_profile("no-gpu").path).read())
    profile["topology"]["problem"] = problem
    path = pytester.path / "locked.json"
    path.write_text(json.dumps(profile))
    result = run(pytester, str(path))
    result.assert_outcomes(passed=1, skipped=5)
    result.stdout.fnmatch_lines(
        [
            f"gputopo: no GPU ({problem}); source recorded:no-gpu*",
            f"*requires_p2p: needs 2 GPUs to form a pair, 0 visible ({problem})*",
        ]
    )


@pytest.mark.skipif(not (CORPUS / "topo").is_dir(), reason=NO_CORPUS)
def test_gating_on_nvidia_smi_text(pytester):
    """A file of `nvidia-smi topo -m` text as the machine: links known, P2P unknown (not in the text)."""
    text = (CORPUS / "topo" / "042.txt").read_text()
    (pytester.path / "a30.txt").write_text(text)
    src = (
        "import pytest\n@pytest.mark.requires_nvlink(gpus=2)\ndef test_pair(): pass\n"
        "@pytest.mark.requires_p2p(gpus=2)\ndef test_p2p(): pass\n"
    )
    result = run(pytester, "a30.txt", src=src)
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "gputopo: 4x unknown GPU, worst link SYS (GPU0-GPU2), P2P 6 unknown of 6 pairs, "
            "source text:a30.txt (nvidia-smi output, not this host)",
            "*requires_p2p(gpus=2): GPU0-GPU1 P2P status is unknown*",
        ]
    )


def test_every_option_is_documented_with_its_three_surfaces():
    from pathlib import Path

    from pytest_gputopo.plugin.options import OPTIONS

    doc = (Path(__file__).parents[1] / "docs" / "options.md").read_text()
    rows = {
        line.split("|")[1].split("`")[1].split()[0]: line
        for line in doc.splitlines()
        if line.startswith("| `--gputopo-")
    }
    for option in OPTIONS.values():
        assert option.flag in rows, f"{option.flag} missing from docs/options.md"
        assert f"`{option.ini}`" in rows[option.flag] and f"`{option.env}`" in rows[option.flag]


def _fixture_docs() -> str:
    text = (Path(__file__).resolve().parents[1] / "docs" / "markers.md").read_text(encoding="utf-8")
    return text[text.index("### Every field") : text.index("## For other plugins")]


def test_the_fixture_docs_name_every_field():
    """Every field a user can read of the fixture is documented."""
    import dataclasses

    from pytest_gputopo.core import model

    docs = _fixture_docs()
    for cls in (model.Topology, model.Gpu, model.NvLink, model.Link, model.P2P):
        for f in dataclasses.fields(cls):
            if f.init and not f.name.startswith("_"):
                assert f"`{f.name}`" in docs, f"{cls.__name__}.{f.name} is not in docs/markers.md"


def test_the_fixture_examples_in_the_docs_run(pytester):
    code = _fixture_docs().split("```python\n", 1)[1].split("```", 1)[0]
    pytester.makepyfile(test_fields=code)
    pytester.runpytest("--gputopo-machine", "hgx-h100").assert_outcomes(passed=4)
    result = pytester.runpytest("--gputopo-machine", "hgx-h100-nvlink-down", "-k", "nvlinks")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*GPU5: NVLinks * are down*"])
    if (CORPUS / "topo").is_dir():  # nvidia-smi text knows no memory: unknown, said, never assumed
        text = pytester.path / "topo.txt"
        text.write_text((CORPUS / "topo" / "042.txt").read_text())
        result = pytester.runpytest("--gputopo-machine", str(text), "-k", "big_enough", "-rs")
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines(["*GPU0's memory is unknown*"])


LOADED_AT_THE_END = """
import json, sys
def pytest_unconfigure(config):
    with open("loaded.json", "w") as f:
        json.dump(sorted(m for m in sys.modules if m.startswith("pytest_gputopo")), f)
"""


@pytest.mark.parametrize(
    "suite, woken",
    [
        ("def test_a(): pass\n", False),
        ("import pytest\n@pytest.mark.requires_gpus(1)\ndef test_a(): pass\n", True),
        ("def test_a(gputopo): pass\n", True),
        ("def test_a(request): request.getfixturevalue('gputopo')\n", True),
    ],
    ids=["plain", "marked", "fixture", "fixture-by-name"],
)
def test_a_run_that_asks_nothing_loads_only_the_entry_point(pytester, suite, woken):
    """Free until asked (issue 45): a run whose tests use no marker, fixture or setting of the plugin
    loads its entry point's three modules (options, markers' registration, hookspecs) and no more; a
    test that asks wakes the plugin, whichever way it asks."""
    pytester.makeconftest(LOADED_AT_THE_END)
    pytester.makepyfile(test_a=suite)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    assert result.ret == 0  # passed (or, marked on this host, skipped)
    loaded = json.loads((pytester.path / "loaded.json").read_text())
    entry = [
        "pytest_gputopo",
        "pytest_gputopo.plugin",
        "pytest_gputopo.plugin.entry",
        "pytest_gputopo.plugin.hookspecs",
        "pytest_gputopo.plugin.marker_table",
        "pytest_gputopo.plugin.option_table",
    ]
    if woken:
        assert "pytest_gputopo.plugin.hooks" in loaded
    else:
        assert loaded == entry
