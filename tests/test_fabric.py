"""G3's fabric item (issue 32): NVML's GPU fabric state read at the one choke point, served by the fake
NVML, kept in the profile, judged by the quick check's ``fabric[GPUi]`` item and the fleet's faults,
and -- where a GPU's NVLink fabric is not up -- ``requires_p2p`` / ``requires_nvlink`` unknown, never
met on NVML's answers alone.

Checked against the installed nvidia-ml-py (.venv/lib/python3.11/site-packages/pynvml.py, 13.615.71):
``NVML_GPU_FABRIC_STATE_NOT_SUPPORTED/NOT_STARTED/IN_PROGRESS/COMPLETED`` = 0..3 (l.7193-7196);
``c_nvmlGpuFabricInfo_v2_t`` (version, clusterUuid: c_uint8 * 16, status, cliqueId, state, healthMask),
its ``__init__`` presetting ``version = nvmlGpuFabricInfo_v2 = 0x02000024``, and
``c_nvmlGpuFabricInfoV_t = c_nvmlGpuFabricInfo_v2_t`` (l.7263-7278); ``nvmlDeviceGetGpuFabricInfoV(device,
gpuFabricInfo)`` hands its argument to the C function as given and returns NVML_SUCCESS (l.7327-7331),
so the caller passes ``ctypes.byref``; the deprecated ``nvmlDeviceGetGpuFabricInfo`` likewise (l.7321).
And against nvml.h (NVIDIA/go-nvml gen/nvml/nvml.h, read with the library's read_file): "NVML_ERROR_NOT_SUPPORTED
If device doesn't support gpu fabric"; the status "must be checked only if Probe state returns complete"
(nvml-nccl-torch.md §1.5, NVMLH l.3795-3958); NCCL's nvmlwrap.cc sets ``version = nvmlGpuFabricInfo_v2``
before calling ``nvmlDeviceGetGpuFabricInfoV``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import inspect
import json

import pynvml
import pytest

from conftest import checks_of
from fake_nvml import make_fake_pynvml
from pytest_gputopo.core import fabric_health, faults, model, schema
from pytest_gputopo.core.requirements import LinkRequirement, NvLinkRequirement, P2PRequirement
from pytest_gputopo.plugin import checks
from pytest_gputopo.probe import nvml
from pytest_gputopo.probe.recorded import load_profile, profile_dict

CLUSTER = "9c6f5af3-53bf-49b5-a436-b66766c413c3"
UP = model.Fabric("Completed", "Success", 4026, CLUSTER)
STATES = {
    "up": UP,
    "not started": model.Fabric("Not Started"),
    "in progress": model.Fabric("In Progress"),
    "failed": model.Fabric("Completed", "Unknown Error", 4026, CLUSTER),
    "not supported": model.Fabric("Not Supported"),
}


def _tray(fabric: model.Fabric | None, gpu: int = 1) -> model.Topology:
    """The bundled GB200 tray with GPU ``gpu``'s fabric as given and the others' up."""
    t = load_profile("gb200-tray").topology
    return dataclasses.replace(
        t, gpus=tuple(dataclasses.replace(g, fabric=fabric if g.index == gpu else UP) for g in t.gpus)
    )


# -- the real module's surface, as the probe and the fake use it -----------------------------------


def test_the_real_binding_is_what_the_probe_and_the_fake_assume():
    assert [
        pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED,
        pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED,
        pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS,
        pynvml.NVML_GPU_FABRIC_STATE_COMPLETED,
    ] == [0, 1, 2, 3]
    assert pynvml.c_nvmlGpuFabricInfoV_t is pynvml.c_nvmlGpuFabricInfo_v2_t
    assert pynvml.c_nvmlGpuFabricInfoV_t().version == pynvml.nvmlGpuFabricInfo_v2 == 0x02000024
    assert pynvml.c_nvmlGpuFabricInfoV_t.clusterUuid.size == 16
    for name in ("nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"):
        source = inspect.getsource(getattr(pynvml, name))
        assert "ret = fn(device, gpuFabricInfo)" in source and "return NVML_SUCCESS" in source  # no byref inside
    assert [name for name, _ in nvml.FABRIC_CALLS] == ["nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo"]


# -- the fake NVML serves it as the C library fills it ---------------------------------------------


@pytest.fixture
def fake():
    mod = make_fake_pynvml(_tray(STATES["failed"]))
    mod.nvmlInit()
    yield mod
    mod.nvmlShutdown()


def test_the_fake_fills_a_struct_passed_by_reference(fake):
    info = fake.c_nvmlGpuFabricInfoV_t()
    assert fake.nvmlDeviceGetGpuFabricInfoV(fake.nvmlDeviceGetHandleByIndex(0), ctypes.byref(info)) == 0
    assert (info.state, info.status, info.cliqueId) == (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, 0, 4026)
    assert bytes(info.clusterUuid).hex() == CLUSTER.replace("-", "")
    info = fake.c_nvmlGpuFabricInfoV_t()
    fake.nvmlDeviceGetGpuFabricInfoV(fake.nvmlDeviceGetHandleByIndex(1), ctypes.byref(info))
    assert info.status == pynvml.NVML_ERROR_UNKNOWN  # GPU1: completed with an error
    old = fake.c_nvmlGpuFabricInfo_t()
    assert fake.nvmlDeviceGetGpuFabricInfo(fake.nvmlDeviceGetHandleByIndex(0), ctypes.byref(old)) == 0
    assert (old.state, old.cliqueId) == (3, 4026)


def test_the_fake_refuses_what_the_c_library_would(fake):
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(ctypes.ArgumentError):
        fake.nvmlDeviceGetGpuFabricInfoV(handle, fake.c_nvmlGpuFabricInfoV_t())  # not by reference
    info = fake.c_nvmlGpuFabricInfoV_t()
    info.version = 1
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        fake.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    none = make_fake_pynvml(_tray(None, gpu=0))
    none.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):  # nvml.h: a device without GPU fabric
        none.nvmlDeviceGetGpuFabricInfoV(none.nvmlDeviceGetHandleByIndex(0), ctypes.byref(info))


@pytest.mark.parametrize(
    "binding, has_v, has_old",
    [("13.615.71", True, True), ("12.575.51", True, True), ("12.535.161", False, True), ("11.515.48", False, False)],
)
def test_bindings_have_the_functions_of_their_release(binding, has_v, has_old):
    mod = make_fake_pynvml(_tray(UP), binding_version=binding)
    assert hasattr(mod, "nvmlDeviceGetGpuFabricInfoV") is has_v
    assert hasattr(mod, "nvmlDeviceGetGpuFabricInfo") is has_old


# -- the probe: one fact, unknown where NVML gives none ---------------------------------------------


@pytest.mark.parametrize("state", sorted(STATES))
@pytest.mark.parametrize("binding", ["13.615.71", "12.575.51"])
def test_the_probe_reads_each_state_through_the_fake(state, binding):
    got = nvml.probe(make_fake_pynvml(_tray(STATES[state]), binding_version=binding))
    want = STATES[state]
    assert got.gpus[1].fabric == (want if want.state == "Completed" else model.Fabric(want.state))
    assert got.gpus[0].fabric == UP and not got.warnings


@pytest.mark.parametrize("binding", ["12.535.161", "11.515.48"])
def test_a_binding_without_the_c_layout_or_the_function_leaves_it_unknown(binding):
    """12.535's c_nvmlGpuFabricInfo_t has an 80-byte clusterUuid where the C struct has 16 (nvml-nccl-torch.md
    §1.6): every field after it would be read at the wrong offset. Not used: unknown, not misread."""
    got = nvml.probe(make_fake_pynvml(_tray(STATES["in progress"]), binding_version=binding))
    assert {g.fabric for g in got.gpus} == {None} and not got.warnings


def test_a_driver_without_the_v_function_falls_back_and_an_error_makes_only_this_fact_unknown():
    mod = make_fake_pynvml(_tray(STATES["in progress"]))

    def not_found(*args):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    mod.nvmlDeviceGetGpuFabricInfoV = not_found  # the driver's libnvidia-ml has no such symbol
    assert nvml.probe(mod).gpus[1].fabric == model.Fabric("In Progress")

    def lost(*args):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    mod.nvmlDeviceGetGpuFabricInfoV = lost
    got = nvml.probe(mod)
    assert {g.fabric for g in got.gpus} == {None}
    assert got.gpus[1].name == "NVIDIA GB200" and got.links[0].nvlinks == 18  # the other facts kept
    assert any("nvmlDeviceGetGpuFabricInfoV failed for GPU0: GPU is lost (and 3 more)" in w for w in got.warnings)


# -- the profile --------------------------------------------------------------------------------------


def test_the_profile_keeps_the_fabric_and_profiles_without_one_stay_as_they_were():
    t = _tray(STATES["failed"])
    data = schema.to_dict(t)
    assert data["gpus"][1]["fabric"] == {
        "state": "Completed",
        "status": "Unknown Error",
        "clique_id": 4026,
        "cluster_uuid": CLUSTER,
    }
    assert schema.from_dict(data) == t
    assert "fabric" not in schema.to_dict(load_profile("gb200-tray").topology)["gpus"][0]
    data["gpus"][1]["fabric"] = {"state": "Sideways"}
    with pytest.raises(schema.SchemaError, match=r"gpus\[1\]\.fabric\.state: 'Sideways' is not one of"):
        schema.from_dict(data)


# -- judged: the check item, the fleet's faults, the markers ------------------------------------------


@pytest.mark.parametrize(
    "state, outcome, says",
    [
        (
            "up",
            "passed",
            f"GPU1: NVLink fabric up (Completed, Success; clique 4026 of cluster {CLUSTER}); {checks.NO_HEALTH}",
        ),
        (
            "not started",
            "failed",
            "GPU1: NVLink fabric not up (state Not Started: the fabric manager has not registered it)",
        ),
        (
            "in progress",
            "failed",
            "GPU1: NVLink fabric not up (state In Progress: the fabric manager has not registered it)",
        ),
        ("failed", "failed", "GPU1: NVLink fabric registration failed (Unknown Error)"),
        (
            "not supported",
            "skipped",
            "GPU1: NVLink fabric state not reported (NVML: the GPU has no GPU fabric, not supported)",
        ),
    ],
)
def test_the_fabric_item_says_whether_the_fabric_is_up(pytester, state, outcome, says):
    checks = checks_of(pytester, _tray(STATES[state]))
    assert (checks["fabric[GPU1]"]["outcome"], checks["fabric[GPU1]"]["message"]) == (outcome, says)
    assert checks["fabric[GPU0]"]["outcome"] == "passed"


def test_a_recorded_machine_without_the_fact_has_no_fabric_item(pytester):
    checks = checks_of(pytester, load_profile("gb200-tray").topology)
    assert not [name for name in checks if name.startswith("fabric[")]


def test_the_fleet_names_a_node_whose_fabric_is_down():
    (fault,) = [f for f in faults.topology_faults(_tray(STATES["in progress"])) if f.name.startswith("fabric")]
    assert (fault.name, fault.gpus) == ("fabric[GPU1]", ("GPU1",))
    assert not [f for f in faults.topology_faults(_tray(UP)) if f.name.startswith("fabric")]
    assert not [f for f in faults.topology_faults(_tray(STATES["not supported"])) if f.name.startswith("fabric")]


@pytest.mark.parametrize("state", ["not started", "in progress", "failed"])
def test_p2p_and_nvlink_are_unknown_not_met_where_the_fabric_is_down(state):
    """An NVSwitch / GB200 node whose fabric manager is down: NVML lists NV18 and reports P2P OK on every
    pair; the pairs with the GPU whose fabric is not up are unknown (skipped with the reason), the others met."""
    t = _tray(STATES[state])
    for req, noun in (
        (P2PRequirement(), "P2P"),
        (NvLinkRequirement(), "NVLink"),
        (LinkRequirement(need="NV18"), "NVLink"),
    ):
        verdict = req.evaluate(t, max_pairs=None)
        assert not verdict.ok and verdict.unknown, (req, verdict)
        assert [f.split(" ")[0] for f in verdict.failures] == ["GPU0-GPU1", "GPU1-GPU2", "GPU1-GPU3"]
        assert f"{noun} unknown: GPU1: NVLink fabric" in verdict.failures[0]
        assert req.evaluate(_tray(UP)).ok and req.evaluate(_tray(STATES["not supported"])).ok
        assert req.evaluate(_tray(None)).ok  # not reported: NVML's answer as before
    assert P2PRequirement(gpus=[0, 2]).evaluate(t).ok  # pairs without GPU1 are met
    assert LinkRequirement(need="SYS").evaluate(t).ok  # a PCIe class is not an NVLink answer


P2P_TEST = (
    "import pytest\n@pytest.mark.requires_p2p(gpus=2)\ndef test_pair(): pass\n"
    "@pytest.mark.requires_nvlink(gpus=[0, 2])\ndef test_other_pair(): pass\n"
)


def test_requires_p2p_skips_with_the_fabric_as_its_reason(pytester):
    path = pytester.path / "node.json"
    path.write_text(json.dumps(profile_dict("node", _tray(STATES["in progress"]))))
    pytester.makepyfile(test_x=P2P_TEST)
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider", "--gputopo-machine", str(path))
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*requires_p2p(gpus=2): GPU0-GPU1 P2P unknown: GPU1: NVLink fabric not up "
            "(state In Progress: the fabric manager has not registered it)*"
        ]
    )


# -- issue 39 item 3: the fabric struct's healthMask ---------------------------------------------------
# "The fabric struct's healthMask is never read (degraded bandwidth on GB200 passes)." Checked against
# the installed nvidia-ml-py 13.615.71 (pynvml.py l.7206-7256: NVML_GPU_FABRIC_HEALTH_MASK_* values,
# SHIFT_* and WIDTH_*; l.7265-7273: c_nvmlGpuFabricInfo_v2_t ends in ``healthMask: c_uint32``; the
# older c_nvmlGpuFabricInfo_t, l.7198-7204, has none) and against nvml.h 13.3.29 (NVIDIA/go-nvml
# gen/nvml/nvml.h l.3821-3958, fetched): degraded BW bits 0-1 (1 "Bandwidth degraded"), route recovery
# 2-3 (1 "in progress"), route unhealthy 4-5 (1 "Route is unhealthy"), access timeout recovery 6-7
# (1 "in progress"), incorrect configuration 8-11 (1 "Correct Configuration", 2-8 incorrect), partition
# assigned 12-13; 0 is "not supported" in each; NVML_GPU_FABRIC_HEALTH_GET(var, type) is
# ``(var >> SHIFT) & WIDTH``; nvmlGpuFabricInfo_v2_t "adds ... the healthMask field to the end".

BW_DEGRADED = 1  # degraded bandwidth TRUE at bits 0-1
HEALTHY = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8  # every judged field at its healthy value


def _mask(**fields: int) -> int:
    return sum(
        value << getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{name.upper()}") for name, value in fields.items()
    )


def test_the_health_fields_are_the_installed_bindings_and_nvml_hs():
    names = {
        "degraded bandwidth": "DEGRADED_BW",
        "route recovery": "ROUTE_RECOVERY",
        "route unhealthy": "ROUTE_UNHEALTHY",
        "access timeout recovery": "ACCESS_TIMEOUT_RECOVERY",
        "incorrect configuration": "INCORRECT_CONFIGURATION",
        "partition assigned": "PARTITION_ASSIGNED",
        "global fabric manager": "GFM_STATE",
    }
    assert [f.name for f in fabric_health.FIELDS] == list(names)
    for f in fabric_health.FIELDS:
        c = names[f.name]
        assert (f.shift, f.width) == (
            getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_{c}"),
            getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_WIDTH_{c}"),
        )
        assert getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_{c}_NOT_SUPPORTED") == 0 and 0 not in f.said
    for c in ("DEGRADED_BW", "ROUTE_RECOVERY", "ROUTE_UNHEALTHY", "ACCESS_TIMEOUT_RECOVERY"):
        assert (
            getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_{c}_TRUE"),
            getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_{c}_FALSE"),
        ) == (1, 2)
    config = fabric_health.FIELDS[4]
    assert pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE == 1 and 1 not in config.faults
    assert config.faults == {
        getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_{v}")
        for v in ("INCORRECT_SYSGUID", "INCORRECT_CHASSIS_SN", "NO_PARTITION", "INSUFFICIENT_NVLINKS")
        + ("INCOMPATIBLE_GPU_FW", "INVALID_LOCATION", "GPU_STATE_INVALID")
    }
    assert [n for n, _ in pynvml.c_nvmlGpuFabricInfo_v2_t._fields_][-1] == "healthMask"
    assert "healthMask" not in [n for n, _ in pynvml.c_nvmlGpuFabricInfo_t._fields_]


@pytest.mark.parametrize(
    "mask, problems, unknown",
    [
        (0, (), ()),  # every field not supported: nothing said
        (HEALTHY, (), ()),
        (HEALTHY & ~0x3 | BW_DEGRADED, ("bandwidth degraded",), ()),
        (_mask(route_recovery=1), ("route recovery in progress",), ()),
        (_mask(route_unhealthy=1, degraded_bw=1), ("bandwidth degraded", "route unhealthy"), ()),
        (_mask(access_timeout_recovery=1), ("access timeout recovery in progress",), ()),
        (_mask(incorrect_configuration=5), ("incorrect configuration: insufficient NVLinks",), ()),
        (_mask(incorrect_configuration=1, partition_assigned=2, gfm_state=2), (), ()),  # said, not judged
        (_mask(degraded_bw=3), (), ("degraded bandwidth 3",)),  # not a value nvml.h defines
        (_mask(incorrect_configuration=9, route_unhealthy=1), ("route unhealthy",), ("incorrect configuration 9",)),
    ],
)
def test_the_health_mask_is_read_field_by_field(mask, problems, unknown):
    health = fabric_health.read(mask)
    assert (health.problems, health.unknown) == (problems, unknown)
    assert (fabric_health.problem(mask) is None) == (not problems)
    assert fabric_health.problem(None) is None  # no mask: unknown, not a fault and not "healthy"


def _health(mask: int | None) -> model.Fabric:
    return dataclasses.replace(UP, health_mask=mask)


@pytest.mark.parametrize("binding", ["13.615.71", "12.575.51"])
def test_the_probe_reads_the_health_mask_where_the_struct_has_it(binding):
    got = nvml.probe(make_fake_pynvml(_tray(_health(BW_DEGRADED)), binding_version=binding))
    assert got.gpus[1].fabric.health_mask == BW_DEGRADED and got.gpus[0].fabric.health_mask is None
    mod = make_fake_pynvml(_tray(_health(BW_DEGRADED)))
    del mod.nvmlDeviceGetGpuFabricInfoV  # a binding or driver with the old call and struct only: unknown
    assert nvml.probe(mod).gpus[1].fabric == UP


def test_the_profile_keeps_the_health_mask():
    t = _tray(_health(BW_DEGRADED))
    data = schema.to_dict(t)
    assert data["gpus"][1]["fabric"]["health_mask"] == BW_DEGRADED and "health_mask" not in data["gpus"][0]["fabric"]
    assert schema.from_dict(data) == t
    data["gpus"][1]["fabric"]["health_mask"] = 2**32
    with pytest.raises(schema.SchemaError, match=r"gpus\[1\]\.fabric\.health_mask"):
        schema.from_dict(data)


@pytest.mark.parametrize(
    "mask, outcome, says",
    [
        (
            HEALTHY & ~0x3 | BW_DEGRADED,
            "failed",
            "GPU1: NVLink fabric unhealthy (NVML's health mask: bandwidth degraded)",
        ),
        (
            _mask(route_unhealthy=1),
            "failed",
            "GPU1: NVLink fabric unhealthy (NVML's health mask: route unhealthy)",
        ),
        (
            _mask(degraded_bw=3),
            "skipped",
            f"GPU1: NVLink fabric up (Completed, Success; clique 4026 of cluster {CLUSTER}); NVLink fabric health "
            "unknown (degraded bandwidth 3: not a value nvml.h defines)",
        ),
        (
            HEALTHY,
            "passed",
            f"GPU1: NVLink fabric up (Completed, Success; clique 4026 of cluster {CLUSTER}); health: bandwidth not "
            "degraded, no route recovery, route healthy, no access timeout recovery, configuration correct",
        ),
    ],
)
def test_a_degraded_or_unhealthy_fabric_fails_its_item_and_an_unknown_mask_is_not_passed(pytester, mask, outcome, says):
    """Issue 39 item 3: "degraded bandwidth on GB200 passes" -- a GB200 tray whose GPU1 registered
    (Completed, Success) with its health mask saying bandwidth degraded: the fabric item fails."""
    checks = checks_of(pytester, _tray(_health(mask)))
    assert (checks["fabric[GPU1]"]["outcome"], checks["fabric[GPU1]"]["message"]) == (outcome, says)


def test_the_fleet_names_a_node_whose_fabric_is_unhealthy():
    """The fleet's fault is the check's rule (``faults.fabric_down``), so the fleet names it too."""
    (fault,) = [f for f in faults.topology_faults(_tray(_health(BW_DEGRADED))) if f.name.startswith("fabric")]
    assert (fault.name, fault.gpus, fault.what) == (
        "fabric[GPU1]",
        ("GPU1",),
        "NVLink fabric unhealthy (NVML's health mask: bandwidth degraded)",
    )
    for mask in (None, 0, HEALTHY, _mask(degraded_bw=3), _mask(partition_assigned=2)):
        assert not [f for f in faults.topology_faults(_tray(_health(mask))) if f.name.startswith("fabric")], mask
