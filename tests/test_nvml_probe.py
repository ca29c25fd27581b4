"""The NVML backend, driven through the fake pynvml: round trips, unknowns, errors, old bindings."""

from __future__ import annotations

import dataclasses
import itertools
import json
import socket

import pynvml
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fake_nvml import make_fake_pynvml
from pytest_gputopo.core import model, schema
from pytest_gputopo.probe import nvml, recorded

S = model.P2PStatus
OK = S.OK
PCIE_CLASSES = [c for c in model.LinkClass if c is not model.LinkClass.NV]


def _cpus(cpus: set[int]) -> str:
    """nvidia-smi's CPU list, written independently of the code under test."""
    out, run = [], []
    for cpu in sorted(cpus):
        if run and cpu != run[-1] + 1:
            out.append(run)
            run = []
        run.append(cpu)
    out.append(run)
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in out)


def _maybe(strategy):
    return st.one_of(st.none(), strategy)


@st.composite
def topologies(draw):
    """What a recording could hold: NVLink direct, through NVSwitches or none, some facts unknown.

    Pair counts are built from the links (not computed by the code under test); a GPU with an
    active link of unknown destination ("mystery") makes its pairs' counts unknown (the documented rule).
    """
    n = draw(st.integers(0, 10))
    style = draw(st.sampled_from(["pcie", "direct", "switch"]))
    bus_numbers = draw(st.lists(st.integers(1, 255), min_size=n, max_size=n, unique=True))
    domain = draw(st.sampled_from([0, 1, 0x10000]))
    bus = [f"{domain:08X}:{b:02X}:00.0" for b in bus_numbers]
    if style != "direct":  # a direct link needs its peer's bus id; elsewhere it may be unknown
        bus = [draw(_maybe(st.just(b))) for b in bus]
    mystery = draw(st.sets(st.integers(0, n - 1), max_size=2)) if n else set()
    remote_bus = lambda g: bus[g] if bus[g] is not None else None  # noqa: E731
    links_of: dict[int, list] = {g: [] for g in range(n)}
    count: dict[tuple[int, int], int] = {}
    version = _maybe(st.sampled_from(sorted(nvml.NVLINK_VERSIONS.values())))
    for a, b in itertools.combinations(range(n), 2):
        count[a, b] = 0
    if style == "direct":
        for a, b in count:
            c = count[a, b] = draw(st.integers(0, 3))
            for x, y in ((a, b), (b, a)):
                # an unknown device type still counts: the remote bus id is a GPU's
                links_of[x] += [
                    (True, bus[y], draw(st.sampled_from(["GPU", "unknown"])), draw(version)) for _ in range(c)
                ]
    elif style == "switch":
        per_gpu = [draw(st.integers(0, 18)) for _ in range(n)]
        for g, k in enumerate(per_gpu):
            links_of[g] += [
                (True, draw(_maybe(st.sampled_from(["00000000:A0:00.0", "00000000:A1:00.0"]))), "SWITCH", draw(version))
                for _ in range(k)
            ]
        for a, b in count:
            count[a, b] = min(per_gpu[a], per_gpu[b])
    for g in range(n):
        for _ in range(draw(st.integers(0, 2))):  # links that are down count for nothing
            peer = remote_bus(draw(st.integers(0, n - 1)))
            links_of[g].append(
                (
                    False,
                    draw(st.sampled_from([peer, None, "0000ABCD:01:00.0"])),
                    draw(st.sampled_from(["GPU", "SWITCH", "IBMNPU", "unknown"])),
                    draw(version),
                )
            )
        if g in mystery:
            links_of[g].append((True, None, "GPU", draw(version)))
    gpus = []
    nvml_order = draw(st.permutations(range(n)))
    for g in range(n):
        found = draw(st.permutations(links_of[g]))
        numbers = sorted(draw(st.lists(st.integers(0, 35), min_size=len(found), max_size=len(found), unique=True)))
        gpus.append(
            model.Gpu(
                index=g,
                nvml_index=nvml_order[g],
                pci_bus_id=bus[g],
                name=draw(_maybe(st.sampled_from(["NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB", "A100"]))),
                uuid=draw(_maybe(st.uuids().map(lambda u: f"GPU-{u}"))),
                numa_node=draw(_maybe(st.integers(0, 15))),
                cpu_affinity=draw(_maybe(st.sets(st.integers(0, 1023), min_size=1, max_size=40).map(_cpus))),
                pcie_gen_current=draw(_maybe(st.integers(1, 6))),
                pcie_gen_max=draw(_maybe(st.integers(1, 6))),
                pcie_width_current=draw(_maybe(st.sampled_from([1, 2, 4, 8, 16]))),
                pcie_width_max=draw(_maybe(st.sampled_from([8, 16, 32]))),
                memory_total_bytes=draw(_maybe(st.integers(1, 2**40))),
                compute_capability=draw(_maybe(st.builds("{}.{}".format, st.integers(3, 12), st.integers(0, 9)))),
                mig=draw(_maybe(st.booleans())),
                compute_mode=draw(_maybe(st.sampled_from(model.COMPUTE_MODES))),
                nvlinks=tuple(model.NvLink(k, *link) for k, link in zip(numbers, found, strict=True)),
            )
        )
    links = tuple(
        model.Link(
            a,
            b,
            pcie=draw(st.sampled_from([None, *PCIE_CLASSES])),
            nvlinks=None if {a, b} & mystery else c,
            p2p=model.P2P(*(draw(st.sampled_from(list(model.P2PStatus))) for _ in model.P2P_CAPS)),
        )
        for (a, b), c in count.items()
    )
    return model.Topology(
        gpus=tuple(gpus),
        links=links,
        driver_version=draw(_maybe(st.from_regex(r"\A[1-9][0-9]{2}\.[0-9]{2,3}(\.[0-9]{2})?\Z"))),
        cuda_driver_version=draw(_maybe(st.builds("{}.{}".format, st.integers(9, 13), st.integers(0, 12)))),
    )


def _in_nvml_order(t: model.Topology) -> model.Topology:
    """``t`` listed as NVML enumerates it (index == nvml_index), as probe() returns it."""
    return t.restrict(sorted(range(len(t.gpus)), key=lambda g: t.gpus[g].nvml_index))


def _as_asked(link: model.NvLink) -> model.NvLink:
    """What the probe asks of a link: nothing past one that is down (as NCCL, src/graph/xml.cc), no
    bus id of a switch."""
    if not link.active:
        return model.NvLink(link.link, False)
    return dataclasses.replace(link, remote_bus_id=None) if link.remote_type == "SWITCH" else link


def _same_machine(got: model.Topology, want: model.Topology) -> None:
    want_gpus = tuple(dataclasses.replace(g, nvlinks=tuple(map(_as_asked, g.nvlinks))) for g in want.gpus)
    assert got.gpus == want_gpus
    assert got.links == want.links
    assert (got.driver_version, got.cuda_driver_version) == (want.driver_version, want.cuda_driver_version)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(topologies())
@pytest.mark.slow
def test_probe_of_the_fake_gives_the_recording_back(t):
    got = nvml.probe(make_fake_pynvml(t))
    _same_machine(got, _in_nvml_order(t))
    assert got.source == model.Source("nvml") and got.problem is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(topologies())
def test_old_binding_round_trips_too(t):
    # 11.495: bytes everywhere, NVML_NVLINK_MAX_LINKS 12, no nvmlDeviceGetNumaNodeId
    _same_machine(nvml.probe(make_fake_pynvml(t, binding_version="11.495.46")), _in_nvml_order(t))


# -- shapes worth naming -------------------------------------------------------------------------


def _dgx(n=8, nvlinks=12, per_link=True) -> model.Topology:
    gpus = tuple(
        model.Gpu(
            i,
            name="NVIDIA A100-SXM4-80GB",
            pci_bus_id=f"00000000:{0x07 + 0x10 * i:02X}:00.0",
            nvml_index=i,
            numa_node=i // 4,
            cpu_affinity="0-63,128-191" if i < 4 else "64-127,192-255",
            nvlinks=tuple(
                model.NvLink(k, True, f"00000000:{0xC4 + k // 2:02X}:00.0", "SWITCH", "3.0") for k in range(nvlinks)
            )
            if per_link
            else (),
        )
        for i in range(n)
    )
    links = tuple(
        model.Link(
            a,
            b,
            pcie=model.LinkClass.SYS if a // 4 != b // 4 else model.LinkClass.NODE,
            nvlinks=nvlinks,
            p2p=model.P2P(OK, OK, OK, OK),
        )
        for a, b in itertools.combinations(range(n), 2)
    )
    return model.Topology(gpus=gpus, links=links, driver_version="535.104.05", cuda_driver_version="12.2")


def test_a_dgx_with_nvswitches():
    t = _dgx()
    got = nvml.probe(make_fake_pynvml(t))
    _same_machine(got, t)
    assert {str(ln.label) for ln in got.links} == {"NV12"}
    assert got.gpus[5].active_nvlinks == 12 and got.gpus[5].numa_node == 1


def test_a_nvswitch_box_without_per_link_data_gets_switch_links():
    """``nvidia-smi topo -m`` text says NV12 everywhere: 12 links to NVSwitches are synthesized."""
    t = _dgx(per_link=False)
    t = dataclasses.replace(t, gpus=tuple(dataclasses.replace(g, pci_bus_id=None, nvml_index=None) for g in t.gpus))
    got = nvml.probe(make_fake_pynvml(t))
    assert got.links == t.links
    for g, want in zip(got.gpus, t.gpus, strict=True):
        assert g.nvlinks == tuple(model.NvLink(k, True, None, "SWITCH") for k in range(12))
        assert dataclasses.replace(g, nvlinks=(), nvml_index=None) == want  # bus id: unknown, as recorded


def test_direct_nvlink_counts_without_per_link_data_get_direct_links():
    """A DGX-1-like hybrid cube mesh known only from its NV1/NV2 labels."""
    n = 4
    counts = {(0, 1): 1, (0, 2): 2, (0, 3): 0, (1, 2): 0, (1, 3): 2, (2, 3): 1}
    gpus = tuple(model.Gpu(i, pci_bus_id=None if i == 3 else f"00000000:{0x10 + i:02X}:00.0") for i in range(n))
    links = tuple(model.Link(a, b, pcie=None if c else model.LinkClass.SYS, nvlinks=c) for (a, b), c in counts.items())
    t = model.Topology(gpus=gpus, links=links)
    got = nvml.probe(make_fake_pynvml(t))
    assert got.links == links
    assert [g.active_nvlinks for g in got.gpus] == [3, 3, 3, 3]
    assert [ln.remote_bus_id for ln in got.gpus[0].nvlinks] == [
        "00000000:11:00.0",
        "00000000:12:00.0",
        "00000000:12:00.0",
    ]
    assert [ln.remote_bus_id for ln in got.gpus[1].nvlinks] == ["00000000:10:00.0", None, None]  # GPU3: unknown
    assert got.gpus[3].pci_bus_id is None


def test_unknown_pair_counts_come_back_unknown():
    """torch-only facts: every count unknown. GPUs come back as they were (no links invented)."""
    gpus = tuple(model.Gpu(i, nvml_index=i, pci_bus_id=f"00000000:{0x10 + i:02X}:00.0") for i in range(4))
    links = tuple(model.Link(a, b, pcie=None, nvlinks=None) for a, b in itertools.combinations(range(4), 2))
    t = model.Topology(gpus=gpus, links=links)
    got = nvml.probe(make_fake_pynvml(t))
    _same_machine(got, t)
    assert any("nvmlDeviceGetNvLinkState" in w for w in got.warnings)


def test_a_missing_row_makes_only_that_gpus_pairs_unknown():
    t = _dgx(n=4, nvlinks=4, per_link=False)
    t = dataclasses.replace(
        t, links=tuple(dataclasses.replace(ln, nvlinks=None) if 2 in (ln.a, ln.b) else ln for ln in t.links)
    )
    got = nvml.probe(make_fake_pynvml(t))
    assert got.links == t.links


def test_a_link_of_unknown_type_to_no_gpu_may_be_a_switch():
    """Without the device type (or an unknown one), a link to a bus id that is no GPU's is ambiguous."""
    t = _dgx(n=3, nvlinks=2)
    t = dataclasses.replace(
        t,
        gpus=tuple(
            dataclasses.replace(g, nvlinks=tuple(dataclasses.replace(ln, remote_type="unknown") for ln in g.nvlinks))
            for g in t.gpus
        ),
    )
    got = nvml.probe(make_fake_pynvml(t))
    assert got.gpus == t.gpus
    assert [ln.nvlinks for ln in got.links] == [None, None, None]
    # A binding without nvmlDeviceGetNvLinkRemoteDeviceType reads the same way.
    fake = make_fake_pynvml(_dgx(n=3, nvlinks=2))
    del fake.nvmlDeviceGetNvLinkRemoteDeviceType
    assert [ln.nvlinks for ln in nvml.probe(fake).links] == [None, None, None]


def test_counts_no_gpu_could_have_come_back_unknown_not_an_error():
    """Counts that neither direct links nor NVSwitches give (GPU0 NV30 to one peer, NV10 to another,
    those two unlinked) leave the links unknown, never a ValueError (an INTERNALERROR wherever the
    profile was used)."""
    gpus = tuple(model.Gpu(i) for i in range(3))
    links = (model.Link(0, 1, nvlinks=30), model.Link(0, 2, nvlinks=10), model.Link(1, 2, nvlinks=0))
    got = nvml.probe(make_fake_pynvml(model.Topology(gpus=gpus, links=links)))
    assert [ln.nvlinks for ln in got.links] == [None, None, None]


def test_a_switch_box_whose_gpu_lost_its_links_replays_from_its_matrix(tmp_path):
    """A profile recorded from hgx-h100-nvlink-down's matrix replays (no INTERNALERROR such as "GPU0
    would need 108 NVLinks"): NV18 to six peers is 18 links to NVSwitches, and GPU5's SYS pairs are a
    GPU with none up."""
    import subprocess
    import sys

    from pytest_gputopo.probe import probe_recorded
    from pytest_gputopo.render.smi_topo import render_topo_matrix

    degraded = probe_recorded("hgx-h100-nvlink-down")
    (tmp_path / "topo.txt").write_text(render_topo_matrix(degraded))
    out = tmp_path / "node.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_gputopo.cli",
            "record",
            "--from-smi",
            str(tmp_path / "topo.txt"),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    replayed = probe_recorded(str(out))
    assert [ln.label for ln in replayed.links] == [ln.label for ln in degraded.links]
    assert replayed.warnings == ()


def test_replay_invents_no_nvlinks_and_keeps_cuda_peer(tmp_path):
    """A profile without NVLink lists is not replayed as "18/18 NVLinks up", and a recorded
    cuda_peer: false is kept. The pair counts come through NVML's code path; the per-link facts the
    profile does not hold stay unknown, and CUDA's answers are the profile's."""
    import json

    from pytest_gputopo.probe import probe_recorded
    from pytest_gputopo.probe.recorded import profile_dict

    t = _dgx(n=4, nvlinks=18, per_link=False)
    t = dataclasses.replace(t, links=tuple(dataclasses.replace(ln, cuda_peer=(ln.a, ln.b) != (0, 1)) for ln in t.links))
    path = tmp_path / "box.json"
    path.write_text(json.dumps(profile_dict("box", t)))
    got = probe_recorded(str(path))
    assert all(g.nvlinks == () for g in got.gpus)
    assert {str(ln.label) for ln in got.links} == {"NV18"}
    assert got.link(0, 1).cuda_peer is False and got.link(0, 2).cuda_peer is True
    assert got.link(0, 1).p2p_works is False


def test_p2p_staged_figures_are_accepted_in_profiles():
    """A profile's `published` figures may be `p2p_staged` ones."""
    fig = {"kind": "p2p_staged", "gbps": 10.5, "source": "a measurement"}
    assert schema.from_dict({"gpus": [], "links": [], "published": [fig]}).published == (fig,)


def test_no_gpus():
    got = nvml.probe(make_fake_pynvml(model.Topology()))
    assert got.gpus == () and got.links == () and got.problem is None


# -- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "error, reason",
    [
        ("LibraryNotFound", "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver installed"),
        ("DriverNotLoaded", "NVIDIA driver not loaded"),
        ("NoPermission", "no permission to use NVML"),
        ("Unknown", "NVML error: Unknown Error"),
    ],
)
def test_init_errors_propagate_and_have_a_reason(error, reason):
    with pytest.raises(pynvml.NVMLError) as info:
        nvml.probe(make_fake_pynvml(_dgx(), init_error=error))
    assert type(info.value) is getattr(pynvml, "NVMLError_" + error)
    assert nvml.unavailable_reason(info.value) == reason


def test_the_real_module_here():
    try:
        got = nvml.probe(pynvml)
    except pynvml.NVMLError_LibraryNotFound as exc:
        assert nvml.unavailable_reason(exc).startswith("NVML library not found")
    else:  # a machine with a driver: every GPU and every pair is described
        n = len(got.gpus)
        assert len(got.links) == n * (n - 1) // 2
        assert all(g.pci_bus_id for g in got.gpus)


def test_shutdown_follows_even_a_crash():
    fake = make_fake_pynvml(_dgx())

    def broken():
        raise RuntimeError("boom")

    fake.nvmlDeviceGetCount = broken
    with pytest.raises(RuntimeError):
        nvml.probe(fake)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlSystemGetDriverVersion()  # init was undone


def test_a_gpu_without_permission_is_listed_with_nothing_known():
    fake = make_fake_pynvml(_dgx(n=3))
    by_index = fake.nvmlDeviceGetHandleByIndex

    def handle(i):
        if i == 1:
            raise pynvml.NVMLError_NoPermission()
        return by_index(i)

    fake.nvmlDeviceGetHandleByIndex = handle
    got = nvml.probe(fake)
    assert got.gpus[1] == model.Gpu(1, nvml_index=1)
    assert [(ln.a, ln.b, ln.nvlinks) for ln in got.links] == [(0, 1, None), (0, 2, 12), (1, 2, None)]
    assert got.warnings == ("nvmlDeviceGetHandleByIndex failed for GPU1: Insufficient Permissions",)


def test_failing_calls_leave_one_warning_each():
    fake = make_fake_pynvml(_dgx(n=4))

    def lost(*args):
        raise pynvml.NVMLError_GpuIsLost()

    fake.nvmlDeviceGetP2PStatus = lost
    got = nvml.probe(fake)
    assert all(ln.p2p == model.P2P() for ln in got.links)
    assert got.warnings == ("nvmlDeviceGetP2PStatus failed for GPU0-GPU1: GPU is lost (and 47 more)",)


def test_missing_functions_are_unknown_facts():
    fake = make_fake_pynvml(_dgx(n=2))
    for name in (
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetMemoryAffinity",
        "nvmlDeviceGetCpuAffinity",
        "nvmlDeviceGetTopologyCommonAncestor",
        "nvmlSystemGetCudaDriverVersion",
    ):
        delattr(fake, name)
    got = nvml.probe(fake)
    assert (got.gpus[0].numa_node, got.gpus[0].cpu_affinity, got.gpus[0].compute_capability) == (None, None, None)
    assert got.links[0].pcie is None and got.links[0].nvlinks == 12 and got.cuda_driver_version is None
    assert got.warnings == ()


def test_p2p_keeps_the_worse_direction():
    t = _dgx(n=2)
    fake = make_fake_pynvml(t)
    status = fake.nvmlDeviceGetP2PStatus

    def one_way(d1, d2, index):  # GPU1 -> GPU0 write is refused by the chipset
        if fake.nvmlDeviceGetIndex(d1) == 1 and index == 1:
            return pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
        return status(d1, d2, index)

    fake.nvmlDeviceGetP2PStatus = one_way
    p2p = nvml.probe(fake).links[0].p2p
    assert p2p == model.P2P(OK, model.P2PStatus.CHIPSET_NOT_SUPPORTED, OK, OK)
    assert p2p.read_write is False


@pytest.mark.parametrize(
    "x, y, worse",
    [
        (OK, OK, OK),
        (OK, S.UNKNOWN, S.UNKNOWN),
        (S.UNKNOWN, OK, S.UNKNOWN),
        (S.TOPOLOGY_NOT_SUPPORTED, S.UNKNOWN, S.TOPOLOGY_NOT_SUPPORTED),
        (S.UNKNOWN, S.GPU_NOT_SUPPORTED, S.GPU_NOT_SUPPORTED),
        (OK, S.CHIPSET_NOT_SUPPORTED, S.CHIPSET_NOT_SUPPORTED),
        (S.DISABLED_BY_REGKEY, S.NOT_SUPPORTED, S.DISABLED_BY_REGKEY),
    ],
    ids=lambda status: status.value,  # as nvidia-smi topo -p2p prints it
)
def test_worse_of_two_directions(x, y, worse):
    assert nvml._worse(x, y) is worse


# -- small pieces --------------------------------------------------------------------------------


def test_hostname_only_for_a_live_probe():
    assert nvml.probe(make_fake_pynvml(_dgx(n=2))).hostname == socket.gethostname()
    source = model.Source("recorded", "dgx-a100")
    got = nvml.probe(make_fake_pynvml(_dgx(n=2)), source=source)
    assert got.source == source and got.hostname is None


@pytest.mark.parametrize(
    "mask, text",
    [
        (0, None),
        (1, "0"),
        (0b1011, "0-1,3"),
        ((1 << 24) - 1 | ((1 << 24) - 1) << 48, "0-23,48-71"),
        (0b10101, "0,2,4"),
        (1 << 1023, "1023"),
    ],
)
def test_cpu_list(mask, text):
    assert nvml.cpu_list(mask) == text


def test_synthetic_bus_ids():
    ids = {nvml.synthetic_bus_id(n) for n in range(600)}
    assert len(ids) == 600 and all(nvml.is_synthetic_bus_id(i) for i in ids)
    assert nvml.synthetic_bus_id(3) == "FFFFFFFF:03:00.0"
    assert not nvml.is_synthetic_bus_id("00000000:19:00.0")


def test_a_uniform_box_that_fits_in_direct_links_gets_direct_links():
    """4 GPUs, NV4 every pair (an HGX A100 4-GPU board): 12 direct links each, no NVSwitch invented."""
    gpus = tuple(model.Gpu(i, pci_bus_id=f"00000000:{0x10 + i:02X}:00.0") for i in range(4))
    links = tuple(model.Link(a, b, nvlinks=4) for a, b in itertools.combinations(range(4), 2))
    got = nvml.probe(make_fake_pynvml(model.Topology(gpus=gpus, links=links)))
    assert got.links == links
    assert {ln.remote_type for g in got.gpus for ln in g.nvlinks} == {"GPU"}
    assert [g.active_nvlinks for g in got.gpus] == [12] * 4


@pytest.mark.parametrize("name", recorded.bundled_names())
def test_every_bundled_machine_round_trips(name):
    t = recorded.load_profile(name).topology
    got = nvml.probe(make_fake_pynvml(t), source=t.source)
    # cuda_peer and multicast come from CUDA, not NVML
    want = dataclasses.replace(
        t,
        links=tuple(dataclasses.replace(ln, cuda_peer=None) for ln in t.links),
        gpus=tuple(dataclasses.replace(g, multicast=None) for g in t.gpus),
    )
    _same_machine(got, _in_nvml_order(want))
    assert got.source == t.source and got.warnings == ()


# -- facts as the real driver gives them -----------------------------------------------------


def _pcie_cards_without_bridge() -> model.Topology:
    """2x A100 PCIe without an NVLink bridge: every link present, none up."""
    gpus = tuple(
        model.Gpu(
            i,
            name="NVIDIA A100 80GB PCIe",
            pci_bus_id=f"00000000:{0x17 + 0x50 * i:02X}:00.0",
            nvml_index=i,
            nvlinks=tuple(model.NvLink(k, False) for k in range(12)),
        )
        for i in range(2)
    )
    return model.Topology(gpus=gpus, links=(model.Link(0, 1, pcie=model.LinkClass.SYS, nvlinks=0),))


def test_links_that_are_down_are_not_asked_where_they_lead():
    """A link that is down is not asked its remote PCI info, type or version, whose driver errors
    would be warnings that fail the `topology` check. NCCL asks nothing more of a
    link that is not NVML_FEATURE_ENABLED (src/graph/xml.cc ncclTopoGetXmlFromGpu, v2.30.7: the P2P
    capability, the state, "if (isActive != NVML_FEATURE_ENABLED) continue;", then the remote PCI info;
    never the remote device type)."""
    got = nvml.probe(make_fake_pynvml(_pcie_cards_without_bridge()))
    assert got.warnings == ()
    assert [ln.active for ln in got.gpus[0].nvlinks] == [False] * 12 and got.link(0, 1).nvlinks == 0


def test_nvlink_capable_pcie_cards_without_a_bridge_pass_the_checks(pytester):
    """A GPU with no NVLink up on a machine where no GPU has one up is a GPU without
    NVLink, not a fault; some up and some down is."""
    from pytest_gputopo.probe.recorded import profile_dict

    path = pytester.path / "a100-pcie.json"
    path.write_text(json.dumps(profile_dict("a100-pcie", _pcie_cards_without_bridge())))
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-check", "--gputopo-machine", str(path))
    # topology passes; PCIe width unknown x2, nvlink x2, P2P unknown
    result.stdout.fnmatch_lines(
        [
            "SKIPPED nvlink[[]GPU0], nvlink[[]GPU1]: no NVLink up on any GPU: a machine without NVLink*not a fault",
            "*",
            "gputopo check: 1 passed, 5 skipped",
        ]
    )


def test_a_geforce_pair_reporting_cns_is_a_card_without_p2p(pytester):
    """GeForce cards report CNS as well as GNS for P2P (NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED);
    the p2p_status check treats both as a card without P2P, not a broken node."""
    from pytest_gputopo.probe.recorded import profile_dict

    cns = model.P2P(read=model.P2PStatus.CHIPSET_NOT_SUPPORTED, write=model.P2PStatus.CHIPSET_NOT_SUPPORTED)
    t = model.Topology(
        gpus=(model.Gpu(0, name="NVIDIA GeForce RTX 4090"), model.Gpu(1, name="NVIDIA GeForce RTX 4090")),
        links=(model.Link(0, 1, pcie=model.LinkClass.NODE, nvlinks=0, p2p=cns),),
    )
    path = pytester.path / "geforce.json"
    path.write_text(json.dumps(profile_dict("geforce", t)))
    result = pytester.runpytest("-p", "no:cacheprovider", "--gputopo-check", "--gputopo-machine", str(path))
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "SKIPPED p2p_status[[]GPU0-GPU1]: P2P not supported by this GPU model or chipset "
            "(chipset not supported; not a fault)"
        ]
    )


def test_a_mig_instance_does_not_inherit_its_parents_nvlinks(monkeypatch):
    """CUDA reports a MIG instance with its parent GPU's PCI bus id (``cudaDeviceProp.pciBusID``); the
    instance is not handed the whole GPU's NVLinks by a join on bus id, but left out with a warning."""
    from pytest_gputopo.probe.cuda_driver import CudaView
    from pytest_gputopo.probe.cuda_numbering import as_cuda_sees_it

    t = recorded.load_profile("hgx-h100").topology
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-3b2c7a91-0000-5b1e-9a3f-1c2d3e4f5a6b")
    got = as_cuda_sees_it(t, CudaView((t.gpus[0].pci_bus_id,), {}, {}))
    assert got.gpus == ()
    assert any("MIG instance" in w for w in got.warnings)


@given(st.sets(st.integers(0, 4095), min_size=1, max_size=60))
def test_one_cpu_list_reader_inverts_nvmls_cpu_list(cpus):
    """One reader of CPU lists (core.cpus) for profiles, the fake NVML and the copy benchmark."""
    from pytest_gputopo.core.cpus import cpu_mask, cpu_set

    mask = sum(1 << c for c in cpus)
    text = nvml.cpu_list(mask)
    assert cpu_set(text) == cpus and cpu_mask(text) == mask


@pytest.mark.parametrize("text", [None, "", "N/A", "0-99999999999", "5-3", "0-65536", "9" * 5000])
def test_a_cpu_list_no_machine_has_is_unknown(text):
    from pytest_gputopo.core.cpus import cpu_mask, cpu_ranges, cpu_set

    assert cpu_ranges(text) is cpu_set(text) is cpu_mask(text) is None
