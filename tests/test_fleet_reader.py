"""The fleet's reading of one of gputopo's own documents (``render/fleet_reader``), called on a parsed
document with no file behind it: which kind of document it is (a run's or a check's report, a recorded
profile, the fleet view's own), the nodes it gives, and each refusal's words, which are the ones
``gputopo fleet`` prints after a document's path (``tests/test_fleet_documents.py`` reads the files)."""

from __future__ import annotations

import builtins
import copy
import json
import os
import re

import pytest

from fleet_docs import measurements
from pytest_gputopo.cli.fleet_documents import read_nodes
from pytest_gputopo.core import schema
from pytest_gputopo.core.fleet_facts import UNKNOWN_MODEL
from pytest_gputopo.probe import probe_recorded
from pytest_gputopo.probe.recorded import profile_dict
from pytest_gputopo.render import fleet_reader
from pytest_gputopo.render.fleet_reader import FLEET_DOCUMENT, NOT_READ, SetAside, nodes_of, parsed

TOPOLOGY = schema.to_dict(probe_recorded("hgx-h100"))
PROFILE = profile_dict("lab-box", probe_recorded("dgx-a100"))


def report(**changes) -> dict:
    """A check report of one node, as ``gputopo check --json`` writes the parts the fleet reads."""
    topo = dict(copy.deepcopy(TOPOLOGY), hostname="node7")
    doc = {"schema": 1, "source": "NVML", "topology": topo, "measurements": measurements(topo, 1.0)}
    return dict(doc, **changes)


@pytest.fixture
def no_files(monkeypatch):
    """Opening any file fails the test: a parsed document is read without the file system."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"a file was opened: {args[:1]}")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(os, "open", refuse)


def test_a_report_is_read_into_its_node_with_its_figures_and_failed_checks(no_files):
    doc = report(
        checks=[
            {"check": "nvlink[GPU3]", "outcome": "failed", "message": "GPU3: an NVLink is down"},
            {"check": "p2p", "outcome": "passed"},
            {"check": 7, "outcome": "failed"},  # not an item gputopo writes: not read as one
        ],
        software={"torch": "2.9.0"},
        written="2026-11-29T05:00:00Z",
    )
    [node] = nodes_of(doc, "/data/node7.json")
    assert (node.name, node.path, node.when, node.notes) == ("node7", "/data/node7.json", doc["written"], ())
    assert len(node.figures) == len(doc["measurements"]) == 28 + 8 + 1
    assert node.facts["torch"] == "2.9.0" and node.uuids == tuple(g["uuid"] for g in TOPOLOGY["gpus"])
    assert [f.name for f in node.faults] == ["nvlink[GPU3]"]


def test_a_node_without_a_host_name_is_named_after_its_document(no_files):
    doc = report(source="nvidia-smi")
    del doc["topology"]["hostname"]
    [node] = nodes_of(doc, "/data/rack4-node2.json")
    assert node.name == "rack4-node2" and node.uuids == ()  # a recording's UUIDs say no node
    assert node.notes == ("facts from nvidia-smi, not NVML on the node",)


def test_a_recorded_profile_is_a_node_without_figures(no_files):
    [node] = nodes_of(PROFILE, "lab.json")
    assert node.name == "lab-box" and not node.figures and node.uuids == ()
    assert node.notes == ("a recorded profile: no measured figures",)
    assert node.kind != UNKNOWN_MODEL


def test_a_run_across_nodes_gives_each_node_and_compares_none_of_its_figures(no_files):
    other = dict(copy.deepcopy(TOPOLOGY), hostname="node8")
    doc = report(nodes=[{"topology": TOPOLOGY}, {"topology": other}])
    nodes = nodes_of(doc, "run.json")
    assert TOPOLOGY["hostname"] is None  # a node of no host name is its document's and its place in the run
    assert [n.name for n in nodes] == ["run.json#0", "node8"]
    assert all(
        not n.figures and n.notes == ("one of the 2 nodes of a run: its figures are the run's, not compared",)
        for n in nodes
    )


def test_the_fleet_views_own_document_is_set_aside_by_its_kind_or_its_older_shape(no_files):
    for doc in ({"schema": 1, "kind": "gputopo fleet", "groups": []}, {"schema": 1, "groups": [], "not_read": []}):
        with pytest.raises(SetAside, match=re.escape(FLEET_DOCUMENT)):
            nodes_of(doc, "fleet.json")
    assert fleet_reader.starts_as_fleet_document('{\n "schema": 1,\n "kind": "gputopo fleet",')
    assert fleet_reader.starts_as_fleet_document('{"schema": 1, "healthy": false, "named": [')
    assert not fleet_reader.starts_as_fleet_document('{"schema": 1, "source": "NVML", "topology": {')


TOO_MANY = {"gpus": [{}] * 65}
REFUSED = [
    ([], "not a gputopo document (a JSON object)"),
    (
        {"x": 1},
        "not a gputopo document: a run's (--gputopo-json), a check's (gputopo check --json) or a recorded "
        "profile's (gputopo record) has schema 1 and a topology",
    ),
    (
        report(schema=2),
        "a gputopo document of schema '2': this gputopo reads schema 1 (write it again with this version of "
        "gputopo, or read it with the version that wrote it)",
    ),
    (report(topology=TOO_MANY), "topology.gpus: 65 GPUs, more than the 64 gputopo fleet compares in one node"),
    (report(measurements={}), "measurements: not a list"),
    (report(measurements=[1]), "measurements[0]: not an object"),
    (
        report(measurements=[{"key": ["p2p", 0, 1], "gbps": -1}]),
        "measurements[0].gbps: expected a number or null (from 0 to 1e+06), got -1",
    ),
    (report(measurements=[{"key": "p2p", "gbps": 1.0}]), "measurements[0]: not a measurement gputopo writes"),
    (report(nodes=[{"topology": TOPOLOGY}, 5]), "nodes[1].topology: expected an object, got NoneType"),
    (
        report(nodes=[{"topology": TOPOLOGY}, {"topology": TOO_MANY}]),
        "nodes[1].topology.gpus: 65 GPUs, more than the 64 gputopo fleet compares in one node",
    ),
]


@pytest.mark.parametrize("doc, why", REFUSED, ids=range(len(REFUSED)))
def test_a_document_not_as_gputopo_writes_it_is_refused_in_the_words_gputopo_fleet_prints(doc, why, tmp_path):
    with pytest.raises(NOT_READ) as refused:
        nodes_of(doc, "doc.json")
    assert str(refused.value) == why
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    assert read_nodes([str(path)]).unread == [(str(path), why)]


def test_a_text_of_more_values_than_gputopo_writes_is_refused_before_it_is_parsed():
    with pytest.raises(ValueError, match=r"^more than 1,000,000 JSON values \(about 1,100,000\)"):
        parsed("[" + "0," * 1_100_000 + "0]", "doc.json")
    assert parsed('{"schema": 1}', "doc.json") == {"schema": 1}


def test_the_file_and_the_parsed_document_give_the_same_nodes(tmp_path):
    doc = report(checks=[{"check": "pcie[GPU2]", "outcome": "error", "message": "x8"}])
    path = tmp_path / "node7.json"
    path.write_text(json.dumps(doc))
    assert read_nodes([str(path)]).nodes == nodes_of(doc, str(path))
