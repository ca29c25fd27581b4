"""Verdicts on documents as real nodes write them (issue 39): every consumer is fed what the real writer,
``gputopo check --level full --json``, writes on the emulated GPU host with the engine double's public
figures (``tests/real_writer.py``, ``tests/engine_double.py``), never a hand-made document.

A fleet of one healthy run copied into 20 nodes names none; each injected fault is named with its cause,
alone among 20 and as a 2-of-7 minority; the degraded bundled machines are named for their own faults."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

import engine_double
import real_writer as rw
from emulated import emulated_libs, needs_compiler  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.slow, needs_compiler]


@pytest.fixture(scope="module")
def documents(emulated_libs, tmp_path_factory):
    """``get(machine, fault=None)``: the real writer's document for it, written once per module."""
    made: dict = {}
    root = tmp_path_factory.mktemp("real-writer")

    def get(machine: str, fault: str | None = None) -> dict:
        if (machine, fault) not in made:
            folder = root / f"{machine}-{fault or 'healthy'}".replace(" ", "-")
            made[machine, fault] = rw.full_check(emulated_libs, folder, machine, fault)
        return copy.deepcopy(made[machine, fault])

    return get


def _findings(out: dict, node: str) -> str:
    return json.dumps([n["findings"] for g in out["groups"] for n in g["nodes"] if n["name"] == node])


# --- issue 39 item 1: a staged copy is no NVLink copy -----------------------------------------------


def test_a_staged_copy_has_no_floor_and_six_healthy_h100_nodes_are_not_named(documents, tmp_path):
    """Issue 39 item 1: a full check on hgx-h100 wrote every one of its 56 ``p2p_staged`` figures
    "below" (held to the pair's NVLink figure), and ``gputopo fleet`` named all six healthy nodes
    ("all 28 pairs of the 8 GPUs fail their floor"). The staged twin is the host path a P2P copy must
    beat: kept and shown, never judged."""
    doc = documents("hgx-h100")
    staged = [m for m in doc["measurements"] if m["key"][0] == "p2p_staged"]
    assert len(staged) == 56 and all(m["gbps"] for m in staged)
    assert all("state" not in m for m in staged), staged[0]
    assert {m["state"] for m in doc["measurements"] if m["key"][0] != "p2p_staged"} == {"met"}
    assert {c["outcome"] for c in doc["checks"]} == {"passed", "skipped"}
    nodes = {f"h100-{i}": rw.as_node(doc, f"h100-{i}", i) for i in range(6)}
    code, out, text = rw.fleet(rw.write_fleet(tmp_path / "six", nodes))
    assert (code, out["named"], out["healthy"]) == (0, [], True), text


def test_the_staged_twin_still_shows_a_p2p_copy_that_is_not_getting_p2p(documents, tmp_path):
    """The staged twin's one use: a P2P copy slower than it is no P2P, in the run and in the fleet."""
    doc = documents("hgx-h100")
    staged = {tuple(m["key"][1:]): m["gbps"] for m in doc["measurements"] if m["key"][0] == "p2p_staged"}
    node = rw.as_node(doc, "h100-x", 99)
    for m in node["measurements"]:
        if m["key"] == ["p2p", 0, 1]:
            m["gbps"] = staged[0, 1] * 0.5
    nodes = {f"h100-{i}": rw.as_node(doc, f"h100-{i}", i) for i in range(5)} | {"h100-x": node}
    code, out, text = rw.fleet(rw.write_fleet(tmp_path / "fleet", nodes))
    assert code == 1 and out["named"] == ["h100-x"], text
    assert "p2p_bw[GPU0->GPU1]" in _findings(out, "h100-x")


# --- the real-writer suite ----------------------------------------------------------------------------


@pytest.mark.parametrize("machine", engine_double.MACHINES)
def test_twenty_healthy_nodes_of_one_real_run_are_none_named(documents, tmp_path, machine):
    doc = documents(machine)
    assert [c["check"] for c in doc["checks"] if c["outcome"] == "failed"] == []
    nodes = {f"n{i:02d}": rw.as_node(doc, f"n{i:02d}", i) for i in range(20)}
    code, out, text = rw.fleet(rw.write_fleet(tmp_path / "fleet", nodes))
    assert (code, out["named"], out["healthy"]) == (0, [], True), text


def _named_with_cause(documents, tmp_path, machine: str, fault: str, healthy: int, faulty: int) -> None:
    good, bad = documents(machine), documents(machine, fault)
    nodes = {f"n{i:02d}": rw.as_node(good, f"n{i:02d}", i) for i in range(healthy)}
    sick = [f"n{i:02d}" for i in range(healthy, healthy + faulty)]
    nodes |= {name: rw.as_node(bad, name, healthy + k) for k, name in enumerate(sick)}
    code, out, text = rw.fleet(rw.write_fleet(tmp_path / "fleet", nodes))
    assert code == 1 and out["named"] == sick, text
    cause = rw.MACHINE_FAULTS.get(fault) or {**rw.HOST_FAULTS, **rw.ENGINE_FAULTS}[fault][1]
    for name in sick:
        assert cause in _findings(out, name), (name, text)


@pytest.mark.parametrize("fault", rw.FAULTS)
def test_a_fault_alone_among_twenty_is_named_with_its_cause(documents, tmp_path, fault):
    _named_with_cause(documents, tmp_path, "hgx-h100", fault, 19, 1)


@pytest.mark.parametrize("fault", rw.FAULTS)
def test_a_fault_on_two_of_seven_is_named_with_its_cause(documents, tmp_path, fault):
    _named_with_cause(documents, tmp_path, "dgx-a100", fault, 5, 2)


@pytest.mark.parametrize(
    ("degraded", "cause"),
    [("hgx-h100-nvlink-down", "nvlink[GPU5]"), ("hgx-h100-pcie-x8", "pcie[GPU2]")],
)
def test_the_degraded_bundled_machines_are_named_for_their_own_faults(
    documents, emulated_libs, tmp_path, degraded, cause
):
    """A degraded bundled machine served as this host, measured by the engine at a healthy H100's
    figures (its copies over a lost link are what the link gives, not what was published)."""
    doc = rw.full_check(emulated_libs, tmp_path / "degraded", degraded, engine_of="hgx-h100")
    healthy = documents("hgx-h100")
    nodes = {f"n{i:02d}": rw.as_node(healthy, f"n{i:02d}", i) for i in range(6)} | {"sick": rw.as_node(doc, "sick", 9)}
    shutil.rmtree(tmp_path / "degraded")
    code, out, text = rw.fleet(rw.write_fleet(tmp_path / "fleet", nodes))
    assert code == 1 and out["named"] == ["sick"], text
    assert cause in _findings(out, "sick"), text


# --- issue 39 item 2: the fleet trusts no stamp and no stray GPU ------------------------------------


def _with_uuids(node: dict, uuids: list[str]) -> dict:
    text = json.dumps(node)
    for old, new in zip(rw.uuids_of(node), uuids, strict=True):
        text = text.replace(old, new)
    return json.loads(text)


@pytest.mark.parametrize("stamp", ["2027-12-01T10:00:00+00:00", "2099-01-01T00:00:00+00:00"])
def test_a_document_stamped_ahead_never_hides_a_fresh_degraded_one(documents, tmp_path, stamp):
    """Issue 39 item 2: a node whose clock was once a year ahead left a document dated 2027 that
    superseded its fresh degraded one (exit 0, healthy, for every later collection); one planted
    document dated 2099 with the node's UUIDs did the same."""
    good, bad = documents("hgx-h100"), documents("hgx-h100", "link down")
    nodes = {f"n{i:02d}": rw.as_node(good, f"n{i:02d}", i) for i in range(6)}
    nodes["sick-fresh"] = rw.as_node(bad, "sick", 9, written="2026-12-05T10:00:00+00:00")
    nodes["sick-ahead"] = rw.as_node(good, "sick", 9, written=stamp)
    code, out, text = rw.fleet(rw.write_fleet(tmp_path / "fleet", nodes))
    assert code == 1 and out["named"] == ["sick"], text
    found = _findings(out, "sick")
    assert "nvlink[GPU4]" in found and "stamped later than this collection" in found, text
    (old,) = out["superseded"]
    assert old["document"].endswith("sick-ahead.json"), old


def test_a_gpu_moved_between_two_nodes_merges_neither(documents, tmp_path):
    """Issue 39 item 2: a GPU moved from one node to another (an RMA swap) merged the two into one
    node, and the degraded one's fault was hidden behind the other's newer document."""
    good, bad = documents("hgx-h100"), documents("hgx-h100", "link down")
    nodes = {f"n{i:02d}": rw.as_node(good, f"n{i:02d}", i) for i in range(5)}
    a = rw.as_node(bad, "a", 20, written="2026-12-01T10:00:00+00:00")
    b_old = rw.as_node(good, "b", 21, written="2026-12-01T10:00:00+00:00")
    b_new = _with_uuids(b_old, rw.uuids_of(b_old)[:7] + rw.uuids_of(a)[7:])
    b_new["written"] = "2026-12-05T10:00:00+00:00"
    nodes |= {"a": a, "b-old": b_old, "b-new": b_new}
    code, out, text = rw.fleet(rw.write_fleet(tmp_path / "fleet", nodes))
    assert code == 1, text
    judged = {n["document"].rsplit("/", 1)[-1]: n for g in out["groups"] for n in g["nodes"]}
    assert "nvlink[GPU4]" in json.dumps(judged["a.json"]["findings"]), text
    assert "its GPUs are also another node's" in json.dumps(judged["b-new.json"]["findings"]), text
    assert "b-old.json" in judged and out["superseded"] == [], text


def test_one_document_holding_a_gpu_of_each_node_supersedes_neither(documents, tmp_path):
    good, bad = documents("hgx-h100"), documents("hgx-h100", "link down")
    nodes = {f"n{i:02d}": rw.as_node(good, f"n{i:02d}", i) for i in range(5)}
    nodes["sick"] = rw.as_node(bad, "sick", 30)
    planted = rw.as_node(good, "sick", 31, written="2026-12-06T00:00:00+00:00")
    planted = _with_uuids(planted, rw.uuids_of(nodes["sick"])[:4] + rw.uuids_of(nodes["n00"])[4:])
    nodes["planted"] = planted
    code, out, text = rw.fleet(rw.write_fleet(tmp_path / "fleet", nodes))
    assert code == 1 and out["superseded"] == [], text
    judged = {n["document"].rsplit("/", 1)[-1]: n for g in out["groups"] for n in g["nodes"]}
    assert "nvlink[GPU4]" in json.dumps(judged["sick.json"]["findings"]), text
    assert "its GPUs are also another node's" in json.dumps(judged["planted.json"]["findings"]), text
    assert judged["n00.json"]["findings"] == [], text


def test_the_report_draws_the_staged_twin_as_a_reference_never_below(documents, tmp_path):
    """The HTML report of the real writer's document: every P2P copy met, each staged twin shown as
    the host path it is ("not judged"), no cell below its threshold, the banner passed."""
    doc = tmp_path / "check.json"
    doc.write_text(json.dumps(documents("hgx-h100")))
    page = tmp_path / "check.html"
    done = rw.python("pytest_gputopo.cli", "report", str(doc), "-o", str(page))
    assert done.returncode == 0, done.stdout + done.stderr
    html = page.read_text()
    assert html.count('data-state="reference"') == 56
    assert 'data-state="below"' not in html and 'data-state="staged"' not in html
    assert "not judged: nothing of its own: the host path the pair&#x27;s P2P copy must beat" in html
    assert 'id="verdict" class="passed"' in html


USER_TESTS = """
import pytest

@pytest.mark.min_p2p_bw(300, gpus=2)
def test_pair():
    pass

@pytest.mark.min_allreduce_bw(200)
def test_allreduce():
    pass

@pytest.mark.requires_p2p(gpus=8)
def test_node():
    pass
"""


def test_every_output_of_a_healthy_nodes_run_says_passed(emulated_libs, tmp_path):
    """A user's run on a healthy HGX H100 node, the full check before its tests, every output written
    by the real writers: the terminal, JSON, JUnit XML, HTML and the step summary agree that all passed,
    and none shows a staged twin below anything."""
    env = rw.node_env(emulated_libs, tmp_path / "node", "hgx-h100")
    env["GITHUB_STEP_SUMMARY"] = str(tmp_path / "summary.md")
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    out = {name: tmp_path / name for name in ("run.json", "junit.xml", "run.html")}
    done = rw.python(
        *["pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "test_user.py", "--gputopo-check", "full"],
        *["--gputopo-json", str(out["run.json"]), "--junitxml", str(out["junit.xml"])],
        *["--gputopo-html", str(out["run.html"]), "-rA"],
        env=env,
        cwd=tmp_path,
    )
    said = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0 and "3 passed" in done.stdout, said
    doc = json.loads(out["run.json"].read_text())
    states = {m["key"][0]: m.get("state") for m in doc["measurements"]}
    assert states["p2p_staged"] is None and "below" not in states.values(), states
    assert {v["verdict"] for v in doc["verdicts"]} == {"met"}, doc["verdicts"]
    junit = out["junit.xml"].read_text()
    assert 'failures="0"' in junit and 'errors="0"' in junit
    assert 'id="verdict" class="passed"' in out["run.html"].read_text()
    summary = (tmp_path / "summary.md").read_text()
    assert "fail" not in summary.lower().replace("0 failed", ""), summary
    assert summary.count("| — | none (the host path P2P must beat) | measured |") == 56, summary


def test_an_expectation_recorded_on_a_healthy_node_holds_there_and_names_a_lost_link(emulated_libs, tmp_path):
    """``gputopo record`` writes the expectation on the healthy node; a run of the same node passes
    its gate, and a run of the node with an NVLink down stops before its first test, naming it."""
    (tmp_path / "test_user.py").write_text("def test_one():\n    pass\n")
    expect = tmp_path / "healthy-node.json"
    env = rw.node_env(emulated_libs, tmp_path / "healthy", "hgx-h100")
    recorded = rw.python("pytest_gputopo.cli", "record", "-o", str(expect), env=env, cwd=tmp_path)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    for node, fault in (("healthy", None), ("sick", "link down")):
        if fault is not None:
            env = rw.node_env(emulated_libs, tmp_path / node, "hgx-h100", fault)
        done = rw.python(
            "pytest", "-p", "no:cacheprovider", "test_user.py", "--gputopo-expect", str(expect), env=env, cwd=tmp_path
        )
        if fault is None:
            assert done.returncode == 0, done.stdout[-3000:]
        else:
            assert done.returncode != 0 and "GPU4" in done.stdout, done.stdout[-3000:]


def test_a_plan_after_a_cached_run_gives_each_test_the_runs_verdict(emulated_libs, tmp_path):
    """The plan reads the figures the real run cached (``--gputopo-cache``) and gives each test the
    verdict the run gave it, measuring nothing: on the node with a slow pair, the pair's test skips in
    both, the node's all-reduce test runs in both."""
    env = rw.node_env(emulated_libs, tmp_path / "node", "hgx-h100", "slow pair")
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    common = ["pytest", "-p", "no:randomly", "test_user.py", "--gputopo-cache", "-rA"]
    runs = {}
    for name, extra in (("run", ["--gputopo-json", "run.json"]), ("plan", ["--gputopo-plan-json", "plan.json"])):
        done = rw.python(*common, *extra, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        runs[name] = json.loads((tmp_path / f"{name}.json").read_text())
    plan = {e["nodeid"].split("::")[-1]: e["verdict"] for e in runs["plan"]["tests"]}
    assert plan == {"test_pair": "skip", "test_allreduce": "run", "test_node": "run"}, runs["plan"]
    skipped = {u["test"].split("::")[-1] for u in runs["run"]["unmet"]}
    assert skipped == {"test_pair"}, runs["run"]["unmet"]
