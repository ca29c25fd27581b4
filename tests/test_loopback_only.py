"""Tests, tools and benchmarks send traffic to loopback only (docs/testing.md, "Traffic"): the guard
every test runs under (tests/loopback.py), and an audit of the project's own scripts for the ways a
program learns the host's other addresses."""

import re
import socket
from pathlib import Path

import pytest

import loopback

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "host, stays",
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("127.255.255.254", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        (b"localhost", True),
        (None, True),
        ("192.0.2.2", False),
        ("10.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("fe80::1%eth0", False),
        ("::", False),
        ("0.0.0.0", False),
        ("", False),
        ("vm", False),
        ("no-such-host.invalid", False),
    ],
)
def test_what_stays_on_loopback(host, stays):
    assert loopback.on_loopback(host) is stays


@pytest.mark.parametrize("family, address", [(socket.AF_INET, ("192.0.2.1", 9)), (socket.AF_INET6, ("2001:db8::1", 9))])
def test_the_guard_refuses_a_socket_aimed_beyond_loopback_before_it_sends(family, address):
    """TEST-NET addresses over UDP: even without the guard, connect() sends nothing."""
    before = len(loopback.refused)
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            with pytest.raises(loopback.BeyondLoopback, match=f"refused connect to '{re.escape(address[0])}' port 9"):
                s.connect(address)
            with pytest.raises(loopback.BeyondLoopback, match="refused sendto"):
                s.sendto(b"x", address)
    finally:
        del loopback.refused[before:]  # refused on purpose: not this test's failure


def test_the_guard_refuses_looking_up_a_name_but_not_parsing_an_address():
    before = len(loopback.refused)
    try:
        with pytest.raises(loopback.BeyondLoopback, match="getaddrinfo of 'example.invalid'"):
            socket.getaddrinfo("example.invalid", 80)
        with pytest.raises(loopback.BeyondLoopback, match="gethostbyname of"):
            socket.gethostbyname(socket.gethostname())
    finally:
        del loopback.refused[before:]
    assert socket.getaddrinfo("192.0.2.1", 80, type=socket.SOCK_STREAM)[0][4][0] == "192.0.2.1"  # no lookup
    assert socket.getaddrinfo("localhost", 80)


def test_a_test_that_leaves_loopback_fails_even_where_its_code_caught_the_refusal(pytester):
    """The guard is this process's: a pytester run inside it is guarded too, and the autouse fixture
    fails the test whose code swallowed the refusal."""
    pytester.makeconftest("""
import pytest, loopback

@pytest.fixture(autouse=True)
def _loopback_only():
    before = len(loopback.refused)
    yield
    new = loopback.refused[before:]
    del loopback.refused[before:]  # the outer test's fixture must not fail for this inner run
    if new:
        pytest.fail("traffic beyond loopback: " + "; ".join(new), pytrace=False)
""")
    pytester.makepyfile("""
import socket

def test_swallows():
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
    except Exception:
        pass
""")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*traffic beyond loopback: connect to '192.0.2.1' port 9*"])


# The ways a program learns this host's other addresses, or reaches them. Written so that this file's
# own patterns do not match themselves.
FORBIDDEN = {
    "a UDP connect to learn the default route's address": re.compile(r"SOCK_DGRAM[\s\S]{0,400}?\.connect\("),
    "the host name looked up": re.compile(
        r"gethostbyname(_ex)?\(\s*(socket\.)?gethostname\(|getaddrinfo\(\s*"
        r"(socket\.)?gethostname\("
    ),
    "the fully qualified name looked up": re.compile(r"\bgetfqdn\("),
    "interface addresses listed": re.compile(r"\bnetifaces\b|\bnet_if_addrs\b|SIOCGIFADDR|\bgetifaddrs\b"),
    "the route or addresses asked of the system": re.compile(
        r"\bhostname\s+-[iI]\b|\bip\s+(-\S+\s+)*(route|addr)\b"
        r"(?!\s+(add|set)\b)"
    ),
    "a connection to a non-loopback literal": re.compile(
        r"(connect|create_connection|TCPStore)\(\s*\(?\s*['\"]"
        r"(?!127\.|::1|localhost)[0-9a-fA-F.:]+['\"]"
    ),
}
AUDITED = ("tests", "tools", "dev", "scripts", "examples", "pytest_gputopo")
EXEMPT = {Path("tests/loopback.py"), Path("tests/test_loopback_only.py")}  # the guard and its own tests


def _sources():
    for top in AUDITED:
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT)
            if not path.is_file() or rel in EXEMPT or "captured" in rel.parts or "__pycache__" in rel.parts:
                continue
            if path.suffix in (".py", ".sh", ".md") or (path.suffix == "" and path.parent.name in ("dev", "scripts")):
                yield rel, path.read_text(errors="replace")


def test_no_test_tool_or_benchmark_looks_up_or_reaches_the_hosts_other_addresses():
    found = [
        f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: {what}: {m.group(0)[:80]!r}"
        for rel, text in _sources()
        for what, pattern in FORBIDDEN.items()
        for m in pattern.finditer(text)
    ]
    assert not found, "tests and tools send traffic to loopback only (docs/testing.md):\n" + "\n".join(found)


def test_the_audit_finds_what_it_looks_for():
    route = "with socket.socket(socket.AF_INET, socket.SOCK_" + "DGRAM) as s:\n    s.conn" + "ect(('192.0.2.123', 9))"
    name = "socket.gethost" + "byname(socket.gethostname())"
    shell = "ip -4 ro" + "ute get 1.1.1.1"
    direct = "s.conn" + "ect(('10.1.2.3', 80))"
    for sample in (route, name, shell, direct):
        assert any(p.search(sample) for p in FORBIDDEN.values()), sample
    assert not any(p.search("ip link set lo up\nip addr add 198.18.0.1/24 dev gt0") for p in FORBIDDEN.values())


# ---------------------------------------------------------------------------------------------
# dev/loopback-audit: what the guard cannot see (processes a test starts, code in C), from strace


def _audit_tool():
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("loopback_audit", str(ROOT / "dev" / "loopback-audit"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("loopback_audit", loader))
    loader.exec_module(module)
    return module


# Lines as strace 6.1 wrote them here (strace -f -qq -s 256), tracing torch 2.13's TCPStore and glibc 2.36.
TRACE = r"""8674  connect(14, {sa_family=AF_UNIX, sun_path="/var/run/nscd/socket"}, 110) = -1 ENOENT (No such file or directory)
8674  connect(14, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.255.255.53")}, 16) = 0
8674  sendto(14, "\364?\1\0\0\1\0\0\0\0\0\0\0011\0010\0010\003127\7in-addr\4arpa\0\0\f\0\1", 40, MSG_NOSIGNAL, NULL, 0) = 40
8674  connect(13, {sa_family=AF_INET6, sin6_port=htons(29871), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::ffff:127.0.0.1", &sin6_addr), sin6_scope_id=0}, 28) = -1 EINPROGRESS (Operation now in progress)
8674  socket(AF_NETLINK, SOCK_RAW|SOCK_CLOEXEC, NETLINK_ROUTE) = 14
8674  sendto(14, [{nlmsg_len=20, nlmsg_type=RTM_GETLINK, nlmsg_flags=NLM_F_REQUEST|NLM_F_DUMP, nlmsg_seq=1, nlmsg_pid=0}, {ifi_family=AF_UNSPEC, ...}], 20, 0, {sa_family=AF_NETLINK, nl_pid=0, nl_groups=00000000}, 12) = 20
8680  connect(5, {sa_family=AF_INET, sin_port=htons(29500), sin_addr=inet_addr("192.0.2.2")}, 16) = 0
15086 unshare(CLONE_NEWUSER|CLONE_NEWNET) = 0
15086 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f0) = 15090
15090 connect(3, {sa_family=AF_INET, sin_port=htons(29501), sin_addr=inet_addr("198.18.0.1")}, 16) = 0
"""  # noqa: E501 (the tool's own lines, verbatim)


def test_the_audit_tool_tells_the_hosts_address_from_lookups_and_its_own_namespace():
    tool = _audit_tool()
    beyond, lookups = tool.audit(TRACE.splitlines(keepends=True), {"10.255.255.53"})
    assert dict(beyond) == {"192.0.2.2 port 29500": 1}  # not the namespace's 198.18.0.1, nor loopback
    assert dict(lookups) == {"1.0.0.127.in-addr.arpa": 1}  # the netlink send on the reused fd 14 is not one


@pytest.mark.slow
def test_the_audit_tool_fails_a_command_that_leaves_loopback(tmp_path):
    import shutil
    import subprocess
    import sys

    if not shutil.which("strace"):
        pytest.skip("strace is not installed here")
    leaves = "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect(('192.0.2.77', 9))"
    stays = "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).connect(('127.0.0.9', 9))"
    for code, status, says in ((leaves, 3, "192.0.2.77 port 9"), (stays, 0, "no traffic beyond loopback")):
        done = subprocess.run(
            [sys.executable, str(ROOT / "dev" / "loopback-audit"), "--", sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
        )  # UDP connect(): nothing is sent
        if done.returncode == 2 and "could not trace" in done.stderr:  # e.g. this suite run under the tool
            pytest.skip(f"strace cannot trace here: {done.stderr.strip()[:200]}")
        assert done.returncode == status and says in done.stdout, done.stdout + done.stderr
