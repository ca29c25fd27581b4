"""``gputopo fleet`` as operators drain nodes by it (issue 30): a node's own fault names it whatever share of
its peers has it; a node is its GPUs; the exit status means one thing; one cause is one line in every
output; hostile names stay data. Each fleet is made of what ``gputopo check --machine <bundled> --json``
writes, edited as real nodes differ (their own host names and GPU UUIDs, NVML's facts, a written time)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import browser_render, needs_browser, run_cli

_CHECKS: dict[str, dict] = {}


def check_doc(machine: str, tmp_path_factory) -> dict:
    """What ``gputopo check --machine MACHINE --json`` writes (made once per machine per session)."""
    if machine not in _CHECKS:
        out = tmp_path_factory.mktemp("check") / f"{machine}.json"
        done = subprocess.run(
            [sys.executable, "-m", "pytest_gputopo.cli", "check", "--machine", machine, "--json", str(out)],
            capture_output=True,
            text=True,
            cwd=out.parent,
            timeout=300,
        )
        assert done.returncode in (0, 1), done.stdout[-2000:]
        _CHECKS[machine] = json.loads(out.read_text())
    return copy.deepcopy(_CHECKS[machine])


@pytest.fixture
def node(tmp_path_factory):
    """``node(machine, host, number, path, written=...)``: a real node's check report: the bundled
    machine's document with its own host name and GPU UUIDs (``number`` makes them), NVML's facts."""

    def make(
        machine: str, host: str, number: int, path: Path, written: str = "2026-01-10T10:00:00Z", edit=None
    ) -> dict:
        doc = check_doc(machine, tmp_path_factory)
        doc.update(source="NVML", recorded=False, written=written)
        doc["topology"]["hostname"] = host
        for gpu in doc["topology"]["gpus"]:
            gpu["uuid"] = f"GPU-{number:08x}-7a1e-4c2e-8b8f-{gpu['index']:012x}"
        if edit:
            edit(doc)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
        return doc

    return make


def fleet(capsys, folder: Path, *more):
    """``gputopo fleet FOLDER --json --markdown --html``: (status, stdout lines, JSON, Markdown, page)."""
    out = folder.parent
    code, printed, err = run_cli(
        capsys, "fleet", folder, *more, "--json", out / "f.json", "--markdown", out / "f.md", "--html", out / "f.html"
    )
    assert not err or code == 2, err
    return (
        code,
        printed.splitlines(),
        json.loads((out / "f.json").read_text()),
        (out / "f.md").read_text(),
        (out / "f.html").read_text(),
    )


def findings(doc: dict) -> dict:
    return {
        n["name"]: [(f["kind"], f["says"]) for f in n["findings"]]
        for g in doc["groups"]
        for n in g["nodes"]
        if n["findings"]
    }


# --- 1. two kinds of finding ----------------------------------------------------------------------------


def test_a_minority_of_broken_nodes_is_named_not_split(tmp_path, node, capsys):
    """5 healthy hgx-h100 and 2 that lost GPU5's NVLinks: 2 of 7 is under a quarter, and today that was a
    split with "findings 0" in green: an NVLink down is never a healthy value, so both are named."""
    docs = tmp_path / "docs"
    for i in range(5):
        node("hgx-h100", f"h{i}", i, docs / f"h{i}.json")
    for i in (5, 6):
        node("hgx-h100-nvlink-down", f"h{i}", i, docs / f"h{i}.json")
    code, lines, doc, md, page = fleet(capsys, docs)
    assert code == 1
    assert doc["named"] == ["h5", "h6"] and doc["groups"][0]["group_findings"] == []
    for name in ("h5", "h6"):
        (line,) = [ln for ln in lines if ln.startswith(f"  NAMED {name}:")]
        assert line.startswith(f"  NAMED {name}: its own fault: GPU5: NVLinks [0, 1, 2") and "(0/18 up)" in line
        (f,) = [n for n in doc["groups"][0]["nodes"] if n["name"] == name][0]["findings"]
        assert f["kind"] == "fault" and f["fact"] == "GPU5 NVLinks up"
    assert not any(ln.startswith("  SPLIT") for ln in lines)
    assert lines[-1] == "gputopo fleet: 7 nodes in 1 group: 2 nodes named (2 for faults of their own)"
    rows = re.findall(r"<tr><td[^>]*>(h\d)</td><td class=\"(\w+)\">([^<]*)</td>", page)
    assert rows[:2] == [("h5", "named", "1"), ("h6", "named", "1")]  # first, red, never "0" in green
    assert "| h5 | its own fault |" in md


def test_a_fault_every_node_shares_names_every_node(tmp_path, node, capsys):
    """Four nodes that all lost GPU5's NVLinks: no peer is healthy, and no majority makes them so."""
    docs = tmp_path / "docs"
    for i in range(4):
        node("hgx-h100-nvlink-down", f"n{i}", i, docs / f"n{i}.json")
    code, lines, doc, md, page = fleet(capsys, docs)
    assert code == 1 and doc["named"] == ["n0", "n1", "n2", "n3"] and doc["healthy"] is False
    assert all(kinds == [("fault", says)] for kinds in findings(doc).values() for (_, says) in kinds)


def test_a_failed_check_of_the_nodes_own_document_names_it(tmp_path, node, capsys):
    """A check item the node's document marks failed names the node, even where every node has it and
    the fleet sees no fact of it (here NVML's topology warning)."""
    docs = tmp_path / "docs"

    def warned(doc):
        doc["checks"] = [
            dict(c, outcome="failed", message="NVML: GPU3 lost (Xid 79)") if c["check"] == "topology" else c
            for c in doc["checks"]
        ]

    for i in range(3):
        node("hgx-h100", f"n{i}", i, docs / f"n{i}.json", edit=warned)
    code, lines, doc, md, page = fleet(capsys, docs)
    assert code == 1 and doc["named"] == ["n0", "n1", "n2"]
    assert "  NAMED n0: its own fault: check topology failed: NVML: GPU3 lost (Xid 79)" in lines


def test_a_figure_under_its_floor_is_a_fault_whatever_its_peers_measure(tmp_path, node, capsys):
    """The floor is the plugin's own threshold rule for that GPU and link (0.65 of a Gen5 x16 line rate
    for a pinned host copy): every node at 20 GB/s is named, though they agree with each other."""
    docs = tmp_path / "docs"

    def slow(doc):
        doc["measurements"] = [
            {"key": ["h2d", g, True], "what": f"GPU{g} host->device copy, pinned", "gbps": 20.0, "origin": "measured"}
            for g in range(8)
        ]

    for i in range(5):
        node("hgx-h100", f"n{i}", i, docs / f"n{i}.json", edit=slow)
    code, lines, doc, md, page = fleet(capsys, docs)
    assert code == 1 and len(doc["named"]) == 5
    (line,) = [ln for ln in lines if ln.startswith("  NAMED n0:")]
    assert line.startswith("  NAMED n0: its own fault: the machine: all 8 GPUs fail their floor")
    assert "needed 41.0 (0.65 x expected 63.0 GB/s" in json.dumps(doc)


# --- 2. a node is its GPUs ------------------------------------------------------------------------------


def test_four_vms_all_called_vm_are_four_nodes_and_the_broken_one_is_named(tmp_path, node, capsys):
    docs = tmp_path / "docs"
    for i in range(4):
        node("hgx-h100-nvlink-down" if i == 2 else "hgx-h100", "vm", i, docs / f"run{i}" / "report.json")
    code, lines, doc, md, page = fleet(capsys, docs)
    names = [n["name"] for n in doc["groups"][0]["nodes"]]
    assert code == 1 and len(set(names)) == 4 and "vm" not in names
    assert all(re.fullmatch(r"vm \[[0-9a-f]{8}\]", n) for n in names)
    (broken,) = doc["named"]
    assert broken == names[2] and doc["healthy"] is False
    assert any(ln.startswith(f"  NAMED {broken}: its own fault: GPU5: NVLinks") for ln in lines)


def test_a_planted_document_cannot_take_a_healthy_nodes_bare_name(tmp_path, node, capsys):
    """A document that gives a healthy node's host name with other GPUs is another node: both are shown
    with their GPUs' digest, whichever file is read first."""
    docs = tmp_path / "docs"
    for i in range(3):
        node("hgx-h100", f"n{i}", i, docs / f"n{i}.json")
    node("hgx-h100", "n1", 99, docs / "a-planted.json")
    code, lines, doc, md, page = fleet(capsys, docs)
    names = [n["name"] for n in doc["groups"][0]["nodes"]]
    assert "n1" not in names and sum(n.startswith("n1 [") for n in names) == 2 and code == 0


@pytest.mark.parametrize("stale_name, new_name", [("a.json", "b.json"), ("b.json", "a.json")])
def test_of_two_documents_of_one_node_the_newest_is_judged(tmp_path, node, capsys, stale_name, new_name):
    """The same GPUs in two documents: the one written last is judged, whatever the files are called;
    the older is superseded, which is no error (no exit 2)."""
    docs = tmp_path / "docs"
    for i in range(3):
        node("hgx-h100", f"n{i}", i, docs / f"n{i}.json")
    node("hgx-h100", "x", 7, docs / stale_name, written="2026-01-01T08:00:00Z")
    node("hgx-h100-nvlink-down", "x", 7, docs / new_name, written="2026-01-02T08:00:00Z")
    code, lines, doc, md, page = fleet(capsys, docs)
    assert code == 1 and doc["named"] == ["x"] and doc["not_read"] == []
    (x,) = [n for n in doc["groups"][0]["nodes"] if n["name"] == "x"]
    assert x["document"].endswith(new_name) and x["written"] == "2026-01-02T08:00:00Z"
    (old,) = doc["superseded"]
    assert old["document"].endswith(stale_name) and old["by"].endswith(new_name)
    assert any(ln.startswith(f"superseded: {docs / stale_name}: an older document of x") for ln in lines)


def test_the_same_gpus_under_another_name_are_one_node_named_for_it(tmp_path, node, capsys):
    docs = tmp_path / "docs"
    for i in range(3):
        node("hgx-h100", f"n{i}", i, docs / f"n{i}.json")
    node("hgx-h100", "gpu-17", 7, docs / "old.json", written="2026-01-01T08:00:00Z")
    node("hgx-h100", "gpu-71", 7, docs / "new.json", written="2026-01-02T08:00:00Z")
    code, lines, doc, md, page = fleet(capsys, docs)
    assert code == 1 and doc["named"] == ["gpu-71"] and len(doc["groups"][0]["nodes"]) == 4
    (f,) = findings(doc)["gpu-71"]
    assert f[0] == "identity" and "under another host name (gpu-17)" in f[1]


# --- 3. exit statuses -----------------------------------------------------------------------------------


def test_two_nodes_are_not_all_clear(tmp_path, node, capsys):
    docs = tmp_path / "docs"
    for i in range(2):
        node("hgx-h100", f"n{i}", i, docs / f"n{i}.json")
    code, lines, doc, md, page = fleet(capsys, docs)
    assert code == 5 and doc["healthy"] is False
    assert "not judged by its peers" in lines[-1] and "no node differs" not in "\n".join(lines)
    assert 'id="verdict" class="unjudged"' in page


def test_the_exit_statuses_are_in_both_helps(capsys):
    from pytest_gputopo import cli

    for argv in (["fleet", "--help"], ["--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        text = capsys.readouterr().out
        assert re.search(r"\b5\b.*too few nodes", text, re.S), argv


# --- 4. one cause, one line -----------------------------------------------------------------------------


def test_p2p_refused_on_every_pair_is_one_line_everywhere(tmp_path, node, capsys):
    docs = tmp_path / "docs"
    for i in range(3):
        node("8x-l40s", f"l{i}", i, docs / f"l{i}.json")
    node("8x-l40s-p2p-disabled", "bad", 9, docs / "bad.json")
    code, lines, doc, md, page = fleet(capsys, docs)
    assert code == 1 and doc["named"] == ["bad"]
    (line,) = [ln for ln in lines if "bad" in ln and ln.startswith("  NAMED")]
    assert line.startswith(
        "  NAMED bad: its own fault: the machine: all 28 pairs of the 8 GPUs fail P2P: "
        "refused by NVML: TNS (topology not supported: the PCIe path between them refuses "
        "peer traffic: usually ACS"
    )
    (f,) = [n for n in doc["groups"][0]["nodes"] if n["name"] == "bad"][0]["findings"]
    assert len(f["items"]) == 28 and len(f["evidence"]) == 28 and f["column"] == "P2P"
    assert sum(1 for row in md.splitlines() if row.startswith("| bad |")) == 1
    header = re.search(r"<table><tr>(.*?)</tr>", page).group(1)
    assert re.findall(r"<th>(.*?)</th>", header) == ["node", "findings", "P2P", "not judged"]


def test_a_gpu_moved_on_part_of_the_group_is_one_split_line(tmp_path, node, capsys):
    """GPU5 behind the other socket on 3 of 7 nodes: its NUMA node and its 7 pairs' link class split the
    group the same way: one SPLIT line, not eight."""
    docs = tmp_path / "docs"

    def moved(doc):
        topo = doc["topology"]
        topo["gpus"][5]["numa_node"] = 1 - topo["gpus"][5]["numa_node"]
        for link in topo["links"]:
            if 5 in (link["a"], link["b"]):
                link["pcie"] = "SYS" if link["pcie"] != "SYS" else "NODE"

    for i in range(7):
        node("8x-l40s", f"l{i}", i, docs / f"l{i}.json", edit=moved if i >= 4 else None)
    code, lines, doc, md, page = fleet(capsys, docs)
    assert code == 1 and doc["named"] == []
    (split,) = [ln for ln in lines if ln.startswith("  SPLIT")]
    assert "8 facts (GPU5 NUMA node, GPU0-GPU5 link" in split
    (finding,) = doc["groups"][0]["group_findings"]
    assert [s["nodes"] for s in finding["sides"]] == [["l0", "l1", "l2", "l3"], ["l4", "l5", "l6"]]
    assert finding["disagreeing"] == ["l4", "l5", "l6"]
    rows = dict(re.findall(r"<tr><td[^>]*>(l\d)</td><td class=\"(\w+)\">", page))
    assert rows["l4"] == "split" and "ok" not in rows.values()  # no node of a split group is green


@needs_browser
@pytest.mark.slow
def test_the_page_of_a_node_with_every_pair_refused_fits_1400_px(tmp_path, node, capsys):
    docs = tmp_path / "docs"
    for i in range(5):
        node("8x-l40s", f"l{i}", i, docs / f"l{i}.json")
    node("8x-l40s-p2p-disabled", "bad", 9, docs / "bad.json")
    fleet(capsys, docs)
    page = tmp_path / "f.html"
    page.write_text(
        page.read_text().replace(
            "</body>", "<script>document.title = 'W' + document.documentElement.scrollWidth;</script></body>"
        )
    )
    png, dom, log = browser_render(page, tmp_path)
    width = int(re.search(r"<title>W(\d+)</title>", dom).group(1))
    assert width <= 1400, width


# --- 5. hostile names -----------------------------------------------------------------------------------


def test_no_line_of_the_output_is_a_workflow_command(tmp_path, node, capsys):
    docs = tmp_path / "docs"

    def hostile(doc):
        for gpu in doc["topology"]["gpus"]:
            gpu["name"] = "::add-mask::X"

    for i in range(3):
        node("hgx-h100", "::add-mask::host" if i == 1 else f"n{i}", i, docs / f"n{i}.json", edit=hostile)
    node("hgx-h100-nvlink-down", "::warning::y", 7, docs / "n3.json", edit=hostile)
    code, lines, doc, md, page = fleet(capsys, docs)
    assert code == 1 and lines[0].startswith("\\x3a:add-mask::X")
    assert not [ln for ln in lines if ln.lstrip().startswith("::") or "##[" in ln]


# --- 6. smaller texts -----------------------------------------------------------------------------------


def test_another_schema_version_is_said_as_such(tmp_path, node, capsys):
    docs = tmp_path / "docs"
    for i in range(3):
        node("hgx-h100", f"n{i}", i, docs / f"n{i}.json")
    node("hgx-h100", "new", 5, docs / "new.json", edit=lambda d: d.update(schema=2))
    code, lines, doc, md, page = fleet(capsys, docs)
    (unread,) = doc["not_read"]
    assert code == 2 and unread["why"].startswith("a gputopo document of schema '2': this gputopo reads schema 1")


def test_a_figure_under_its_peers_says_how_many_of_its_figures_are():
    from pytest_gputopo.core import fleet as judge, keys
    from pytest_gputopo.core.fleet_facts import node_of
    from pytest_gputopo.probe import probe_recorded

    base = probe_recorded("hgx-h100")
    pairs = [(a, b) for a in range(8) for b in range(a + 1, 8)]

    def figures(slow: set):
        return [(keys.Copy("p2p", a, b), 330.0 if (a, b) in slow else 400.0, "measured") for a, b in pairs]

    nodes = [node_of(base, name=f"n{i}", path="-", figures=figures(set())) for i in range(5)]
    nodes += [
        node_of(base, name="one", path="-", figures=figures({(0, 1)})),
        node_of(base, name="two", path="-", figures=figures({(0, 1), (2, 3)})),
    ]
    group = judge.judge(nodes).groups[0]
    assert group.of("one")[0].says.endswith("(the only one of its 28 figures of the class)")
    assert group.of("two")[0].says.endswith("(2 of its 28 figures of the class are, this the lowest)")
