"""A GPU's health at rest (issue 44 item 1): ``core.health``'s rules, NVML's calls as the probe makes
them, the fake NVML's answers, the profile, the ``health[GPU<i>]`` check item with a code and an action
in every medium, and the fleet's absolute fault.

Checked against the installed nvidia-ml-py (.venv/lib/python3.11/site-packages/pynvml.py, 13.615.71):
``nvmlDeviceGetTotalEccErrors(handle, errorType, counterType)`` returns ``c_count.value`` (l.4050);
``nvmlDeviceGetRemappedRows(device)`` the tuple (corr, unc, bpending, bfailure) (l.6300);
``nvmlDeviceGetRetiredPagesPendingStatus(device)`` ``int(c_pending.value)`` (l.4788);
``nvmlDeviceGetCurrentClocksEventReasons(handle)`` and the older ``...ThrottleReasons`` the mask
(l.4665-4677); ``nvmlDeviceGetPersistenceMode(handle)`` ``c_state.value`` (l.3651);
``nvmlDeviceGetVbiosVersion`` / ``nvmlDeviceGetInforomImageVersion`` ``c_version.value`` (l.4154, l.3606).
And against nvml.h (NVIDIA/go-nvml gen/nvml/nvml.h, API 13): each returns NVML_ERROR_NOT_SUPPORTED
"if the device does not support this feature" (row remapping also "If MIG is enabled"); ECC counts
"Requires ECC Mode to be enabled"; hardware slowdown "May be also reported during PState or clock change".
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from pathlib import Path

import pynvml
import pytest

from conftest import checks_of, run_cli
from emulated import emulated_libs, make_host  # noqa: F401  (a fixture)
from fake_nvml import make_fake_pynvml
from pytest_gputopo.core import faults, health, model, schema
from pytest_gputopo.probe import nvml
from pytest_gputopo.probe.recorded import bundled_names, load_profile

HEALTHY = model.GpuHealth(
    ecc_uncorrected_volatile=0,
    ecc_uncorrected_aggregate=0,
    remapped_rows_pending=False,
    remapping_failed=False,
    retired_pages_pending=False,
    clocks_event_reasons=0x1,  # GPU idle: no slowdown
    persistence_mode=True,
    vbios_version="96.00.99.00.01",
    inforom_version="G520.0200.00.05",
)


def _node(machine: str = "hgx-h100", **sick) -> model.Topology:
    """A bundled machine whose GPUs are healthy, but GPU3, whose facts ``sick`` replace."""
    t = load_profile(machine).topology
    gpus = tuple(
        dataclasses.replace(g, health=dataclasses.replace(HEALTHY, **(sick if g.index == 3 else {}))) for g in t.gpus
    )
    return dataclasses.replace(t, gpus=gpus)


def _codes(t: model.Topology, gpu: int = 3) -> list[tuple[str, str]]:
    return [(f.code, f.severity) for f in health.findings(t, t.gpus[gpu])]


# -- the rules --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sick, found",
    [
        ({}, []),
        ({"ecc_uncorrected_volatile": 2, "ecc_uncorrected_aggregate": 2}, [("ecc_uncorrected", "fault")]),
        ({"ecc_uncorrected_aggregate": 5}, [("ecc_uncorrected_lifetime", "warning")]),
        ({"remapped_rows_pending": True}, [("row_remap_pending", "fault")]),
        ({"remapping_failed": True}, [("row_remap_failed", "fault")]),
        ({"retired_pages_pending": True}, [("page_retire_pending", "fault")]),
        ({"clocks_event_reasons": 0x8}, [("clocks_hw_slowdown", "fault")]),
        # thermal and power brake are hardware slowdown's causes (nvml.h): named, not said twice
        ({"clocks_event_reasons": 0x48}, [("clocks_hw_thermal", "fault")]),
        ({"clocks_event_reasons": 0x88}, [("clocks_power_brake", "fault")]),
        ({"clocks_event_reasons": 0x20}, [("clocks_sw_thermal", "warning")]),
        ({"clocks_event_reasons": 0x1 | 0x4 | 0x10 | 0x100}, []),  # idle, power cap, sync boost, display: no fault
        ({"persistence_mode": False}, [("persistence_off", "warning")]),
        ({"vbios_version": "96.00.74.00.01"}, [("vbios_mismatch", "warning")]),
        ({"inforom_version": "G520.0200.00.01"}, [("inforom_mismatch", "warning")]),
        # faults first, then warnings
        (
            {"persistence_mode": False, "remapping_failed": True},
            [("row_remap_failed", "fault"), ("persistence_off", "warning")],
        ),
    ],
)
def test_each_fact_is_judged_by_its_rule(sick, found):
    assert _codes(_node(**sick)) == found


def test_unknown_is_never_a_finding():
    t = _node()
    unknown = dataclasses.replace(t.gpus[3], health=model.GpuHealth())
    assert health.findings(t, unknown) == [] and health.findings(t, dataclasses.replace(t.gpus[3], health=None)) == []
    assert health.not_reported(model.GpuHealth()) == list(health.NOT_REPORTED.values())
    assert health.judged_facts(model.GpuHealth()) == []


def test_a_firmware_version_is_judged_against_its_models_gpus_only():
    t = _node(vbios_version="96.00.74.00.01")
    (odd,) = health.findings(t, t.gpus[3])
    assert (
        odd.what == "VBIOS 96.00.74.00.01 where 7 other GPUs of its model (NVIDIA H100 80GB HBM3) have 96.00.99.00.01"
    )
    assert all(health.findings(t, g) == [] for g in t.gpus if g.index != 3)  # the seven agree
    # Another model beside it is not compared with it.
    other = dataclasses.replace(t.gpus[3], name="NVIDIA H200")
    mixed = dataclasses.replace(t, gpus=t.gpus[:3] + (other,) + t.gpus[4:])
    assert health.findings(mixed, mixed.gpus[3]) == []
    # Half and half: no version is the node's, every GPU is named.
    gpus = tuple(
        dataclasses.replace(g, health=dataclasses.replace(HEALTHY, vbios_version="A" if g.index < 4 else "B"))
        for g in t.gpus
    )
    half = dataclasses.replace(t, gpus=gpus)
    assert all(_codes(half, g.index) == [("vbios_mismatch", "warning")] for g in half.gpus)
    assert (
        "where 4 other GPUs of its model (NVIDIA H100 80GB HBM3) have B" in health.findings(half, half.gpus[0])[0].what
    )


def test_every_code_has_a_severity_and_an_action():
    for code, meaning in health.CODES.items():
        assert meaning.severity in (health.FAULT, health.WARNING) and meaning.title and meaning.action, code


# -- NVML's calls, as the probe makes them and the fake answers them ---------------------------------


def test_the_real_binding_has_the_calls_and_constants_the_probe_assumes():
    assert (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC) == (1, 0, 1)
    assert (nvml._UNCORRECTED, nvml._VOLATILE_ECC, nvml._AGGREGATE_ECC, nvml._ENABLED) == (1, 0, 1, 1)
    assert pynvml.NVML_FEATURE_ENABLED == 1
    reasons = (
        pynvml.nvmlClocksEventReasonHwSlowdown,
        pynvml.nvmlClocksEventReasonSwThermalSlowdown,
        pynvml.nvmlClocksEventReasonHwThermalSlowdown,
        pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
    )
    assert reasons == (health.HW_SLOWDOWN, health.SW_THERMAL, health.HW_THERMAL, health.HW_POWER_BRAKE)
    signatures = {
        "nvmlDeviceGetTotalEccErrors": ["handle", "errorType", "counterType"],
        "nvmlDeviceGetRemappedRows": ["device"],
        "nvmlDeviceGetRetiredPagesPendingStatus": ["device"],
        "nvmlDeviceGetCurrentClocksEventReasons": ["handle"],
        "nvmlDeviceGetCurrentClocksThrottleReasons": ["handle"],
        "nvmlDeviceGetPersistenceMode": ["handle"],
        "nvmlDeviceGetVbiosVersion": ["handle"],
        "nvmlDeviceGetInforomImageVersion": ["handle"],
    }
    fake = make_fake_pynvml(_node())
    for name, params in signatures.items():
        assert list(inspect.signature(getattr(pynvml, name)).parameters) == params, name
        assert list(inspect.signature(getattr(fake, name)).parameters) == params, name
    assert "return (c_corr.value, c_unc.value, c_bpending.value, c_bfailure.value)" in inspect.getsource(
        pynvml.nvmlDeviceGetRemappedRows
    )
    assert list(nvml.CLOCKS_EVENT_CALLS) == [
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ]


@pytest.mark.parametrize("binding", ["13.615.71", "11.495.46"])
def test_the_probe_reads_back_what_the_fake_serves(binding):
    t = _node(
        ecc_uncorrected_volatile=3, ecc_uncorrected_aggregate=9, remapped_rows_pending=True, persistence_mode=False
    )
    probed = nvml.probe(make_fake_pynvml(t, binding_version=binding))
    assert [g.health for g in probed.gpus] == [g.health for g in t.gpus]
    assert not probed.warnings


def test_a_run_that_asks_no_health_reads_none(monkeypatch):
    """Health is read where asked (a check, ``healthy=True``: ``model.HEALTH``): a run judged on the
    topology alone makes no health call, reads neither the PCI bus nor the kernel log (on a busy
    node up to 16 MiB, every run), and holds each GPU's health unknown."""
    from pytest_gputopo.core import model
    from pytest_gputopo.core.gpu_requirements import GpuRequirement
    from pytest_gputopo.probe import host, kernel_log, pci_bus

    t = _node(ecc_uncorrected_volatile=3)
    fake = make_fake_pynvml(t)
    for name in ("nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetPersistenceMode"):
        monkeypatch.setattr(fake, name, lambda *a, name=name: pytest.fail(f"{name} called"))
    monkeypatch.setattr(pci_bus, "nvidia_gpus", lambda *a: pytest.fail("the PCI bus read"))
    monkeypatch.setattr(kernel_log, "read_log", lambda *a: pytest.fail("the kernel log read"))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert all(g.health is None for g in host._nvml_facts(with_health=False).gpus)
    assert model.HEALTH in GpuRequirement(healthy=True).facts and model.HEALTH not in GpuRequirement().facts
    assert model.HEALTH in model.ALL_FACTS  # a check, a fixture, a report: every fact


def test_a_gpu_that_reports_nothing_has_no_health_and_no_warning():
    t = load_profile("8x-rtx4090").topology  # no health recorded: every call NotSupported
    probed = nvml.probe(make_fake_pynvml(t))
    assert all(g.health is None for g in probed.gpus) and not probed.warnings


def test_a_failing_health_call_leaves_its_fact_unknown_and_the_machine_without_a_warning():
    fake = make_fake_pynvml(_node())

    def lost(handle):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    fake.nvmlDeviceGetRemappedRows = lost
    probed = nvml.probe(fake)
    assert probed.gpus[0].health == dataclasses.replace(HEALTHY, remapped_rows_pending=None, remapping_failed=None)
    assert not probed.warnings  # the topology item judges the machine's facts: a health call is not one of them


def test_a_slowdown_seen_once_is_not_kept_and_one_that_stays_is(monkeypatch):
    """nvml.h: hardware slowdown "may be also reported during PState or clock change"."""
    monkeypatch.setattr(nvml, "CLOCKS_RECHECK_S", 0)
    fake = make_fake_pynvml(_node())
    answers = iter([0x8 | 0x1, 0x1])  # a P-state change seen, then idle

    fake.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: next(answers, 0x1)
    assert nvml.probe(fake).gpus[0].health.clocks_event_reasons == 0x1
    fake.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: 0x48
    assert nvml.probe(fake).gpus[0].health.clocks_event_reasons == 0x48


def test_a_binding_without_the_new_name_reads_the_old_one():
    fake = make_fake_pynvml(_node(clocks_event_reasons=0x20))
    del fake.nvmlDeviceGetCurrentClocksEventReasons
    assert nvml.probe(fake).gpus[3].health.clocks_event_reasons == 0x20


def test_the_fake_refuses_what_the_c_library_would():
    fake = make_fake_pynvml(_node())
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceGetTotalEccErrors(handle, 2, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # corrected errors: not recorded
        fake.nvmlDeviceGetTotalEccErrors(handle, 0, 0)
    fake.nvmlShutdown()


# -- the profile ------------------------------------------------------------------------------------


def test_the_profile_keeps_the_facts_given_and_profiles_without_them_stay_as_they_were():
    t = _node(persistence_mode=None)
    data = schema.to_dict(t)
    assert "persistence_mode" not in data["gpus"][3]["health"] and data["gpus"][0]["health"]["persistence_mode"] is True
    assert schema.from_dict(json.loads(json.dumps(data))).gpus == t.gpus
    assert all("health" not in g for g in schema.to_dict(load_profile("dgx-a100").topology)["gpus"])
    for bad, says in (
        ({"ecc_uncorrected_volatile": -1}, "is not from 0"),
        ({"remapping_failed": "no"}, "expected bool"),
        ({"vbios_version": ""}, "is not a version of 1 to 64 characters"),
        ({"temperature": 90}, "unknown field"),
    ):
        data["gpus"][3]["health"] = bad
        with pytest.raises(schema.SchemaError, match=says):
            schema.from_dict(data)


# -- the check item, in every medium, and the fleet ---------------------------------------------------


def test_the_health_item_fails_with_each_faults_code_and_action(pytester, monkeypatch):
    """The code and the action in every medium: the terminal line, the JSON report, JUnit, the HTML
    report and GitHub's step summary."""
    t = _node(ecc_uncorrected_volatile=2, remapped_rows_pending=True, persistence_mode=False)
    junit, html, summary = (pytester.path / name for name in ("junit.xml", "report.html", "summary.md"))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    checks = checks_of(pytester, t, "--junitxml", str(junit), "--gputopo-html", str(html))
    for medium in (junit, html, summary):
        text = medium.read_text().replace("\\", "")  # Markdown's escapes (row\_remap\_pending)
        assert "row_remap_pending" in text and "ecc_uncorrected: reset the GPU" in text, medium
    sick = checks["health[GPU3]"]
    assert sick["outcome"] == "failed"
    assert sick["message"] == (
        "GPU3: 2 uncorrectable ECC errors since the driver loaded [ecc_uncorrected: reset the GPU (nvidia-smi -r, "
        "or reboot the node); drain the node if they come back]; a row remapping waits for a GPU reset "
        "[row_remap_pending: reset the GPU (nvidia-smi -r, or reboot the node)]; warning: persistence mode off "
        "[persistence_off: enable it: nvidia-persistenced, or nvidia-smi -pm 1]"
    )
    well = checks["health[GPU0]"]
    assert well["outcome"] == "passed"
    assert well["message"] == (
        "GPU0: no uncorrectable ECC error since the driver loaded, no row remapping pending or failed, "
        "no page pending retirement, no slowdown at rest, persistence mode on"
    )


def test_a_warning_alone_passes_the_item_and_says_it(pytester):
    checks = checks_of(pytester, _node(vbios_version="96.00.74.00.01", persistence_mode=None))
    item = checks["health[GPU3]"]
    assert item["outcome"] == "passed"
    assert "; warning: VBIOS 96.00.74.00.01 where 7 other GPUs" in item["message"]
    assert item["message"].endswith("; not reported: persistence mode")


def test_a_recorded_machine_without_health_facts_has_no_health_item(pytester):
    checks = checks_of(pytester, load_profile("dgx-a100").topology)
    assert not [name for name in checks if name.startswith("health[")]


def test_the_fleet_names_a_node_for_a_health_fault_and_not_for_a_warning():
    (fault,) = faults.health_faults(_node(remapping_failed=True))
    assert (fault.name, fault.gpus) == ("health[GPU3]", ("GPU3",))
    assert fault.what == "a row remapping has failed (row_remap_failed)"  # alike on every node that has it
    assert fault in faults.topology_faults(_node(remapping_failed=True))
    assert faults.health_faults(_node(persistence_mode=False, vbios_version="x")) == []


@pytest.mark.parametrize("machine", bundled_names())
def test_no_bundled_machine_is_named_when_healthy(machine):
    t = load_profile(machine).topology
    assert faults.health_faults(t) == []
    healthy = dataclasses.replace(t, gpus=tuple(dataclasses.replace(g, health=HEALTHY) for g in t.gpus))
    assert all(health.findings(healthy, g) == [] for g in healthy.gpus)
    assert faults.health_faults(healthy) == []


# -- on the emulated host, entered as a user's run enters it; the fleet reads what the check wrote ----


@pytest.mark.slow
def test_a_check_on_the_emulated_host_fails_a_sick_gpu_and_the_fleet_names_its_node(
    pytester, emulated_libs, tmp_path, monkeypatch, capsys
):
    """A DGX A100 whose GPUs are healthy as NVML reports them passes every health item; the same node
    once GPU5's row remapping has failed fails health[GPU5] with the code and the action, and ``gputopo
    fleet`` over its check document names it for its own fault, with no peer to compare it with."""
    documents = tmp_path / "fleet"
    documents.mkdir()
    for node, sick in (("a", {}), ("b", {5: {"remapping_failed": True}})):
        host, env = make_host(tmp_path / f"host-{node}", emulated_libs, "dgx-a100", health=sick)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        report = (documents if sick else tmp_path) / f"node-{node}.json"
        result = pytester.runpytest_subprocess("--gputopo-check", "quick", "-v", "--gputopo-json", str(report))
        items = {c["check"]: c for c in json.loads(report.read_text())["checks"]}
        health_items = {name: c["outcome"] for name, c in items.items() if name.startswith("health[")}
        assert len(health_items) == 8
        if node == "a":
            assert set(health_items.values()) == {"passed"}, result.stdout.str()
        else:
            assert health_items.pop("health[GPU5]") == "failed" and set(health_items.values()) == {"passed"}
            assert items["health[GPU5]"]["message"] == (
                "GPU5: a row remapping has failed [row_remap_failed: drain the node; replace the GPU]"
            )
            result.stdout.fnmatch_lines(["FAILED health[[]GPU5[]] (*): GPU5: a row remapping has failed*"])
    capsys.readouterr()  # the check runs' output
    code, out, err = run_cli(capsys, "fleet", documents)
    assert code == 1, err
    named = [line for line in out.splitlines() if "NAMED" in line]
    assert len(named) == 1 and named[0].startswith("  NAMED ") and ": its own fault: GPU5: a row remapping" in named[0]


def test_the_docs_table_is_the_codes():
    """docs/health.md's table lists every code with the severity, meaning and action ``CODES`` gives."""
    text = (Path(__file__).parent.parent / "docs" / "health.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`") and cells[0] != "`code`":
            rows[cells[0].strip("`")] = cells[1:4]
    assert rows == {code: [c.severity, c.title, c.action] for code, c in health.CODES.items()}


# -- requires_gpus(healthy=True) and the run gate's healthy term ---------------------------------------


def test_healthy_is_met_on_a_healthy_node_unmet_naming_the_fault_and_unknown_without_facts():
    from pytest_gputopo.core.gpu_requirements import GpuRequirement

    need = GpuRequirement(healthy=True)
    assert need.evaluate(_node()).ok and need.evaluate(_node(persistence_mode=False)).ok  # a warning is no fault
    sick = need.evaluate(_node(remapping_failed=True))
    assert not sick.ok and not sick.unknown
    assert "GPU3 (NVIDIA H100 80GB HBM3) is not healthy: a row remapping has failed [row_remap_failed:" in sick.reason
    bare = need.evaluate(load_profile("dgx-a100").topology)  # a profile without health facts
    assert not bare.ok and bare.unknown and "health is unknown" in bare.reason
    with pytest.raises(Exception, match="healthy must be True or None"):
        GpuRequirement(healthy=False)


def test_the_run_gate_requires_a_healthy_node(pytester):
    from pytest_gputopo.probe.recorded import profile_dict

    pytester.makepyfile(test_x="def test_x(): pass\n")
    for name, topology, passes in (("well", _node(), True), ("sick", _node(ecc_uncorrected_volatile=1), False)):
        path = pytester.path / f"{name}.json"
        path.write_text(json.dumps(profile_dict(name, topology)))
        result = pytester.runpytest(
            "-p", "no:cacheprovider", "--gputopo-machine", str(path), "--gputopo-require", "healthy"
        )
        if passes:
            result.assert_outcomes(passed=1)
        else:
            assert result.ret != 0
            result.stdout.fnmatch_lines(
                ["*GPU3 (NVIDIA H100 80GB HBM3) is not healthy: 1 uncorrectable ECC error since*"]
            )


@pytest.mark.slow
@pytest.mark.parametrize(
    "machine, health_of",
    [(name, None) for name in bundled_names() if name != "no-gpu"]
    + [
        # MIG enabled: NVML has no row remapper to read (nvml.h: "NOT_SUPPORTED If MIG is enabled")
        ("dgx-a100", {"remapped_rows_pending": None, "remapping_failed": None}),
        # a vGPU guest: ECC, row remapping and the InfoROM not reported, persistence off in the guest
        (
            "single-gpu",
            {
                "ecc_uncorrected_volatile": None,
                "ecc_uncorrected_aggregate": None,
                "remapped_rows_pending": None,
                "remapping_failed": None,
                "inforom_version": None,
                "persistence_mode": False,
            },
        ),
    ],
)
def test_no_machine_of_any_kind_fails_a_health_item_when_healthy(
    pytester, emulated_libs, tmp_path, monkeypatch, machine, health_of
):
    """Every bundled machine (PCIe-only, one GPU, NVSwitch, GeForce, GB200, ...) on the emulated host,
    its GPUs healthy as NVML reports them, and the MIG and vGPU kinds NVML reports less of: no health,
    pci or xid item fails (the PCI bus here shows none of the emulated GPUs: pci is not judged)."""
    gpus = len(load_profile(machine).topology.gpus)
    _, env = make_host(
        tmp_path / "host", emulated_libs, machine, health={i: health_of for i in range(gpus)} if health_of else None
    )
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    report = tmp_path / "check.json"
    pytester.runpytest_subprocess("--gputopo-check", "quick", "--gputopo-json", str(report))
    items = {c["check"]: c for c in json.loads(report.read_text())["checks"]}
    judged = {name: c["outcome"] for name, c in items.items() if name.startswith("health[") or name in ("pci", "xid")}
    assert len([n for n in judged if n.startswith("health[")]) == gpus
    assert "failed" not in judged.values(), {n: items[n]["message"] for n, o in judged.items() if o == "failed"}
    assert all(judged[f"health[GPU{i}]"] == "passed" for i in range(gpus)), judged


def test_healthy_is_unmet_on_the_nodes_own_faults():
    from pytest_gputopo.core import xid
    from pytest_gputopo.core.gpu_requirements import GpuRequirement

    t = dataclasses.replace(
        _node(), xids=tuple(xid.xid_events("NVRM: Xid (PCI:0000:1b:00): 79, pid=1, GPU has fallen off the bus."))
    )
    verdict = GpuRequirement(healthy=True).evaluate(t)
    assert not verdict.ok and "the node is not healthy: Xid 79 (GPU has fallen off the bus" in verdict.reason
    assert GpuRequirement(healthy=True).evaluate(dataclasses.replace(_node(), pci_unlisted=(), xids=())).ok
