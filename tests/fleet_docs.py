"""Fleets of simulated nodes, as documents on disk: each node a check report (what ``gputopo check --json``
writes) of a bundled machine with its own host name and measured figures drawn around fixed values with
±5 % uniform noise, some with a fault injected. Used by tests/test_fleet.py and tools/perf/bench_fleet.py."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

from pytest_gputopo.core.schema import to_dict
from pytest_gputopo.probe import probe_recorded

FAULTS = {  # node index -> (what is injected, the fact or figure class the finding must name)
    3: ("GPU0-GPU1 at SYS", "GPU0-GPU1 link"),
    5: ("GPU2 at x8", "GPU2 PCIe width now"),
    7: ("an NVLink of GPU4 down", "GPU4 NVLinks up"),
    9: ("25 % slow on P2P", "p2p copy over NV18"),
    11: ("driver 570.86.15", "driver"),
}
BASE = {"p2p": 360.0, "h2d": 53.0, "allreduce": 480.0}


def noisy(value: float) -> float:
    return value * random.uniform(0.95, 1.05)


def measurements(topo: dict, slow_p2p: float) -> list:
    n = len(topo["gpus"])
    out = [{"key": ["p2p", a, b], "what": f"GPU{a}->GPU{b} copy, P2P", "gbps": noisy(BASE["p2p"] * slow_p2p),
            "origin": "measured"} for a in range(n) for b in range(a + 1, n)]
    out += [{"key": ["h2d", g, True], "what": f"GPU{g} host->device copy, pinned", "gbps": noisy(BASE["h2d"]),
             "origin": "measured"} for g in range(n)]
    return out + [{"key": ["allreduce", n, 2**30], "what": f"all-reduce busbw, {n} ranks, 1 GiB",
                   "gbps": noisy(BASE["allreduce"]), "origin": "measured"}]


def inject(topo: dict, fault: str) -> None:
    if fault.endswith("at SYS"):
        link = next(ln for ln in topo["links"] if (ln["a"], ln["b"]) == (0, 1))
        link.update(nvlinks=0, pcie="SYS")
    elif fault.endswith("at x8"):
        topo["gpus"][2]["pcie_width_current"] = 8
    elif "NVLink" in fault:
        topo["gpus"][4]["nvlinks"][0]["active"] = False
    elif fault.startswith("driver"):
        topo["driver_version"] = fault.split()[1]


def write_fleet(folder: Path, n: int, shared_fault: bool = False, machine: str = "hgx-h100", prefix: str = "node",
                faults: bool = True) -> None:
    base = to_dict(probe_recorded(machine))
    for i in range(n):
        topo = copy.deepcopy(base)
        topo["hostname"] = f"{prefix}{i:05d}"
        fault = FAULTS.get(i, (None,))[0] if faults else None
        if shared_fault and i % 5 < 2:  # 40 % of the nodes
            fault = "an NVLink of GPU4 down"
        if fault:
            inject(topo, fault)
        slow = 0.75 if fault == "25 % slow on P2P" else 1.0
        doc = {"schema": 1, "source": "NVML", "recorded": False, "topology": topo, "complete": True,
               "measurements": measurements(topo, slow)}
        (folder / f"{prefix}{i:05d}.json").write_text(json.dumps(doc))
