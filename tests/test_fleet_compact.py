"""The fleet view kept small and quick (issue 45): what a node keeps (its facts as shared names and values,
its figures as 8 bytes each, its GPUs' UUIDs as one string), what nodes of one topology share while a
fleet is read (``Shapes``), the class medians found without a float object per figure, and the JSON
written node by node -- each the same, value for value, as the plain form it replaces."""

from __future__ import annotations

import copy
import json
import random
import statistics
import struct
from array import array
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from fleet_docs import FAULTS, inject, measurements, uuid_of, write_fleet
from pytest_gputopo.cli.fleet_documents import read_nodes
from pytest_gputopo.core import keys
from pytest_gputopo.core.fleet import _judged_figures, _median, judge
from pytest_gputopo.core.fleet_facts import Facts, Figures, Node, Shapes, Uuids
from pytest_gputopo.core.fleet_roster import roster
from pytest_gputopo.core.schema import from_dict, to_dict
from pytest_gputopo.probe import probe_recorded
from pytest_gputopo.render.fleet import document, document_text
from pytest_gputopo.render.fleet_reader import nodes_of

NOW = 1_800_000_000.0


def same_float(a: float, b: float) -> bool:
    return struct.pack("<d", a) == struct.pack("<d", b)  # NaN included, and -0.0 told from 0.0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from([0.0, -0.0, 1.0, 2.5, 360.0, float("inf"), float("nan")]),
            st.floats(allow_nan=True, allow_infinity=True),
        ),
        min_size=1,
        max_size=300,
    ),
    st.integers(1, 64),
)
def test_the_median_is_statistics_median_exactly(values, sorted_below):
    assert same_float(_median(array("d", values), sorted_below), statistics.median(values))


@pytest.mark.parametrize("n", [4096, 4097, 56_000, 56_001])
def test_the_median_of_a_fleets_class_is_statistics_median_exactly(n):
    rng = random.Random(n)
    for values in (
        [rng.uniform(342, 378) for _ in range(n)],  # a class's noisy figures
        [float(rng.randint(0, 3)) for _ in range(n)],  # few values, many ties
        sorted(rng.gauss(360, 40) for _ in range(n)),  # in order: the sample's every step
        [360.0] * (n // 2) + [rng.uniform(0, 1e6) for _ in range(n - n // 2)],  # half one value
    ):
        assert same_float(_median(array("d", values)), statistics.median(values))


def test_a_nodes_facts_read_as_the_dict_they_replace():
    facts = {"GPUs": "8", "GPU0 PCIe max": "Gen5 x16", "NICs": None}
    kept = Facts(facts)
    assert kept == facts and list(kept) == list(facts) and list(kept.items()) == list(facts.items())
    assert kept["GPU0 PCIe max"] == "Gen5 x16" and kept.get("NICs", "?") is None and kept.get("none", "?") == "?"
    assert "NICs" in kept and "none" not in kept and len(kept) == 3
    with pytest.raises(KeyError):
        kept["none"]
    again = Facts(dict(facts))
    assert again._index is kept._index and again._values is kept._values  # one copy for nodes alike


def test_a_nodes_figures_and_uuids_read_as_the_tuples_they_replace():
    layout = [("GPU0->GPU1 copy, P2P", "p2p copy over NV18"), ("GPU0 host->device copy, pinned", "h2d on Gen5")]
    figures = Figures(layout, [355.25, 53.0])
    assert [(f.what, f.cls, f.gbps) for f in figures] == [(*layout[0], 355.25), (*layout[1], 53.0)]
    assert figures == Figures(list(layout), [355.25, 53.0]) and figures != Figures(layout, [355.25, 53.5])
    assert figures.classes() == {"p2p copy over NV18": (0,), "h2d on Gen5": (1,)}
    with pytest.raises(ValueError):
        Figures(layout, [1.0])
    for given_ in (("GPU-a", "GPU-b"), ("GPU-a", None), ("GPU-a\nGPU-b", "c"), ("",), ("", "x"), ()):
        uuids = Uuids(given_)
        assert tuple(uuids) == given_ and uuids == given_ and len(uuids) == len(given_) and list(uuids) == list(given_)
        assert uuids[:1] == given_[:1] and hash(uuids) == hash(given_)


def test_a_node_of_the_classes_it_is_judged_on_keeps_their_first_order():
    """A figure under its floor is not compared; the classes come in the order of the first figure that is
    (as the figures were gathered one by one before)."""
    layout = [("a0", "A"), ("b0", "B"), ("a1", "A"), ("c0", "C")]
    node = Node("n", "-", "H100", {"GPUs": "8"}, figures=Figures(layout, [1.0, 2.0, 3.0, 4.0]))
    for explained in (frozenset(), frozenset({"a0"}), frozenset({"a0", "a1"}), frozenset({"b0", "c0"})):
        before: dict[str, list[int]] = {}
        for i, (what, cls) in enumerate(layout):
            if what not in explained:
                before.setdefault(cls, []).append(i)
        assert _judged_figures(node, explained) == {cls: tuple(at) for cls, at in before.items()}


def _topologies() -> list[dict]:
    """hgx-h100 as nodes differ: healthy ones, each injected fault, and one fact each changed."""
    base = to_dict(probe_recorded("hgx-h100"))
    out = []
    for i in range(14):
        topo = copy.deepcopy(base)
        topo["hostname"] = f"n{i}"
        for gpu in topo["gpus"]:
            gpu["uuid"] = uuid_of(i, gpu["index"])
        fault = FAULTS.get(i, (None,))[0]
        if fault:
            inject(topo, fault)
        if i == 12:
            topo["gpus"][3]["numa_node"] = 1 - (topo["gpus"][3]["numa_node"] or 0)
        if i == 13:
            topo["gpus"][6]["nvlinks"][2]["version"] = "3.0"
        out.append(topo)
    return out


def test_nodes_read_with_their_topologies_shapes_are_the_nodes_read_alone():
    """Whatever order the topologies come in, and however few shapes are kept: the same facts, figures,
    classes and faults, node for node."""
    random.seed(3)
    docs = []
    for i, topo in enumerate(_topologies()):
        slow = 0.7 if i == 9 else 1.0
        figures = [
            dict(m, gbps=m["gbps"] * (0.5 if i == 10 and m["key"][0] == "h2d" else 1)) for m in measurements(topo, slow)
        ]
        docs.append({"schema": 1, "source": "NVML", "topology": topo, "measurements": figures, "written": "2026-12-01"})
    for most in (1, 2, 16):
        order = docs * 2
        random.Random(most).shuffle(order)
        shapes = Shapes(most)
        for doc in order:
            assert nodes_of(doc, "d.json", shapes) == nodes_of(doc, "d.json")


def test_a_shape_is_shared_only_by_topologies_equal_but_for_their_names_and_uuids():
    topologies = [from_dict(t, "topology") for t in _topologies()]
    shapes = Shapes(len(topologies))
    first = shapes.of(topologies[0])
    assert shapes.of(topologies[1]) is first and shapes.of(topologies[2]) is first  # other names and UUIDs
    for i in (3, 5, 7, 11, 12, 13):  # a pair at SYS, x8, an NVLink down, another driver, NUMA, NVLink version
        assert shapes.of(topologies[i]) is not first, i
    assert shapes.of(topologies[9]) is first  # slow P2P: a figure, not the topology


def _varied_folder(tmp_path):
    random.seed(5)
    folder = tmp_path / "docs"
    folder.mkdir()
    write_fleet(folder, 14, full=False)
    write_fleet(folder, 2, machine="dgx-a100", prefix="a100-", faults=False)
    old = json.loads((folder / "node00001.json").read_text())
    (folder / "node00001-old.json").write_text(json.dumps(dict(old, written="2020-01-01T00:00:00Z")))
    return folder


def _varied_fleet(folder):
    """A fleet with every part of the document: groups judged and not, faults, splits, a superseded
    document, documents not read and set aside, and names only JSON's escaping writes."""
    nodes, superseded = roster(read_nodes([str(folder)]).nodes, NOW)
    odd = ['quote " back \\ slash', "line\nbreak\ttab", "é ünïcødé \u2028 \x00", "</script><b>"]
    nodes = [replace(n, name=odd[i]) if i < len(odd) else n for i, n in enumerate(nodes)]
    unread = [("bad.json", "not valid JSON: \u00e9 \n")]
    return judge(nodes, tuple(superseded), (("out.json", "its own output"),)), unread


def test_the_json_written_node_by_node_is_json_dumps_of_the_document(tmp_path):
    fleet, unread = _varied_fleet(_varied_folder(tmp_path))
    assert fleet.named and fleet.superseded and any(not g.compared for g in fleet.groups)
    assert document_text(fleet, unread) == json.dumps(document(fleet, unread), indent=1) + "\n"
    empty = judge([])
    assert document_text(empty, []) == json.dumps(document(empty, []), indent=1) + "\n"


def test_a_fleet_read_with_shapes_judges_as_one_read_without(tmp_path, monkeypatch):
    folder = _varied_folder(tmp_path)
    fleet, unread = _varied_fleet(folder)
    import pytest_gputopo.cli.fleet_documents as documents

    monkeypatch.setattr(documents, "Shapes", lambda: None)
    alone, _ = _varied_fleet(folder)
    assert document(fleet, unread) == document(alone, unread)


def test_figures_of_a_key_no_node_writes_twice_are_read_once(tmp_path):
    """A document that lists a figure twice keeps both, as it did (a shape's figure is looked up by key)."""
    topo = to_dict(probe_recorded("hgx-h100"))
    m = {"key": ["p2p", 0, 1], "gbps": 350.0, "origin": "measured"}
    doc = {"schema": 1, "source": "NVML", "topology": topo, "measurements": [m, dict(m, gbps=351.0)]}
    shapes = Shapes()
    (node,) = nodes_of(doc, "x.json", shapes)
    assert [f.gbps for f in node.figures] == [350.0, 351.0] and node == nodes_of(doc, "x.json")[0]
    assert keys.from_list(["p2p", 0, 1]) in shapes.of(from_dict(topo, "topology")).figures


def test_judged_nodes_let_their_figures_go_keeping_what_the_page_draws(tmp_path):
    folder = _varied_folder(tmp_path)
    nodes, _ = roster(read_nodes([str(folder)]).nodes, NOW)
    fleet = judge(nodes)
    (group,) = [g for g in fleet.groups if g.lowest]
    assert all(not n.figures for g in fleet.groups for n in g.nodes)
    read = {n.name: n for n in nodes}
    for cls, lowest in group.lowest.items():
        assert cls in group.medians and any(f.column == cls for f in group.findings)
        for name, (gbps, count) in lowest.items():
            figures = [f.gbps for f in read[name].figures if f.cls == cls]
            assert (gbps, count) == (min(figures), len(figures))
        assert set(lowest) == {n.name for n in nodes if any(f.cls == cls for f in n.figures)}
