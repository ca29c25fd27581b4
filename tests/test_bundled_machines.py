"""The bundled recorded machines (pytest_gputopo/machines/*.json, written by scripts/build_machines.py).

Every profile must load, name its sources, be internally consistent the way NVML and nvidia-smi are
(one link per GPU pair; NV# recomputable from the per-GPU NVLink records), and carry the facts that
define it. Regenerating the files must give the same bytes.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from conftest import BUNDLED_MACHINES
from pytest_gputopo.core.model import LinkClass, P2PStatus
from pytest_gputopo.probe import recorded

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "build_machines.py"

OK, NS = P2PStatus.OK, P2PStatus.NOT_SUPPORTED
BUS_RE = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")
UUID_RE = re.compile(r"^GPU-00000000-[0-9a-f]{4}-4[0-9a-f]{3}-8[0-9a-f]{3}-[0-9a-f]{12}$")


def _load_script():
    spec = importlib.util.spec_from_file_location("build_machines", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


@pytest.fixture(scope="module")
def build_machines():
    return _load_script()


def topo(name):
    return recorded.load_profile(name).topology


# ---------------------------------------------------------------------------------------------
# The set of files, and that the generator reproduces them


def test_every_machine_is_bundled_and_nothing_else():
    assert sorted(recorded.bundled_names()) == sorted(BUNDLED_MACHINES)


def test_generating_again_gives_identical_files(build_machines):
    files = build_machines.build()
    assert sorted(files) == sorted(f"{n}.json" for n in BUNDLED_MACHINES)
    for file_name, text in files.items():
        on_disk = (recorded.BUNDLED_DIR / file_name).read_text(encoding="utf-8")
        assert on_disk == text, f"{file_name} is out of date: run scripts/build_machines.py"
    assert build_machines.build() == files  # deterministic within one process as well


def test_check_mode_agrees(build_machines):
    assert build_machines.main(["--check"]) == 0


def test_check_mode_reports_a_stale_file(build_machines, tmp_path, capsys):
    assert build_machines.main(["--out", str(tmp_path)]) == 0
    (tmp_path / "dgx-a100.json").write_text("{}", encoding="utf-8")
    (tmp_path / "hand-written.json").write_text("{}", encoding="utf-8")
    assert build_machines.main(["--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "dgx-a100.json: missing or out of date" in err
    assert "hand-written.json: not produced by" in err


# ---------------------------------------------------------------------------------------------
# Every profile: loads, names its sources, consistent


@pytest.mark.parametrize("name", BUNDLED_MACHINES)
def test_profile_loads_and_names_its_sources(name):
    profile = recorded.load_profile(name)
    assert profile.name == name
    assert profile.topology.recorded and profile.topology.source.name == name
    assert profile.description.strip()
    assert profile.sources and all(isinstance(s, str) and len(s) > 20 for s in profile.sources)
    assert all(isinstance(s, str) and ": " in s for s in profile.inferred)
    assert profile.topology.hostname is None
    if profile.topology.gpus:
        assert any(s.startswith("gpus[*].uuid: synthetic") for s in profile.inferred)


# A citation a user of the package reads (`gputopo show --machine X --json`) must name a public
# publication, never a file beside this repository that only its developers have.
PRIVATE_CITATION = re.compile(r"\bcorpus [a-z-]+/\d+|\breference/[\w-]+\.md|\.\./shared/")


@pytest.mark.parametrize("name", BUNDLED_MACHINES)
def test_profile_cites_no_file_outside_the_repository(name):
    profile = recorded.load_profile(name)
    published = [fig.get("source", "") for fig in profile.topology.published]
    texts = [profile.description, *profile.sources, *profile.inferred, *published]
    assert [t for t in texts if PRIVATE_CITATION.search(t)] == []


@pytest.mark.parametrize("name", BUNDLED_MACHINES)
def test_gpus_are_numbered_in_pci_order(name):
    gpus = topo(name).gpus
    for i, gpu in enumerate(gpus):
        assert gpu.index == gpu.nvml_index == i
        assert BUS_RE.match(gpu.pci_bus_id), gpu.pci_bus_id
        assert UUID_RE.match(gpu.uuid), gpu.uuid
        assert gpu.name and gpu.compute_capability and gpu.memory_total_bytes > 0
        if gpu.pcie_gen_max is not None:  # unknown only where no PCIe figure was captured (gb200-tray: NVLink-C2C)
            assert gpu.pcie_gen_current <= gpu.pcie_gen_max and gpu.pcie_width_current <= gpu.pcie_width_max
        assert [ln.link for ln in gpu.nvlinks] == list(range(len(gpu.nvlinks)))
    buses = [g.pci_bus_id for g in gpus]
    assert buses == sorted(buses) and len(set(buses)) == len(buses)
    assert len({g.uuid for g in gpus}) == len(gpus)


@pytest.mark.parametrize("name", BUNDLED_MACHINES)
def test_every_pair_has_exactly_one_link(name):
    profile = recorded.load_profile(name)
    t = profile.topology
    n = len(t.gpus)
    pairs = [(ln.a, ln.b) for ln in t.links]
    assert sorted(pairs) == [(a, b) for a in range(n) for b in range(a + 1, n)]
    for ln in t.links:
        assert ln.pcie is not LinkClass.NV and ln.nvlinks is not None
        # Unknown only behind NV# (as nvidia-smi hides it) or where the capture does not show the pair.
        cut = any(i.startswith(f"links[{ln.a}-{ln.b}].pcie: unknown") for i in profile.inferred)
        assert ln.pcie is not None or ln.nvlinks or cut, "a PCIe class is unknown only behind NV# or off the capture"


def nv_count(a, b):
    """NV# the way nvidia-smi computes it from the per-GPU NVLink records (written independently of the
    generator): active links of a whose remote is b; on NVSwitch, the smaller count of active switch links."""
    direct_ab = sum(1 for ln in a.nvlinks if ln.active and ln.remote_type == "GPU" and ln.remote_bus_id == b.pci_bus_id)
    direct_ba = sum(1 for ln in b.nvlinks if ln.active and ln.remote_type == "GPU" and ln.remote_bus_id == a.pci_bus_id)
    assert direct_ab == direct_ba, "a direct NVLink must be seen from both ends"
    if direct_ab:
        return direct_ab
    switch = [sum(1 for ln in g.nvlinks if ln.active and ln.remote_type == "SWITCH") for g in (a, b)]
    return min(switch)


@pytest.mark.parametrize("name", BUNDLED_MACHINES)
def test_nvlink_count_follows_the_per_gpu_records(name):
    t = topo(name)
    for ln in t.links:
        a, b = t.gpus[ln.a], t.gpus[ln.b]
        assert ln.nvlinks == nv_count(a, b), ln.name
        if not a.nvlinks or not b.nvlinks:
            assert ln.nvlinks == 0
        # An NVLink pair can do P2P over NVLink; a PCIe pair has no NVLink path.
        if ln.nvlinks:
            assert ln.p2p.nvlink is OK and ln.p2p.read_write is True, ln.name
        else:
            assert ln.p2p.nvlink is not OK, ln.name
    for gpu in t.gpus:
        for nvl in gpu.nvlinks:
            if nvl.active:
                assert nvl.remote_type in ("GPU", "SWITCH")
                # where a switch link leads may be unknown (gb200-tray: the rack's switch trays)
                assert (nvl.remote_type == "SWITCH" and nvl.remote_bus_id is None) or BUS_RE.match(nvl.remote_bus_id)
            assert nvl.version in ("2.0", "3.1", "4.0", "5.0")


# ---------------------------------------------------------------------------------------------
# The defining facts of each machine


def labels(t):
    return {str(ln.label) for ln in t.links}


def test_dgx_a100():
    t = topo("dgx-a100")
    assert len(t.gpus) == 8 and len(t.links) == 28
    assert labels(t) == {"NV12"}
    assert all(ln.p2p.read == ln.p2p.write == ln.p2p.nvlink == ln.p2p.atomics == OK for ln in t.links)
    assert [g.numa_node for g in t.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert t.gpus[0].pci_bus_id == "00000000:07:00.0"
    for g in t.gpus:
        assert g.name == "NVIDIA A100-SXM4-80GB" and g.compute_capability == "8.0"
        assert g.memory_total_bytes == 81920 * 2**20
        assert (g.pcie_gen_max, g.pcie_width_max) == (4, 16)
        assert g.active_nvlinks == 12
        assert {ln.remote_type for ln in g.nvlinks} == {"SWITCH"}
        assert len({ln.remote_bus_id for ln in g.nvlinks}) == 6  # 6 NVSwitches, 2 links each
    # PXB within a NUMA node, SYS across (NPS4: other NUMA nodes are SYS even on one socket)
    assert t.link(0, 1).pcie is LinkClass.PXB and t.link(0, 2).pcie is LinkClass.SYS
    assert t.nics == tuple(f"mlx5_{i}" for i in range(18))


def test_hgx_h100():
    t = topo("hgx-h100")
    assert len(t.gpus) == 8 and labels(t) == {"NV18"}
    assert all(ln.p2p.read == ln.p2p.write == ln.p2p.nvlink == ln.p2p.atomics == OK for ln in t.links)
    for g in t.gpus:
        assert g.name == "NVIDIA H100 80GB HBM3" and g.compute_capability == "9.0"
        assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (5, 5, 16, 16)
        assert g.active_nvlinks == 18 and {ln.version for ln in g.nvlinks} == {"4.0"}
    for ln in t.links:
        same_socket = (ln.a < 4) == (ln.b < 4)
        assert ln.pcie is (LinkClass.NODE if same_socket else LinkClass.SYS)
    assert t.nics == tuple(f"mlx5_{i}" for i in range(8))
    assert t.driver_version == "570.124.06"


# corpus topo/036, row by row (upper triangle): the V100 hybrid cube mesh as the VM shows it
DGX1_MATRIX = """
GPU0 X NV2 NV1 NV2 NODE NODE NV1 NODE
GPU1 NV2 X NV2 NV1 NODE NODE NODE NV1
GPU2 NV1 NV2 X NV1 NV2 NODE NODE NODE
GPU3 NV2 NV1 NV1 X NODE NV2 NODE NODE
GPU4 NODE NODE NV2 NODE X NV1 NV1 NV2
GPU5 NODE NODE NODE NV2 NV1 X NV2 NV1
GPU6 NV1 NODE NODE NODE NV1 NV2 X NV2
GPU7 NODE NV1 NODE NODE NV2 NV1 NV2 X
"""


def test_dgx1_v100_is_the_cube_mesh_of_corpus_036():
    t = topo("dgx1-v100")
    rows = [line.split()[1:] for line in DGX1_MATRIX.strip().splitlines()]
    for ln in t.links:
        assert str(ln.label) == rows[ln.a][ln.b] == rows[ln.b][ln.a], ln.name
    for g in t.gpus:
        assert g.compute_capability == "7.0" and (g.pcie_gen_max, g.pcie_width_max) == (3, 16)
        assert g.active_nvlinks == 6 and {ln.remote_type for ln in g.nvlinks} == {"GPU"}
        assert {ln.version for ln in g.nvlinks} == {"2.0"}
    assert all(ln.pcie is LinkClass.NODE for ln in t.links)


def test_2x_rtx3090_nvlink():
    t = topo("2x-rtx3090-nvlink")
    (ln,) = t.links
    assert str(ln.label) == "NV4" and ln.p2p.read_write is True and ln.p2p.nvlink is OK
    for g, peer in zip(t.gpus, reversed(t.gpus), strict=True):
        assert g.compute_capability == "8.6" and g.active_nvlinks == 4
        assert {(n.remote_type, n.remote_bus_id, n.version) for n in g.nvlinks} == {("GPU", peer.pci_bus_id, "3.1")}


def test_4x_rtx4090_refuses_p2p_everywhere():
    t = topo("4x-rtx4090")
    assert len(t.gpus) == 4 and len(t.links) == 6
    for ln in t.links:
        assert ln.nvlinks == 0 and ln.label.cls is not LinkClass.NV
        assert ln.p2p.read is ln.p2p.write is P2PStatus.GPU_NOT_SUPPORTED
        assert ln.p2p.nvlink is NS and t.p2p(ln.a, ln.b) is False
    assert all(g.nvlinks == () and g.compute_capability == "8.9" for g in t.gpus)


def test_8x_l40s():
    t = topo("8x-l40s")
    assert len(t.gpus) == 8 and labels(t) == {"PIX", "NODE", "SYS"}
    assert all(g.nvlinks == () for g in t.gpus)
    assert all(ln.p2p.read_write is True and ln.p2p.nvlink is NS for ln in t.links)
    assert t.link(0, 1).pcie is LinkClass.PIX and t.link(0, 2).pcie is LinkClass.NODE
    assert t.link(0, 4).pcie is LinkClass.SYS


def test_2x_rtx_pro_6000():
    t = topo("2x-rtx-pro-6000")
    (ln,) = t.links
    assert ln.label.cls is LinkClass.PHB and ln.nvlinks == 0
    assert ln.p2p.read_write is True and ln.p2p.nvlink is NS
    for g in t.gpus:
        assert g.compute_capability == "12.0" and g.nvlinks == ()
        assert (g.pcie_gen_max, g.pcie_width_max) == (5, 16)


def test_single_gpu():
    t = topo("single-gpu")
    assert len(t.gpus) == 1 and t.links == () and list(t.pairs()) == []
    assert t.problem is None


def test_no_gpu():
    t = topo("no-gpu")
    assert t.gpus == () and t.links == ()
    assert t.problem == "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver installed"


# ---------------------------------------------------------------------------------------------
# The degraded twins: their healthy machine with exactly one thing broken


def _unmeasured(gpu):
    """A GPU of a degraded twin: its base's, but the health facts read on the base's node."""
    return dataclasses.replace(gpu, health=None)


def test_hgx_h100_nvlink_down():
    base, t = topo("hgx-h100"), topo("hgx-h100-nvlink-down")
    assert t.gpus[5].active_nvlinks == 0 and len(t.gpus[5].nvlinks) == 18
    assert [g for i, g in enumerate(t.gpus) if i != 5] == [_unmeasured(g) for i, g in enumerate(base.gpus) if i != 5]
    for ln, ref in zip(t.links, base.links, strict=True):
        if 5 in (ln.a, ln.b):
            assert ln.nvlinks == 0 and ln.label.cls is not LinkClass.NV
            assert ln.pcie is ref.pcie is (LinkClass.SYS if min(ln.a, ln.b) < 4 else LinkClass.NODE)
            assert ln.p2p.nvlink is not OK
        else:
            assert ln == ref


def test_hgx_h100_pcie_x8():
    base, t = topo("hgx-h100"), topo("hgx-h100-pcie-x8")
    g = t.gpus[2]
    assert (g.pcie_gen_current, g.pcie_width_current, g.pcie_gen_max, g.pcie_width_max) == (3, 8, 5, 16)
    assert [x for i, x in enumerate(t.gpus) if i != 2] == [_unmeasured(x) for i, x in enumerate(base.gpus) if i != 2]
    assert t.links == base.links


def test_8x_l40s_p2p_disabled():
    base, t = topo("8x-l40s"), topo("8x-l40s-p2p-disabled")
    assert t.gpus == base.gpus
    for ln, ref in zip(t.links, base.links, strict=True):
        assert ln.p2p.read is ln.p2p.write is P2PStatus.TOPOLOGY_NOT_SUPPORTED
        assert t.p2p(ln.a, ln.b) is False
        assert (ln.a, ln.b, ln.pcie, ln.nvlinks) == (ref.a, ref.b, ref.pcie, ref.nvlinks)


@pytest.mark.parametrize(
    "twin,base",
    [("hgx-h100-nvlink-down", "hgx-h100"), ("hgx-h100-pcie-x8", "hgx-h100"), ("8x-l40s-p2p-disabled", "8x-l40s")],
)
def test_twins_keep_their_base_sources_and_say_they_are_constructed(twin, base):
    t, b = recorded.load_profile(twin), recorded.load_profile(base)
    assert t.sources[: len(b.sources)] == b.sources and len(t.sources) > len(b.sources)
    assert t.inferred[: len(b.inferred)] == b.inferred
    assert any("degraded twin constructed" in s and f"'{base}'" in s for s in t.inferred)
    assert (t.topology.nics, t.topology.driver_version) == (b.topology.nics, b.topology.driver_version)
