"""Which documents are which node (``core.fleet_roster.roster``), a pure rule tested with tables (issue 39
item 2): the fleet trusted any stamp and any shared GPU. A node whose clock was once a year ahead left
a document dated 2027 that superseded its fresh degraded one (exit 0 for every later collection); one
planted document dated 2099 with a node's UUIDs did the same; a GPU moved between two nodes (an RMA
swap), or one document holding a UUID of each node, merged them into one node and hid the degraded
one's fault."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from pytest_gputopo.core.faults import Fault
from pytest_gputopo.core.fleet_facts import Node
from pytest_gputopo.core.fleet_roster import FUTURE_SKEW_S, _stamp, roster

NOW = _stamp("2026-12-06T12:00:00Z")
DEGRADED = Fault("nvlink[GPU4]", "GPU4: NVLinks [0] are down (17/18 up)", ("GPU4",), "NVLinks down")


def gpus(node: str, *which: int, count: int = 8) -> tuple[str, ...]:
    return tuple(f"GPU-{node}-{g}" for g in (which or range(count)))


def doc(path: str, uuids: tuple[str, ...], when: str | None, name: str = "", degraded: bool = False) -> Node:
    return Node(
        name=name or path.split("-")[0],
        path=path,
        kind="H100",
        facts={"GPUs": str(len(uuids))},
        when=when,
        uuids=uuids,
        faults=(DEGRADED,) if degraded else (),
    )


def judged(nodes: list[Node], now: float = NOW) -> dict[str, tuple[str, list[str]]]:
    """Each judged node's document and the names of its faults, by node name; and what was superseded."""
    kept, _ = roster(nodes, now)
    return {n.name: (n.path, [f.name for f in n.faults]) for n in kept}


FRESH, OLD, YEAR_AHEAD = "2026-12-06T11:00:00Z", "2026-12-01T11:00:00Z", "2027-12-06T11:00:00Z"


@pytest.mark.parametrize(
    ("documents", "expected"),
    [
        pytest.param(
            [doc("a-ahead", gpus("a"), YEAR_AHEAD), doc("a-fresh", gpus("a"), FRESH, degraded=True)],
            {"a": ("a-fresh", ["nvlink[GPU4]", "stamp"])},
            id="a document a year ahead never supersedes the fresh degraded one, and the node is named",
        ),
        pytest.param(
            [doc("a-fresh", gpus("a"), FRESH, degraded=True), doc("a-planted", gpus("a"), "2099-01-01T00:00:00Z")],
            {"a": ("a-fresh", ["nvlink[GPU4]", "stamp"])},
            id="a planted document dated 2099 with the node's UUIDs",
        ),
        pytest.param(
            [doc("a-ahead", gpus("a"), YEAR_AHEAD)],
            {"a": ("a-ahead", ["stamp"])},
            id="a node's only document stamped ahead is judged, and named for its stamp",
        ),
        pytest.param(
            [doc("a-old", gpus("a"), OLD), doc("a-skewed", gpus("a"), "2026-12-06T12:04:00Z", degraded=True)],
            {"a": ("a-skewed", ["nvlink[GPU4]"])},
            id="a clock a few minutes ahead is within the skew",
        ),
        pytest.param(
            [doc("a-old", gpus("a"), OLD), doc("a-new", gpus("a", 0, 1, 2, 3, 4, 5, 6), FRESH)],
            {"a": ("a-new", ["gpus"])},
            id="a GPU lost: one node, named for the GPU no longer seen",
        ),
        pytest.param(
            [
                doc("a-old", gpus("a"), OLD),
                doc("b-old", gpus("b"), OLD, degraded=True),
                doc("b-new", (*gpus("b", 0, 1, 2, 3, 4, 5, 6), "GPU-a-7"), FRESH, name="b-new"),
            ],
            {"a": ("a-old", []), "b": ("b-old", ["nvlink[GPU4]"]), "b-new": ("b-new", ["identity"])},
            id="an RMA swap: a's GPU in b's new document; neither node merged, the document apart",
        ),
        pytest.param(
            [
                doc("a-old", gpus("a"), OLD),
                doc("a-new", (*gpus("a", 0, 1, 2, 3, 4, 5, 6), "GPU-c-0"), FRESH),
                doc("b-old", gpus("b"), OLD),
                doc("b-new", (*gpus("b", 0, 1, 2, 3, 4, 5, 6), "GPU-a-7"), FRESH, degraded=True),
            ],
            {"a": ("a-new", []), "b": ("b-new", ["nvlink[GPU4]"])},
            id="the swap once both nodes have written again: each its own newest, no conflict",
        ),
        pytest.param(
            [
                doc("a-fresh", gpus("a"), FRESH),
                doc("b-fresh", gpus("b"), FRESH, degraded=True),
                doc("x-planted", ("GPU-a-0", "GPU-b-0"), "2099-01-01T00:00:00Z"),
            ],
            {"a": ("a-fresh", []), "b": ("b-fresh", ["nvlink[GPU4]"]), "x": ("x-planted", ["stamp", "identity"])},
            id="one document holding a UUID of each node supersedes neither and is a finding of its own",
        ),
    ],
)
def test_which_document_is_judged_for_which_node(documents, expected):
    assert judged(documents) == expected


def test_a_document_taken_apart_names_the_gpus_it_shares_and_where():
    nodes = [doc("a-fresh", gpus("a"), FRESH), doc("x-planted", ("GPU-a-0", "GPU-b-0"), FRESH, name="x")]
    kept, superseded = roster(nodes, NOW)
    (x,) = [n for n in kept if n.name == "x"]
    (line,) = [f.line for f in x.faults if f.name == "identity"]
    assert "GPU-a-0 in a-fresh (a, written 2026-12-06T11:00:00Z)" in line and "supersedes neither" in line
    assert superseded == []


def test_a_document_stamped_ahead_is_listed_as_superseded_for_what_it_is():
    nodes = [doc("a-ahead", gpus("a"), YEAR_AHEAD), doc("a-fresh", gpus("a"), FRESH)]
    kept, (old,) = roster(nodes, NOW)
    assert old.path == "a-ahead" and old.why.startswith("a document stamped later than this collection of a")
    (stamp,) = [f.line for f in kept[0].faults]
    assert stamp.startswith("a-ahead (written 2027-12-06T11:00:00Z): stamped later than this collection")


@pytest.mark.parametrize("ahead_s", [FUTURE_SKEW_S - 1, FUTURE_SKEW_S + 1])
def test_the_skew_is_the_bound(ahead_s):
    from datetime import UTC, datetime

    when = datetime.fromtimestamp(NOW + ahead_s, UTC).isoformat()
    result = judged([doc("a-old", gpus("a"), OLD), doc("a-new", gpus("a"), when)])
    assert result["a"][0] == ("a-new" if ahead_s < FUTURE_SKEW_S else "a-old")


def test_the_order_documents_are_read_in_does_not_change_the_verdict():
    nodes = [
        doc("a-old", gpus("a"), OLD),
        doc("b-old", gpus("b"), OLD, degraded=True),
        doc("b-new", (*gpus("b", 0, 1, 2, 3, 4, 5, 6), "GPU-a-7"), FRESH),
        doc("x-planted", ("GPU-a-0", "GPU-b-0"), "2099-01-01T00:00:00Z"),
    ]
    first = judged(nodes)
    assert judged(list(reversed(nodes))) == first
    assert judged([replace(n) for n in nodes[1:] + nodes[:1]]) == first


@pytest.mark.parametrize(
    ("documents", "because"),
    [
        ([doc("a-fresh", gpus("a"), FRESH)], "its only document"),
        (
            [doc("a-old", gpus("a"), OLD), doc("a-fresh", gpus("a"), FRESH)],
            "the newest by its written time of 2 documents of this node",
        ),
        (
            [doc("a-ahead", gpus("a"), YEAR_AHEAD), doc("a-fresh", gpus("a"), FRESH)],
            "the newest by its written time of 2 documents of this node, 1 stamped later than this "
            "collection set aside",
        ),
        (
            [doc("a-fresh", gpus("a"), FRESH), doc("x-planted", ("GPU-a-0", "GPU-b-0"), OLD, name="x")],
            "judged apart: its GPUs are also those of a's a-fresh",
        ),
    ],
)
def test_each_node_says_why_its_document_is_the_one_judged(documents, because):
    kept, _ = roster(documents, NOW)
    assert kept[-1].judged_because == because


_STAMPS = (None, OLD, FRESH, YEAR_AHEAD, "not a time")


@st.composite
def _documents(draw):
    """Documents of a few nodes' GPUs: whole sets, a GPU lost or moved, planted mixtures, odd stamps."""
    count = draw(st.integers(1, 8))
    out = []
    for k in range(count):
        uuids = draw(
            st.lists(
                st.sampled_from([f"GPU-{n}-{g}" for n in "abc" for g in range(4)]), min_size=1, max_size=5, unique=True
            )
        )
        out.append(doc(f"d{k}", tuple(uuids), draw(st.sampled_from(_STAMPS)), name=draw(st.sampled_from("abx"))))
    return out


@given(_documents(), st.randoms(use_true_random=False))
def test_no_document_is_lost_and_the_order_read_changes_nothing(documents, rng):
    """Every document is judged or superseded, once; read in any order, each is judged or superseded
    the same, with the same findings."""

    def outcome(nodes):
        kept, superseded = roster(nodes, NOW)
        judged = {n.path: sorted(f.name for f in n.faults) for n in kept}
        return judged, {s.path: s.by for s in superseded}

    judged, superseded = outcome(documents)
    assert sorted([*judged, *superseded]) == sorted(d.path for d in documents)
    shuffled = list(documents)
    rng.shuffle(shuffled)
    assert outcome(shuffled) == (judged, superseded)
