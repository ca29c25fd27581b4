"""The process's environment: the one place that reads ``os.environ``.

Also maps NVML's device order to CUDA's: CUDA numbers devices by ``CUDA_DEVICE_ORDER``
(``FASTEST_FIRST`` by default, ``PCI_BUS_ID``) and then keeps the ``CUDA_VISIBLE_DEVICES`` subset, so
that "GPU 0" in a reason is the device a test gets as ``cuda:0``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ..core import numtext
from . import files

if TYPE_CHECKING:
    from ..core.model import Gpu

ENV_PREFIX = "PYTEST_GPUTOPO_"


def env_option(name: str) -> str | None:
    """``PYTEST_GPUTOPO_<NAME>`` for the option ``gputopo_<name>`` (None when unset)."""
    return os.environ.get(ENV_PREFIX + name.upper())


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


class Visibility(NamedTuple):  # not a dataclass: cheaper to define, and this module loads with the plugin
    order: tuple[int, ...]  # positions in the NVML-ordered GPU list, in CUDA order
    warnings: tuple[str, ...] = ()


def _cuda_order(gpus: Sequence[Gpu], device_order: str) -> list[int]:
    # Where a GPU's bus id is unknown (text listing some GPUs), no bus order is known: NVML's stands.
    by_bus = (
        sorted(range(len(gpus)), key=lambda i: (gpus[i].pci_bus_id.upper(), i))  # type: ignore[union-attr]  # each has one (below)
        if all(g.pci_bus_id for g in gpus)
        else list(range(len(gpus)))
    )
    if device_order == "PCI_BUS_ID":
        return by_bus

    # FASTEST_FIRST: CUDA puts the most capable devices first and breaks ties by PCI bus id; we
    # approximate "capable" by compute capability, which orders every real mixed box we know of.
    def capability(i: int) -> tuple[int, ...]:
        cc = gpus[i].compute_capability or "0.0"
        return tuple(-int(x) for x in cc.split(".") if x.isdigit())

    return sorted(by_bus, key=capability)


def visible_gpus(gpus: Sequence[Gpu], visible: str | None = None, device_order: str | None = None) -> Visibility:
    """Which NVML-listed GPUs a CUDA process sees, in CUDA order.

    ``visible``/``device_order`` default to ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER``. As in
    CUDA, the list stops at the first entry that names no device; entries may be indices, GPU UUIDs
    (a unique prefix suffices) or MIG ids (which this plugin cannot map: the list stops there too).
    """
    if visible is None:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if device_order is None:
        device_order = os.environ.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    warnings = []
    device_order = device_order.strip().upper()
    if device_order not in ("FASTEST_FIRST", "PCI_BUS_ID"):
        warnings.append(
            f"CUDA_DEVICE_ORDER={device_order!r} is not FASTEST_FIRST or PCI_BUS_ID; CUDA uses FASTEST_FIRST"
        )
        device_order = "FASTEST_FIRST"
    cuda = _cuda_order(gpus, device_order)
    if visible is None:
        return Visibility(tuple(cuda), tuple(warnings))
    chosen: list[int] = []
    entries = [e.strip() for e in visible.split(",")]
    for i, entry in enumerate(entries):
        pick = _match(entry, cuda, gpus)
        if isinstance(pick, str):
            if entry or any(entries[i + 1 :]):  # a trailing "0,1," drops nothing; "1,,2" drops the 2
                warnings.append(f"CUDA_VISIBLE_DEVICES={visible[:60]!r}: {pick}; CUDA sees only the devices before it")
            break
        if pick in chosen:
            warnings.append(
                f"CUDA_VISIBLE_DEVICES={visible[:60]!r}: {entry[:40]!r} is listed twice; CUDA sees only "
                f"the devices before it"
            )
            break
        chosen.append(pick)
    return Visibility(tuple(chosen), tuple(warnings))


def _match(entry: str, cuda: list[int], gpus: Sequence[Gpu]) -> int | str:
    """The NVML position ``entry`` names, or why it names none."""
    if not entry:
        return "empty entry"
    if re.fullmatch(r"-?[0-9]+", entry):  # ASCII only: "²".isdigit() is true and int("²") raises
        i = numtext.read_int(entry, 0, len(cuda) - 1)
        return cuda[i] if i is not None else f"{entry[:20]!r} is not a device index (0..{len(cuda) - 1})"
    if entry.upper().startswith("MIG-"):
        return f"{entry!r} is a MIG instance, which pytest-gputopo does not map to a GPU"
    wanted = entry.upper() if entry.upper().startswith("GPU-") else "GPU-" + entry.upper()
    hits = [i for i, g in enumerate(gpus) if g.uuid and g.uuid.upper().startswith(wanted)]
    if len(hits) == 1:
        return hits[0]
    return f"{entry!r} matches {'no' if not hits else 'more than one'} GPU UUID"


def all_gpus_visible() -> bool:
    """Whether the job may see every GPU (CUDA_VISIBLE_DEVICES unset)."""
    return os.environ.get("CUDA_VISIBLE_DEVICES") is None


def mig_visible() -> bool:
    """Whether CUDA_VISIBLE_DEVICES names a MIG instance (``MIG-<uuid>``)."""
    return any(e.strip().upper().startswith("MIG-") for e in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(","))


def seeing_only(visible: str) -> dict[str, str]:
    """This process's environment for a child that sees only the devices ``visible`` names (its
    ``CUDA_VISIBLE_DEVICES``); this process's own is left as it is."""
    return {**os.environ, "CUDA_VISIBLE_DEVICES": visible}


# A leased test's own process (plugin/lease_child) is told so here, its spec's file named: never a
# setting (no option, no ini key), and forgotten by that process once read (``forget_lease_spec``).
LEASE_SPEC = "PYTEST_GPUTOPO_LEASE_SPEC"


def lease_spec() -> str | None:
    """The spec's file of the leased test's process this is, None in any other process."""
    return os.environ.get(LEASE_SPEC) or None


def forget_lease_spec() -> None:
    """This process's lease taken: what it starts (a test's own pytest, a rank) is no lease's process."""
    os.environ.pop(LEASE_SPEC, None)


TEST_FAULTS = "PYTEST_GPUTOPO_TEST_FAULTS"


def test_faults() -> dict:
    """The faults the project's own tests inject into a benchmark worker, as JSON in
    ``PYTEST_GPUTOPO_TEST_FAULTS`` (``{"hang_rank": 1}``, ``{"die_rank": 1}``, ``{"corrupt": true}``);
    {} when unset or unreadable. Test-only: no user surface sets it."""
    try:
        plan = json.loads(os.environ.get(TEST_FAULTS, "{}"))
    except ValueError:
        return {}
    return plan if isinstance(plan, dict) else {}


def github_step_summary() -> str | None:
    """The file of GitHub Actions' job summary for this step (``GITHUB_STEP_SUMMARY``), if any."""
    return os.environ.get("GITHUB_STEP_SUMMARY") or None


def local_rank() -> int | None:
    """``LOCAL_RANK`` as a launcher set it (None when unset or not a rank)."""
    return numtext.read_int(os.environ.get("LOCAL_RANK", ""), 0, 2**31 - 1)


def environment() -> dict[str, str]:
    """A copy of this process's environment, for the worker processes a benchmark starts."""
    return dict(os.environ)


def nccl_inputs() -> tuple[dict[str, str], list[tuple[str, str]]]:
    """What NCCL would read: the NCCL_* environment, and its config files' text in NCCL's order
    (NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf; the home directory from the password
    database, as NCCL takes it)."""
    from ..nccl.nccl_settings import conf_file_paths  # NCCL's rules: when a run asks for its view, not at load

    environ = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    try:
        import pwd

        home = pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError):
        home = None
    found = []
    for path in conf_file_paths(os.environ, home):
        try:
            found.append((path, files.read_text(path)))  # never a FIFO's endless wait
        except OSError:
            pass
    return environ, found


def cpu_vendor() -> str | None:
    """This host's CPU vendor (``GenuineIntel``, ``AuthenticAMD``), which moves NCCL's P2P level."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip() or None
    except OSError:
        pass
    return None


def hostname() -> str:
    """This host's name (os.uname avoids importing socket on the no-GPU fast path)."""
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket

    return socket.gethostname()


def boot_id() -> str | None:
    """This boot of the host (Linux: ``/proc/sys/kernel/random/boot_id``, new at every boot); None
    where there is none to read."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read(64).strip() or None
    except (OSError, ValueError):
        return None


def nvidia_driver_load() -> list[int | str | None] | None:
    """This load of the NVIDIA kernel module, so that a reload within a boot (at the same version, with
    other parameters) is told apart: its sysfs folder's inode number (kernfs numbers a new node
    cyclically, fs/kernfs/dir.c ``__kernfs_new_node``: a reloaded module's folder gets a new one) and
    its parameters as the driver prints them (``/proc/driver/nvidia/params``); None where neither is."""
    found: list[int | str | None] = []
    try:
        found.append(os.stat("/sys/module/nvidia").st_ino)
    except OSError:
        found.append(None)
    try:
        with open("/proc/driver/nvidia/params", encoding="ascii", errors="replace") as f:
            found.append(f.read(65536))
    except OSError:
        found.append(None)
    return found if found != [None, None] else None


def library_path() -> str | None:
    """``LD_LIBRARY_PATH``: where the loader looks first for ``libcuda.so.1``."""
    return os.environ.get("LD_LIBRARY_PATH")


def cuda_environment() -> dict[str, str | None]:
    """What CUDA reads at start-up to choose and number the devices a process sees."""
    return {name: os.environ.get(name) for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}


ALL_REDUCE_PERF = "all_reduce_perf"
# DCGM's nccl_tests plugin reads DCGM_NCCL_TESTS_BIN_PATH (a directory holding all_reduce_perf); we
# accept the same, and the shorter NCCL_TESTS_BIN_PATH first.
BIN_PATH_VARS = ("NCCL_TESTS_BIN_PATH", "DCGM_NCCL_TESTS_BIN_PATH")


def find_all_reduce_perf(environ: Mapping[str, str] | None = None) -> str | None:
    """Where nccl-tests' ``all_reduce_perf`` is: ``$NCCL_TESTS_BIN_PATH``/``$DCGM_NCCL_TESTS_BIN_PATH``
    (a folder, as DCGM looks for it), else on ``PATH``; ``environ`` defaults to this process's."""
    if environ is None:
        environ = os.environ
    for var in BIN_PATH_VARS:
        folder = environ.get(var)
        if folder:
            candidate = os.path.join(folder, ALL_REDUCE_PERF)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    path = environ.get("PATH")
    # With no PATH we do not search: shutil.which would fall back to os.environ (or the cwd).
    return shutil.which(ALL_REDUCE_PERF, path=path) if path else None


class Launch(NamedTuple):
    """What a launcher (torchrun, or srun with the usual variables) told this process."""

    rank: int
    world_size: int
    local_rank: int | None
    node_rank: int | None
    master_addr: str
    master_port: int
    agent_store: bool  # torchrun's agent hosts the store at MASTER_ADDR:MASTER_PORT
    run_id: str
    nodes: int | None = None  # how many nodes the ranks run on, where the launcher says


# Where a launcher says which rank this process is: (rank, world size, local rank, node rank).
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE")
# srun's task variables for the job step it started (srun(1), OUTPUT ENVIRONMENT VARIABLES). Not
# SLURM_NTASKS: a batch script itself runs with SLURM_PROCID=0 and SLURM_NTASKS=N and no step, and a
# pytest started there is one process, not rank 0 of N.
SRUN_VARS = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_NUM_NODES")


def launch() -> Launch | None:
    """The launch, when a launcher says this is one rank of several: torchrun (RANK, WORLD_SIZE), or
    srun starting every rank itself (a job step's SLURM_PROCID and SLURM_STEP_NUM_TASKS, with
    MASTER_ADDR set, as torch's env:// needs it; torchrun's variables win when both are there).
    Raises ValueError naming the variable when one is malformed."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        names, agent_store = TORCHRUN_VARS, env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        run = f"{env.get('TORCHELASTIC_RUN_ID', 'none')}.{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    elif all(name in env for name in SRUN_VARS[:2] + ("SLURM_STEP_ID", "MASTER_ADDR")):
        names, agent_store = SRUN_VARS, False
        run = f"slurm-{env.get('SLURM_JOB_ID', 'none')}.{env['SLURM_STEP_ID']}"
    else:
        return None

    def number(name: str) -> int | None:
        raw = env.get(name)
        if raw is None:
            return None
        value = numtext.read_int(raw, 0, 2**31 - 1)
        if value is None:
            raise ValueError(f"environment variable {name}={raw[:40]!r} is not an integer from 0 to {2**31 - 1}")
        return value

    rank_name, world_name, local_name, node_name, nodes_name = names
    rank, world = number(rank_name), number(world_name)
    if world is None or world < 1 or rank is None or not 0 <= rank < world:
        raise ValueError(
            f"environment variables {rank_name}={env[rank_name]!r} {world_name}={env[world_name]!r} "
            f"do not describe a rank of a run"
        )
    if world == 1:
        return None
    highest = 65535 if agent_store else 65534  # without torchrun's store, ours listens on MASTER_PORT+1
    port = numtext.read_int(env.get("MASTER_PORT", "29500"), 1, highest)
    if port is None:
        raise ValueError(
            f"environment variable MASTER_PORT={env['MASTER_PORT'][:40]!r} is not a port from 1 to "
            f"{highest}" + ("" if agent_store else " (pytest-gputopo's store listens on MASTER_PORT+1)")
        )
    return Launch(
        rank=rank,
        world_size=world,
        local_rank=number(local_name),
        node_rank=number(node_name),
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=port,
        agent_store=agent_store,
        run_id=run,
        nodes=number(nodes_name) or None,
    )


STORE_SECRET = "PYTEST_GPUTOPO_STORE_SECRET"
STORE_SECRET_FILE = "PYTEST_GPUTOPO_STORE_SECRET_FILE"
MIN_SECRET_CHARS = 32  # 128 bits as hex: what ``secrets.token_hex(16)`` gives


def store_secret() -> tuple[bytes, str] | None:
    """(the secret the ranks sign their store records with, the variable it came from), or None when
    neither ``PYTEST_GPUTOPO_STORE_SECRET_FILE`` (a 0600 file of this user's: ``files.read_private``)
    nor ``PYTEST_GPUTOPO_STORE_SECRET`` is set. Environment only, never an option: a command line is
    visible to every user of the host. ValueError naming the variable when it is set and unusable."""
    path, value = os.environ.get(STORE_SECRET_FILE), os.environ.get(STORE_SECRET)
    if path is not None and value is not None:
        raise ValueError(f"both {STORE_SECRET_FILE} and {STORE_SECRET} are set: set one")
    if path is None and value is None:
        return None
    if path is not None:
        source = f"{STORE_SECRET_FILE}={path[:200]!r}"
        try:
            secret = files.read_private(path).strip()
        except OSError as exc:
            raise ValueError(f"{source}: {exc.strerror or exc}") from None
    else:
        # value: one of the two is set
        secret, source = value.strip().encode("utf-8", errors="surrogateescape"), STORE_SECRET  # type: ignore[union-attr]
    if len(secret) < MIN_SECRET_CHARS:
        raise ValueError(
            f"{source}: the secret has {len(secret)} characters, fewer than {MIN_SECRET_CHARS} "
            f"(make one with: python -c 'import secrets; print(secrets.token_hex(32))')"
        )
    return secret, source.partition("=")[0]
