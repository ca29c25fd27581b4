"""Who can reach the ranks' store, and whose records it takes.

- The store rank 0 serves (the srun path, MASTER_PORT + 1) listens on the address MASTER_ADDR names on
  its host and no wider. torch's TCPStore binds every interface on its own (``makeWithPort`` in
  torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp binds "::" or "0.0.0.0"); given
  ``master_listen_fd`` it listens on that socket instead (``makeWithSocket``: ``uv_tcp_open``, then
  ``uv_listen``), checked here on the installed torch by connecting to another address of loopback
  (Linux answers all of 127.0.0.0/8 on ``lo``), and to a non-loopback address inside a network
  namespace the test makes itself: tests send traffic to loopback only (docs/testing.md).
- With a per-run secret (``PYTEST_GPUTOPO_STORE_SECRET_FILE``, a 0600 file, or
  ``PYTEST_GPUTOPO_STORE_SECRET``) every record is signed (HMAC-SHA256 over key and value) and a
  record of exactly the right shape written by a stranger -- the "met" verdict the shape check cannot
  tell from a rank's own -- ends the run naming the key, instead of being taken.
"""

import json
import os
import socket
import stat
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import RANK_1_HELD_BACK, launcher_port, served_store, srun_ranks, stranger_of
from pytest_gputopo.runtime import environ, files, listener
from pytest_gputopo.runtime.signing import PREFIX, Signer

SECRET = b"0123456789abcdef0123456789abcdef"  # 32 characters: the least taken


def _reaches(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        try:
            s.connect((address, port))
            return True
        except OSError:
            return False


def _free_port() -> int:
    return launcher_port()  # below the ephemeral range: no outgoing connection takes it meanwhile


# ---------------------------------------------------------------------------------------------
# Listening no wider than MASTER_ADDR


def test_bind_store_takes_the_address_master_addr_names_here():
    bound, where = listener.bind_store("127.0.0.1", 0, nodes=1)
    try:
        assert bound.getsockname()[0] == "127.0.0.1" and where == "127.0.0.1 only"
    finally:
        bound.close()
    bound, where = listener.bind_store("localhost", 0, nodes=1)  # a name: the address it resolves to
    try:
        assert bound.getsockname()[0] in ("127.0.0.1", "::1") and where.startswith("localhost (")
    finally:
        bound.close()


@pytest.mark.parametrize(
    "addr, nodes, says",
    [
        # Debian's "127.0.1.1 <hostname>": the other nodes resolve the name to the host's real address
        ("127.0.0.1", None, "is 127.0.0.1, a loopback address, here, and ranks on other nodes could not reach it"),
        ("127.0.0.1", 2, "a loopback address"),
        ("0.0.0.0", 2, "MASTER_ADDR='0.0.0.0' names them all"),
        ("203.0.113.7", 2, "MASTER_ADDR='203.0.113.7' is not an address of this host"),  # TEST-NET-3: never ours
        ("no-such-host.invalid", 2, "MASTER_ADDR='no-such-host.invalid' does not resolve here"),
    ],
)
def test_where_ranks_could_not_reach_a_narrow_listener_it_listens_as_torch_does_and_says_why(
    monkeypatch, addr, nodes, says
):
    if addr.endswith(".invalid"):  # glibc's answer, without asking a name server (loopback only)

        def no_such_name(*args, **kwargs):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

        monkeypatch.setattr(socket, "getaddrinfo", no_such_name)
    bound, where = listener.bind_store(addr, 0, nodes)
    assert bound is None and where.startswith("every interface: ") and says in where, where


def test_a_taken_port_is_an_error_naming_the_address():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match=r"cannot listen on 127\.0\.0\.1:\d+"):
            listener.bind_store("127.0.0.1", taken.getsockname()[1], nodes=1)


def _serve(master_addr: str, nodes: int | None):
    pytest.importorskip("torch.distributed")
    from pytest_gputopo.runtime.ranks import Exchange

    port = launcher_port() + 1
    launch = environ.Launch(0, 2, 0, 0, master_addr, port - 1, False, "slurm-7.0", nodes)
    return Exchange.connect(launch, 10), port


def _loopback_answers_all_of_127_8() -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.2", 0))
            return True
        except OSError:
            return False


def test_rank_zeros_store_answers_only_on_the_address_master_addr_names():
    """Before: torch's store listened on every interface, reachable from any network of the host. Linux
    answers all of 127.0.0.0/8 on lo, so a store that answered on 127.0.0.2 while MASTER_ADDR named
    127.0.0.1 (or the other way round) would be listening wider than MASTER_ADDR."""
    if not _loopback_answers_all_of_127_8():
        pytest.skip("this system's loopback has 127.0.0.1 only (Linux answers all of 127.0.0.0/8)")
    exchange, port = _serve("127.0.0.1", nodes=1)
    assert exchange.listening == "127.0.0.1 only"
    assert _reaches("127.0.0.1", port) and not _reaches("127.0.0.2", port)
    exchange, port = _serve("127.0.0.2", nodes=1)
    assert exchange.listening == "127.0.0.2 only"
    assert _reaches("127.0.0.2", port) and not _reaches("127.0.0.1", port)
    exchange.store.set("k", b"v")  # the store itself works on that socket
    assert exchange.store.get("k") == b"v"
    # The probe tells a wide listener: across nodes a loopback MASTER_ADDR leaves torch's own, on both.
    exchange, port = _serve("127.0.0.1", nodes=2)
    assert exchange.listening.startswith("every interface: ")
    assert _reaches("127.0.0.1", port) and _reaches("127.0.0.2", port)


# A non-loopback address of the serving host, in a network namespace the test makes (unshare -rn: a
# user namespace, so no root is needed), never this host's own. A veth pair where the kernel has no
# dummy interfaces (gVisor). 198.18.0.0/15 is set aside for benchmarks (RFC 2544), routed nowhere.
NAMESPACE = """
set -e
ip link set lo up
ip link add gt0 type dummy 2>/dev/null || ip link add gt0 type veth peer name gt1
ip addr add 198.18.0.1/24 dev gt0
ip link set gt0 up
ip link set gt1 up 2>/dev/null || true
exec "$@"
"""

IN_NAMESPACE = """
import socket, sys
sys.path.insert(0, sys.argv[1])
from pytest_gputopo.runtime import environ
from pytest_gputopo.runtime.ranks import Exchange

def serve(addr, nodes, port):  # the namespace's own ports: all free
    launch = environ.Launch(0, 2, 0, 0, addr, port - 1, False, "slurm-7.0", nodes)
    return Exchange.connect(launch, 10), port

def reaches(addr, port):
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((addr, port)) == 0

exchange, port = serve("127.0.0.1", 1, 29501)
print(exchange.listening, reaches("127.0.0.1", port), reaches("198.18.0.1", port))
exchange, port = serve("198.18.0.1", 2, 29503)
exchange.store.set("k", b"v")
print(exchange.listening, reaches("198.18.0.1", port), reaches("127.0.0.1", port), exchange.store.get("k"))
"""


@pytest.mark.slow
def test_rank_zeros_store_on_a_hosts_other_address_answers_there_only(tmp_path):
    """The same, between loopback and a non-loopback address of the host, in a namespace of the test's own."""
    pytest.importorskip("torch.distributed")
    made = subprocess.run(["unshare", "-rn", "sh", "-c", NAMESPACE, "sh", "true"], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"no network namespace of its own here (unshare -rn with ip: {made.stderr.strip()[-200:]})")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        ["unshare", "-rn", "sh", "-c", NAMESPACE, "sh", sys.executable, "-c", IN_NAMESPACE, root],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["127.0.0.1 only True False", "198.18.0.1 only True False b'v'"], done.stdout


def test_the_header_line_says_where_the_ranks_meet_and_whether_records_are_signed():
    exchange, port = _serve("127.0.0.1", nodes=1)
    assert exchange.describe() == (
        f"gputopo: the ranks meet at rank 0's store on port {port}, listening on 127.0.0.1 only; records not "
        "signed (no PYTEST_GPUTOPO_STORE_SECRET_FILE: whoever reaches the store can write one; docs/distributed.md)"
    )
    exchange.signer = Signer(SECRET, "PYTEST_GPUTOPO_STORE_SECRET_FILE")
    assert exchange.describe().endswith("records signed with the run's secret (PYTEST_GPUTOPO_STORE_SECRET_FILE)")


def test_without_a_secret_a_store_other_hosts_reach_is_said_in_the_header():
    """Issue 32.5: on several nodes (a loopback MASTER_ADDR here cannot serve them), the store listens on
    every interface; without a secret a record forged from another host is taken, so the header says so."""
    exchange, port = _serve("127.0.0.1", nodes=None)
    assert exchange.describe() == (
        f"gputopo: the ranks meet at rank 0's store on port {port}, listening on every interface: "
        "MASTER_ADDR='127.0.0.1' is 127.0.0.1, a loopback address, here, and ranks on other nodes could not reach "
        "it there; records NOT signed, and the store is reachable from other hosts: a record forged there can make "
        "the ranks disagree; set PYTEST_GPUTOPO_STORE_SECRET_FILE (docs/distributed.md)"
    )
    exchange.signer = Signer(SECRET, "PYTEST_GPUTOPO_STORE_SECRET_FILE")
    assert exchange.describe().endswith("records signed with the run's secret (PYTEST_GPUTOPO_STORE_SECRET_FILE)")


@pytest.mark.parametrize(
    "env, nodes",
    [
        ({"RANK": "0", "WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "2"}, 2),  # torchrun: the number of agents
        ({"RANK": "0", "WORLD_SIZE": "4"}, None),
        (
            {
                "SLURM_JOB_ID": "7",
                "SLURM_STEP_ID": "0",
                "SLURM_PROCID": "0",
                "SLURM_STEP_NUM_TASKS": "4",
                "SLURM_STEP_NUM_NODES": "1",
                "MASTER_ADDR": "10.0.0.1",
            },
            1,
        ),  # srun(1): the step's node count
    ],
)
def test_the_launch_says_how_many_nodes_the_ranks_span(monkeypatch, env, nodes):
    for name in (
        *environ.TORCHRUN_VARS,
        *environ.SRUN_VARS,
        "SLURM_STEP_ID",
        "MASTER_ADDR",
        "TORCHELASTIC_USE_AGENT_STORE",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert environ.launch().nodes == nodes


def test_a_malformed_node_count_names_its_variable(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("GROUP_WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="GROUP_WORLD_SIZE='two' is not an integer"):
        environ.launch()


# ---------------------------------------------------------------------------------------------
# The secret: from the environment only, a file kept as ssh keeps a key


@pytest.fixture
def no_secret(monkeypatch):
    monkeypatch.delenv(environ.STORE_SECRET, raising=False)
    monkeypatch.delenv(environ.STORE_SECRET_FILE, raising=False)
    return monkeypatch


def _secret_file(tmp_path, text=SECRET.decode() + "\n", mode=0o600):  # noqa: B008 (a constant, read once)
    path = tmp_path / "secret"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_no_secret_is_none(no_secret):
    assert environ.store_secret() is None


def test_a_secret_from_a_private_file_or_a_variable(no_secret, tmp_path):
    no_secret.setenv(environ.STORE_SECRET_FILE, str(_secret_file(tmp_path)))
    assert environ.store_secret() == (SECRET, "PYTEST_GPUTOPO_STORE_SECRET_FILE")  # the newline is not part of it
    no_secret.delenv(environ.STORE_SECRET_FILE)
    no_secret.setenv(environ.STORE_SECRET, SECRET.decode())
    assert environ.store_secret() == (SECRET, "PYTEST_GPUTOPO_STORE_SECRET")


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda tmp: _secret_file(tmp, mode=0o644), "others may read or write it (mode 0644): make it 0600"),
        (lambda tmp: _secret_file(tmp, mode=0o620), "mode 0620"),
        (lambda tmp: _secret_file(tmp, text="short\n"), "the secret has 5 characters, fewer than 32"),
        (lambda tmp: _secret_file(tmp, text="x" * 5000), "larger than 4096 bytes"),
        (lambda tmp: tmp / "missing", "cannot read: No such file or directory"),
        (lambda tmp: tmp, "not a regular file: it is a folder"),
        (lambda tmp: (os.mkfifo(tmp / "fifo"), tmp / "fifo")[1], "not a regular file: it is a FIFO"),  # no wait
    ],
    ids=["0644", "0620", "short", "large", "missing", "folder", "fifo"],
)
def test_an_unusable_secret_file_is_refused_naming_the_variable(no_secret, tmp_path, make, says):
    path = make(tmp_path)
    no_secret.setenv(environ.STORE_SECRET_FILE, str(path))
    with pytest.raises(ValueError) as excinfo:
        environ.store_secret()
    text = str(excinfo.value)
    assert text.startswith("PYTEST_GPUTOPO_STORE_SECRET_FILE") and says in text, text


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="giving a file away needs root")
def test_a_secret_file_of_another_user_is_refused(no_secret, tmp_path):
    path = _secret_file(tmp_path)
    os.chown(path, 65534, 65534)
    no_secret.setenv(environ.STORE_SECRET_FILE, str(path))
    with pytest.raises(ValueError, match="owned by user id 65534, not by this user"):
        environ.store_secret()


def test_a_short_or_doubled_secret_is_refused(no_secret, tmp_path):
    no_secret.setenv(environ.STORE_SECRET, "hunter2")
    with pytest.raises(ValueError, match="PYTEST_GPUTOPO_STORE_SECRET: the secret has 7 characters"):
        environ.store_secret()
    no_secret.setenv(environ.STORE_SECRET_FILE, str(_secret_file(tmp_path)))
    with pytest.raises(ValueError, match="both PYTEST_GPUTOPO_STORE_SECRET_FILE and PYTEST_GPUTOPO_STORE_SECRET"):
        environ.store_secret()


def test_the_secret_is_read_from_a_file_without_following_it_into_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "fifo", tmp_path / "link")
    with pytest.raises(OSError, match="FIFO"):
        files.read_private(str(tmp_path / "link"))
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode)


# ---------------------------------------------------------------------------------------------
# Signing


def test_a_signed_record_opens_only_under_its_key_with_its_secret():
    signer = Signer(SECRET, "PYTEST_GPUTOPO_STORE_SECRET")
    key = "gputopo/slurm-7.0/verdict/min_p2p_bw(1)/1"
    sealed = signer.seal(key, '{"reason": null, "broken": false}')
    assert sealed.startswith(PREFIX) and signer.open(key, sealed) == b'{"reason": null, "broken": false}'
    refusals = {
        "moved to another rank's key": lambda: signer.open(key[:-1] + "0", sealed),
        "value changed": lambda: signer.open(key, sealed.replace(b"false}", b"true} ")),
        "another secret": lambda: Signer(b"f" * 32, "X").open(key, sealed),
        "cut short": lambda: signer.open(key, sealed[: len(PREFIX) + 10]),
        "unsigned": lambda: signer.open(key, b'{"reason": null, "broken": false}'),
    }
    for case, attempt in refusals.items():
        with pytest.raises(ValueError, match="not signed|does not match this run's secret"):
            attempt()
            pytest.fail(case)
    with pytest.raises(ValueError, match="it is signed and this rank has no secret: give every rank the same"):
        Signer(None).open(key, sealed)
    assert Signer(None).seal(key, "{}") == b"{}" and Signer(None).open(key, b"{}") == b"{}"


# ---------------------------------------------------------------------------------------------
# A stranger's record of the right shape, with and without the secret


@pytest.fixture
def store():
    pytest.importorskip("torch.distributed")
    return served_store(_free_port())


def _all_ranks(store, signer, name, mine):
    from pytest_gputopo.plugin.run import GputopoRun
    from pytest_gputopo.runtime.ranks import Exchange

    launch = environ.Launch(0, 2, 0, 0, "127.0.0.1", store.port, False, "slurm-42.0")
    run = SimpleNamespace(ranks=SimpleNamespace(exchange=Exchange(launch, store.served, 5, signer)))
    return GputopoRun.all_ranks(run, name, mine)


MET = {"reason": None, "broken": False}
UNMET = {"reason": "min_allreduce_bw(1000): all-reduce busbw 0.9 GB/s", "broken": False}
VERDICT = "verdict/min_allreduce_bw(1000)"


def test_a_planted_met_verdict_of_the_right_shape_is_refused_when_the_run_has_a_secret(store):
    from pytest_gputopo.plugin.run import RANKS_EXIT_STATUS

    key = f"gputopo/slurm-42.0/{VERDICT}/1"
    store.stranger.set(key, json.dumps(MET))
    # Without a secret the shape is all there is to check: the planted record is taken (docs/distributed.md).
    assert _all_ranks(store, Signer(None), VERDICT, UNMET)[1] == MET
    with pytest.raises(pytest.exit.Exception) as excinfo:
        _all_ranks(store, Signer(SECRET, "PYTEST_GPUTOPO_STORE_SECRET_FILE"), VERDICT, UNMET)
    assert excinfo.value.returncode == RANKS_EXIT_STATUS
    assert str(excinfo.value.msg) == (
        f"gputopo: the ranks cannot agree: rank 1's '{VERDICT}' record is not taken (key {key}): it is not signed: "
        "a process without this run's secret (PYTEST_GPUTOPO_STORE_SECRET_FILE) wrote it, or a rank that was given none"
    )
    # A rank's own record, signed with the run's secret, is taken.
    store.stranger.set(key, Signer(SECRET).seal(key, json.dumps(MET)))
    assert _all_ranks(store, Signer(SECRET, "X"), VERDICT, UNMET) == [UNMET, MET]


def test_a_planted_bench_figure_of_the_right_shape_is_measured_again_when_the_run_has_a_secret(store, monkeypatch):
    import dataclasses

    from pytest_gputopo.bench.bench_result import BenchResult
    from pytest_gputopo.bench.suite import BenchSettings, BenchSuite
    from pytest_gputopo.core import keys, model
    from pytest_gputopo.probe import probe
    from pytest_gputopo.runtime.ranks import Exchange, NodeShare

    here = dataclasses.replace(probe("dgx-a100"), source=model.Source("nvml"), hostname="node-a")
    monkeypatch.setattr(BenchSuite, "_measure", lambda self, key: BenchResult(key, "copy", 42.0, "measured"))
    key = keys.Copy("p2p", 0, 1)
    launch = environ.Launch(0, 2, 0, 0, "127.0.0.1", store.port, False, "slurm-42.0")
    share = NodeShare(Exchange(launch, store.served, 5, Signer(SECRET, "PYTEST_GPUTOPO_STORE_SECRET")), here)
    planted = BenchResult(key, "copy", 900.0, "measured").to_json()
    store.stranger.set(share.prefix + "p2p-0-1", json.dumps(planted))
    result = BenchSuite(here, BenchSettings(), shared=share).get(key)
    assert result.gbps == 42.0 and "not taken: it is not signed" in result.what, result.what
    share.put("p2p-0-1", planted)  # a rank of this node, holding the secret
    assert BenchSuite(here, BenchSettings(), shared=share).get(key).gbps == 900.0


# ---------------------------------------------------------------------------------------------
# End to end: two pytest ranks as srun starts them, given a secret file; a stranger plants a "met"
# verdict of exactly the right shape as rank 1's while rank 1 is held back.


@pytest.mark.slow
def test_a_signed_run_refuses_a_planted_verdict_of_the_right_shape(tmp_path):
    pytest.importorskip("torch.distributed")
    (tmp_path / "conftest.py").write_text(RANK_1_HELD_BACK)
    (tmp_path / "test_bw.py").write_text("import pytest\n@pytest.mark.min_p2p_bw(100000)\ndef test_bw(): pass\n")
    secret = _secret_file(tmp_path)
    port = launcher_port()
    procs = srun_ranks(tmp_path, port, 20, {"PYTEST_GPUTOPO_STORE_SECRET_FILE": str(secret)})
    try:
        stranger = stranger_of(port)
        key = "gputopo/slurm-42.0/verdict/min_p2p_bw(100000)/1"
        stranger.set(key, json.dumps(MET))
        out = procs[0].communicate(timeout=120)[0]  # rank 0 reads the planted record as rank 1's
    finally:
        for p in procs:
            p.kill()
            p.communicate()
    assert procs[0].returncode == 9, out[-3000:]
    # Both ranks signed and took each other's topology records; the header says so.
    assert (
        f"gputopo: the ranks meet at rank 0's store on port {port + 1}, listening on 127.0.0.1 only; records "
        "signed with the run's secret (PYTEST_GPUTOPO_STORE_SECRET_FILE)"
    ) in out, out[-3000:]
    assert (f"rank 1's 'verdict/min_p2p_bw(100000)' record is not taken (key {key}): it is not signed") in out, out[
        -3000:
    ]
    assert "1 passed" not in out


def test_a_bad_secret_is_a_usage_error_before_any_store_is_opened(tmp_path):
    (tmp_path / "test_x.py").write_text("import pytest\n@pytest.mark.requires_gpus(1)\ndef test_x(): pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_", "PYTEST_GPUTOPO_"))}
    env.update(
        {
            "SLURM_JOB_ID": "42",
            "SLURM_STEP_ID": "0",
            "SLURM_PROCID": "0",
            "SLURM_STEP_NUM_TASKS": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(launcher_port()),
            "PYTEST_GPUTOPO_STORE_SECRET": "hunter2",
            "PYTEST_GPUTOPO_MACHINE": "dgx-a100",
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 4, done.stdout + done.stderr
    assert "ERROR: PYTEST_GPUTOPO_STORE_SECRET: the secret has 7 characters, fewer than 32" in done.stderr, done.stderr
