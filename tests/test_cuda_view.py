"""CUDA's view joined to NVML's facts (issue 32 G2-G5): a device NVML cannot place is unknown, never
a reason to renumber the GPUs after it; a CUDA that cannot start is named by the driver's own words
and makes P2P unknown; a boot record is read only when it is this user's and agrees with NVML.

Sources: cuda.h (CUDA 12.x/13.x) declares ``CUresult cuGetErrorName(CUresult error, const char **pStr)``
and ``cuGetErrorString`` alike ("CUDA_ERROR_INVALID_VALUE" and ``*pStr = NULL`` for an unknown code),
``CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)`` with ``CUuuid { char bytes[16]; }``;
``cuDeviceGet(ordinal)`` is the ordinal every CUDA process uses, so a GPU's number is its position in
CUDA's list, whatever NVML can say of the devices before it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from emulated import emulated_host, emulated_libs  # noqa: F401  (fixtures)
from pytest_gputopo.probe.cuda_driver import CudaView
from pytest_gputopo.probe.cuda_numbering import as_cuda_sees_it
from pytest_gputopo.probe.recorded import load_profile


def _bus_order(topology):
    return sorted(topology.gpus, key=lambda g: g.pci_bus_id)


def test_a_device_nvml_cannot_place_keeps_its_number_and_shifts_no_other(monkeypatch):
    """NVML could not read GPU 2 (no handle: no bus id, no UUID), CUDA lists all eight: cuda:3 is
    still the GPU at CUDA's fourth bus id, not the one after it; cuda:2 is a GPU of unknown facts."""
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.delenv(name, raising=False)
    nvml = load_profile("hgx-h100").topology
    cuda_order = _bus_order(nvml)
    lost = cuda_order[2].index
    nvml = dataclasses.replace(
        nvml,
        gpus=tuple(
            dataclasses.replace(g, pci_bus_id=None, uuid=None, name=None) if g.index == lost else g for g in nvml.gpus
        ),
    )
    view = CudaView(tuple(g.pci_bus_id for g in cuda_order), {}, {})
    seen = as_cuda_sees_it(nvml, view)
    assert len(seen.gpus) == 8
    assert [g.pci_bus_id for g in seen.gpus] == [g.pci_bus_id for g in cuda_order]  # each at its own ordinal
    assert seen.gpus[3].uuid == cuda_order[3].uuid and seen.gpus[2].name is None
    assert (
        seen.link(2, 3).label is None
        and seen.link(3, 4).label == nvml.link(cuda_order[3].index, cuda_order[4].index).label
    )
    assert any("CUDA device 2 (PCI " in w and "not renumbered" in w for w in seen.warnings)


def test_cuda_and_nvml_are_joined_by_uuid_before_bus_id(monkeypatch):
    """A GPU whose bus id NVML did not give is still placed by its UUID."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = load_profile("hgx-h100").topology
    cuda_order = _bus_order(nvml)
    nvml = dataclasses.replace(
        nvml, gpus=tuple(dataclasses.replace(g, pci_bus_id=None) if g is cuda_order[5] else g for g in nvml.gpus)
    )
    view = CudaView(tuple(g.pci_bus_id for g in cuda_order), {}, {}, tuple(g.uuid for g in cuda_order))
    seen = as_cuda_sees_it(nvml, view)
    assert [g.uuid for g in seen.gpus] == [g.uuid for g in cuda_order] and not seen.warnings


def test_a_view_with_uuids_round_trips_and_a_bad_uuid_is_refused():
    good = CudaView(
        ("00000000:18:00.0", "00000000:2A:00.0"), {(0, 1): True}, {}, ("GPU-0123abcd-0000-1111-2222-333344445555", None)
    )
    assert CudaView.from_json(good.to_json()) == good
    with pytest.raises(ValueError):
        CudaView.from_json({**good.to_json(), "uuids": ["GPU-x", None]})


def test_the_probe_child_reads_uuids_and_names_cudas_error_as_the_driver_does(emulated_host, monkeypatch):
    """The emulated libcuda.so.1 (tests/emulated_host/libcuda.c) answers as cuda.h declares."""
    import ctypes
    import os

    from pytest_gputopo.probe.cuda_driver import cuda_view

    emulated_host("dgx-a100")
    lib = ctypes.CDLL(os.path.join(os.environ["LD_LIBRARY_PATH"].split(os.pathsep)[0], "libcuda.so.1"))
    view = cuda_view(lib)
    assert list(view.uuids) == [g.uuid for g in _bus_order(load_profile("dgx-a100").topology)]
    from pytest_gputopo.probe.cuda_driver import error_text

    assert error_text(lib, 802) == "CUDA_ERROR_SYSTEM_NOT_READY (802): system not yet initialized"
    assert error_text(lib, 12345) == "CUresult 12345"  # a code the driver does not know


P2P_TEST = "import pytest\n@pytest.mark.requires_p2p(gpus=2)\ndef test_pair(): pass\n"


def test_where_cuda_cannot_start_p2p_is_unknown_and_the_check_names_the_error(pytester, emulated_host):
    """An NVSwitch node whose fabric manager is down: cuInit answers CUDA_ERROR_SYSTEM_NOT_READY (802)
    while NVML reports every pair's P2P OK. requires_p2p is unknown, not met (no CUDA program can do
    P2P there); the quick check's cuda item fails naming the error in the driver's words."""
    host = emulated_host("dgx-a100")
    host.cuda(init_result=802)
    pytester.makepyfile(test_x=P2P_TEST)
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    said = "cuInit returned CUDA_ERROR_SYSTEM_NOT_READY (802): system not yet initialized"
    result.stdout.fnmatch_lines(
        [f"gputopo warning: *{said}", f"*requires_p2p*P2P unknown: CUDA cannot start here ({said})*"]
    )
    check = pytester.runpytest_subprocess("--gputopo-check", "quick", "-p", "no:cacheprovider", "-v")
    check.stdout.fnmatch_lines(["*gputopo-check::cuda FAILED*", f"FAILED cuda (*): CUDA cannot start: {said}"])
    assert "topology FAILED" not in check.stdout.str()  # the one cause said once, by the cuda item


def test_where_cuda_starts_the_check_says_how_many_devices_it_lists(pytester, emulated_host):
    emulated_host("dgx-a100")
    result = pytester.runpytest_subprocess("--gputopo-check", "quick", "-p", "no:cacheprovider", "-v")
    result.stdout.fnmatch_lines(
        ["*gputopo-check::cuda PASSED (CUDA starts and lists 8 devices, every visible GPU NVML lists)*"]
    )


REPEAT = "import pytest\n@pytest.mark.requires_p2p(gpus=2)\ndef test_pair(): pass\n"


def _record_files(pytester) -> list:
    return sorted((pytester.path / ".pytest_cache" / "v" / "gputopo" / "boot").iterdir())


def _record_then_no_peer_access_planted(pytester, emulated_host) -> Path:
    """A run on dgx-a100 that writes this boot's record, then "no peer access" for every pair planted
    in that record: its file."""
    emulated_host("dgx-a100")
    pytester.makepyfile(test_p2p=REPEAT)
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    (record,) = _record_files(pytester)
    kept = json.loads(record.read_text())
    kept["cuda"]["peer"] = [[a, b, False] for a, b, _ in kept["cuda"]["peer"]]
    record.write_text(json.dumps(kept))
    return record


def test_a_record_others_could_have_written_is_not_read(pytester, emulated_host):
    """G4: a boot record in pytest's cache (in the checkout) that is writable by group or others, as a
    shared checkout's would be, is not read: CUDA is asked again, and a planted "no peer access" fails
    nothing."""
    record = _record_then_no_peer_access_planted(pytester, emulated_host)
    record.chmod(0o666)
    again = pytester.runpytest_subprocess()
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*(NVML probed; CUDA's view probed)"])


def test_a_record_written_under_a_umask_of_002_is_read_back(pytester, emulated_host):
    """Debian and Ubuntu give every user a group of their own and a umask of 002, so pytest makes its
    cache group-writable: the record's own file and folders are made the user's alone (0600, 0700) and
    pytest's two folders above them are trusted where their group is the user's own, so a repeat run
    still takes CUDA's view from this boot's record."""
    import grp
    import pwd

    user = pwd.getpwuid(os.getuid())
    try:
        own = grp.getgrgid(user.pw_gid).gr_name == user.pw_name
    except KeyError:
        own = False
    emulated_host("dgx-a100")
    pytester.makepyfile(test_p2p=REPEAT)
    before = os.umask(0o002)
    try:
        pytester.runpytest_subprocess().assert_outcomes(passed=1)
        again = pytester.runpytest_subprocess()
    finally:
        os.umask(before)
    (record,) = _record_files(pytester)
    assert record.stat().st_mode & 0o777 == 0o600 and record.parent.stat().st_mode & 0o777 == 0o700
    again.assert_outcomes(passed=1)
    if own:
        again.stdout.fnmatch_lines(["*(NVML probed; CUDA's view from this boot's record)"])
    else:  # a user whose group is shared: pytest's group-writable folders are not trusted
        again.stdout.fnmatch_lines(["*(NVML probed; CUDA's view probed)"])


def test_a_record_that_contradicts_nvml_is_asked_again(pytester, emulated_host):
    """G4: a kept "no peer access" where NVML now says P2P OK (peer access came back after a change the
    key cannot see) is asked again, not believed until the next boot."""
    _record_then_no_peer_access_planted(pytester, emulated_host)
    again = pytester.runpytest_subprocess()
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*(NVML probed; CUDA's view probed)"])


def test_the_boot_key_covers_a_driver_reload_mig_modes_and_the_library_path(monkeypatch):
    from pytest_gputopo.probe import this_host
    from pytest_gputopo.runtime import environ

    monkeypatch.setattr(environ, "boot_id", lambda: "boot")
    topology = load_profile("dgx-a100").topology
    key = this_host._boot_key(topology)
    monkeypatch.setattr(environ, "nvidia_driver_load", lambda: [4711, "EnableMSI: 0\n"])
    reloaded = this_host._boot_key(topology)
    monkeypatch.setattr(environ, "nvidia_driver_load", lambda: [4712, "EnableMSI: 0\n"])
    assert len({key, reloaded, this_host._boot_key(topology)}) == 3
    mig = dataclasses.replace(topology, gpus=(dataclasses.replace(topology.gpus[0], mig=True), *topology.gpus[1:]))
    assert this_host._boot_key(mig) != this_host._boot_key(topology)
    before = this_host._boot_key(topology)
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/other-driver/lib")
    assert this_host._boot_key(topology) != before


def test_cudas_order_of_identical_gpus_is_taken_from_this_boots_record(pytester, emulated_host):
    """G5: on a host of one model an NVML-only run takes CUDA's own order from this boot's record where
    there is one, not the guess that identical GPUs come in bus order (no CUDA document says so)."""
    host = emulated_host("dgx-a100")
    lines = (host.root / "cuda.txt").read_text().splitlines()
    devs = [ln for ln in lines if ln.startswith("dev ")]
    uuids = {int(ln.split()[1]): ln.split()[2] for ln in lines if ln.startswith("uuid ")}
    n = len(devs)
    (host.root / "cuda.txt").write_text(
        "\n".join([lines[0], *reversed(devs), *(f"uuid {n - 1 - i} {u}" for i, u in uuids.items())]) + "\n"
    )
    pytester.makepyfile(test_p2p=REPEAT)
    pytester.runpytest_subprocess().assert_outcomes(passed=1)  # CUDA asked, its order kept for the boot
    pytester.makepyfile(test_p2p="import pytest\n@pytest.mark.requires_gpus(8)\ndef test_count(): pass\n")
    pytester.makeconftest(
        "def pytest_gputopo_topology(topology, config):\n"
        "    open('order.txt', 'w').write(' '.join(g.pci_bus_id for g in topology.gpus))\n"
    )
    again = pytester.runpytest_subprocess()
    again.stdout.fnmatch_lines(["*(NVML probed; CUDA's view from this boot's record)"])
    order = (pytester.path / "order.txt").read_text().split()
    assert order == sorted(order, reverse=True)  # CUDA's order, not the bus order


def test_the_boot_key_covers_the_libcuda_file_itself(monkeypatch, tmp_path):
    """G4: a driver updated in place (another libcuda.so.1 at the same path, or the same link pointed at
    another file) is another key, though LD_LIBRARY_PATH and NVML's facts are the same."""
    from pytest_gputopo.probe import this_host
    from pytest_gputopo.runtime import environ

    monkeypatch.setattr(environ, "boot_id", lambda: "boot")
    monkeypatch.setattr(environ, "nvidia_driver_load", lambda: [4711, "EnableMSI: 0\n"])
    lib = tmp_path / "lib"
    lib.mkdir()
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{tmp_path / 'empty'}:{lib}")
    (lib / "libcuda.so.580.65.06").write_bytes(b"\x7fELF stub 580.65.06")
    (lib / "libcuda.so.1").symlink_to("libcuda.so.580.65.06")
    topology = load_profile("dgx-a100").topology
    key = this_host._boot_key(topology)
    assert this_host._boot_key(topology) == key  # the same file: the same key
    (lib / "libcuda.so.580.82.07").write_bytes(b"\x7fELF stub 580.82.07")
    (lib / "libcuda.so.1").unlink()
    (lib / "libcuda.so.1").symlink_to("libcuda.so.580.82.07")  # the installer repoints the link
    repointed = this_host._boot_key(topology)
    replaced = lib / "new"
    replaced.write_bytes(b"\x7fELF stub 580.82.07, rebuilt")
    os.replace(replaced, lib / "libcuda.so.580.82.07")  # the same name, another file
    assert len({key, repointed, this_host._boot_key(topology)}) == 3
    before = this_host._boot_key(topology)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "libcuda.so.1").write_bytes(b"\x7fELF stub, earlier on the path")
    assert this_host._boot_key(topology) != before  # one that appears earlier on the path is loaded instead


def test_ld_so_cache_is_read_as_glibc_writes_it(tmp_path):
    """glibc sysdeps/generic/dl-cache.h: the new format's 48-byte header, 24-byte entries whose key and
    value are offsets from that header; checked against this machine's own cache where ldconfig -p
    lists the same."""
    import struct

    from pytest_gputopo.probe.libcuda_file import cache_paths

    texts = [b"libcuda.so.1", b"/usr/lib/x86_64-linux-gnu/libcuda.so.1", b"/usr/lib/i386-linux-gnu/libcuda.so.1"]
    strings = b"".join(t + b"\0" for t in texts)
    at = [48 + 3 * 24 + strings.index(t + b"\0") for t in texts]  # offsets from the new header's start
    entries = [(0x303, at[0], at[1]), (0x003, at[0], at[2]), (0x303, at[0], at[0] + 4096)]  # the last: past the end
    cache = b"glibc-ld.so.cache1.1" + struct.pack("=II", 3, len(strings)) + bytes(20)
    cache += b"".join(struct.pack("=iIIIQ", f, k, v, 0, 0) for f, k, v in entries) + strings
    (tmp_path / "ld.so.cache").write_bytes(b"ld.so-1.7.0\0" + bytes(4) + cache)  # after an old-format table
    assert cache_paths(cache=str(tmp_path / "ld.so.cache")) == [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib/i386-linux-gnu/libcuda.so.1",
        "",
    ]
    (tmp_path / "other").write_bytes(b"not a cache")
    assert cache_paths(cache=str(tmp_path / "other")) is None
    import shutil
    import subprocess

    ldconfig = shutil.which("ldconfig") or ("/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else None)
    if ldconfig is None or not os.path.exists("/etc/ld.so.cache"):
        return
    listed = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout.splitlines()[1:]
    name = listed[0].split()[0]
    assert cache_paths(name) == [ln.split(" => ")[1] for ln in listed if ln.split()[0] == name]


def test_a_libcuda_replaced_in_place_is_asked_again(pytester, emulated_host, emulated_libs, tmp_path, monkeypatch):
    """G4, end to end: the same LD_LIBRARY_PATH, the same NVML, another libcuda.so.1 file there (a driver
    updated in place): CUDA is asked again, not taken from this boot's record."""
    import shutil

    emulated_host("dgx-a100")
    libs = shutil.copytree(emulated_libs, tmp_path / "private-libs")
    monkeypatch.setenv(
        "LD_LIBRARY_PATH", os.pathsep.join([str(libs), *os.environ["LD_LIBRARY_PATH"].split(os.pathsep)[1:]])
    )
    pytester.makepyfile(test_p2p=REPEAT)
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    pytester.runpytest_subprocess().stdout.fnmatch_lines(["*(NVML probed; CUDA's view from this boot's record)"])
    shutil.copy(libs / "libcuda.so.1", libs / "libcuda.new")
    os.replace(libs / "libcuda.new", libs / "libcuda.so.1")
    again = pytester.runpytest_subprocess()
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*(NVML probed; CUDA's view probed)"])
