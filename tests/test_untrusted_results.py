"""Benchmark figures read back from pytest's cache, the folder xdist workers share and the store
torchrun ranks share are untrusted input: a figure that cannot be trusted
is measured again, and the reason says so; nothing there crashes a run or decides a verdict."""

from __future__ import annotations

import json
import math
import time

import pytest
from hypothesis import given, strategies as st

from conftest import launcher_port, needs_torch, quick_gloo
from pytest_gputopo.bench.bench_result import BenchResult
from pytest_gputopo.bench.shared_folder import SharedFolder
from pytest_gputopo.bench.suite import BenchSettings, BenchSuite
from pytest_gputopo.core import keys, limits, model

HOST = model.Topology(gpus=(model.Gpu(0), model.Gpu(1)), links=(model.Link(0, 1),), source=model.Source("nvml"))
KEY = keys.Copy("p2p", 0, 1)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)
entries = (
    st.fixed_dictionaries({}, optional={"gbps": json_values | st.floats(), "time": json_values, "detail": json_values})
    | json_values
)


def suite_with_cache(monkeypatch, entry):
    measured = []

    def measure(self, key):
        measured.append(key)
        return BenchResult(key, "copy", 12.5, "measured", detail={"bw_ci95_gbps": [12.0, 13.0]})

    monkeypatch.setattr(BenchSuite, "_measure", measure)
    return BenchSuite(HOST, BenchSettings(), cache_get=lambda name: entry, cache_set=lambda name, value: None), measured


@pytest.mark.parametrize(
    "entry, says",
    [
        ({"gbps": math.nan, "time": 1.0}, "gbps nan is not a bandwidth"),
        ({"gbps": math.inf, "time": 1.0}, "gbps inf is not a bandwidth"),
        ({"gbps": -5, "time": 1.0}, "gbps -5 is not a bandwidth"),
        ([1, 2, 3], "it is [1, 2, 3], not an object"),
        ("fast", "it is 'fast', not an object"),
        ({"gbps": None, "time": None, "detail": None}, "time None is not a time"),
        ({"gbps": 10.0, "time": 9e99}, "its time lies in the future"),
        ({"gbps": 10.0, "time": 1.0, "detail": {"judged": [1]}}, "detail.judged is not an object"),
        (
            {"gbps": 10.0, "time": 1.0, "detail": {"a": json.loads("[" * 40 + "]" * 40)}},
            "detail nested more than 32 levels deep",
        ),
    ],
)
def test_a_cache_entry_that_cannot_be_trusted_is_measured_again_and_says_so(monkeypatch, entry, says):
    """A cache entry that is not a figure (NaN or 1e999, which would pass ``min_allreduce_bw(1)``; -5,
    which would show as "cached -5 GB/s"; other shapes, once an AttributeError at setup) or whose time
    lies in the future (it would never expire) is measured again, and the reason says why."""
    if entry and isinstance(entry, dict) and entry.get("time") == 1.0:
        entry["time"] = time.time()  # fresh: only its content is wrong
    suite, measured = suite_with_cache(monkeypatch, entry)
    result = suite.get(KEY)
    assert measured == [KEY] and result.origin == "measured" and result.gbps == 12.5
    assert f"measured again: the cached figure was not trusted: {says}" in result.what


def test_a_sound_fresh_entry_is_served_and_an_old_one_measured_again_silently(monkeypatch):
    suite, measured = suite_with_cache(monkeypatch, {"gbps": 20, "time": time.time(), "detail": {}})
    assert suite.get(KEY).origin == "cached" and measured == []
    suite, measured = suite_with_cache(monkeypatch, {"gbps": 20, "time": time.time() - 48 * 3600})
    result = suite.get(KEY)
    assert result.origin == "measured" and measured == [KEY] and "not trusted" not in result.what


@given(entries)
def test_no_cache_entry_crashes_the_suite_or_serves_an_implausible_figure(entry):
    class Suite(BenchSuite):
        def _measure(self, key):
            return BenchResult(key, "copy", 12.5, "measured")

    result = Suite(HOST, BenchSettings(), cache_get=lambda name: entry, cache_set=lambda n, v: None).get(KEY)
    assert 0 < result.gbps <= limits.MAX_GBPS and math.isfinite(result.gbps)
    json.dumps(result.to_json(), allow_nan=False)  # the JSON report stays strict JSON
    result.interval_gbps  # noqa: B018 (what verdict texts read of the detail: reading it must not raise)


@given(json_values)
def test_a_shared_result_is_taken_only_whole(data):
    try:
        result = BenchResult.from_json(data)
    except ValueError as exc:
        assert str(exc)
    else:
        assert result.gbps is None or 0 < result.gbps <= limits.MAX_GBPS
        json.dumps(result.to_json(), allow_nan=False)
        result.interval_gbps  # noqa: B018 (reading it must not raise)


def test_a_truncated_file_in_the_shared_folder_is_measured_again_and_listed_as_lost(tmp_path, monkeypatch):
    """Half a file left by a worker killed mid-write is listed as lost and measured again; the
    controller's sessionfinish neither raises a traceback nor loses the JSON."""
    folder = SharedFolder(str(tmp_path))
    (tmp_path / "p2p-0-1.json").write_text('{"key": ["p2p", 0, 1], "what": "co')
    folder.put("h2d-0-True", BenchResult(keys.HostCopy("h2d", 0, True), "h2d", 20.0, "measured").to_json())
    taken, lost = folder.results(HOST)
    assert [r.key for r in taken] == [keys.HostCopy("h2d", 0, True)]
    assert lost == [f"p2p-0-1: {tmp_path / 'p2p-0-1.json'} is not whole JSON"]

    monkeypatch.setattr(BenchSuite, "_measure", lambda self, key: BenchResult(key, "copy", 12.5, "measured"))
    result = BenchSuite(HOST, BenchSettings(), shared=folder).get(KEY)
    assert result.gbps == 12.5 and "another process of this run left was not trusted" in result.what
    assert BenchResult.from_json(folder.get("p2p-0-1")) == result  # written whole this time


def test_the_shared_folder_is_written_whole_or_not_at_all(tmp_path):
    folder = SharedFolder(str(tmp_path))
    folder.put("x", {"a": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temporary file left beside it
    with pytest.raises(ValueError):
        folder.put("y", {"gbps": math.nan})  # a NaN never reaches another process
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


# ---------------------------------------------------------------------------------------------
# Through pytest


def _entry_file(pytester):
    (found,) = (pytester.path / ".pytest_cache" / "v" / "gputopo").rglob("allreduce-*")
    return found


@needs_torch
@pytest.mark.slow
def test_a_corrupted_cache_entry_never_passes_a_test(pytester):
    """End to end: gloo measures this host's CPUs, far below 100000 GB/s, so a NaN cached figure
    must not pass the marker nor a list crash the setup (AttributeError): both are measured again."""
    pytester.makepyfile(test_bw="import pytest\n@pytest.mark.min_allreduce_bw(100000)\ndef test_fast(): pass\n")
    args = [*quick_gloo("64K"), "--gputopo-cache", "-rs"]  # what is done with a cached figure, not its precision
    pytester.runpytest(*args).assert_outcomes(skipped=1)
    entry = _entry_file(pytester)
    good = json.loads(entry.read_text())
    entry.write_text(json.dumps({**good, "gbps": float("nan")}))
    result = pytester.runpytest(*args)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*measured again: the cached figure was not trusted: gbps nan is not a bandwidth*"])
    entry.write_text("[1, 2, 3]")
    result = pytester.runpytest(*args)
    result.assert_outcomes(skipped=1)
    assert "Traceback" not in result.stdout.str() and "AttributeError" not in result.stdout.str()


@pytest.mark.slow
def test_xdist_workers_recorded_figures_reach_the_json_report(pytester):
    """Under ``-n 2`` on a recorded machine the workers' recorded figures reach the controller's JSON
    (it once held 0 measurements). ``min_p2p_bw`` consults each pair's staged copy too (the rule
    check items follow), so that one is reported as well."""
    pytest.importorskip("xdist")
    pytester.makepyfile(
        test_bw="import pytest\n"
        "@pytest.mark.parametrize('i', range(4))\n"
        "@pytest.mark.min_allreduce_bw(1)\n"
        "def test_ar(i): pass\n"
        "@pytest.mark.min_p2p_bw(1)\n"
        "def test_p2p(): pass\n"
    )
    result = pytester.runpytest_subprocess(
        "-n", "2", "--gputopo-machine", "dgx-a100", "--gputopo-json", "out.json", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=5)
    doc = json.loads((pytester.path / "out.json").read_text())
    kinds = sorted({m["key"][0] for m in doc["measurements"]})
    assert kinds == ["allreduce", "p2p", "p2p_staged"] and all(m["origin"] == "recorded" for m in doc["measurements"])
    assert doc["lost_measurements"] == []


def test_a_forged_rank_record_is_a_reason_not_a_crash(monkeypatch):
    """The rank-0 store takes records from anyone who reaches its port; a forged one is a RankError
    naming the rank, not an INTERNALERROR on rank 0."""
    from pytest_gputopo.runtime import environ as runtime
    from pytest_gputopo.runtime.ranks import Exchange, RankError, gather_views

    dist = pytest.importorskip("torch.distributed")
    port = launcher_port()
    store = dist.TCPStore("127.0.0.1", port, 1, True, wait_for_workers=False)
    launch = runtime.Launch(0, 2, 0, 0, "127.0.0.1", port, False, "run-1")
    for forged, says in [
        (b"\xff not json", "is not a JSON object"),
        (json.dumps({"hostname": 5, "topology": {}}), "hostname: expected str, got 5"),
        (
            json.dumps({"topology": {"gpus": [{"index": 0, "numa_node": -1}]}}),
            "topology.gpus[0].numa_node: -1 is not from 0 to 1023",
        ),
        (json.dumps({"topology": {"gpus": "x" * 1000}}), "topology.gpus: expected list"),
    ]:
        store.set("gputopo/run-1/topology/1", forged)
        with pytest.raises(RankError) as excinfo:
            gather_views(Exchange(launch, store, 5), HOST)
        assert "rank 1 sent a" in str(excinfo.value) and says in str(excinfo.value), excinfo.value


# ---------------------------------------------------------------------------------------------
# The benchmark lock


@pytest.fixture
def lock_tmp(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    return tmp_path


def test_the_lock_lives_in_a_private_folder_and_follows_no_link(lock_tmp):
    """It was ``$TMPDIR/pytest-gputopo-bench-<uid>.lock``, opened create-if-missing following
    links: a link planted in a sticky /tmp made a root run create a file where it pointed."""
    import os
    import stat

    from pytest_gputopo.bench.host_lock import host_lock

    with host_lock(5):
        pass
    folder = lock_tmp / f"pytest-gputopo-{os.getuid()}"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "bench.lock").stat().st_mode) == 0o600

    (folder / "bench.lock").unlink()
    target = lock_tmp / "elsewhere"
    (folder / "bench.lock").symlink_to(target)
    with pytest.raises(OSError):
        with host_lock(5):
            pass
    assert not target.exists()


@pytest.mark.parametrize("planted", ["symlink", "file", "lock is a folder"])
def test_a_lock_path_someone_else_prepared_is_refused_naming_it(lock_tmp, monkeypatch, planted):
    import os

    from pytest_gputopo.bench.host_lock import LockRefused

    folder = lock_tmp / f"pytest-gputopo-{os.getuid()}"
    if planted == "symlink":
        (lock_tmp / "theirs").mkdir()
        folder.symlink_to(lock_tmp / "theirs")
    elif planted == "file":
        folder.write_text("")
    else:
        (folder / "bench.lock").mkdir(parents=True)
    monkeypatch.setattr(BenchSuite, "_measure", lambda self, key: BenchResult(key, "copy", 12.5, "measured"))
    with pytest.raises(LockRefused, match=f"{folder}.*point TMPDIR at a folder only you can write"):
        BenchSuite(HOST, BenchSettings()).get(KEY)
    assert not (lock_tmp / "theirs" / "bench.lock").exists()


def test_a_folder_of_another_user_is_not_used(lock_tmp, monkeypatch):
    import os

    if os.getuid() != 0:
        pytest.skip("making a folder owned by another user needs root")
    folder = lock_tmp / f"pytest-gputopo-{os.getuid()}"
    folder.mkdir(mode=0o777)
    os.chown(folder, 65534, 65534)
    monkeypatch.setattr(BenchSuite, "_measure", lambda self, key: BenchResult(key, "copy", 12.5, "measured"))
    with pytest.raises(PermissionError, match=f"{folder} is owned by user id 65534, not by you"):
        BenchSuite(HOST, BenchSettings()).get(KEY)


# A recorded 2-GPU machine passing for this host, its copies answered by the tests' fault plan.
THIS_HOST = """
import dataclasses
import pytest
from pytest_gputopo.core import model

@pytest.hookimpl(tryfirst=True)
def pytest_gputopo_probe(config):
    from pytest_gputopo.probe import probe_recorded
    return dataclasses.replace(probe_recorded("2x-rtx-pro-6000"), source=model.Source("nvml"), published=())
"""


@pytest.mark.slow
def test_another_users_lock_folder_fails_a_benchmark_gated_run_instead_of_skipping_it(pytester, monkeypatch):
    """Issue 32.5, from an attack: another user makes ``$TMPDIR/pytest-gputopo-<uid>`` first; every
    benchmark-gated test then skipped and the run passed (exit status 0). Now each errors, naming the
    folder and saying to point TMPDIR elsewhere; with TMPDIR pointed at a folder of the user's, it runs."""
    import os

    if os.getuid() != 0:
        pytest.skip("making a folder owned by another user needs root")
    monkeypatch.setenv("PYTEST_GPUTOPO_TEST_FAULTS", '{"copy_gbps": 900.0}')
    shared = pytester.mkdir("shared-tmp")
    planted = shared / f"pytest-gputopo-{os.getuid()}"
    planted.mkdir(mode=0o777)
    os.chown(planted, 65534, 65534)
    monkeypatch.setenv("TMPDIR", str(shared))
    pytester.makeconftest(THIS_HOST)
    pytester.makepyfile("import pytest\n@pytest.mark.min_p2p_bw(10)\ndef test_copy():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            f"*the benchmark lock's folder {planted} is owned by user id 65534, not by you*"
            "point TMPDIR at a folder only you can write*"
        ]
    )
    monkeypatch.setenv("TMPDIR", str(pytester.mkdir("mine")))
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


# ---------------------------------------------------------------------------------------------
# A figure keeps its GPUs whatever a process numbers them (issue 40 item 1)

NODE = model.Topology(
    gpus=tuple(model.Gpu(i, uuid=f"GPU-{i}") for i in range(4)),
    links=tuple(model.Link(a, b) for a in range(4) for b in range(a + 1, 4)),
    source=model.Source("nvml"),
)
LEASE = model.Topology(  # a leased test's process sees GPU2 and GPU3 alone, as cuda:0 and cuda:1
    gpus=(model.Gpu(0, uuid="GPU-2"), model.Gpu(1, uuid="GPU-3")),
    links=(model.Link(0, 1),),
    source=model.Source("nvml"),
)


@pytest.mark.parametrize(
    "key",
    [keys.Copy("p2p", 0, 1), keys.Copy("p2p_bidir", 1, 0), keys.HostCopy("h2d", 1, False), keys.AllReduce(2, 2**30)],
)
def test_a_leases_figure_is_another_leases_only_where_its_gpus_are(tmp_path, monkeypatch, key):
    folder = SharedFolder(str(tmp_path))
    monkeypatch.setattr(BenchSuite, "_measure", lambda self, k: BenchResult(k, k.describe(), 10.0, "measured"))
    BenchSuite(LEASE, BenchSettings(), shared=folder).get(key)  # measured on physical GPU2, GPU3
    other = model.Topology(
        gpus=(model.Gpu(0, uuid="GPU-0"), model.Gpu(1, uuid="GPU-1")), links=(model.Link(0, 1),), source=LEASE.source
    )
    monkeypatch.setattr(BenchSuite, "_measure", lambda self, k: BenchResult(k, k.describe(), 99.0, "measured"))
    assert BenchSuite(other, BenchSettings(), shared=folder).get(key).gbps == 99.0  # another lease measures its own
    assert BenchSuite(LEASE, BenchSettings(), shared=folder).get(key).gbps == 10.0  # the same GPUs take it
    taken, lost = folder.results(NODE)  # the run's record, in the run's numbering
    here = keys.renumbered(key, tuple({0: 2, 1: 3}[g] for g in keys.gpus_of(key)))
    mine = [r for r in taken if r.gbps == 10.0]
    assert lost == [] and [r.key for r in mine] == [here] and mine[0].what.startswith(here.describe())


@given(st.sampled_from([keys.Copy("p2p", 3, 1), keys.HostCopy("d2h", 2, True), keys.AllReduce(3, 1024, (0, 2, 5))]))
def test_a_key_renumbered_onto_its_own_gpus_is_itself(key):
    assert keys.renumbered(key, keys.gpus_of(key)) == key
