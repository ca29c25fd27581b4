# Root conftest: settings shared by the test suite.
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import loopback
from schedule import slow_first_per_worker

# pytest as a user starts it, in a process of its own; it writes no cache into the test's folder.
USER_PYTEST = (sys.executable, "-m", "pytest", "-p", "no:cacheprovider")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _private_network() -> list[str] | None:
    """The prefix that runs a command in a network namespace of its own, with nothing but its own
    loopback (``unshare -rn``: a user namespace, no root needed), or None where this system allows none.
    Chromium reaches out on its own (DNS-over-HTTPS probes, Google's update and account hosts, seen
    with dev/loopback-audit) whatever its flags say: tests send traffic to loopback only."""
    if shutil.which("unshare") is None:
        return None
    try:
        made = subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return ["unshare", "-rn"] if made.returncode == 0 else None


PRIVATE_NETWORK = _private_network() if CHROMIUM else None
needs_browser = pytest.mark.skipif(
    CHROMIUM is None or PRIVATE_NETWORK is None,
    reason="no chromium here (dev/setup installs Debian's package where it can)"
    if CHROMIUM is None
    else "no network namespace of its own for chromium here (unshare -rn): it would reach beyond loopback",
)


def browser_render(page: Path, tmp_path: Path, size: str = "1400,2000"):
    """Debian's chromium, headless, in a window of ``size``: the page as a PNG (its size in bytes) and
    as its DOM (after the page's scripts ran), with the browser's log (console errors show there as
    CONSOLE / Uncaught)."""
    common = [
        *PRIVATE_NETWORK,
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--enable-logging=stderr",
        "--v=0",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--user-data-dir=" + str(tmp_path / "profile"),
    ]
    shot = subprocess.run(
        common + [f"--window-size={size}", f"--screenshot={tmp_path / 'page.png'}", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    png = (tmp_path / "page.png").stat().st_size if (tmp_path / "page.png").exists() else 0
    dom = subprocess.run(
        common + [f"--window-size={size}", "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    return png, dom.stdout, shot.stderr + dom.stderr


# Tests that run a real benchmark (gloo on this host's CPUs) need torch; on a Python whose torch is
# not installed (dev/test-python), they skip saying so.
needs_torch = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed in this environment (dev/setup installs it)",
)


def quick_gloo(size: str) -> tuple[str, ...]:
    """The options of an all-reduce of ``size`` measured with gloo on this host's CPUs, 1 s per size: for
    the tests that assert what a run does with a figure, not its precision."""
    return ("--gputopo-allreduce-backend", "gloo", "--gputopo-allreduce-size", size, "--gputopo-bench-budget", "1")


# The shared corpus of real tool outputs (../shared/corpus): beside the repository, not in it, so a
# clone alone skips the tests that read it, with this reason.
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
NO_CORPUS = f"no conformance corpus at {CORPUS} (it lives beside the repository, not in it)"


def corpus_meta(path: Path) -> dict:
    """What the corpus says of one of its samples: the ``.meta.json`` beside it."""
    return json.loads(path.with_suffix(".meta.json").read_text())


def corpus_samples(kind: str, keep=None) -> list[Path]:
    """The corpus's samples of one kind (its folder), in order; with ``keep``, those whose meta it
    accepts. None where the corpus is not here."""
    folder = CORPUS / kind
    found = sorted(folder.glob("*.txt")) if folder.is_dir() else []
    return [p for p in found if keep is None or keep(corpus_meta(p))]


def corpus_samples_but(kind: str) -> list[Path]:
    """Every corpus sample of another kind than ``kind``: what its reader must refuse."""
    return sorted(p for p in CORPUS.glob("*/*.txt") if p.parent.name != kind) if CORPUS.is_dir() else []


def corpus_cases(paths: list[Path]) -> list:
    """One test case per sample, or one case skipped with the reason where the corpus is not here."""
    if not paths:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_CORPUS), id="no-corpus")]
    return [pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in paths]


# Every machine the package bundles (tests/test_bundled_machines.py holds recorded.bundled_names() to it).
BUNDLED_MACHINES = (
    "dgx-a100",
    "hgx-h100",
    "dgx1-v100",
    "2x-rtx3090-nvlink",
    "4x-a100-40gb",
    "gb200-tray",
    "4x-rtx4090",
    "8x-l40s",
    "4x-a30",
    "8x-rtx4090",
    "2x-rtx-pro-6000",
    "single-gpu",
    "no-gpu",
    "hgx-h100-nvlink-down",
    "hgx-h100-pcie-x8",
    "8x-l40s-p2p-disabled",
)

# CI machines are small and shared: no per-example deadline (a slow example is not a bug here).
settings.register_profile("gputopo", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gputopo")


GPU_TESTS = Path(__file__).resolve().with_name("gpu")


def _measures_gpus_here(config) -> bool:
    """The run reaches tests/gpu and this host has an NVIDIA GPU (the driver lists one): those tests
    measure it, and tests run beside them would share its GPUs, CPUs and memory bandwidth."""
    if not any(Path("/proc/driver/nvidia/gpus").glob("*")):
        return False
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if path == GPU_TESTS or path in GPU_TESTS.parents or GPU_TESTS in path.parents:
            return True
    return False


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns "auto" into a number of workers
def pytest_cmdline_main(config):
    """This suite runs in parallel, one xdist worker per CPU, unless the run gives -n (-n 0: in this
    process), is a worker itself, or measures this host's GPUs; worksteal hands an idle worker some of
    a busy one's tests, so that one long test does not leave the other CPUs idle at the end. (A worker
    more than the CPUs, to run tests while others wait on ranks and timeouts, took as long on two CPUs
    and 40 s more CPU: docs/testing.md.)"""
    if (
        getattr(config.option, "numprocesses", 0) is None
        and not hasattr(config, "workerinput")
        and not _measures_gpus_here(config)
    ):
        config.option.numprocesses = "auto"
        if config.option.dist == "no":
            config.option.dist = "worksteal"


# Tests marked ``slow`` take seconds each, most of them in real processes (pytest runs, torchrun or
# srun ranks, gloo workers, chromium). A plain `pytest` leaves them out so that a contributor waits
# minutes at most; --with-slow runs them too (the whole suite: the README's command, .ci/run). A run
# that names its files or tests, or selects with -m, runs what it names (-m slow: only them).
def pytest_addoption(parser):
    parser.addoption(
        "--with-slow", action="store_true", help="also run the tests marked slow (the whole suite, as .ci/run runs it)"
    )


def _slow_left_out(config) -> bool:
    # xdist's workers get the run's own arguments, so each takes the controller's decision
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS and not (
        config.getoption("--with-slow") or config.getoption("markexpr")
    )


def pytest_report_header(config):
    if _slow_left_out(config):
        return "slow tests left out: --with-slow runs the whole suite"


@pytest.hookimpl(trylast=True)  # after pytest's own reordering (fixtures) and deselection (-m, -k)
def pytest_collection_modifyitems(config, items):
    if _slow_left_out(config):
        slow = [item for item in items if item.get_closest_marker("slow")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("slow")]
    # An xdist worker: every worker's share of the run starts with slow tests (tests/schedule.py)
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    items[:] = slow_first_per_worker(items, workers)


# Traffic stays on loopback (tests/loopback.py): this process refuses any socket aimed elsewhere, and
# the test that asked fails naming it, even where the code under test caught the refusal.
loopback.install()


@pytest.fixture(scope="session", autouse=True)
def _children_without_hypothesis():
    """The pytest processes the tests start (pytester's runs, torchrun's and srun's ranks, gputopo
    check) run no hypothesis test, and its plugin's loading imports all of hypothesis: 0.1-0.2 s of CPU
    in each, hundreds of times in the whole suite. Set here, in the process that runs the tests (a
    worker), after its own options were read, so this suite keeps the plugin; a test that sets
    PYTEST_ADDOPTS itself (or a reader's shell, test_doc_examples) has its own."""
    before = os.environ.get("PYTEST_ADDOPTS")
    os.environ["PYTEST_ADDOPTS"] = " ".join(filter(None, [before, "-p no:hypothesispytest"]))
    yield
    if before is None:
        os.environ.pop("PYTEST_ADDOPTS", None)
    else:
        os.environ["PYTEST_ADDOPTS"] = before


@pytest.fixture(autouse=True)
def _loopback_only():
    before = len(loopback.refused)
    yield
    if len(loopback.refused) > before:
        pytest.fail("traffic beyond loopback (docs/testing.md): " + "; ".join(loopback.refused[before:]), pytrace=False)


# pytester's in-process runs drop the modules they imported when they end, and the plugin imports
# many lazily (its load budget): a test that patched a module the run then dropped and imported anew
# would patch a copy nobody calls (seen: bench.allreduce after test_bench_plugin's runs). So every
# module of the package is imported once here (none imports torch or pynvml at its top; about 0.5 s),
# and every run shares one copy, as a real process would. What a run imports is tested in subprocesses.
def _import_the_package() -> None:
    import importlib
    import pkgutil

    import pytest_gputopo

    for module in pkgutil.walk_packages(pytest_gputopo.__path__, "pytest_gputopo."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    # And packaging, which core.hardware imports where a version is read and caches specifiers of: a
    # run that imported it anew compared a cached SpecifierSet with another copy's Version ("compute
    # capability 9.0, needs >=9.0", in test_doc_examples' in-process runs only).
    for name in ("packaging.version", "packaging.specifiers"):
        importlib.import_module(name)


_import_the_package()


def copy_children() -> list[int]:
    """This process's children running the copy benchmark (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid() and b"pytest_gputopo.bench.copies" in cmd:
            found.append(int(entry.name))
    return found


# launcher_port's blocks: below Linux's default ephemeral range (32768-60999), so that no outgoing
# connection takes a drawn port before the launch binds it (one there made rank 0's store fail with
# EADDRINUSE), one block per xdist worker, so that two workers of a run never draw the same port.
_PORT_BLOCKS_FROM, _PORT_BLOCK, _PORT_BLOCKS = 10000, 1000, 22
_port_draw = random.Random()  # its own generator: hypothesis and seeded tests keep theirs


def launcher_port() -> int:
    """A MASTER_PORT for a run started as a launcher starts it: free now, and so is MASTER_PORT + 1,
    where the plugin's own store listens without torchrun's; drawn at random in this xdist worker's
    block (another run on the same machine draws from the same blocks)."""
    import socket

    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    low = _PORT_BLOCKS_FROM + (int(worker) if worker.isdigit() else 0) % _PORT_BLOCKS * _PORT_BLOCK
    while True:
        port = _port_draw.randrange(low, low + _PORT_BLOCK - 1)  # port + 1 stays in the block
        try:
            with socket.socket() as first, socket.socket() as second:
                first.bind(("", port))
                second.bind(("", port + 1))
        except OSError:
            continue
        return port


# Every variable a launcher (torchrun, srun) may set that ``runtime.environ.launch`` reads, and pytest's
# own that would change a run: cleared (clear_launch) so that the outer environment (a CI job inside
# Slurm, say) cannot change what a test sees.
LAUNCH_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "SLURM_PROCID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_ID",
    "SLURM_JOB_ID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "PYTEST_ADDOPTS",
    "PYTEST_XDIST_AUTO_NUM_WORKERS",
    "SLURM_NTASKS",
    "GROUP_WORLD_SIZE",
    "SLURM_STEP_NUM_NODES",
)


def clear_launch(monkeypatch) -> None:
    """Leave none of LAUNCH_VARS in this process's environment (undone after the test)."""
    for name in LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)


LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def srun_ranks(folder, port: int, rank_timeout_s: int, extra_env: dict | None = None, ranks: int = 2) -> list:
    """pytest started in ``folder`` as srun starts every rank of a one-node job step itself: its task
    variables (SLURM_PROCID, the step's task and node counts) and MASTER_ADDR/MASTER_PORT as torch's
    env:// reads them, in an environment without any other launcher's or gputopo's variables. Each
    rank's output (stderr with stdout) is its Popen's stdout."""
    import os
    import subprocess
    import sys

    base = {
        k: v
        for k, v in os.environ.items()
        if k not in LAUNCHER_VARS and not k.startswith(("SLURM_", "TORCHELASTIC_", "PYTEST_GPUTOPO_"))
    }
    procs = []
    for rank in range(ranks):
        env = {
            **base,
            "SLURM_JOB_ID": "42",
            "SLURM_STEP_ID": "0",
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": str(ranks),
            "SLURM_STEP_NUM_TASKS": str(ranks),
            "SLURM_STEP_NUM_NODES": "1",
            "SLURM_LOCALID": str(rank),
            "SLURM_NODEID": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "PYTHONWARNINGS": "ignore",
            "GLOO_SOCKET_IFNAME": "lo",  # loopback only
            **(extra_env or {}),
        }
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-p",
                    "no:cacheprovider",
                    "-rs",
                    "--gputopo-rank-timeout",
                    str(rank_timeout_s),
                ],
                cwd=folder,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


# The conftest of two srun ranks on dgx-a100 (recorded) whose rank 1 waits (up to 60 s) for a file
# named ``release`` before its test: a stranger plants rank 1's verdict meanwhile, and rank 1's own
# verdict never overwrites it.
RANK_1_HELD_BACK = """
import os, time
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_gputopo_probe(config):
    from pytest_gputopo.probe import probe_recorded
    return probe_recorded("dgx-a100")

@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    if os.environ["SLURM_PROCID"] == "1":
        deadline = time.monotonic() + 60
        while not os.path.exists("release") and time.monotonic() < deadline:
            time.sleep(0.05)
    return (yield)
"""


class Stranger:
    """A plain TCPStore client whose ``set`` has landed when it returns. TCPStore answers no SET (the
    client sends it and goes on), so a read on another connection could overtake a planted record (seen
    once in CI: rank 0's own record overwritten after it was written). A ``get`` on the same connection
    is answered only after the SET before it."""

    def __init__(self, store):
        self.store = store

    def set(self, key: str, value) -> None:
        self.store.set(key, value)
        self.store.get(key)

    def __getattr__(self, name: str):
        return getattr(self.store, name)


def served_store(port: int | None = None):
    """Rank 0's store (as the srun path serves it) on ``port`` (a free one when None) and a
    stranger's client of it: what anyone who reaches that port can do."""
    from datetime import timedelta
    from types import SimpleNamespace

    import torch.distributed as dist

    port = port or launcher_port()
    served = dist.TCPStore("127.0.0.1", port, 1, True, wait_for_workers=False, timeout=timedelta(seconds=10))
    stranger = Stranger(dist.TCPStore("127.0.0.1", port, 1, False, timeout=timedelta(seconds=10)))
    return SimpleNamespace(served=served, stranger=stranger, port=port)


def stranger_of(port: int, wait_s: float = 60):
    """A plain TCPStore client of the store rank 0 serves on MASTER_PORT + 1 (``port`` + 1), once it
    is up: what anyone who reaches that port can do."""
    import time
    from datetime import timedelta

    import torch.distributed as dist

    deadline = time.monotonic() + wait_s
    while True:
        try:
            return Stranger(dist.TCPStore("127.0.0.1", port + 1, 1, False, timeout=timedelta(seconds=5)))
        except Exception:
            assert time.monotonic() < deadline, "rank 0's store never came up"
            time.sleep(0.2)


def checks_of(pytester, topology, *args: str) -> dict:
    """A ``--gputopo-check`` run on ``topology`` recorded as a profile (``--gputopo-machine``): its
    items by name, as the JSON report has them (check, outcome, message)."""
    from pytest_gputopo.probe.recorded import profile_dict

    path = pytester.path / "node.json"
    path.write_text(json.dumps(profile_dict("node", topology)))
    report = pytester.path / "run.json"
    pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--gputopo-check",
        "--gputopo-machine",
        str(path),
        "--gputopo-json",
        str(report),
        *args,
    )
    return {c["check"]: c for c in json.loads(report.read_text())["checks"]}


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """``gputopo ARGS`` in this process: (exit status, what it printed, what it wrote to stderr)."""
    from pytest_gputopo import cli

    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def gputopo_process(*args, cwd=None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``gputopo ARGS`` as a user runs it: a process of its own, its output kept as text."""
    argv = [sys.executable, "-m", "pytest_gputopo.cli", *map(str, args)]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=timeout)


def wait_for_file(path: Path, timeout_s: float) -> bool:
    """Whether ``path`` exists within ``timeout_s`` seconds (what another process writes when it gets there)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.exists()


# A ``sitecustomize`` (Python runs it at start-up in every process of a run, xdist workers too) that
# swaps the path finder for one that cannot see MODULE: ``import MODULE`` fails and
# ``importlib.util.find_spec(MODULE)`` is None, as on a host where it is not installed.
_HIDING = """
import sys
from importlib.machinery import PathFinder


class _PathFinderWithout(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] == MODULE:
            return None
        return super().find_spec(fullname, path, target)


sys.meta_path[:] = [_PathFinderWithout if f is PathFinder else f for f in sys.meta_path]
"""


def hide_module(pytester, monkeypatch, module: str) -> None:
    """Every process the test starts runs as on a host where ``module`` is not installed."""
    stub = pytester.mkdir(f"no_{module}")
    (stub / "sitecustomize.py").write_text(_HIDING.replace("MODULE", repr(module)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(stub), os.environ.get("PYTHONPATH")])))


def json_paths(value, prefix: tuple = ()):
    """Every path into a JSON value (keys and list indices), the value's own ``()`` first: where a
    mutation may land."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from json_paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from json_paths(item, prefix + (index,))


def marked_module(**tests: str) -> str:
    """The source of a test module whose tests, each named by a keyword, pass doing nothing under the
    marker its value writes (``requires_gpus(8)``; "" for no marker)."""
    lines = ["import pytest"]
    for name, marker in tests.items():
        lines += [f"@pytest.mark.{marker}"] if marker else []
        lines.append(f"def {name}(): pass")
    return "\n".join(lines) + "\n"


def record_node(capsys, tmp_path, topo, *sources) -> tuple[int, str, str]:
    """``gputopo record --from-smi TOPO SOURCES... -o node.json`` in ``tmp_path``, as run_cli runs it."""
    return run_cli(capsys, "record", "--from-smi", topo, *sources, "-o", tmp_path / "node.json")


def source_files(folder, *sources) -> list:
    """Each (option, file name, text) of ``sources`` written into ``folder``: the arguments that give
    ``gputopo record`` those files."""
    args = []
    for option, name, text in sources:
        (folder / name).write_text(text)
        args += [option, folder / name]
    return args


def node_profile(tmp_path) -> dict:
    """The profile record_node wrote."""
    return json.loads((tmp_path / "node.json").read_text())


@pytest.fixture
def h100_topo(tmp_path):
    """hgx-h100 as ``nvidia-smi topo -m`` prints it: GPU indices and links (NV18 every pair), no name,
    UUID, bus id or NVLink states."""
    from pytest_gputopo.probe import probe
    from pytest_gputopo.render.smi_topo import render_topo_matrix

    path = tmp_path / "topo.txt"
    path.write_text(render_topo_matrix(probe("hgx-h100")))
    return path
