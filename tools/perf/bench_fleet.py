"""The fleet view's scale and accuracy, on fleets synthesised from the bundled machines (simulated nodes,
not real ones: label the figures so).

Each node is a check report (the document ``gputopo check --json`` writes) of a bundled machine with its
own host name, and measured P2P, host-to-device and all-reduce figures drawn around fixed values with
±5 % uniform noise. Faults injected: one pair at SYS, one GPU at x8, one NVLink down, one node 25 % slow on
P2P, one driver skew; and a fleet where 40 % of nodes share one fault (a lost NVLink).

    .venv/bin/python tools/perf/bench_fleet.py [nodes ...]     # default: 1000 10000

Prints, per fleet size: the wall time and peak memory of ``gputopo fleet DIR --html --json`` (a fresh
process), the HTML's size, whether every injected fault was named with its reason and nothing else; then
the false-positive rate over many noisy healthy fleets (in-process, ``core.fleet.judge``).
"""

from __future__ import annotations

import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from fleet_docs import FAULTS, measurements, write_fleet  # noqa: E402

from pytest_gputopo.core import fleet, keys  # noqa: E402
from pytest_gputopo.core.fleet_facts import node_of  # noqa: E402
from pytest_gputopo.core.schema import to_dict  # noqa: E402
from pytest_gputopo.probe import probe_recorded  # noqa: E402

def run_fleet(folder: Path) -> tuple[float, float, int, dict, int]:
    out = folder.parent / "out"
    out.mkdir(exist_ok=True)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest_gputopo.cli", "fleet", str(folder), "--html",
                           str(out / "fleet.html"), "--json", str(out / "fleet.json")], capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if done.returncode not in (0, 1):
        raise SystemExit(f"gputopo fleet failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall, peak_mb, (out / "fleet.html").stat().st_size, json.loads((out / "fleet.json").read_text()), done.returncode


def accuracy(doc: dict) -> str:
    found = {n["name"]: {f["fact"] for f in n["findings"]} for g in doc["groups"] for n in g["nodes"] if n["findings"]}
    want = {f"node{i:05d}": fact for i, (_, fact) in FAULTS.items()}
    missed = [f"{node} ({fact})" for node, fact in want.items() if fact not in found.get(node, set())]
    extra = sorted(set(found) - set(want))
    return (f"{len(want) - len(missed)} of {len(want)} faults named with the right fact"
            + (f"; missed {missed}" if missed else "") + f"; {len(extra)} other nodes named")


def false_positives(fleets: int = 300) -> str:
    base = probe_recorded("hgx-h100")
    named = total = splits = 0
    for _ in range(fleets):
        n = random.choice([5, 10, 50, 200])
        nodes = []
        for i in range(n):
            topo = to_dict(base)
            figures = [(keys.from_list(m["key"]), m["gbps"], "measured") for m in measurements(topo, 1.0)]
            nodes.append(node_of(base, name=f"n{i}", path="-", figures=figures))
        judged = fleet.judge(nodes)
        named, total, splits = named + len(judged.named), total + n, splits + len(judged.splits)
    return f"{named} of {total} healthy nodes named, {splits} group splits, over {fleets} noisy fleets of 5 to 200 nodes"


def main(sizes: list[int]) -> None:
    random.seed(1)
    print("simulated fleets (hgx-h100 nodes, ±5 % noise), timed on this machine")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp, "docs")
            folder.mkdir()
            write_fleet(folder, n)
            wall, peak, html, doc, code = run_fleet(folder)
            print(f"  {n} nodes: {wall:.1f} s, peak {peak:.0f} MB, HTML {html / 1e6:.2f} MB, exit {code}; {accuracy(doc)}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "docs")
        folder.mkdir()
        write_fleet(folder, 100, shared_fault=True)
        _, _, _, doc, code = run_fleet(folder)
        splits = [f["says"][:120] for g in doc["groups"] for f in g["group_findings"] if f["kind"] == "split"]
        named_40 = sum(1 for g in doc["groups"] for n in g["nodes"]
                       if any(f["fact"] == "GPU4 NVLinks up" for f in n["findings"]))
        print(f"  100 nodes, 40 % sharing a lost NVLink: exit {code}; split findings {len(splits)} "
              f"({splits[:1]}); nodes named for it alone: {named_40}")
    print("  " + false_positives())


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1000, 10000])
