"""Bundled machines record the versions their public captures show, and only those, so that a
version-gated test (``requires_versions``) is judged on a recorded machine where a capture says the
version, and is unknown -- never met -- where none does."""

from __future__ import annotations

import pytest

from conftest import CORPUS, NO_CORPUS
from pytest_gputopo.core.gpu_requirements import VERSIONS, VersionRequirement
from pytest_gputopo.probe.recorded import bundled_names, load_profile

# Each recorded version and the capture in the profile's sources that shows it (a substring of a source).
RECORDED = {
    ("hgx-h100", "cuda_runtime_version"): ("12.9", "sglang/issues/20855"),
    ("hgx-h100-nvlink-down", "cuda_runtime_version"): ("12.9", "sglang/issues/20855"),
    ("hgx-h100-pcie-x8", "cuda_runtime_version"): ("12.9", "sglang/issues/20855"),
    ("4x-a100-40gb", "cuda_driver_version"): ("12.2", "CUDA Version: 12.2"),
    ("2x-rtx3090-nvlink", "cuda_driver_version"): ("11.4", "CUDA 11.4"),
    ("gb200-tray", "cuda_driver_version"): ("13.0", "CUDA 13.0"),
    ("8x-rtx4090", "cuda_runtime_version"): ("12.1", "'CUDA used to build PyTorch: 12.1'"),
    ("8x-rtx4090", "nccl_version"): ("2.20.5", "'[pip3] nvidia-nccl-cu12==2.20.5'"),
    ("4x-a30", "cuda_runtime_version"): ("12.8", "'CUDA used to build PyTorch   : 12.8'"),
    ("4x-a30", "nccl_version"): ("2.27.3", "'[pip3] nvidia-nccl-cu12==2.27.3'"),
    ("single-gpu", "cuda_driver_version"): ("12.4", "CUDA Version: 12.4'"),
    ("4x-rtx4090", "cuda_driver_version"): ("12.4", "'CUDA Version : 12.4'"),
    ("8x-l40s", "cuda_driver_version"): ("12.4", "'CUDA Version : 12.4'"),
    ("8x-l40s-p2p-disabled", "cuda_driver_version"): ("12.4", "'CUDA Version : 12.4'"),
    # the CUDA version of the driver the machine's capture names, as public nvidia-smi tables of that driver print it
    ("hgx-h100", "cuda_driver_version"): ("12.8", "'Driver Version: 570.124.06     CUDA Version: 12.8'"),
    ("hgx-h100-nvlink-down", "cuda_driver_version"): ("12.8", "'Driver Version: 570.124.06     CUDA Version: 12.8'"),
    ("hgx-h100-pcie-x8", "cuda_driver_version"): ("12.8", "'Driver Version: 570.124.06     CUDA Version: 12.8'"),
    ("4x-a30", "cuda_driver_version"): ("12.2", "'Driver Version: 535.274.02   CUDA Version: 12.2'"),
    ("8x-rtx4090", "cuda_driver_version"): ("12.0", "'Driver Version: 525.147.05   CUDA Version: 12.0'"),
    ("2x-rtx-pro-6000", "cuda_driver_version"): ("13.2", "'Driver Version: 595.71.05      CUDA Version: 13.2'"),
}
VERSION_FIELDS = ("cuda_driver_version", "cuda_runtime_version", "nccl_version")


@pytest.mark.parametrize("name", bundled_names())
def test_a_bundled_machine_records_a_version_only_where_a_cited_capture_shows_it(name):
    """Every CUDA and NCCL version a bundled profile holds is listed here with the source that shows
    it, and that source is in the profile's ``sources``; every other is unknown (null)."""
    profile = load_profile(name)
    for field in VERSION_FIELDS:
        value = getattr(profile.topology, field)
        expected = RECORDED.get((name, field))
        assert value == (expected[0] if expected else None), (name, field)
        if expected:
            assert any(expected[1] in source for source in profile.sources), (name, field)


@pytest.mark.parametrize("name", bundled_names())
def test_a_torch_cuda_gate_is_judged_where_a_capture_recorded_it_and_unknown_elsewhere(name):
    """``requires_versions(cuda_runtime=...)``: met or unmet, by the recorded version, on the machines
    whose capture shows torch's CUDA; elsewhere unmet because the version is unknown, whichever
    specifier is asked (unknown is never met)."""
    topology = load_profile(name).topology
    version = topology.cuda_runtime_version
    if version is not None:
        at_least = VersionRequirement(cuda_runtime=f">={version}")
        below = VersionRequirement(cuda_runtime=f"<{version}")
        assert at_least.evaluate(topology).ok and not below.evaluate(topology).ok
        assert f"is {version}, needs <{version}" in below.evaluate(topology).reason
    else:
        for requirement in (VersionRequirement(cuda_runtime=">=12.8"), VersionRequirement(cuda_runtime="<12")):
            verdict = requirement.evaluate(topology)
            assert not verdict.ok and f"({'cuda_runtime'}) is unknown" in verdict.reason


@pytest.mark.parametrize("name", bundled_names())
def test_a_torch_nccl_gate_with_cuda_is_judged_where_a_capture_recorded_both(name):
    """``requires_versions(cuda_runtime=..., nccl=...)`` on a recorded machine whose capture shows the
    CUDA torch was built with and the NCCL it loads: met when both are, unmet naming the version that
    is not (never "unknown"); on any other machine an NCCL gate is unmet because NCCL is unknown."""
    topology = load_profile(name).topology
    cuda, nccl = topology.cuda_runtime_version, topology.nccl_version
    if nccl is None:
        verdict = VersionRequirement(nccl=">=2.18").evaluate(topology)
        assert not verdict.ok and "(nccl) is unknown" in verdict.reason
        return
    assert cuda is not None, "a profile that records torch's NCCL records torch's CUDA too"
    assert VersionRequirement(cuda_runtime=f">={cuda}", nccl=f">={nccl}").evaluate(topology).ok
    newer = VersionRequirement(cuda_runtime=f">={cuda}", nccl=f">{nccl}").evaluate(topology)
    assert not newer.ok and newer.failures == (f"the NCCL torch loads (nccl) is {nccl}, needs >{nccl}",)
    older_cuda = VersionRequirement(cuda_runtime=f"<{cuda}", nccl=f"=={nccl}").evaluate(topology)
    assert not older_cuda.ok and "unknown" not in older_cuda.reason


def test_bundled_machines_can_try_torch_cuda_and_nccl_gates():
    """A port's ``requires_versions(cuda_runtime=..., nccl=...)`` can be tried on at least two
    recorded machines that record both versions."""
    assert any(load_profile(n).topology.cuda_runtime_version for n in bundled_names())
    topologies = {n: load_profile(n).topology for n in bundled_names()}
    both = [n for n, t in topologies.items() if t.nccl_version and t.cuda_runtime_version]
    assert len(both) >= 2, both
    assert VERSIONS["cuda_runtime"][0] == "cuda_runtime_version" and VERSIONS["nccl"][0] == "nccl_version"


def test_the_documented_versions_example_runs_on_the_machine_that_records_them(pytester):
    """docs/markers.md's ``requires_versions(nccl=">=2.18", cuda_runtime=">=12.1")`` example runs on
    ``4x-a30`` and ``8x-rtx4090`` (torch's CUDA and NCCL recorded) and skips on ``hgx-h100``, whose
    capture gives torch's CUDA but no NCCL, as the doc says."""
    from doc_examples import blocks

    (example,) = [b.text for b in blocks() if b.path == "docs/markers.md" and "def test_nvls_reduce_scatter" in b.text]
    pytester.makepyfile(test_versions=example)
    for machine in ("4x-a30", "8x-rtx4090"):
        pytester.runpytest("-p", "no:cacheprovider", "--gputopo-machine", machine).assert_outcomes(passed=1)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "--gputopo-machine", "hgx-h100")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*the NCCL torch loads (nccl) is unknown*"])


@pytest.mark.skipif(not CORPUS.is_dir(), reason=NO_CORPUS)
def test_a_machine_built_from_a_collect_env_has_the_topology_its_capture_shows():
    """``4x-a30`` is built from the "GPU Topology:" section of the collect_env whose versions it records
    (corpus topo/042 is that section): every GPU pair's label, each GPU's CPU and NUMA affinity and the
    NIC are what gputopo's own ``topo -m`` parser reads from the capture."""
    from pytest_gputopo.parse.smi_topo import parse_topo_matrix

    shown = parse_topo_matrix((CORPUS / "topo" / "042.txt").read_text())
    topology = load_profile("4x-a30").topology
    for link in topology.links:
        assert str(link.label) == shown.matrix[link.a][link.b], (link.a, link.b)
    assert [(g.numa_node, g.cpu_affinity) for g in topology.gpus] == [
        (int(g.numa_affinity), g.cpu_affinity) for g in shown.gpus
    ]
    assert topology.nics == shown.nics == ("mlx5_0",)
