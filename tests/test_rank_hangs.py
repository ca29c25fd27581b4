"""A stuck ``ranks(n)`` test names the rank the others wait for and the call (``core.hangs``), from each
rank's trail of torch.distributed calls (``plugin.rank_trail``): the pure rule on tables, and a corpus
of ten hang classes run for real on gloo, scored.

Behaviour the corpus rests on (installed torch 2.13, gloo): a rank waiting in a collective whose peer
never comes raises at the group's timeout (``Timed out waiting ...ms for recv operation``,
gloo/transport/tcp/unbound_buffer.cc) or when the peer's process ends (``Connection closed by peer``,
gloo/transport/tcp/pair.cc); ``new_group`` waits for every rank of the world in the store
(``_store_based_barrier``, torch/distributed/distributed_c10d.py), members or not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_gputopo.core.hangs import Call, RankEnd, culprit, innermost_frame, read_trail

WORLD = (0, 1)


def call(op, seq, left=False, group="default", members=WORLD, peer=None, shape="float32[4]"):
    return Call(op, group, members, seq, peer, shape, left)


@pytest.mark.parametrize(
    ("ends", "line"),
    [
        (  # rank 1 in user code while rank 0 waits in the third all-reduce
            [
                RankEnd(0, (call("all_reduce", 1, True), call("all_reduce", 2)), "failed", "RuntimeError: timed out"),
                RankEnd(1, (call("all_reduce", 1, True),), "running", "wait (test_x.py:7)"),
            ],
            "rank 1 never entered all_reduce #2, which rank 0 waits in; rank 1 was running outside any "
            "collective (in wait (test_x.py:7))",
        ),
        (
            [RankEnd(0, (call("barrier", 1, shape=""),), "running"), RankEnd(1, (), "passed")],
            "rank 1 never entered barrier #1, which rank 0 waits in; rank 1 had ended its body (passed)",
        ),
        (
            [RankEnd(0, (call("all_reduce", 1),), "failed", "E"), RankEnd(1, (call("broadcast", 1),), "failed", "E")],
            "mismatched collectives: rank 0 waits in all_reduce #1 and rank 1 entered broadcast #1 (collective #1 "
            "of the group must be the same call on every rank)",
        ),
        (
            [
                RankEnd(0, (call("all_reduce", 1),), "running"),
                RankEnd(1, (call("all_reduce", 1, shape="int64[8]"),), "running"),
            ],
            "mismatched shapes in all_reduce #1: rank 0 gave float32[4], rank 1 int64[8]",
        ),
        (  # the k-th send meets the k-th recv: rank 1's one recv matched the first send
            [
                RankEnd(0, (call("send", 1, True, peer=1), call("send", 2, peer=1)), "running"),
                RankEnd(1, (call("recv", 1, True, peer=0), call("barrier", 1, shape="")), "running"),
            ],
            "rank 1 never entered the recv matching rank 0's send #2 to rank 1, which rank 0 waits in; rank 1 waits "
            "in barrier #1",
        ),
        (  # a group's collectives are numbered within the group: the world's barrier is not the group's
            [
                RankEnd(0, (call("all_reduce", 1, group="3", members=(0, 2)),), "running"),
                RankEnd(1, (call("barrier", 1),), "running"),
                RankEnd(2, (call("barrier", 1, True),), "failed", "ValueError: no"),
            ],
            "rank 2 never entered all_reduce #1 of group 3, which rank 0 waits in; rank 2 had failed: ValueError: no",
        ),
        (
            [RankEnd(0, (), "passed"), RankEnd(1, (), "hung in exit", "failed")],
            "rank 1 hung in exit after its body failed",
        ),
        (
            [RankEnd(0, (), "failed", "DistStoreError: wait timeout, keys: /k"), RankEnd(1, (), "passed")],
            None,  # no rank waited for another: the failure's own line says it
        ),
        (
            [
                RankEnd(0, (call("all_reduce", 1, True),), "passed"),
                RankEnd(1, (call("all_reduce", 1, True),), "running", "f (t.py:3)"),
            ],
            "rank 1 was running outside any collective (in f (t.py:3)); every other rank had ended its body",
        ),
        (
            [
                RankEnd(0, (call("all_reduce", 1, True),), "passed"),
                RankEnd(1, (call("all_reduce", 1, True),), "passed"),
            ],
            None,
        ),
        # a rank that failed in a call it entered, its peer there too: not a hang of one rank
        (
            [RankEnd(0, (call("all_reduce", 1),), "failed", "E"), RankEnd(1, (call("all_reduce", 1),), "failed", "E")],
            None,
        ),
    ],
)
def test_the_line_names_the_rank_the_others_wait_for_and_the_call(ends, line):
    assert culprit(ends) == line


def test_a_trail_is_read_as_untrusted_lines_from_anywhere_in_it_and_a_torn_line_is_left_out():
    records = [
        {"op": "barrier", "group": "default", "members": [0, 1], "seq": 1, "peer": None, "shape": "", "i": 6},
        {"left": 6},
        {
            "op": "all_reduce",
            "group": "default",
            "members": [0, 1],
            "seq": 1,
            "peer": None,
            "shape": "float32[4]",
            "i": 7,
        },
        {"left": 7},
        {"op": "send", "group": "default", "members": [0, 1], "seq": 1, "peer": 1, "shape": "", "i": 8},
    ]
    hostile = [
        "[1, 2]",
        json.dumps({"op": 1, "group": "default", "members": [0], "seq": 1}),
        json.dumps({"op": "x", "group": "g", "members": [0], "seq": 0}),
        json.dumps({"op": "x", "group": "g", "members": "01", "seq": 1}),
        json.dumps({"op": "x", "group": "g", "members": [0], "seq": True}),
        json.dumps({"left": 9}),
        json.dumps({"op": "x", "group": "g", "members": [0], "seq": 1}),  # no number: not the writer's
        json.dumps({"left": True}),
    ]
    text = '{"i": 5}]\n' + "\n".join([json.dumps(r) for r in records] + hostile) + '\n{"op": "barr'
    assert read_trail(text) == (
        Call("barrier", "default", (0, 1), 1, None, "", True),
        Call("all_reduce", "default", (0, 1), 1, None, "float32[4]", True),
        Call("send", "default", (0, 1), 1, 1, "", False),
    )


def test_where_a_rank_runs_is_its_bodys_innermost_frame_outside_torch_and_the_plugin():
    stack = (
        "Thread 0x00007f (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n\n'
        "Current thread 0x00007e (most recent call first):\n"
        '  File "/site/torch/distributed/distributed_c10d.py", line 5356 in barrier\n'
        '  File "/work/tests/test_x.py", line 11 in helper\n'
        '  File "/work/tests/test_x.py", line 18 in test_x\n'
        '  File "/site/torch/multiprocessing/spawn.py", line 87 in _wrap\n'
    )
    assert innermost_frame(stack, ("/site/torch/",)) == "helper (test_x.py:11)"
    assert innermost_frame("", ()) == ""


@pytest.mark.slow
def test_ten_hang_classes_on_gloo_each_name_their_culprit_rank_and_call(pytester):
    """The corpus (tests/rank_hang_corpus.py): mismatched collectives, a missing barrier, one rank
    raised, a skip on one rank, mismatched shapes, a send without its recv, a rank stuck in user code,
    a rank stuck in exit, a deadlocked store read, a sub-group one rank never joined. Each test's
    docstring says its culprit; the score (the report's "where it stopped" line, else its headline) is
    printed, and at least 9 of 10 must name theirs."""
    pytest.importorskip("torch")
    corpus = (Path(__file__).parent / "rank_hang_corpus.py").read_text()
    pytester.makepyfile(test_corpus=corpus)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-n", "2")
    result.assert_outcomes(failed=10)
    text = result.stdout.str()
    expected = dict(re.findall(r'def (test_\w+)\(gputopo_rank\):\n    """(.+?)"""', corpus))
    named = []
    for test, culprit_text in expected.items():
        rank, what = culprit_text.split(" | ")
        section = text.split(f"_ {test} _")[1].split("\n_")[0]
        said = [ln for ln in section.splitlines() if ln.startswith(("ranks(2, timeout=10): ", "where it stopped: "))]
        line = said[-1] if said else ""  # where it stopped, else the headline
        hit = f"rank {rank}" in line and what in line
        named.append(test) if hit else None
        print(f"{'named ' if hit else 'MISSED'} {test}: {line or '(no line)'}")
    print(f"hang corpus: {len(named)} of {len(expected)} name their culprit rank and call")
    assert len(expected) == 10 and len(named) >= 9, text
