"""The fleet view's scale and accuracy, on fleets synthesised from the bundled machines (simulated nodes,
not real ones: label the figures so).

Each node is a full check report of the bundled ``hgx-h100``: what ``gputopo check --level full --json``
writes (its checks, NCCL's view, settings and software; about 0.2 MB), with its own host name and GPU
UUIDs, and every measurement of it measured (P2P, bidirectional and staged copies per pair, host<->device
copies per GPU, one all-reduce, each with 20 samples), drawn around fixed values with ±5 % uniform noise
(``--light``: the smaller check reports of before, 37 figures and no checks). Faults injected: one pair at
SYS, one GPU at x8, one NVLink down, one node 25 % slow on P2P, one driver skew; and a fleet where 40 % of
nodes share one fault (a lost NVLink).

    .venv/bin/python tools/perf/bench_fleet.py [--light] [nodes ...]     # default: 1000 10000

Prints, per fleet size: the documents' size, the wall time and peak memory (max RSS) of ``gputopo fleet
DIR --html --json`` (a fresh process), the HTML's size, whether every injected fault was named with its
reason and nothing else; the memory one node keeps once read (tracemalloc of ``read_nodes`` over 1,000
documents, in-process); then the false-positive rate over many noisy healthy fleets (in-process,
``core.fleet.judge``).
"""

from __future__ import annotations

import gc
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from fleet_docs import FAULTS, measurements, write_fleet  # noqa: E402

from pytest_gputopo.cli.fleet_documents import read_nodes  # noqa: E402
from pytest_gputopo.core import fleet, keys  # noqa: E402
from pytest_gputopo.core.fleet_facts import node_of  # noqa: E402
from pytest_gputopo.core.schema import to_dict  # noqa: E402
from pytest_gputopo.probe import probe_recorded  # noqa: E402

def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.iterdir()) / 1e6


def node_memory(full: bool, n: int = 1000) -> str:
    """What ``n`` nodes keep once read (the nodes the judge gets), per node: tracemalloc, in-process."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_fleet(folder, n, full=full)
        gc.collect()
        tracemalloc.start()
        read = read_nodes([str(folder)])
        nodes, unread = read.nodes, read.unread
        gc.collect()
        kept, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert len(nodes) == n and not unread, unread[:3]
    return (f"{n} nodes read: {kept / n / 1024:.1f} KB kept per node ({kept / 2**20:.1f} MiB), "
            f"peak while reading {peak / 2**20:.1f} MiB (tracemalloc)")


# gputopo, and its own peak RSS on stderr (RUSAGE_CHILDREN would give the largest of every child so far)
_OWN_PEAK = ("import resource, sys\nfrom pytest_gputopo.cli import main\ntry:\n    code = main(sys.argv[1:])\n"
             "finally:\n    sys.stderr.write(f'\\nMAXRSS_KB {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}')\n"
             "sys.exit(code)")


def run_fleet(folder: Path) -> tuple[float, float, int, dict, int]:
    out = folder.parent / "out"
    out.mkdir(exist_ok=True)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _OWN_PEAK, "fleet", str(folder), "--html",
                           str(out / "fleet.html"), "--json", str(out / "fleet.json")], capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak_mb = float(done.stderr.rsplit("MAXRSS_KB ", 1)[-1]) / 1024
    if done.returncode not in (0, 1):
        raise SystemExit(f"gputopo fleet failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall, peak_mb, (out / "fleet.html").stat().st_size, json.loads((out / "fleet.json").read_text()), done.returncode


def accuracy(doc: dict) -> str:
    found = {n["name"]: {f["fact"] for f in n["findings"]} | {f.get("column") for f in n["findings"]}
             for g in doc["groups"] for n in g["nodes"] if n["findings"]}
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


def main(sizes: list[int], full: bool = True) -> None:
    random.seed(1)
    what = "full check reports" if full else "light check reports"
    print(f"simulated fleets (hgx-h100 nodes, {what}, ±5 % noise), timed on this machine")
    print("  " + node_memory(full))
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp, "docs")
            folder.mkdir()
            write_fleet(folder, n, full=full)
            size = folder_mb(folder)
            wall, peak, html, doc, code = run_fleet(folder)
            print(f"  {n} nodes ({size:.0f} MB of documents): {wall:.1f} s, peak {peak:.0f} MB "
                  f"({peak * 1024 / n:.1f} KB per node), HTML {html / 1e6:.2f} MB, exit {code}; {accuracy(doc)}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "docs")
        folder.mkdir()
        write_fleet(folder, 100, shared_fault=True, full=full)
        _, _, _, doc, code = run_fleet(folder)
        splits = [f["says"][:120] for g in doc["groups"] for f in g["group_findings"] if f["kind"] == "split"]
        named_40 = sum(1 for g in doc["groups"] for n in g["nodes"]
                       if any(f["fact"] == "GPU4 NVLinks up" for f in n["findings"]))
        print(f"  100 nodes, 40 % sharing a lost NVLink (and node 7's): exit {code}; split findings {len(splits)} "
              f"({splits[:1]}); nodes named for it (a node's own fault, whatever share has it): {named_40}")
    print("  " + false_positives())


if __name__ == "__main__":
    args = sys.argv[1:]
    main([int(a) for a in args if a != "--light"] or [1000, 10000], full="--light" not in args)
