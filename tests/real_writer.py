"""Documents as real nodes write them: ``gputopo check --level full --json`` run for real on the emulated
GPU host (``tests/emulated.py``: the plugin unpatched, NVML and libcuda emulated), its benchmarks
answered by the engine double (``tests/engine_double.py``: every kind a real node measures, at public
figures). A fault is injected where a real node has it: in the machine the host serves (a link down,
P2P refused, a PCIe link trained down) or in what the engine measures (a slow pair, wrong data).

``fleet_of`` copies one such document into many nodes as a fleet leaves them: a host name, GPU UUIDs
and a written time of each node's own, every measured figure within +-2 % of what the node measured."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import engine_double
from emulated import make_host
from pytest_gputopo.probe.recorded import resolve

MACHINE_FAULTS = {  # what a node's hardware has, by the profile it serves: (fault, the finding's name)
    "link down": "nvlink[GPU4]",
    "P2P refused": "p2p_status[GPU0-GPU1]",
    "x8": "pcie[GPU2]",
}
HOST_FAULTS = {  # what the node's CUDA driver does: (Host.cuda's arguments, the finding's name)
    "lost GPU": ({"unlisted": [3]}, "cuda"),  # NVML lists GPU3, CUDA does not enumerate it
}
ENGINE_FAULTS = {  # what a node measures: (plan arguments, the finding's name)
    "slow pair": ({"slow": {"p2p-0-1": 150.0}}, "p2p_bw[GPU0->GPU1]"),  # under its floor: a fault
    # above its floor (0.84 of the typical figure), 14 % under its peers
    "slower pair": ({"slow": {"p2p-0-1": 0.86}}, "GPU0->GPU1 copy, P2P"),
    "wrong data": ({"wrong": ("p2p-1-0",)}, "p2p_bw[GPU1->GPU0]"),
}
FAULTS = tuple(MACHINE_FAULTS) + tuple(HOST_FAULTS) + tuple(ENGINE_FAULTS)


def faulty_profile(machine: str, fault: str, folder: Path) -> Path:
    """The bundled ``machine`` with ``fault`` in its hardware, as a profile file the host serves."""
    doc = json.loads(Path(resolve(machine)).read_text())
    topo = doc["topology"]
    if fault == "link down":
        topo["gpus"][4]["nvlinks"][0]["active"] = False
    elif fault == "P2P refused":
        link = next(ln for ln in topo["links"] if (ln["a"], ln["b"]) == (0, 1))
        link["p2p"].update(read="TNS", write="TNS")
    elif fault == "x8":
        topo["gpus"][2]["pcie_width_current"] = 8
    else:
        raise ValueError(fault)
    path = folder / f"{machine}-{fault.replace(' ', '-')}.json"
    path.write_text(json.dumps(doc))
    return path


def node_env(libs: Path, folder: Path, machine: str, fault: str | None = None, *, engine_of: str = "") -> dict:
    """The environment of a process on the emulated host serving ``machine`` (a bundled name), a
    healthy node or one with ``fault`` (of ``FAULTS``), its benchmarks giving ``engine_of``'s figures
    (``engine_double.FIGURES``; default: the machine's): this process's own, laid over."""
    folder.mkdir(parents=True)
    served: str = machine
    if fault in MACHINE_FAULTS:
        served = str(faulty_profile(machine, fault, folder))
    arguments = ENGINE_FAULTS[fault][0] if fault in ENGINE_FAULTS else {}
    host, env = make_host(folder / "host", libs, served)
    if fault == "P2P refused":  # where NVML refuses P2P, so does CUDA (cuDeviceCanAccessPeer)
        host.cuda(nopeer=[(0, 1)])
    if fault in HOST_FAULTS:
        host.cuda(**HOST_FAULTS[fault][0])
    env["PYTEST_GPUTOPO_TEST_FAULTS"] = engine_double.plan(engine_of or machine, **arguments)
    unset = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "RANK", "WORLD_SIZE", "SLURM_PROCID", "PYTEST_ADDOPTS")
    return {**{k: v for k, v in os.environ.items() if k not in unset}, **env}


def python(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m ARGS`` (``pytest_gputopo.cli ...``, ``pytest ...``) as a user runs it, its output kept."""
    return subprocess.run([sys.executable, "-m", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def full_check(libs: Path, folder: Path, machine: str, fault: str | None = None, *, engine_of: str = "") -> dict:
    """The document ``gputopo check --level full --json`` writes on that host (``node_env``)."""
    env = node_env(libs, folder, machine, fault, engine_of=engine_of)
    out = folder / "check.json"
    done = python("pytest_gputopo.cli", "check", "--level", "full", "--json", str(out), env=env, cwd=folder)
    if done.returncode not in (0, 1) or not out.exists():
        said = done.stdout[-3000:] + done.stderr[-2000:]
        raise RuntimeError(f"gputopo check on {machine} ({fault or 'healthy'}): exit {done.returncode}\n{said}")
    return json.loads(out.read_text())


def uuids_of(doc: dict) -> list[str]:
    return [g["uuid"] for g in doc["topology"]["gpus"]]


def as_node(doc: dict, name: str, index: int, *, written: str = "2026-12-01T10:00:00+00:00") -> dict:
    """``doc`` as node ``name`` wrote it: its host name, GPU UUIDs of its own (everywhere the document
    names one), its written time, its measured figures within +-2 % (seeded by ``index``)."""
    rng = random.Random(index)
    text = json.dumps(doc)
    for gpu, uuid in enumerate(uuids_of(doc)):
        text = text.replace(uuid, f"GPU-{index:08x}-0000-4000-8000-{gpu:012x}")
    node = json.loads(text)
    node["topology"]["hostname"] = name
    node["written"] = written
    for m in node["measurements"]:
        if m.get("origin") == "measured" and isinstance(m.get("gbps"), (int, float)):
            m["gbps"] *= rng.uniform(0.98, 1.02)
    return node


def write_fleet(folder: Path, nodes: dict[str, dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, doc in nodes.items():
        (folder / f"{name}.json").write_text(json.dumps(doc))
    return folder


def fleet(folder: Path, *extra: str) -> tuple[int, dict, str]:
    """``gputopo fleet FOLDER --json``: (exit status, its JSON document, what it printed)."""
    out = folder.parent / f"{folder.name}-fleet.json"
    done = python("pytest_gputopo.cli", "fleet", str(folder), "--json", str(out), *extra)
    return done.returncode, json.loads(out.read_text()) if out.exists() else {}, done.stdout + done.stderr
