"""``gputopo fleet``: nodes judged by the peers of their GPU model. Every injected fault is named with its
reason, noise never names a node, a group split on a fact is the group's finding (neither side is called
healthy), what cannot be judged says why, and every string from a document is escaped where it lands."""

from __future__ import annotations

import json
import os
import random
import re
import sys

import pytest

from conftest import browser_render, gputopo_process, needs_browser, run_cli
from fleet_docs import FAULTS, measurements, write_fleet
from pytest_gputopo.core import fleet, keys
from pytest_gputopo.core.fleet_facts import node_of
from pytest_gputopo.core.schema import to_dict
from pytest_gputopo.probe import probe_recorded


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    return folder


def fleet_json(capsys, *args):
    code, out, err = run_cli(capsys, "fleet", *args, "--json", args[0].parent / "fleet.json")
    return code, out, err, json.loads((args[0].parent / "fleet.json").read_text())


def named(doc: dict) -> dict:
    return {n["name"]: [f["fact"] for f in n["findings"]] for g in doc["groups"] for n in g["nodes"] if n["findings"]}


def test_every_injected_fault_is_named_with_its_reason_and_no_other_node(docs, capsys):
    random.seed(7)
    write_fleet(docs, 30)
    write_fleet(docs, 6, machine="dgx-a100", prefix="a100-", faults=False)
    code, out, err, doc = fleet_json(capsys, docs)
    assert code == 1, err
    # 25 % slow on every pair is under the floor the threshold rule sets: a fault of the machine, one line
    expected = {f"node{i:05d}": [fact] for i, (_, fact) in FAULTS.items()} | {"node00009": ["the machine"]}
    assert named(doc) == expected
    lines = out.splitlines()
    assert (
        "  NAMED node00005: its own fault: GPU2 PCIe link trained down: x8 of x16 (its maximum width; Gen5 of Gen5)"
        in lines
    )
    (slow,) = [line for line in lines if line.startswith("  NAMED node00009: ")]
    assert slow.startswith("  NAMED node00009: its own fault: the machine: all 28 pairs of the 8 GPUs fail their floor")
    assert lines[-1] == "gputopo fleet: 36 nodes in 2 groups: 5 nodes named (3 for faults of their own)"
    assert [g["kind"] for g in doc["groups"]] == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]  # as read


def test_noise_never_names_a_node():
    random.seed(11)
    base = probe_recorded("dgx-a100")
    for n in (5, 8, 40):
        for _ in range(15):
            figures = [
                [(keys.from_list(m["key"]), m["gbps"], "measured") for m in measurements(to_dict(base), 1.0)]
                for _ in range(n)
            ]
            judged = fleet.judge([node_of(base, name=f"n{i}", path="-", figures=f) for i, f in enumerate(figures)])
            assert judged.healthy, [f.says for g in judged.groups for f in g.findings]


def test_a_group_split_on_a_fact_is_its_own_finding_and_neither_side_is_called_healthy(docs, capsys):
    """A fact with no healthy value of its own (a driver version) held 12 : 8 splits the group: its sides
    are JSON lists, the minority's nodes are shown as disagreeing, and no node is called healthy."""
    write_fleet(docs, 20, faults=False)
    for i in range(20):
        if i % 5 < 2:  # 40 % of the nodes
            doc = json.loads((docs / f"node{i:05d}.json").read_text())
            doc["topology"]["driver_version"] = "570.86.15"
            (docs / f"node{i:05d}.json").write_text(json.dumps(doc))
    code, out, err, doc = fleet_json(capsys, docs)
    assert code == 1 and named(doc) == {}
    (split,) = doc["groups"][0]["group_findings"]
    assert split["node"] is None and split["fact"] == "driver" and split["kind"] == "split"
    minority = [f"node{i:05d}" for i in range(20) if i % 5 < 2]
    assert [side["nodes"] for side in split["sides"]] == [[f"node{i:05d}" for i in range(20) if i % 5 >= 2], minority]
    assert split["sides"][1]["values"] == {"driver": "570.86.15"} and split["disagreeing"] == minority
    assert {n["name"] for n in doc["groups"][0]["nodes"] if n["disagrees"] == ["driver"]} == set(minority)
    assert "  SPLIT driver: the group is split" in out.splitlines()[1]
    assert "no node differs" not in out and "none has a fault" not in out


def test_a_node_that_lost_a_gpu_is_named_for_it_and_its_pairs_are_not_compared():
    base = probe_recorded("hgx-h100")
    nodes = [node_of(base, name=f"n{i}", path="-") for i in range(5)]
    nodes.append(node_of(base.restrict(range(7)), name="short", path="-"))
    group = fleet.judge(nodes).groups[0]
    assert [f.says for f in group.of("short")] == ["GPUs: 7, where 5 of the 6 nodes that say have 8"]
    assert "its GPUs and pairs: 7 GPUs where its peers have 8" in group.unjudged_of(nodes[-1])[0]


def test_too_few_peers_say_so_and_name_nobody(docs, capsys):
    """Two nodes are too few to judge by their peers: not "no node differs" and exit 0, but a status of
    its own (5) and a headline that says what was not judged and why."""
    write_fleet(docs, 2, faults=False)
    code, out, err, doc = fleet_json(capsys, docs)
    assert code == 5 and doc["healthy"] is False and doc["named"] == []
    assert doc["not_compared"] == ["node00000", "node00001"]
    lines = out.splitlines()
    assert (
        "  not judged: 2 nodes of this kind: too few to judge by its peers (3 needed); each node's own faults "
        "are still named"
    ) in lines
    assert lines[-1] == (
        "gputopo fleet: 2 nodes in 1 group: 2 nodes not judged by its peers (too few of its GPU "
        "model: NVIDIA H100 80GB HBM3: 2 nodes; 3 needed); no node has a fault of its own"
    )
    assert "no node differs" not in out


def test_a_document_not_read_is_named_and_the_others_are_still_judged(docs, capsys):
    write_fleet(docs, 5, faults=False)
    (docs / "broken.json").write_text("{not json")
    (docs / "other.json").write_text(json.dumps({"schema": 1, "hello": 1}))
    twice = json.loads((docs / "node00000.json").read_text())
    (docs / "zz-again.json").write_text(json.dumps(twice))
    code, out, err, doc = fleet_json(capsys, docs)
    assert code == 2
    reasons = {d["document"].rsplit("/", 1)[-1]: d["why"] for d in doc["not_read"]}
    assert reasons["broken.json"].startswith("1:2: not valid JSON")
    assert reasons["other.json"].startswith("not a gputopo document: a run's (--gputopo-json), a check's")
    # a second document of a node is no error: one is judged, the other superseded (here neither says
    # when it was written, so the node says which was judged and why)
    assert set(reasons) == {"broken.json", "other.json"}
    (superseded,) = doc["superseded"]
    assert superseded["document"].endswith("node00000.json") and superseded["by"].endswith("zz-again.json")
    (again,) = [n for n in doc["groups"][0]["nodes"] if n["name"] == "node00000"]
    assert any("none newest by its written time" in why for why in again["not_judged"])
    assert out.splitlines()[-1] == (
        "gputopo fleet: 5 nodes in 1 group: every node judged by its peers; none has a "
        "fault of its own or differs from them; 2 documents not read; 1 document "
        "superseded by another of its node"
    )


@pytest.mark.slow
def test_documents_of_this_projects_own_runs_mix_in(docs, tmp_path):
    """Real check reports, as gputopo check writes them on bundled machines (recorded facts, no figures)."""
    for name in ("a", "b", "c"):
        done = gputopo_process(
            "check", "--machine", "dgx-a100", "--json", docs / f"run-{name}.json", cwd=tmp_path, timeout=120
        )
        assert done.returncode == 0, done.stdout[-2000:]
    write_fleet(docs, 5, machine="dgx-a100", prefix="sim-", faults=False)
    done = gputopo_process("fleet", docs, "--json", tmp_path / "f.json", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (group,) = json.loads((tmp_path / "f.json").read_text())["groups"]
    by_name = {n["name"]: n for n in group["nodes"]}
    assert len(by_name) == 8 and "run-a" in by_name
    written = json.loads((docs / "run-a.json").read_text())
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", written["written"])
    assert written["settings"]["check"] == "quick"
    assert by_name["run-a"]["written"] == written["written"]  # a node's document says when it was taken
    assert by_name["run-a"]["not_judged"] == [
        "facts from recorded:dgx-a100 (a recorded machine, not this host), not NVML on the node"
    ]


HOSTILE = "evil|<script>alert(1)</script>\n::error::`x`"


def test_a_hostile_host_name_is_escaped_in_every_medium(docs, tmp_path, capsys):
    write_fleet(docs, 4, faults=False)
    doc = json.loads((docs / "node00001.json").read_text())
    doc["topology"]["hostname"] = HOSTILE
    doc["topology"]["driver_version"] = "1.0<b>"
    (docs / "node00001.json").write_text(json.dumps(doc))
    code, out, err = run_cli(capsys, "fleet", docs, "--html", tmp_path / "f.html", "--markdown", tmp_path / "f.md")
    assert code == 1
    assert "NAMED evil|<script>alert(1)</script>\\n::error::`x`: unlike its peers: driver: 1.0<b>" in out
    page = (tmp_path / "f.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page and "<b>" not in page
    md = (tmp_path / "f.md").read_text()
    assert "<script>" not in md and "evil&#124;" in md and "\\`x\\`" in md


@needs_browser
@pytest.mark.slow
def test_the_page_opens_in_a_real_browser_with_every_node(docs, tmp_path, capsys):
    random.seed(3)
    write_fleet(docs, 40)
    code, out, err = run_cli(capsys, "fleet", docs, "--html", tmp_path / "f.html")
    png, dom, log = browser_render(tmp_path / "f.html", tmp_path)
    assert png > 10_000 and "Uncaught" not in log, log[-2000:]
    assert dom.count("<tr>") == 41  # the head and one row per node
    assert dom.index("node00003") < dom.index("node00000")  # the named nodes first


@pytest.mark.slow
def test_the_documented_example(tmp_path):
    """docs/fleet.md's example, run as a reader pastes it, prints what the doc shows and exits 1."""
    from doc_examples import assert_shows, blocks, run_shell

    (example,) = [b for b in blocks() if b.path == "docs/fleet.md" and "--machine hgx-h100-pcie-x8" in b.text]
    (shown,) = [b for b in blocks() if b.path == "docs/fleet.md" and b.text.startswith("NVIDIA H100")]
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}  # gputopo of this venv
    steps = run_shell(example, tmp_path, env)
    assert [s.status for s in steps] == [0, 0, 0, 0, 1, 1, 1], [s.printed for s in steps]
    assert_shows(shown.lines, steps[-1].printed)
    assert (tmp_path / "fleet.html").exists()


def test_a_run_across_nodes_gives_each_node_and_not_its_figures(docs, capsys):
    write_fleet(docs, 3, faults=False)
    run = json.loads((docs / "node00000.json").read_text())
    (docs / "node00000.json").unlink()
    other = json.loads((docs / "node00001.json").read_text())["topology"]
    a, b = dict(run["topology"], hostname="rank-a"), dict(other, hostname="rank-b", driver_version="1.2.3")
    b["gpus"] = [dict(g, uuid=g["uuid"].replace("GPU-", "GPU-b")) for g in b["gpus"]]  # rank-b's own GPUs
    run["nodes"] = [
        {"where": "rank 0", "differs": False, "topology": a},
        {"where": "rank 8", "differs": True, "topology": b},
    ]
    (docs / "run.json").write_text(json.dumps(run))
    code, out, err, doc = fleet_json(capsys, docs)
    nodes = {n["name"]: n for n in doc["groups"][0]["nodes"]}
    assert set(nodes) == {"node00001", "node00002", "rank-a", "rank-b"}
    assert nodes["rank-b"]["findings"][0]["fact"] == "driver" and code == 1
    assert "one of the 2 nodes of a run: its figures are the run's, not compared" in nodes["rank-a"]["not_judged"]


def test_a_gpu_at_rest_on_gen1_is_not_named_but_one_trained_down_is():
    """An idle GPU drops its link to Gen1 to save power: its generation now is no fault, its width is."""
    import dataclasses

    base = probe_recorded("hgx-h100")

    def at(gen: int, width: int):
        gpu = dataclasses.replace(base.gpus[3], pcie_gen_current=gen, pcie_width_current=width)
        return dataclasses.replace(base, gpus=base.gpus[:3] + (gpu,) + base.gpus[4:])

    nodes = [node_of(base, name=f"n{i}", path="-") for i in range(4)]
    nodes += [node_of(at(1, 16), name="resting", path="-"), node_of(at(5, 4), name="x4", path="-")]
    judged = fleet.judge(nodes)
    assert judged.named == ["x4"]


def test_a_node_with_another_torch_is_named_for_it(docs, capsys):
    write_fleet(docs, 4, faults=False)
    for i, torch in enumerate(["2.13.0", "2.13.0", "2.13.0", "2.12.1"]):
        doc = json.loads((docs / f"node{i:05d}.json").read_text())
        doc["software"] = {"python": "3.12.3", "pytest-gputopo": "0.1.0", "torch": torch}
        (docs / f"node{i:05d}.json").write_text(json.dumps(doc))
    code, out, err, doc = fleet_json(capsys, docs)
    assert named(doc) == {"node00003": ["torch"]} and code == 1


def test_hosts_of_one_name_with_other_gpus_are_other_nodes(docs, capsys):
    """VMs and containers often share a host name (three real H200 VMs here were all "vm"): a node is its
    GPUs' UUIDs, so they are compared as three nodes, each told apart by a digest of its GPUs (none keeps
    the bare name, whichever was read first)."""
    write_fleet(docs, 3, faults=False)
    for i in range(3):
        doc = json.loads((docs / f"node{i:05d}.json").read_text())
        doc["topology"]["hostname"] = "vm"
        for g in doc["topology"]["gpus"]:
            g["uuid"] = f"GPU-{i}{g['index']}000000-0000-0000-0000-000000000000"
        (docs / f"node{i:05d}.json").write_text(json.dumps(doc))
    code, out, err, doc = fleet_json(capsys, docs)
    names = [n["name"] for n in doc["groups"][0]["nodes"]]
    assert len(set(names)) == 3 and all(re.fullmatch(r"vm \[[0-9a-f]{8}\]", n) for n in names), names
    assert doc["not_read"] == [] and code == 0


def test_an_all_reduce_on_gloo_is_not_compared_with_nccls(docs, capsys):
    """A node whose check ran the all-reduce on gloo (CPUs) is not named slow beside NCCL's GPUs: the
    backend its document records is part of what the figure is compared within."""
    write_fleet(docs, 6, faults=False)
    for i in range(6):
        doc = json.loads((docs / f"node{i:05d}.json").read_text())
        for m in doc["measurements"]:
            if m["key"][0] == "allreduce":
                m["detail"] = {"backend": "gloo" if i == 5 else "nccl"}
                m["gbps"] = 2.0 if i == 5 else m["gbps"]
        (docs / f"node{i:05d}.json").write_text(json.dumps(doc))
    code, out, err, doc = fleet_json(capsys, docs)
    assert code == 0 and named(doc) == {}
    assert "  not judged: all-reduce busbw, 8 ranks, 1 GiB, gloo: figures from 1 node; 5 needed" in out.splitlines()
