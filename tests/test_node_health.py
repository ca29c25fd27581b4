"""The node's own health items (issue 44 item 1): the GPUs on the PCI bus NVML does not list (``pci``,
``probe.pci_bus``, NVSentinel's sysfs count against the driver's) and the XIDs of this boot's kernel
log (``xid``, ``probe.kernel_log``, judged by ``core.xid``), read in the probe child, kept in the
profile, judged by ``core.health`` and named by the fleet.

The kernel's formats: a PCI device's sysfs folder holds ``vendor`` (``0x10de``), ``class`` (``0x030000``
VGA, ``0x030200`` 3D controller) and the ``driver`` link (Documentation/ABI/testing/sysfs-bus-pci); the
NVIDIA driver's ``/proc/driver/nvidia/gpus/<bus id>/information`` says ``Device Minor:`` (the
``/dev/nvidia<minor>`` node); ``/dev/kmsg`` gives one record per read, "prio,seq,usec,flags;text",
and EAGAIN with O_NONBLOCK once none is left (Documentation/ABI/testing/dev-kmsg).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading

import pytest

from conftest import checks_of
from pytest_gputopo.core import faults, health, schema, xid
from pytest_gputopo.probe import host, kernel_log, pci_bus
from pytest_gputopo.probe.recorded import load_profile

A100 = load_profile("dgx-a100").topology
BUSES = [g.pci_bus_id for g in A100.gpus]  # 00000000:07:00.0 ...


def _machine(root, gpus: dict[str, tuple[str, str, str | None]], nodes=()) -> dict:
    """A sysfs, procfs and /dev tree: ``gpus`` by sysfs name -> (vendor, class, driver); the NVIDIA
    driver's information file and a device node for each of ``nodes``."""
    sysfs, proc, dev = root / "sys", root / "proc", root / "dev"
    for d in (sysfs, proc, dev, root / "drivers" / "nvidia", root / "drivers" / "vfio-pci"):
        d.mkdir(parents=True, exist_ok=True)
    for minor, (name, (vendor, cls, driver)) in enumerate(gpus.items()):
        here = sysfs / name
        here.mkdir()
        (here / "vendor").write_text(vendor + "\n")
        (here / "class").write_text(cls + "\n")
        if driver:
            (here / "driver").symlink_to(root / "drivers" / driver)
        (proc / name).mkdir()
        (proc / name / "information").write_text(f"Model: \t\t NVIDIA A100\nDevice Minor: \t {minor}\n")
        if name in nodes:
            (dev / f"nvidia{minor}").write_text("")
    return {"sysfs": str(sysfs), "proc": str(proc), "dev": str(dev)}


def _sysfs_name(bus: str) -> str:
    return bus[4:].lower()  # 00000000:07:00.0 -> 0000:07:00.0


# -- the PCI bus --------------------------------------------------------------------------------------


def test_the_gpus_on_the_bus_are_nvidias_display_and_3d_controllers_bound_to_nvidia_and_given_to_this_process(
    tmp_path,
):
    gpus = {
        "0000:07:00.0": ("0x10de", "0x030200", "nvidia"),  # a 3D controller, ours
        "0000:0f:00.0": ("0x10de", "0x030000", "nvidia"),  # a VGA controller, ours
        "0000:47:00.0": ("0x10de", "0x030200", "nvidia"),  # the host's, not given to this container
        "0000:4e:00.0": ("0x10de", "0x030200", "vfio-pci"),  # passed to a virtual machine
        "0000:87:00.0": ("0x10de", "0x068000", "nvidia"),  # an NVSwitch: a bridge
        "0000:90:00.0": ("0x8086", "0x030000", None),  # another vendor's display
        "0000:b7:00.0": ("0x10de", "0x030200", None),  # bound to no driver
    }
    tree = _machine(tmp_path, gpus, nodes=("0000:07:00.0", "0000:0f:00.0", "0000:4e:00.0", "0000:b7:00.0"))
    assert pci_bus.nvidia_gpus(**tree) == ("00000000:07:00.0", "00000000:0F:00.0")
    assert pci_bus.nvidia_gpus(sysfs=str(tmp_path / "none")) is None


@pytest.mark.parametrize(
    "on_bus, listed, unlisted",
    [
        (None, BUSES, None),  # not read
        (tuple(BUSES), BUSES, ()),
        (tuple(BUSES), BUSES[:7] + [None], ("00000000:BD:00.0",)),  # NVML lost GPU7's handle: no bus id
        (tuple(BUSES), BUSES[:5], tuple(BUSES[5:])),
        (("00000000:01:00.0",), BUSES, None),  # the bus shows none of NVML's GPUs: another view of it
        ((), BUSES, None),  # a VM's bus: no GPU there, NVML lists 8
        (tuple(BUSES[:2]), [], tuple(BUSES[:2])),  # NVML lists none: every GPU on the bus is unlisted
        ((), [], ()),
    ],
)
def test_which_gpus_on_the_bus_nvml_does_not_list(on_bus, listed, unlisted):
    assert health.unlisted_on_bus(on_bus, listed) == unlisted


# -- the kernel log -----------------------------------------------------------------------------------

LOG = (
    "6,1201,5123456,-;NVRM: Xid (PCI:0000:90:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
    "4,1202,5123460,-;NVRM: Xid (PCI:0000:07:00): 13, pid=88, name=python, Graphics Exception: ESR 0x404600\n"
    "4,1203,5123470,-;NVRM: Xid (PCI:0000:90:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
)


def test_a_saved_log_is_read_whole_and_a_missing_one_is_unknown(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text(LOG)
    assert kernel_log.read_log(str(log)) == LOG
    assert kernel_log.read_log(str(tmp_path / "none")) is None


def test_a_fifo_nobody_writes_is_read_without_blocking(tmp_path):
    """Never block on a file the plugin did not make: a FIFO with no writer is empty at once."""
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    done = threading.Event()
    got = []
    reader = threading.Thread(target=lambda: (got.append(kernel_log.read_log(str(fifo))), done.set()), daemon=True)
    reader.start()
    assert done.wait(10), "read_log blocked on a FIFO"
    assert got == [""]


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="this host's kernel log is not readable here")
def test_this_hosts_kernel_log_is_read_to_its_end():
    text = kernel_log.read_log()
    assert text is not None and text.endswith("\n")


# -- judged, kept, said -------------------------------------------------------------------------------


def _node(**facts):
    return dataclasses.replace(A100, **facts)


def test_node_findings_name_each_xid_once_with_its_count_and_leave_the_applications():
    t = _node(xids=tuple(xid.xid_events(LOG)), pci_unlisted=("00000000:90:00.0",))
    found = [(f.code, f.what) for f in health.node_findings(t)]
    assert found == [
        (
            "gpu_off_bus",
            "an NVIDIA GPU at PCI 00000000:90:00.0 is on the bus, bound to the nvidia driver, "
            "and NVML does not list it",
        ),
        ("xid", "Xid 79 (GPU has fallen off the bus; NVIDIA: RESTART_BM) on PCI 0000:90:00, 2 times"),
    ]
    assert health.node_findings(_node(xids=tuple(xid.xid_events(LOG.splitlines()[1])))) == []  # Xid 13: the app's


def test_the_profile_keeps_them_and_refuses_what_is_not_them():
    t = _node(xids=tuple(xid.xid_events(LOG)), pci_unlisted=("00000000:90:00.0",))
    data = schema.to_dict(t)
    back = schema.from_dict(json.loads(json.dumps(data)))
    assert (back.xids, back.pci_unlisted) == (t.xids, t.pci_unlisted)
    assert "xids" not in schema.to_dict(A100) and "pci_unlisted" not in schema.to_dict(A100)
    for field, bad, says in (
        ("pci_unlisted", ["0000:90:00.0"], "is not a PCI bus id as NVML writes one"),
        ("xids", [{"pci": "0000:90:00", "xid": 79}], "xids\\[0\\].text: missing"),
        ("xids", [{"pci": "<b>", "xid": 79, "text": ""}], "is not a PCI address"),
        ("xids", [{"pci": "0000:90:00", "xid": -1, "text": ""}], "is not from 0 to 9999"),
        ("xids", [{"pci": "0000:90:00", "xid": 79, "text": "", "pid": 1}], "unknown field"),
    ):
        with pytest.raises(schema.SchemaError, match=says):
            schema.from_dict({**data, field: bad})


def test_the_items_fail_with_the_code_and_pass_or_skip_as_the_facts_say(pytester):
    checks = checks_of(pytester, _node(xids=tuple(xid.xid_events(LOG)), pci_unlisted=("00000000:90:00.0",)))
    assert checks["pci"]["outcome"] == checks["xid"]["outcome"] == "failed"
    assert checks["xid"]["message"].startswith(
        "Xid 79 (GPU has fallen off the bus; NVIDIA: RESTART_BM) on PCI 0000:90:00, 2 times [xid: as NVIDIA's"
    )
    assert "[gpu_off_bus: reboot the node; drain the node until it is listed again]" in checks["pci"]["message"]
    checks = checks_of(pytester, _node(xids=tuple(xid.xid_events(LOG.splitlines()[1])), pci_unlisted=()))
    assert (checks["pci"]["outcome"], checks["xid"]["outcome"]) == ("passed", "passed")
    assert checks["xid"]["message"] == "1 XID in this boot's kernel log, each the application's"
    checks = checks_of(pytester, A100)  # a recording without them: no item
    assert "pci" not in checks and "xid" not in checks


def test_the_fleet_names_the_node_once_per_item():
    t = _node(
        xids=tuple(xid.xid_events(LOG + LOG.replace("0000:90:00", "0000:b7:00"))), pci_unlisted=("00000000:90:00.0",)
    )
    named = {f.name: f for f in faults.topology_faults(t)}
    assert named["pci"].what == "a GPU on the PCI bus that NVML does not list (gpu_off_bus)"
    assert named["xid"].line.count("Xid 79") == 2 and named["xid"].gpus == ()


def test_the_probe_child_adds_them_to_nvmls_facts(monkeypatch, tmp_path):
    log = tmp_path / "kmsg"
    log.write_text(LOG)
    tree = _machine(
        tmp_path,
        {_sysfs_name(b): ("0x10de", "0x030200", "nvidia") for b in BUSES},
        nodes=[_sysfs_name(b) for b in BUSES],
    )
    monkeypatch.setattr(pci_bus.nvidia_gpus, "__defaults__", (tree["sysfs"], tree["proc"], tree["dev"]))
    monkeypatch.setattr(kernel_log.read_log, "__defaults__", (str(log),))
    lost = dataclasses.replace(A100, gpus=A100.gpus[:5])
    t = host._node_facts(lost)
    assert t.pci_unlisted == tuple(BUSES[5:]) and [e.xid for e in t.xids] == [79, 13, 79]
