"""Benchmark keys (``core.keys``): one name per measurement, the same in memory, in the JSON report,
in pytest's cache and in the folder xdist workers share."""

import pytest

from pytest_gputopo.core import keys

EVERY_KIND = [
    keys.Copy("p2p", 0, 1),
    keys.Copy("p2p_staged", 1, 0),
    keys.Copy("p2p_bidir", 2, 3),
    keys.HostCopy("h2d", 0, True),
    keys.HostCopy("d2h", 7, False),
    keys.AllReduce(8, 2**30),
    keys.AllReduce(2, 2**30, (0, 5)),
    keys.NcclTransports(4),
]


@pytest.mark.parametrize("key", EVERY_KIND, ids=keys.name_of)
def test_a_key_survives_json_and_names_its_measurement(key):
    assert keys.from_list(key.to_list()) == key
    assert key.to_list()[0] == key.kind and keys.name_of(key).startswith(f"{key.kind}-")
    assert all(c.isalnum() or c in "-_." for c in keys.name_of(key))  # a file name
    assert key.describe()


def test_the_json_form_is_the_documented_one():
    assert keys.Copy("p2p", 0, 1).to_list() == ["p2p", 0, 1]
    assert keys.AllReduce(8, 2**30).to_list() == ["allreduce", 8, 2**30]
    assert keys.AllReduce(2, 3 * 2**20 + 4).describe() == "all-reduce busbw, 2 ranks, 3145732 B"
    named = keys.AllReduce(2, 2**30, (0, 5))
    assert named.to_list() == ["allreduce", 2, 2**30, [0, 5]] and keys.name_of(named) == "allreduce-2-1073741824-0.5"
    assert named.describe() == "all-reduce busbw, 2 ranks on GPU0, GPU5, 1 GiB"


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [],
        ["p2p", 0],
        ["p2p", 0, "1"],
        ["h2d", 0, 1],
        ["allreduce", -1, 4],
        ["allreduce", 2, 2**41],
        ["dma", 0, 1],
        ["p2p", True, 1],
        "p2p-0-1",
        ["allreduce", 2, 4, [5, 0]],
        ["allreduce", 2, 4, [0]],
        ["allreduce", 2, 4, [0, 0]],
        ["allreduce", 2, 4, [0, True]],
        ["allreduce", 2, 4, "0.5"],
    ],
)
def test_anything_else_is_no_key(raw):
    with pytest.raises(ValueError, match="not a benchmark key"):
        keys.from_list(raw)
