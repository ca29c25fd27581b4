"""Records the ranks exchange through the store are validated whole where they are read: a plain
TCPStore client, as a stranger who reaches the store's port would, plants each bad record kind;
each is refused with a reason naming the rank and the key (exit status 9 through
``GputopoRun.all_ranks``), never a KeyError, never a hang, never a verdict taken. A record of the
right shape with false contents is caught only when the run has a secret (test_store_access.py)."""

import json
from types import SimpleNamespace

import pytest

from conftest import RANK_1_HELD_BACK, launcher_port, served_store, srun_ranks, stranger_of
from pytest_gputopo.core import keys

dist = pytest.importorskip("torch.distributed")

from pytest_gputopo.plugin.run import RANKS_EXIT_STATUS, GputopoRun  # noqa: E402
from pytest_gputopo.runtime import environ as runtime  # noqa: E402
from pytest_gputopo.runtime.ranks import Exchange, NodeShare, RankError, rendezvous  # noqa: E402

VERDICT = "verdict/min_allreduce_bw(1000)"


@pytest.fixture
def store():
    return served_store()


def exchange(store, rank=0) -> Exchange:
    launch = runtime.Launch(rank, 2, rank, 0, "127.0.0.1", store.port, False, "slurm-42.0")
    return Exchange(launch, store.served, 5)


def all_ranks(store, name, mine):
    """What plugin.verdicts reads: ``GputopoRun.all_ranks`` on rank 0 of two."""
    run = SimpleNamespace(ranks=SimpleNamespace(exchange=exchange(store)))
    return GputopoRun.all_ranks(run, name, mine)


def refused(store, name, mine, planted) -> str:
    key = f"gputopo/slurm-42.0/{name}/1"
    store.stranger.set(key, json.dumps(planted))
    with pytest.raises(pytest.exit.Exception) as excinfo:
        all_ranks(store, name, mine)
    assert excinfo.value.returncode == RANKS_EXIT_STATUS
    text = str(excinfo.value.msg)
    assert text.startswith("gputopo: the ranks cannot agree: rank 1 sent a") and f"(key {key})" in text, text
    return text


@pytest.mark.parametrize(
    "planted, says",
    [
        ({}, "field 'broken' is missing"),  # was KeyError: 'reason' on both ranks
        ({"reason": "x"}, "field 'broken' is missing"),
        ({"reason": None, "broken": False, "met": True}, "unknown field 'met'"),
        ({"reason": 5, "broken": False}, "reason 5 is neither null"),
        ({"reason": "", "broken": False}, "is neither null (met) nor a reason"),
        ({"reason": ["slow"], "broken": False}, "is neither null"),
        ({"reason": "slow", "broken": "yes"}, "broken 'yes' is not true or false"),
        ({"reason": "slow", "broken": 1}, "broken 1 is not true or false"),
        ({"reason": None, "broken": True}, "broken is true for a requirement it says is met"),
        ({"reason": "slow", "broken": False, "unknown": "no"}, "unknown 'no' is not true or false"),
        ({"reason": None, "broken": False, "unknown": True}, "unknown is true for a requirement it says is met"),
    ],
)
def test_a_planted_verdict_record_of_the_wrong_shape_ends_the_run(store, planted, says):
    text = refused(store, VERDICT, {"reason": None, "broken": False}, planted)
    assert says in text, text


def test_a_planted_met_verdict_for_a_test_measured_low_is_refused_not_taken(store):
    """A planted record cannot make rank 0 pass a test it measured at 0.9 GB/s. Rank 0's own
    record says unmet; the stranger overwrites it (and rank 1's) with 'met' records of a wrong shape:
    the run ends, naming the key, instead of taking the verdict."""
    unmet = {"reason": "min_allreduce_bw(1000): all-reduce busbw 0.9 GB/s", "broken": False}
    for planted in (
        {"reason": None},
        {"reason": None, "broken": False, "ok": True},
        {"reason": False, "broken": False},
        {"reason": None, "broken": 0},
    ):
        store.stranger.set(f"gputopo/slurm-42.0/{VERDICT}/0", json.dumps(planted))
        refused(store, VERDICT, unmet, planted)
    # A record of exactly the shape a rank writes is taken here: telling it from a rank's needs the
    # run's secret (test_store_access.py).


@pytest.mark.parametrize(
    "planted, says",
    [
        ({}, "field 'problems' is missing"),
        ({"problems": "slow"}, "problems 'slow' is not a list"),
        ({"problems": None}, "problems None is not a list"),
        ({"problems": ["ok", 3]}, "problems[1] 3 is not a reason"),
        ({"problems": [{"x": 1}]}, "problems[0]"),
        ({"problems": [""]}, "problems[0] '' is not a reason"),
        ({"problems": [], "extra": 1}, "unknown field 'extra'"),
    ],
)
def test_a_planted_gate_record_with_bad_problems_ends_the_run(store, planted, says):
    text = refused(store, "gate", {"problems": []}, planted)
    assert says in text, text


def test_valid_records_are_taken(store):
    store.stranger.set(f"gputopo/slurm-42.0/{VERDICT}/1", json.dumps({"reason": "slow", "broken": True}))
    assert all_ranks(store, VERDICT, {"reason": None, "broken": False})[1] == {"reason": "slow", "broken": True}
    store.stranger.set("gputopo/slurm-42.0/gate/1", json.dumps({"problems": ["rank 1 lacks NVLink"]}))
    assert all_ranks(store, "gate", {"problems": []})[1]["problems"] == ["rank 1 lacks NVLink"]


def test_a_planted_rendezvous_port_is_refused(store):
    store.stranger.set("gputopo/slurm-42.0/rendezvous/allreduce-2-1024/0", json.dumps({"port": "x"}))
    store.stranger.set("gputopo/slurm-42.0/rendezvous/allreduce-2-1024/1", json.dumps({"port": None}))
    across = rendezvous(exchange(store, rank=1))
    with pytest.raises(
        RankError,
        match=r"rank 0 sent a 'rendezvous/allreduce-2-1024' record that is not valid "
        r"\(key gputopo/slurm-42.0/rendezvous/allreduce-2-1024/0\): port 'x'",
    ):
        across(("allreduce", 2, 1024))


def test_a_record_kind_without_a_validator_is_a_programming_error(store):
    with pytest.raises(ValueError, match="no validator"):
        exchange(store).all_gather("mystery", {})


# ---------------------------------------------------------------------------------------------
# Benchmark figures shared under bench/<node>/<name>: read before measuring


@pytest.mark.slow
def test_a_planted_bench_figure_that_is_not_a_valid_result_is_measured_again(store, monkeypatch):
    import dataclasses

    from pytest_gputopo.bench.bench_result import BenchResult
    from pytest_gputopo.bench.suite import BenchSettings, BenchSuite
    from pytest_gputopo.core import model
    from pytest_gputopo.probe import probe

    here = dataclasses.replace(probe("dgx-a100"), source=model.Source("nvml"), hostname="node-a")
    measured = []

    def measure(self, key):
        measured.append(key)
        return BenchResult(key, "copy", 42.0, "measured")

    monkeypatch.setattr(BenchSuite, "_measure", measure)
    key = keys.Copy("p2p", 0, 1)
    share = NodeShare(exchange(store), here)
    good = BenchResult(key, "copy", 900.0, "measured").to_json()
    other = BenchResult(keys.Copy("p2p", 2, 3), "copy", 900.0, "measured").to_json()
    for planted, says in [
        ({}, "is missing"),
        (other, "not of GPU0->GPU1"),
        ({**good, "gbps": "fast"}, "gbps 'fast' is not a bandwidth"),
        ({**good, "origin": "trust me"}, "what or origin is missing"),
        ({**good, "verdict": "met"}, "unknown field 'verdict'"),
        ({"key": good["key"], "what": "copy", "origin": "measured"}, "field 'gbps' is missing"),
    ]:
        store.stranger.set(share.prefix + "p2p-0-1", json.dumps(planted))
        result = BenchSuite(here, BenchSettings(), shared=share).get(key)
        assert result.gbps == 42.0 and result.origin == "measured", (planted, result)
        assert "the figure another process of this run left was not trusted: " in result.what, result.what
        assert says in result.what, result.what
    assert len(measured) == 6
    # What a rank of this node writes is taken, not measured again.
    store.stranger.set(share.prefix + "p2p-0-1", json.dumps(good))
    assert BenchSuite(here, BenchSettings(), shared=share).get(key).gbps == 900.0 and len(measured) == 6


# ---------------------------------------------------------------------------------------------
# End to end: two pytest ranks started as srun starts them (gloo-free: no collective in the test),
# a stranger's plain client plants ``{}`` as rank 1's verdict while rank 1 is held back.


@pytest.mark.slow
def test_a_planted_empty_verdict_ends_a_real_run_with_the_rank_and_key_not_a_keyerror(tmp_path):
    """The record ``{}`` crashed both ranks with ``KeyError: 'reason'``."""
    (tmp_path / "conftest.py").write_text(RANK_1_HELD_BACK)
    (tmp_path / "test_bw.py").write_text("import pytest\n@pytest.mark.min_p2p_bw(1)\ndef test_bw(): pass\n")
    port = launcher_port()
    procs = srun_ranks(tmp_path, port, 20)
    try:
        stranger = stranger_of(port)
        key = "gputopo/slurm-42.0/verdict/min_p2p_bw(1)/1"
        stranger.set(key, "{}")
        out = [procs[0].communicate(timeout=120)[0]]  # rank 0 reads the planted record as rank 1's
        procs[1].kill()  # never released: rank 0's store is gone with it
        out.append(procs[1].communicate(timeout=60)[0])
    finally:
        for p in procs:
            p.kill()
    assert "KeyError" not in out[0] + out[1], out[0][-3000:] + out[1][-3000:]
    assert procs[0].returncode == 9, out[0][-3000:]
    assert (
        f"the ranks cannot agree: rank 1 sent a 'verdict/min_p2p_bw(1)' record that is not valid (key {key}): "
        "field 'broken' is missing"
    ) in out[0], out[0][-3000:]
    assert "1 passed" not in out[0]  # no verdict taken on rank 0
