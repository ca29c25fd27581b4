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
    .venv/bin/python tools/perf/bench_fleet.py --bounds                   # one document at the bounds
    .venv/bin/python tools/perf/bench_fleet.py --against /tmp/before      # and another tree's, on the same fleets
    (git archive REV | tar -x -C /tmp/before: the code of REV, e.g. f0b0cc3, before issue 30's reader)

Prints, per fleet size: the documents' size, the wall and CPU time and peak memory (max RSS) of ``gputopo
fleet DIR --html --json`` (a fresh process; the CPU time is what the wall time is on a quiet machine), the
HTML's size, whether every injected fault was named with its reason and nothing else; the memory one node
keeps once read (tracemalloc of ``read_nodes`` over 1,000 documents, in-process; its peak counts the 16 MiB
``runtime.files.read_text`` asks for each document, of which the pages written are the document's); then
the false-positive rate over many noisy healthy fleets (in-process, ``core.fleet.judge``).

``--bounds``: the wall time and peak memory (a fresh process each) of reading one document of each shape
near the bounds of ``core.limits`` (``MAX_DOCUMENT_BYTES``, ``_VALUES``, ``_CONTAINERS``): the largest real
one (a full check of ``hgx-h100`` whose every figure took the harness's 1,000 samples), 16 MiB of figures,
the worst shape under every bound, and 16 MiB of ``{},`` (refused before it is parsed).
"""

from __future__ import annotations

import json
import os
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


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.iterdir()) / 1e6


# What the nodes keep once read, by tracemalloc, in a fresh process of the tree on its PYTHONPATH (the
# reader before issue 30 was cli.fleet.read_nodes, giving (nodes, unread)).
_KEPT = """import gc, sys, tracemalloc
try:
    from pytest_gputopo.cli.fleet_documents import read_nodes
except ImportError:
    from pytest_gputopo.cli.fleet import read_nodes
gc.collect()
tracemalloc.start()
read = read_nodes([sys.argv[1]])
gc.collect()
kept, peak = tracemalloc.get_traced_memory()
nodes = read.nodes if hasattr(read, "nodes") else read[0]
print(len(nodes), kept, peak)
"""


def _env(tree: str | None) -> dict | None:
    """The environment of a child of ``tree`` (its package first on the path; the child runs in a folder
    of no package, as ``python -c`` puts its own folder first)."""
    return None if tree is None else dict(os.environ, PYTHONPATH=tree)


def node_memory(full: bool, n: int = 1000, against: str | None = None) -> str:
    """What ``n`` nodes keep once read (the nodes the judge gets), per node: tracemalloc."""
    with tempfile.TemporaryDirectory() as tmp:
        write_fleet(Path(tmp), n, full=full)
        out = []
        for tree in [None, against] if against else [None]:
            done = subprocess.run(
                [sys.executable, "-c", _KEPT, tmp], capture_output=True, text=True, env=_env(tree), cwd=tmp
            )
            read, kept, peak = map(int, done.stdout.split())
            assert read == n, done.stderr[-2000:]
            out.append(
                f"{'' if tree is None else 'against ' + tree + ': '}{kept / n / 1024:.1f} KB kept per node "
                f"({kept / 2**20:.1f} MiB), peak while reading {peak / 2**20:.1f} MiB"
            )
    return f"{n} nodes read (tracemalloc): " + "; ".join(out)


# The peak RSS of this process's own memory: VmHWM, which starts again at exec (ru_maxrss does not: Linux
# keeps the RSS the forked parent had, so a child of a large parent would report the parent's).
_PEAK_KB = 'int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])'
# gputopo, and its own peak RSS on stderr (RUSAGE_CHILDREN would give the largest of every child so far)
_OWN_PEAK = (
    "import sys\nfrom pytest_gputopo.cli import main\ntry:\n    code = main(sys.argv[1:])\n"
    f"finally:\n    sys.stderr.write(f'\\nMAXRSS_KB {{{_PEAK_KB}}}')\n"
    "sys.exit(code)"
)


def run_fleet(folder: Path, tree: str | None = None) -> tuple[float, float, float, int, dict, int]:
    """(wall s, CPU s, peak RSS MB, the HTML's size, the JSON document, exit status) of one ``gputopo
    fleet`` run: the CPU time says what the wall time would be on a quiet machine."""
    out = folder.parent / "out"
    out.mkdir(exist_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _OWN_PEAK,
            "fleet",
            str(folder),
            "--html",
            str(out / "fleet.html"),
            "--json",
            str(out / "fleet.json"),
        ],
        capture_output=True,
        text=True,
        env=_env(tree),
        cwd=out,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    peak_mb = float(done.stderr.rsplit("MAXRSS_KB ", 1)[-1]) / 1024
    if done.returncode not in (0, 1):
        raise SystemExit(f"gputopo fleet failed ({done.returncode}):\n{done.stderr[-2000:]}")
    document = json.loads((out / "fleet.json").read_text())
    return wall, cpu, peak_mb, (out / "fleet.html").stat().st_size, document, done.returncode


def accuracy(doc: dict) -> str:
    found = {
        n["name"]: {f["fact"] for f in n["findings"]} | {f.get("column") for f in n["findings"]}
        for g in doc["groups"]
        for n in g["nodes"]
        if n["findings"]
    }
    want = {f"node{i:05d}": fact for i, (_, fact) in FAULTS.items()}
    missed = [f"{node} ({fact})" for node, fact in want.items() if fact not in found.get(node, set())]
    extra = sorted(set(found) - set(want))
    return (
        f"{len(want) - len(missed)} of {len(want)} faults named with the right fact"
        + (f"; missed {missed}" if missed else "")
        + f"; {len(extra)} other nodes named"
    )


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
    return (
        f"{named} of {total} healthy nodes named, {splits} group splits, over {fleets} noisy fleets of 5 to 200 nodes"
    )


_READ_ONE = (
    "import sys, time\nfrom pytest_gputopo.cli.fleet_documents import read_nodes\n"
    "start = time.perf_counter()\nread = read_nodes(sys.argv[1:])\n"
    f"print(f'{{time.perf_counter() - start:.2f}} s, peak {{{_PEAK_KB} / 1024:.0f}} MB; '\n"
    "      + (f'not read: {read.unread[0][1][:90]}' if read.unread else f'{len(read.nodes)} node read'))"
)


def bounds() -> None:
    """One document at a time, each near a bound, read in a fresh process (RSS of an empty read: about 22 MB)."""
    import fleet_docs
    from pytest_gputopo.core import limits

    random.seed(1)
    with tempfile.TemporaryDirectory() as tmp:
        shapes = {}
        for samples in (1000, 4000):
            fleet_docs.SAMPLES = samples
            write_fleet(Path(tmp), 1, faults=False, full=True, prefix=f"s{samples}-")
            shapes[f"a full check, {samples:,} samples per figure"] = Path(tmp, f"s{samples}-00000.json")
        fleet_docs.SAMPLES = 20
        base = json.loads(shapes["a full check, 1,000 samples per figure"].read_text())
        text = json.dumps(dict(base, checks="@", measurements=base["measurements"][:5]))
        values = limits.MAX_DOCUMENT_VALUES - text.count(",") - 1000
        width = (limits.MAX_DOCUMENT_BYTES - len(text) - 1000) // values - 3  # distinct strings fill 16 MiB
        worst = "[" + ",".join(f'"{i:0{width}d}"' for i in range(values)) + "]"
        shapes[f"{values:,} distinct strings (every bound nearly reached)"] = Path(tmp, "worst.json")
        Path(tmp, "worst.json").write_text(text.replace('"@"', worst))
        tiny = "[" + ",".join(["{}"] * ((limits.MAX_DOCUMENT_BYTES - len(text)) // 3)) + "]"
        shapes["16 MiB of {}, (refused)"] = Path(tmp, "tiny.json")
        Path(tmp, "tiny.json").write_text(text.replace('"@"', tiny))
        for what, path in shapes.items():
            done = subprocess.run([sys.executable, "-c", _READ_ONE, str(path)], capture_output=True, text=True)
            print(f"  {what} ({path.stat().st_size / 1e6:.1f} MB): {done.stdout.strip() or done.stderr[-500:]}")


def main(sizes: list[int], full: bool = True, against: str | None = None) -> None:
    random.seed(1)
    what = "full check reports" if full else "light check reports"
    print(f"simulated fleets (hgx-h100 nodes, {what}, ±5 % noise), timed on this machine")
    print("  " + node_memory(full, against=against))
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp, "docs")
            folder.mkdir()
            write_fleet(folder, n, full=full)
            size = folder_mb(folder)
            wall, cpu, peak, html, doc, code = run_fleet(folder)
            print(
                f"  {n} nodes ({size:.0f} MB of documents): {wall:.1f} s ({cpu:.1f} s CPU), peak {peak:.0f} MB "
                f"({peak * 1024 / n:.1f} KB per node), HTML {html / 1e6:.2f} MB, exit {code}; {accuracy(doc)}"
            )
            if against:
                wall, cpu, peak, html, doc, code = run_fleet(folder, against)
                print(
                    f"    the same against {against}: {wall:.1f} s ({cpu:.1f} s CPU), peak {peak:.0f} MB "
                    f"({peak * 1024 / n:.1f} KB per node), exit {code}"
                )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "docs")
        folder.mkdir()
        write_fleet(folder, 100, shared_fault=True, full=full)
        *_, doc, code = run_fleet(folder)
        splits = [f["says"][:120] for g in doc["groups"] for f in g["group_findings"] if f["kind"] == "split"]
        named_40 = sum(
            1 for g in doc["groups"] for n in g["nodes"] if any(f["fact"] == "GPU4 NVLinks up" for f in n["findings"])
        )
        print(
            f"  100 nodes, 40 % sharing a lost NVLink (and node 7's): exit {code}; split findings {len(splits)} "
            f"({splits[:1]}); nodes named for it (a node's own fault, whatever share has it): {named_40}"
        )
    print("  " + false_positives())


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--bounds" in args:
        raise SystemExit(bounds())
    against = args[args.index("--against") + 1] if "--against" in args else None
    sizes = [int(a) for a in args if a.isdigit()]
    main(sizes or [1000, 10000], full="--light" not in args, against=against)
