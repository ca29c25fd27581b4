"""``gputopo check``: the node health check, pytest with only the generated --gputopo-check items."""

from __future__ import annotations

import os

from .common import add_command


def cmd_check(args) -> int:
    """A node health check: pytest with only the generated --gputopo-check items."""
    import tempfile

    import pytest

    # --assert=plain: no test of the user's runs here, and rewriting would warn that this package,
    # imported already by this command, cannot be rewritten.
    argv = ["-p", "no:cacheprovider", "--no-header", "--assert=plain", f"--gputopo-check={args.level}"]
    argv += [f"--gputopo-machine={args.machine}"] if args.machine else []
    argv += [f"--gputopo-json={args.json}"] if args.json else []
    argv += [f"--gputopo-html={args.html}"] if args.html else []
    argv += [f"--junitxml={args.junitxml}"] if args.junitxml else []
    argv += [f"--gputopo-allreduce-backend={args.allreduce_backend}"] if args.allreduce_backend else []
    argv += ["-v"] if args.verbose else []
    # Nothing of the user's is collected: the one path is an empty folder, and no conftest.py above it
    # is read. The root is where gputopo was started, so that no item's id names that folder.
    with tempfile.TemporaryDirectory(prefix="gputopo-check-") as empty:
        code = pytest.main(argv + ["--rootdir", os.getcwd(), "--confcutdir", empty, empty])
    return int(code)


def add_check(sub) -> None:
    p = add_command(sub, "check", "run the node health check (pytest --gputopo-check) and report like pytest",
                    "Run pytest with only the generated health-check items (pytest --gputopo-check) on this host\n"
                    "or a recorded machine, and exit with pytest's status.",
                    "  gputopo check --level full --junitxml node.xml --html node.html\n"
                    "  gputopo check --machine hgx-h100-nvlink-down",
                    "  0    every check passed (or was skipped, saying why)\n"
                    "  1    a check failed\n"
                    "  2    interrupted (Ctrl-C), as pytest; or a bad argument of gputopo check itself\n"
                    "  3    an internal error, as pytest\n"
                    "  4    a usage error, as pytest: an unknown --machine, a report path that cannot be written")
    p.add_argument("--level", choices=["quick", "full"], default="quick",
                   help="quick: the topology, each GPU's PCIe width and NVLinks, NVML's P2P status per pair "
                        "(seconds); full: quick, plus measured P2P copies per pair, host<->device copies per "
                        "GPU and one all-reduce (default: quick)")
    p.add_argument("--machine", metavar="NAME|PATH",
                   help="check a recorded machine instead of this host (default: this host)")
    p.add_argument("--json", metavar="PATH",
                   help="write topology, measurements and outcomes as JSON (default: none)")
    p.add_argument("--html", metavar="PATH", help="write the self-contained HTML report (default: none)")
    p.add_argument("--junitxml", metavar="PATH", help="write JUnit XML (default: none)")
    p.add_argument("--allreduce-backend", choices=["nccl", "gloo"],
                   help="torch.distributed backend of the all-reduce: nccl (GPUs) or gloo (CPUs) "
                        "(default: nccl, as --gputopo-allreduce-backend)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print every item's measured, expected, floor and ratio (default: failed and "
                        "skipped items only)")
    p.set_defaults(func=cmd_check)
