"""Fleets of simulated nodes, as documents on disk: each node a check report (what ``gputopo check --json``
writes) of a bundled machine with its own host name, its own GPU UUIDs and measured figures drawn around
fixed values with ±5 % uniform noise, some with a fault injected. Used by tests/test_fleet.py and
tools/perf/bench_fleet.py.

``full=True`` writes what ``gputopo check --level full --json`` writes on a node: the real document of
the bundled machine (its checks, NCCL's view, settings, software), every measurement of it measured
(noise around the recorded figure, with a harness's detail: the samples, their interval), so that the
fleet reads documents of a real node's size."""

from __future__ import annotations

import copy
import functools
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import engine_double
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
    out = [
        {
            "key": ["p2p", a, b],
            "what": f"GPU{a}->GPU{b} copy, P2P",
            "gbps": noisy(BASE["p2p"] * slow_p2p),
            "origin": "measured",
        }
        for a in range(n)
        for b in range(a + 1, n)
    ]
    out += [
        {
            "key": ["h2d", g, True],
            "what": f"GPU{g} host->device copy, pinned",
            "gbps": noisy(BASE["h2d"]),
            "origin": "measured",
        }
        for g in range(n)
    ]
    return out + [
        {
            "key": ["allreduce", n, 2**30],
            "what": f"all-reduce busbw, {n} ranks, 1 GiB",
            "gbps": noisy(BASE["allreduce"]),
            "origin": "measured",
        }
    ]


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


def uuid_of(node: int, gpu: int, prefix: str = "node") -> str:
    """A GPU UUID of its own for GPU ``gpu`` of simulated node ``node`` (a node is its GPUs)."""
    tag = sum(map(ord, prefix)) & 0xFFFF
    return f"GPU-{node:08x}-{tag:04x}-4000-8000-{gpu:012x}"


@functools.cache
def full_check(machine: str) -> str:
    """The document ``gputopo check --machine MACHINE --level full --json`` writes, as its text."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "check.json")
        check = ["check", "--machine", machine, "--level", "full", "--json", out]
        done = subprocess.run(
            [sys.executable, "-m", "pytest_gputopo.cli", *check], capture_output=True, text=True, cwd=tmp, timeout=300
        )
        if done.returncode not in (0, 1):
            raise RuntimeError(
                f"gputopo check --machine {machine} --level full: {done.returncode}\n{done.stdout[-2000:]}"
            )
        return Path(out).read_text()


SAMPLES = 20  # samples per measured figure (the harness takes 5 to 1,000: a quiet node stops early)


def _measured(m: dict, slow_p2p: float) -> dict:
    """A recorded measurement of the full check made measured, as the harness writes one: around its recorded
    figure, or where none is published, 85 % of what the check expects (above the plugin's floor)."""
    kind = m["key"][0]
    if kind == "p2p_staged":  # no expectation of its own: the host path, as engine_double derives it
        return _as_measured(m, noisy(engine_double.FIGURES["hgx-h100"]["p2p_staged"]))
    gbps = noisy((m["gbps"] or 0.85 * m["expected"]["gbps"]) * (slow_p2p if kind == "p2p" else 1.0))
    return dict(_as_measured(m, gbps), state="met")


def _as_measured(m: dict, gbps: float) -> dict:
    size = 2**28
    samples = [size / (gbps * 1e9) * random.uniform(0.99, 1.01) for _ in range(SAMPLES)]
    detail = {
        "name": m["what"],
        "size_bytes": size,
        "bytes_per_iteration": size,
        "iterations_per_sample": 4,
        "samples_s": samples,
        "median_s": sorted(samples)[SAMPLES // 2],
        "median_ci95_s": [min(samples), max(samples)],
        "min_s": min(samples),
        "max_s": max(samples),
        "spread": max(samples) / min(samples),
        "target_ci": 1.1,
        "stable": True,
        "bw_gbps": gbps,
        "bw_ci95_gbps": [gbps * 0.99, gbps * 1.01],
        "verified": True,
        "error": None,
        "warmup_iterations": 5,
        "wall_s": 0.5,
        "verify_s": 0.01,
    }
    if m["key"][0] == "allreduce":
        detail["backend"] = "nccl"
    return dict(m, gbps=gbps, origin="measured", source=None, error=None, detail=detail)


def _passed(check: dict) -> dict:
    """A check the recorded machine skipped for want of a published figure, as a measured node passes it."""
    if check.get("outcome") != "skipped":
        return check
    what = check["message"].split(": no figure", 1)[0]
    return dict(check, outcome="passed", message=f"{what}: measured, above its floor")


def write_fleet(
    folder: Path,
    n: int,
    shared_fault: bool = False,
    machine: str = "hgx-h100",
    prefix: str = "node",
    faults: bool = True,
    full: bool = False,
) -> None:
    base = to_dict(probe_recorded(machine))
    template = json.loads(full_check(machine)) if full else None
    for i in range(n):
        topo = copy.deepcopy(base)
        topo["hostname"] = f"{prefix}{i:05d}"
        for gpu in topo["gpus"]:
            gpu["uuid"] = uuid_of(i, gpu["index"], prefix)
        fault = FAULTS.get(i, (None,))[0] if faults else None
        if shared_fault and i % 5 < 2:  # 40 % of the nodes
            fault = "an NVLink of GPU4 down"
        if fault:
            inject(topo, fault)
        slow = 0.75 if fault == "25 % slow on P2P" else 1.0
        if template is not None:
            doc = dict(
                template,
                source="NVML",
                recorded=False,
                topology=topo,
                measurements=[_measured(m, slow) for m in template["measurements"]],
                checks=[_passed(c) for c in template["checks"]],
            )
        else:
            doc = {
                "schema": 1,
                "source": "NVML",
                "recorded": False,
                "topology": topo,
                "complete": True,
                "measurements": measurements(topo, slow),
            }
        (folder / f"{prefix}{i:05d}.json").write_text(json.dumps(doc))
