"""``gputopo check``: the node health check, pytest with only the generated --gputopo-check items."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile

from ..render.escape import terminal
from ..runtime import files
from ..runtime.environ import SRUN_VARS, TORCHRUN_VARS
from .common import CliError, add_command


def cmd_check(args) -> int:
    """A node health check: pytest with only the generated --gputopo-check items."""
    if args.json_dir is not None:
        folder = _json_dir(args.json_dir)  # refused before anything runs
        with tempfile.TemporaryDirectory(prefix="gputopo-check-doc-") as private:
            code = _run_check(args, os.path.join(private, "check.json"))
            return _keep(os.path.join(private, "check.json"), folder, code)
    return _run_check(args, args.json)


def _run_check(args, json_path: str | None) -> int:
    import pytest  # only when the check runs: the other commands never load pytest

    # --assert=plain: no test of the user's runs here, and rewriting would warn that this package,
    # imported already by this command, cannot be rewritten.
    argv = ["-p", "no:cacheprovider", "--no-header", "--assert=plain", f"--gputopo-check={args.level}"]
    argv += [f"--gputopo-machine={args.machine}"] if args.machine else []
    argv += [f"--gputopo-json={json_path}"] if json_path else []
    argv += [f"--gputopo-html={args.html}"] if args.html else []
    argv += [f"--junitxml={args.junitxml}"] if args.junitxml else []
    argv += [f"--gputopo-allreduce-backend={args.allreduce_backend}"] if args.allreduce_backend else []
    argv += ["-v"] if args.verbose else []
    # Nothing of the user's is collected: the one path is an empty folder, and no conftest.py above it
    # is read. The root is where gputopo was started, so that no item's id names that folder.
    with tempfile.TemporaryDirectory(prefix="gputopo-check-") as empty, _alone():
        code = pytest.main(argv + ["--rootdir", os.getcwd(), "--confcutdir", empty, empty])
    return int(code)


@contextlib.contextmanager
def _alone():
    """The check of this node alone, whatever started it: srun starts one task per node with its rank
    (SLURM_PROCID), and a batch script for torch often exports MASTER_ADDR, which together make the
    plugin join the ranks of a distributed run (a store on rank 0, an all-reduce across the nodes that
    is no node's own figure). The launcher's rank variables are hidden from the check's pytest and
    given back after it."""
    hidden = {name: os.environ.pop(name) for name in TORCHRUN_VARS + SRUN_VARS if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(hidden)


def _json_dir(path: str) -> str:
    """The folder --json-dir names, made if missing (with its parents, as ``mkdir -p``: every node of a
    job may make it at once), or a CliError saying why no document can be written there."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise CliError(f"--json-dir {path}: cannot make the folder: {exc.strerror or exc}") from None
    problem = files.unwritable(os.path.join(path, ".gputopo-check.json"))
    if problem:
        raise CliError(f"--json-dir {path}: cannot write: {problem}")
    return path


def document_name(document: dict) -> str:
    """The file name a check report is kept under in a --json-dir folder: its host name (letters,
    digits, ``.``, ``_`` and ``-`` kept, anything else ``_``) and a digest of its GPUs' UUIDs, so that
    hosts that share a name (VMs, containers) but not their GPUs never overwrite each other's
    document, and a node checked again replaces its own: ``gpu-node-07-3f2a9c81d0e4.json``."""
    topology = document.get("topology") if isinstance(document.get("topology"), dict) else {}
    # topology and gpus: checked to be a dict and a list (mypy does not narrow a repeated get())
    host = re.sub(r"[^A-Za-z0-9._-]", "_", str(topology.get("hostname") or ""))[:64].lstrip(".-") or "unnamed"  # type: ignore[union-attr]
    gpus = topology.get("gpus") if isinstance(topology.get("gpus"), list) else []  # type: ignore[union-attr]
    uuids = sorted(str(g["uuid"]) for g in gpus if isinstance(g, dict) and g.get("uuid"))  # type: ignore[union-attr]
    digest = hashlib.sha256("\n".join(uuids).encode("utf-8")).hexdigest()[:12] if uuids else "no-gpu-uuid"
    return f"{host}-{digest}.json"


def _keep(written: str, folder: str, code: int) -> int:
    """Copy the report the check wrote privately into ``folder`` under its node's name (atomically,
    replacing only a regular file: ``files.write_named``); the check's status, or 4 where the report
    cannot be kept (as pytest's for a report path it cannot write)."""
    if not os.path.exists(written):  # the check stopped before its report (a usage error): said already
        return code
    try:
        text = files.read_text(written)
        path = files.write_named(folder, document_name(json.loads(text)), text)
    except (OSError, ValueError) as exc:
        sys.stderr.write(
            terminal(
                f"gputopo check: --json-dir {folder}: the report was not kept: {getattr(exc, 'strerror', None) or exc}"
            )
            + "\n"
        )
        return 4
    sys.stdout.write(terminal(f"gputopo check: wrote {path}") + "\n")
    return code


def add_check(sub) -> None:
    p = add_command(
        sub,
        "check",
        "run the node health check (pytest --gputopo-check) and report like pytest",
        "Run pytest with only the generated health-check items (pytest --gputopo-check) on this host\n"
        "or a recorded machine, and exit with pytest's status.",
        "  gputopo check --level full --junitxml node.xml --html node.html\n"
        "  gputopo check --machine hgx-h100-nvlink-down\n"
        "  srun --nodes=64 --ntasks-per-node=1 gputopo check --level full --json-dir out/",
        "  0    every check passed (or was skipped, saying why)\n"
        "  1    a check failed\n"
        "  2    interrupted (Ctrl-C), as pytest; or a bad argument of gputopo check itself\n"
        "  3    an internal error, as pytest\n"
        "  4    a usage error, as pytest: an unknown --machine, a report path that cannot be written\n"
        "       (--json-dir: also after the check, where its file's name holds a link or other non-file)",
    )
    p.add_argument(
        "--level",
        choices=["quick", "full"],
        default="quick",
        help="quick: the topology, each GPU's PCIe width and NVLinks, NVML's P2P status per pair "
        "(seconds); full: quick, plus measured P2P copies per pair, host<->device copies per "
        "GPU and one all-reduce (default: quick)",
    )
    p.add_argument(
        "--machine", metavar="NAME|PATH", help="check a recorded machine instead of this host (default: this host)"
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--json", metavar="PATH", help="write topology, measurements and outcomes as JSON (default: none)"
    )
    where.add_argument(
        "--json-dir",
        metavar="DIR",
        help="write that JSON into DIR (made if missing) as HOST-DIGEST.json: the host name and "
        "a digest of the GPUs' UUIDs, so every node of a job (srun, a Job, a matrix) "
        "writes its own file into one shared folder for gputopo fleet (default: none)",
    )
    p.add_argument("--html", metavar="PATH", help="write the self-contained HTML report (default: none)")
    p.add_argument("--junitxml", metavar="PATH", help="write JUnit XML (default: none)")
    p.add_argument(
        "--allreduce-backend",
        choices=["nccl", "gloo"],
        help="torch.distributed backend of the all-reduce: nccl (GPUs) or gloo (CPUs) "
        "(default: nccl, as --gputopo-allreduce-backend)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print every item's measured, expected, floor and ratio (default: failed and skipped items only)",
    )
    p.set_defaults(func=cmd_check)
