"""docs/fleet.md's recipes for collecting the nodes' check reports really collect them, run as the doc
gives them (read from the doc, so that doc and test cannot drift) against each engine's documented
behaviour:

- Slurm: through ``tests/stand_in/srun``, which starts its tasks as srun does (the command's
  arguments as written; ``%N`` replaced only in its own --output/--error/--input file names; each
  task with SLURM_PROCID, SLURM_NODEID, SLURMD_NODENAME, SLURM_STEP_NUM_NODES...);
- GitHub Actions: validated against GitHub's workflow schema (check-jsonschema's vendored
  ``vendor.github-workflows``, offline), then its steps run with ``if:`` as Actions evaluates it and the
  artifacts laid out as download-artifact lays them;
- Kubernetes: validated against the API's schema (kubernetes-validate, offline), then the container's
  command run with Kubernetes' ``$(VAR)`` expansion and the Job's pod failure policy applied to the
  check's exit statuses.

Each fake node is a bundled recorded machine with its own host name and GPU UUIDs, as real nodes
differ (tests/test_fleet.py does the same); one of them lost GPU5's NVLinks, so its check fails
(exit 1) and the fleet must still get its report and name it.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from doc_examples import ROOT, blocks, run_shell

MACHINES = ROOT / "pytest_gputopo" / "machines"
STAND_IN = Path(__file__).resolve().parent / "stand_in"
BIN = Path(sys.executable).parent  # gputopo, check-jsonschema, kubernetes-validate of this environment
DIGEST = re.compile(r"^(?P<host>.+)-(?P<digest>[0-9a-f]{12})\.json$")


def recipe(contains: str):
    found = [b for b in blocks() if b.path == "docs/fleet.md" and contains in b.text]
    assert len(found) == 1, f"docs/fleet.md: {len(found)} blocks contain {contains!r}"
    return found[0]


def node_profile(folder: Path, host: str, machine: str = "hgx-h100", uuid_tag: int | None = None) -> Path:
    """A bundled machine as one node: its own host name and GPU UUIDs (UUIDs are per node: tag them)."""
    profile = json.loads((MACHINES / f"{machine}.json").read_text())
    profile["name"] = f"node-{host}-{uuid_tag}"
    topology = profile["topology"]
    topology["hostname"] = host
    tag = f"{(uuid_tag if uuid_tag is not None else abs(hash(host)) % 10**6):06d}"
    for gpu in topology["gpus"]:
        gpu["uuid"] = f"GPU-{tag}00-0000-4000-8000-{gpu['index']:012d}"
    path = folder / f"{host}-{tag}.profile.json"
    path.write_text(json.dumps(profile))
    return path


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_GPUTOPO_", "SLURM", "MASTER_"))}
    return {**env, "PATH": f"{STAND_IN}{os.pathsep}{BIN}{os.pathsep}{env['PATH']}", **extra}


def run_here(folder: Path, *argv: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """ARGV as a user types it in ``folder``: the stand-ins (srun, ...) and this venv's gputopo first on
    its PATH (``environment()`` unless ``env`` is given); its output kept as text."""
    return subprocess.run(
        list(argv), cwd=folder, env=env or environment(), capture_output=True, text=True, timeout=timeout
    )


def reports(folder: Path) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.rglob("*.json"))}


# ------------------------------------------------------------------------------------------- Slurm

# (Slurm's node name, the host name the node's report gives, its machine): two VMs both called "vm"
# (other GPUs: other nodes), and one node whose GPU5 lost its NVLinks.
SLURM_NODES = [
    ("gpu-a", "gpu-a", "hgx-h100"),
    ("gpu-b", "gpu-b", "hgx-h100"),
    ("gpu-c", "gpu-c", "hgx-h100"),
    ("gpu-d", "gpu-d", "hgx-h100-nvlink-down"),
    ("vm-1", "vm", "hgx-h100"),
    ("vm-2", "vm", "hgx-h100"),
]


def slurm_nodes(tmp_path: Path) -> dict[str, dict[str, str]]:
    """FAKE_SRUN_TASK_ENV: each Slurm node's tasks check their own machine."""
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    return {
        node: {"PYTEST_GPUTOPO_MACHINE": str(node_profile(profiles, host, machine, i))}
        for i, (node, host, machine) in enumerate(SLURM_NODES)
    }


@pytest.mark.slow  # several gputopo processes
def test_the_slurm_recipe_collects_one_report_per_node(tmp_path):
    """The recipe as written (its 64 nodes made the stand-in's 6): one report per node, named by host
    name and GPUs (the two VMs called vm apart), one log per node from srun's own %N, the degraded node's
    report written although its check failed, and the fleet reads all six and names that node."""
    block = recipe("srun --nodes=64")
    env = environment(
        FAKE_SRUN_NODES=",".join(n for n, _, _ in SLURM_NODES), FAKE_SRUN_TASK_ENV=json.dumps(slurm_nodes(tmp_path))
    )
    text = block.text.replace("--nodes=64", f"--nodes={len(SLURM_NODES)}")
    block = type(block)(block.path, block.line, block.info, text, block.note)
    steps = run_shell(block, tmp_path, env, timeout=300)
    assert [s.status for s in steps] == [0, 1, 1], [(s.command, s.printed[-2000:]) for s in steps]
    out = tmp_path / "out"
    found = reports(out)
    assert len(found) == len(SLURM_NODES), sorted(found)
    hosts = sorted(DIGEST.match(name)["host"] for name in found)
    assert hosts == sorted(host for _, host, _ in SLURM_NODES)
    for name, doc in found.items():  # each file is its node's report, named by its host and GPUs
        assert DIGEST.match(name)["host"] == doc["topology"]["hostname"]
        assert doc["settings"]["check"] == "full"
    assert sorted(p.name for p in out.glob("*.log")) == sorted(f"{n}.log" for n, _, _ in SLURM_NODES)
    assert re.search(r"^FAILED nvlink.*GPU5", (out / "gpu-d.log").read_text(), re.M)
    fleet = json.loads((tmp_path / "fleet.json").read_text())
    assert fleet["not_read"] == []
    judged = [node for group in fleet["groups"] for node in group["nodes"]]
    assert len(judged) == len(SLURM_NODES)
    assert fleet["named"] and all("gpu-d" in name for name in fleet["named"]), fleet["named"]


@pytest.mark.slow  # several gputopo processes
def test_srun_replaces_percent_n_in_its_own_file_names_only(tmp_path):
    """Why the recipe does not write --json out/%N.json: srun hands the command its arguments as
    written (man srun: SYNOPSIS, and %N under "IO Redirection" for --output/--error/--input only), so
    every node writes one file literally called %N.json, each replacing the last."""
    (tmp_path / "out").mkdir()
    env = environment(FAKE_SRUN_NODES="n1,n2,n3", PYTEST_GPUTOPO_MACHINE="hgx-h100")
    check = ("gputopo", "check", "--json", "out/%N.json")
    done = run_here(tmp_path, "srun", "--nodes=3", "--ntasks-per-node=1", "--output=out/%N.log", *check, env=env)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["%N.json", "n1.log", "n2.log", "n3.log"]


def test_the_stand_in_gives_each_task_slurms_variables(tmp_path):
    env = environment(FAKE_SRUN_NODES="a,b")
    says = (
        "echo $SLURM_PROCID $SLURM_NODEID $SLURM_LOCALID $SLURMD_NODENAME $SLURM_STEP_NUM_NODES $SLURM_STEP_NUM_TASKS"
    )
    tasks = ("-N", "2", "--ntasks-per-node", "2", "--output=t%2t-%N-%n.txt")
    done = run_here(tmp_path, "srun", *tasks, "sh", "-c", says + " %N", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    said = {p.name: p.read_text().strip() for p in tmp_path.glob("t*.txt")}
    assert said == {
        "t00-a-0.txt": "0 0 0 a 2 4 %N",
        "t01-a-0.txt": "1 0 1 a 2 4 %N",
        "t02-b-1.txt": "2 1 0 b 2 4 %N",
        "t03-b-1.txt": "3 1 1 b 2 4 %N",
    }
    # the highest exit status of its tasks; an option it does not know is refused, not ignored
    assert subprocess.run(["srun", "-N", "2", "sh", "-c", "exit $SLURM_NODEID"], cwd=tmp_path, env=env).returncode == 1
    refused = run_here(tmp_path, "srun", "--exclusive", "true", env=env)
    assert refused.returncode == 1 and "unknown option '--exclusive'" in refused.stderr


@pytest.mark.slow  # several gputopo processes
def test_under_srun_with_master_addr_each_node_checks_itself_alone(tmp_path):
    """A batch script for torch exports MASTER_ADDR; with srun's SLURM_PROCID the plugin would take the
    checks of all nodes for one distributed run (a store on rank 0, an all-reduce across nodes).
    gputopo check checks its own node: no rank line, no store, one report per node."""
    env = environment(
        FAKE_SRUN_NODES="gpu-a,gpu-b",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29613",
        FAKE_SRUN_TASK_ENV=json.dumps(slurm_nodes(tmp_path)),
    )
    (tmp_path / "out").mkdir()
    done = run_here(
        tmp_path, "srun", "--nodes=2", "--output=out/%N.log", "gputopo", "check", "--json-dir", "out/", env=env
    )
    logs = {p.name: p.read_text() for p in (tmp_path / "out").glob("*.log")}
    assert done.returncode == 0, logs
    for log in logs.values():
        assert "rank" not in log and "store" not in log, log
        assert re.search(r"^gputopo check: wrote out/gpu-[ab]-[0-9a-f]{12}\.json$", log, re.M), log
    assert len(list((tmp_path / "out").glob("*.json"))) == 2


# ------------------------------------------------------------------------------ gputopo check --json-dir


def _check(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_here(tmp_path, "gputopo", "check", *args, env=env)


@pytest.mark.slow  # several gputopo processes
def test_json_dir_names_the_report_by_host_and_gpus_and_replaces_only_its_own(tmp_path):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    one, other = node_profile(profiles, "vm", uuid_tag=1), node_profile(profiles, "vm", uuid_tag=2)
    first = _check(tmp_path, "--machine", str(one), "--json-dir", "nested/out")
    assert first.returncode == 0, first.stderr
    (name,) = [p.name for p in (tmp_path / "nested" / "out").iterdir()]
    assert DIGEST.match(name)["host"] == "vm" and f"gputopo check: wrote nested/out/{name}" in first.stdout
    assert _check(tmp_path, "--machine", str(other), "--json-dir", "nested/out").returncode == 0
    assert len(list((tmp_path / "nested" / "out").iterdir())) == 2  # same name, other GPUs: another file
    written = json.loads((tmp_path / "nested" / "out" / name).read_text())["written"]
    assert _check(tmp_path, "--machine", str(one), "--json-dir", "nested/out").returncode == 0
    assert len(list((tmp_path / "nested" / "out").iterdir())) == 2  # the same node again: its own file
    assert json.loads((tmp_path / "nested" / "out" / name).read_text())["written"] >= written
    assert not list((tmp_path / "nested" / "out").glob(".*"))  # no temporary file left


@pytest.mark.slow  # several gputopo processes
def test_json_dir_never_writes_through_a_link_or_over_what_is_not_a_file(tmp_path):
    """The file's name is the tool's, in a folder others write to: a symlink planted at it is refused,
    not followed (the file it points to is untouched), and so is a FIFO; exit 4, saying so."""
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    machine = node_profile(profiles, "gpu-x", uuid_tag=7)
    assert _check(tmp_path, "--machine", str(machine), "--json-dir", "out").returncode == 0
    (name,) = [p.name for p in (tmp_path / "out").iterdir()]
    (tmp_path / "out" / name).unlink()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "out" / name).symlink_to(victim)
    done = _check(tmp_path, "--machine", str(machine), "--json-dir", "out")
    assert done.returncode == 4 and "it is a symlink" in done.stderr, done.stderr
    assert victim.read_text() == "keep me" and (tmp_path / "out" / name).is_symlink()
    (tmp_path / "out" / name).unlink()
    os.mkfifo(tmp_path / "out" / name)
    done = _check(tmp_path, "--machine", str(machine), "--json-dir", "out")
    assert done.returncode == 4 and "FIFO" in done.stderr, done.stderr


def test_json_dir_refuses_a_folder_it_cannot_write_before_the_check(tmp_path):
    (tmp_path / "file").write_text("")
    done = _check(tmp_path, "--machine", "hgx-h100", "--json-dir", "file")
    assert done.returncode == 2 and "--json-dir file: cannot make the folder" in done.stderr
    assert "collected" not in done.stdout  # refused before pytest started
    done = _check(tmp_path, "--machine", "hgx-h100", "--json-dir", "x", "--json", "y.json")
    assert done.returncode == 2 and "not allowed with argument" in done.stderr


@pytest.mark.parametrize(
    "host, gpus, name",
    [
        ("gpu-node-07", ["GPU-b", "GPU-a"], "gpu-node-07-{digest}.json"),
        ("../../etc/passwd", ["GPU-a", "GPU-b"], "_.._etc_passwd-{digest}.json"),
        ("::add-mask::x y", ["GPU-a", "GPU-b"], "__add-mask__x_y-{digest}.json"),
        (None, ["GPU-a", "GPU-b"], "unnamed-{digest}.json"),
        ("...", [], "unnamed-no-gpu-uuid.json"),
    ],
)
def test_the_file_name_is_a_safe_name_of_host_and_gpus(host, gpus, name):
    import hashlib

    from pytest_gputopo.cli.check import document_name

    digest = hashlib.sha256(b"GPU-a\nGPU-b").hexdigest()[:12]
    doc = {"topology": {"hostname": host, "gpus": [{"index": i, "uuid": u} for i, u in enumerate(gpus)]}}
    assert document_name(doc) == name.format(digest=digest)
    assert "/" not in document_name(doc) and not document_name(doc).startswith(".")


# ---------------------------------------------------------------------------------- GitHub Actions


def _tool(name: str, *args: str) -> subprocess.CompletedProcess:
    """A validator of the dev extra (requirements-dev.txt), run as its own command; both work offline."""
    return subprocess.run([str(BIN / name), *args], capture_output=True, text=True, timeout=120)


def test_the_actions_recipe_is_a_valid_workflow(tmp_path):
    """GitHub's workflow schema (SchemaStore's github-workflow.json, vendored in check-jsonschema, read
    offline) takes the recipe; the same recipe with a misspelt key is refused, so the check is real."""
    text = recipe("actions/upload-artifact@v4").text
    (tmp_path / "fleet.yml").write_text(text)
    done = _tool("check-jsonschema", "--builtin-schema", "vendor.github-workflows", str(tmp_path / "fleet.yml"))
    assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / "bad.yml").write_text(text.replace("runs-on: ubuntu-latest", "run-on: ubuntu-latest"))
    done = _tool("check-jsonschema", "--builtin-schema", "vendor.github-workflows", str(tmp_path / "bad.yml"))
    assert done.returncode == 1, done.stdout + done.stderr


def _expand(text: str, context: dict[str, str]) -> str:
    """``${{ matrix.runner }}`` as Actions expands it (the expressions these recipes use: a context
    value); any other expression is refused, so that the simulation cannot silently skip one."""

    def one(found: re.Match) -> str:
        expr = found.group(1).strip()
        if expr not in context:
            raise AssertionError(f"the simulation does not evaluate ${{{{ {expr} }}}}")
        return context[expr]

    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


def _runs(condition, failed: bool) -> bool:
    """Whether a step or job with this ``if:`` runs (the status functions: a step with none runs only
    while everything before it succeeded: success())."""
    condition = (condition or "success()").strip()
    if condition.startswith("${{"):
        condition = condition[3:-2].strip()
    known = {"success()": not failed, "always()": True, "failure()": failed, "!cancelled()": True}
    assert condition in known, f"the simulation does not evaluate if: {condition}"
    return known[condition]


def simulate_workflow(workflow: dict, root: Path, runners: dict[str, dict[str, str]], skip: tuple[str, ...]) -> dict:
    """Runs the workflow's jobs here: each matrix job in a folder of its own with the runner's
    environment, its steps' ``if:`` evaluated, ``run:`` in bash (those starting with ``skip`` left out:
    installs), upload-artifact keeping the files of its path (a folder's files relative to it, as
    upload-artifact roots an artifact at the paths' common folder), download-artifact with ``pattern``
    laying each artifact in a folder of its name (merge-multiple false, its default).
    Returns {job: {"failed": bool, "steps": [(step, ran, status)]}, "artifacts": {name: {rel: bytes}}}."""
    artifacts: dict[str, dict[str, bytes]] = {}
    jobs: dict = {}

    def run_job(name: str, job: dict, context: dict[str, str], folder: Path, env: dict[str, str]) -> dict:
        folder.mkdir(parents=True, exist_ok=True)
        summary = folder / "step_summary.md"
        failed, steps = False, []
        for step in job["steps"]:
            if not _runs(step.get("if"), failed):
                steps.append((step, False, None))
                continue
            status = 0
            if "run" in step:
                command = _expand(step["run"], context)
                if command.startswith(skip):
                    steps.append((step, False, None))
                    continue
                status = subprocess.run(
                    ["bash", "-e", "-c", command],
                    cwd=folder,
                    timeout=300,
                    env={**env, "GITHUB_STEP_SUMMARY": str(summary)},
                ).returncode
            elif step["uses"].startswith("actions/upload-artifact@"):
                w = {k: _expand(str(v), context) for k, v in step["with"].items()}
                path = folder / w["path"]
                files = [p for p in (path.rglob("*") if path.is_dir() else [path]) if p.is_file()]
                base = path if path.is_dir() else path.parent
                artifacts[w["name"]] = {str(p.relative_to(base)): p.read_bytes() for p in files}
            elif step["uses"].startswith("actions/download-artifact@"):
                w = {k: _expand(str(v), context) for k, v in step["with"].items()}
                merged = str(w.get("merge-multiple", "false")).lower() == "true"
                for artifact, files in artifacts.items():
                    if fnmatch.fnmatchcase(artifact, w.get("pattern", "*")):
                        target = folder / w.get("path", ".") / ("" if merged else artifact)
                        for rel, data in files.items():
                            (target / rel).parent.mkdir(parents=True, exist_ok=True)
                            (target / rel).write_bytes(data)
            else:
                raise AssertionError(f"the simulation does not run {step['uses']}")
            steps.append((step, True, status))
            failed = failed or status != 0
        return {"failed": failed, "steps": steps, "folder": folder}

    for name, job in workflow["jobs"].items():
        needs = job.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        if not _runs(job.get("if"), any(jobs[n]["failed"] for n in needs)):
            jobs[name] = {"failed": False, "skipped": True, "steps": []}
            continue
        matrix = job.get("strategy", {}).get("matrix", {})
        if matrix:
            ((key, values),) = matrix.items()
            results = [
                run_job(name, job, {f"matrix.{key}": v}, root / name / v, environment(**runners.get(v, {})))
                for v in values
            ]
            jobs[name] = {"failed": any(r["failed"] for r in results), "runs": dict(zip(values, results, strict=True))}
        else:
            jobs[name] = run_job(name, job, {}, root / name, environment())
    return {"jobs": jobs, "artifacts": artifacts}


def _runners(tmp_path: Path, names: list[str], degraded: str) -> dict[str, dict[str, str]]:
    profiles = tmp_path / "profiles"
    profiles.mkdir(exist_ok=True)
    return {
        name: {
            "PYTEST_GPUTOPO_MACHINE": str(
                node_profile(profiles, name, "hgx-h100-nvlink-down" if name == degraded else "hgx-h100", i)
            )
        }
        for i, name in enumerate(names)
    }


@pytest.mark.slow  # several gputopo processes
def test_the_actions_recipe_uploads_every_nodes_report_and_the_fleet_reads_them(tmp_path):
    """The matrix's checks on recorded machines (the second runner's GPU5 lost its NVLinks: its check
    exits 1), the upload that must run all the same, download-artifact's per-artifact folders, and the
    fleet job: it reads all three reports, names the degraded node, writes the step summary, and
    uploads its page although it exits 1. Without the upload's `if: always()` the degraded node's
    report is lost: the simulation tells the two apart."""
    import yaml

    block = recipe("actions/upload-artifact@v4")
    workflow = yaml.safe_load(block.text)
    check = workflow["jobs"]["check"]
    assert check["strategy"]["fail-fast"] is False  # or a failed check cancels the others
    names = check["strategy"]["matrix"]["runner"]
    skip = block.not_run[0]
    result = simulate_workflow(workflow, tmp_path / "run", _runners(tmp_path, names, names[1]), skip)
    runs = result["jobs"]["check"]["runs"]
    assert [runs[n]["failed"] for n in names] == [False, True, False]
    assert sorted(result["artifacts"]) == sorted([f"gputopo-{n}" for n in names] + ["gputopo-fleet"])
    for n in names:  # one report per artifact, named by the node's host and GPUs
        (rel,) = result["artifacts"][f"gputopo-{n}"]
        assert DIGEST.match(rel)["host"] == n
    fleet = result["jobs"]["fleet"]
    statuses = [status for _, ran, status in fleet["steps"] if ran]
    assert statuses == [0, 1, 0], fleet["steps"]  # download, fleet (names a node: 1), upload of the page
    docs = fleet["folder"] / "docs"
    downloaded = sorted(str(p.relative_to(docs)) for p in docs.rglob("*.json"))
    assert [p.split("/")[0] for p in downloaded] == sorted(f"gputopo-{n}" for n in names)
    summary = (fleet["folder"] / "step_summary.md").read_text()
    assert names[1] in summary and "fleet.html" in result["artifacts"]["gputopo-fleet"]

    # The same workflow without the upload's if: always(): the degraded node uploads nothing.
    for step in workflow["jobs"]["check"]["steps"]:
        if step.get("uses", "").startswith("actions/upload-artifact@"):
            step.pop("if")
    result = simulate_workflow(workflow, tmp_path / "without", _runners(tmp_path, names, names[1]), skip)
    assert f"gputopo-{names[1]}" not in result["artifacts"]


# ------------------------------------------------------------------------------------------ Kubernetes


def test_the_kubernetes_recipe_is_a_valid_job(tmp_path):
    """Kubernetes' own API schema (kubernetes-validate, its schemas vendored: offline), strict: an
    unknown field is refused, so the recipe's podFailurePolicy and backoffLimitPerIndex are real fields."""
    text = recipe("kind: Job").text
    (tmp_path / "job.yaml").write_text(text)
    done = _tool("kubernetes-validate", "--strict", str(tmp_path / "job.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr
    (tmp_path / "bad.yaml").write_text(text.replace("backoffLimitPerIndex:", "backoffLimitPerNode:"))
    done = _tool("kubernetes-validate", "--strict", str(tmp_path / "bad.yaml"))
    assert done.returncode != 0, done.stdout + done.stderr


def _k8s_expand(arg: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of a container's command and args: $(VAR) is the container's variable
    VAR where it is defined, left as written where not; $$ is a literal $."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        arg,
    )


def pod_failure_action(policy: dict, container: str, exit_code: int, conditions: tuple[str, ...] = ()) -> str:
    """What a Job does with a failed pod by its podFailurePolicy (the first rule that matches; none:
    Count, the pod counts against the backoff limit and is retried within it). onExitCodes with In
    matches a container's exit code in the values (of the named container where one is named)."""
    for rule in policy["rules"]:
        codes = rule.get("onExitCodes")
        if codes is not None:
            assert codes["operator"] == "In", "the simulation evaluates In only"
            if codes.get("containerName", container) == container and exit_code in codes["values"]:
                return rule["action"]
        for condition in rule.get("onPodConditions", []):
            if condition["type"] in conditions:
                return rule["action"]
    return "Count"


@pytest.mark.slow  # several gputopo processes
def test_the_kubernetes_recipe_writes_every_report_and_does_not_retry_a_degraded_node(tmp_path):
    """Each pod's command as Kubernetes runs it ($(NODE_NAME) expanded from the downward API's node
    name; the volume's /out a folder here): the healthy nodes exit 0, the degraded one exits 1 with its
    report written, and the Job's policy marks its index failed without retrying it (a pod killed for
    another reason is retried; an evicted one is not counted); the fleet reads all four and names it."""
    import yaml

    job = yaml.safe_load(recipe("kind: Job").text)
    spec = job["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["restartPolicy"] == "Never" and spec["completionMode"] == "Indexed"  # what the policy needs
    mount = container["volumeMounts"][0]["mountPath"]
    out = tmp_path / "volume"
    out.mkdir()
    nodes = ["node-a", "node-b", "node-c", "node-d"]
    runners = _runners(tmp_path, nodes, "node-d")
    for node in nodes:
        env = {e["name"]: node for e in container["env"] if e["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"}
        command = [_k8s_expand(a, env).replace(mount, str(out), 1) for a in container["command"]]
        done = run_here(tmp_path, *command, env=environment(**runners[node], **env))
        if node == "node-d":
            assert done.returncode == 1, done.stdout[-2000:]
            assert pod_failure_action(spec["podFailurePolicy"], container["name"], done.returncode) == "FailIndex"
        else:
            assert done.returncode == 0, done.stdout[-2000:]
    assert sorted(p.name for p in out.iterdir()) == [f"{n}.json" for n in nodes]
    policy = spec["podFailurePolicy"]
    assert pod_failure_action(policy, "check", 137) == "Count" and spec["backoffLimitPerIndex"] >= 1
    assert pod_failure_action(policy, "check", 137, ("DisruptionTarget",)) == "Ignore"
    fleet = run_here(tmp_path, "gputopo", "fleet", str(out), "--json", str(tmp_path / "fleet.json"))
    assert fleet.returncode == 1, fleet.stdout + fleet.stderr
    judged = json.loads((tmp_path / "fleet.json").read_text())
    assert judged["named"] == ["node-d"] and judged["not_read"] == []


# ------------------------------------------------------------------------------------------ README


@pytest.mark.slow  # several gputopo processes
def test_the_readme_names_the_fleet_view_with_a_command_it_takes(tmp_path):
    """The README's commands name gputopo fleet (its line is left out of the README's run: it needs many
    nodes' reports, which docs/fleet.md's example makes), the line is one gputopo fleet takes, and the
    docs list points at docs/fleet.md."""
    import shlex

    readme = (ROOT / "README.md").read_text()
    (block,) = [b for b in blocks() if b.path == "README.md" and "gputopo check --level full --html" in b.text]
    (line,) = [ln for ln in block.lines if ln.startswith("gputopo fleet ")]
    assert "gputopo fleet" in block.note and "[docs/fleet.md](docs/fleet.md)" in readme
    args = shlex.split(line.split("  #")[0])
    out = tmp_path / "out"
    out.mkdir()
    for i, machine in enumerate(["hgx-h100", "hgx-h100", "hgx-h100"]):  # three nodes' reports, then the line
        assert (
            _check(
                tmp_path, "--machine", str(node_profile(tmp_path, f"n{i}", machine, i)), "--json-dir", "out"
            ).returncode
            == 0
        )
    done = run_here(tmp_path, *args, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "fleet.html").exists() and "3 nodes" in done.stdout
