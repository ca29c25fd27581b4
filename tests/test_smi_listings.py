"""What nvidia-smi prints about each GPU -- ``nvidia-smi nvlink -s``'s headers, ``--query-gpu=...
--format=csv`` and ``-L`` -- reaches a machine recorded from ``nvidia-smi topo -m`` text: names, UUIDs,
bus ids, memory, compute capability, PCIe and the driver version, each fact filled once, a
disagreement said, another machine's output refused.

The texts below are written in the exact forms nvidia-smi prints, as documented: ``nvlink -s`` as the
corpus capture nvlink-status/001 (``GPU 0: <name> (UUID: GPU-...)``, then ``\\t Link <n>: 25 GB/s``);
``--query-gpu`` as NVIDIA's nvidia-smi manual page (``nvidia-smi --help-query-gpu``) describes
``--format=csv``: a header of the canonical field names, units in brackets (``memory.total [MiB]``),
cells separated by ``", "``, values with their unit unless ``nounits``, ``[N/A]`` where not said;
``-L`` as the manual page's ``--list-gpus`` and the MIG user guide show it (``GPU 0: <name> (UUID:
GPU-...)``, ``  MIG 1g.10gb     Device  0: (UUID: MIG-...)``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gputopo import cli
from pytest_gputopo.core import gpu_facts
from pytest_gputopo.probe import probe
from pytest_gputopo.render.smi_topo import render_topo_matrix

UUIDS = [f"GPU-{i:08x}-1111-2222-3333-44445555{i:04x}" for i in range(8)]
BUSES = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
         "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]
H100 = "NVIDIA H100 80GB HBM3"


def run(capsys, *args) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def topo(tmp_path) -> Path:
    """hgx-h100 as ``nvidia-smi topo -m`` prints it: GPU indices and links, no name, UUID or bus id."""
    path = tmp_path / "topo.txt"
    path.write_text(render_topo_matrix(probe("hgx-h100")))
    return path


def nvlink_s(uuids=UUIDS, name=H100) -> str:
    """``nvidia-smi nvlink -s`` of 8 H100s: 18 links of 26.562 GB/s each."""
    return "".join(f"GPU {i}: {name} (UUID: {u})\n" + "".join(f"\t Link {k}: 26.562 GB/s\n" for k in range(18))
                   for i, u in enumerate(uuids))


def query_csv(fields="index,name,uuid,pci.bus_id,memory.total,compute_cap,driver_version,pcie.link.gen.current,"
              "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max", nounits=False, n=8, uuids=UUIDS) -> str:
    """``nvidia-smi --query-gpu=<fields> --format=csv[,nounits]`` of 8 H100 SXM5 on driver 550.90.07."""
    units = {"memory.total": "MiB"}
    values = {"index": lambda i: str(i), "name": lambda i: H100, "uuid": lambda i: uuids[i],
              "pci.bus_id": lambda i: BUSES[i], "memory.total": lambda i: "81559" + ("" if nounits else " MiB"),
              "compute_cap": lambda i: "9.0", "driver_version": lambda i: "550.90.07",
              "pcie.link.gen.current": lambda i: "5", "pcie.link.gen.max": lambda i: "5",
              "pcie.link.width.current": lambda i: "16", "pcie.link.width.max": lambda i: "16",
              "power.limit": lambda i: "[N/A]"}
    names = fields.split(",")
    header = ", ".join(f"{f} [{units[f]}]" if f in units else f for f in names)
    return header + "\n" + "".join(", ".join(values[f](i) for f in names) + "\n" for i in range(n))


def smi_list(uuids=UUIDS, name=H100) -> str:
    """``nvidia-smi -L`` of 8 H100s."""
    return "".join(f"GPU {i}: {name} (UUID: {u})\n" for i, u in enumerate(uuids))


def recorded(tmp_path):
    return probe(str(tmp_path / "node.json"))


# ------------------------------------------------------------------------------ nvlink -s headers


def test_nvlink_status_names_the_gpus_of_a_text_machine(tmp_path, topo, capsys):
    """A profile recorded from topo -m text with nvlink -s knows each GPU's name and UUID (it said
    '8x unknown GPU'), so a test gated on the model is judged on it."""
    (tmp_path / "nvl.txt").write_text(nvlink_s())
    code, out, err = run(capsys, "record", "--from-smi", topo, "--nvlink-status", tmp_path / "nvl.txt",
                         "-o", tmp_path / "node.json")
    assert code == 0, err
    assert f"8x {H100}" in out and "unknown GPU" not in out
    seen = recorded(tmp_path)
    assert [g.uuid for g in seen.gpus] == UUIDS and {g.name for g in seen.gpus} == {H100}
    assert gpu_facts.GpuRequirement(model="H100").evaluate(seen).ok


def test_nvlink_status_of_another_machine_is_refused(tmp_path, topo, capsys):
    """Two nvlink -s captures whose GPU0 has two UUIDs are two machines: the second is refused,
    naming both UUIDs, and nothing is written."""
    (tmp_path / "a.txt").write_text(nvlink_s())
    (tmp_path / "b.txt").write_text(nvlink_s(uuids=[u.replace("GPU-0", "GPU-f") for u in UUIDS]))
    code, out, err = run(capsys, "record", "--from-smi", topo, "--nvlink-status", tmp_path / "a.txt",
                         "--nvlink-status", tmp_path / "b.txt", "-o", tmp_path / "node.json")
    assert code == 2 and not (tmp_path / "node.json").exists()
    assert f"b.txt: nvidia-smi nvlink -s's GPU 0 has UUID GPU-f" in err and "another machine's output" in err


def test_nvlink_status_naming_a_gpu_otherwise_is_said(tmp_path, topo, capsys):
    """Two sources naming one GPU otherwise: the first name is kept, and a warning says both."""
    (tmp_path / "a.txt").write_text(nvlink_s())
    (tmp_path / "b.txt").write_text(nvlink_s(name="NVIDIA H100 PCIe"))
    code, out, err = run(capsys, "record", "--from-smi", topo, "--nvlink-status", tmp_path / "a.txt",
                         "--nvlink-status", tmp_path / "b.txt", "-o", tmp_path / "node.json")
    assert code == 0, err
    assert f"GPU0: nvidia-smi nvlink -s ({tmp_path / 'b.txt'}) says name NVIDIA H100 PCIe, an earlier source {H100}" in err
    assert recorded(tmp_path).gpus[0].name == H100
