"""NCCL's own account of a run, as the plugin uses it on a GPU host: observed once whatever the
verbosity, pairs NCCL did not connect judged by the prediction (and said so), external network
plugins judged by their family.

No GPU here: a conftest makes a recorded machine pass for this host (source ``nvml``), and
``bench.suite.nccl_account`` is replaced by a stub that parses NCCL INFO lines written as NCCL
prints them (``src/transport/p2p.cc`` / ``shm.cc`` / ``net.cc``: "Channel 00/0 : 0[0] -> 1[1]
via P2P/CUMEM/read").
"""

import pytest

from conftest import CORPUS, NO_CORPUS
from pytest_gputopo.core.fact_requirements import TransportRequirement
from pytest_gputopo.parse.nccl_log import parse_nccl_log, transport_family
from pytest_gputopo.plugin.run import GATE_EXIT_STATUS

NCCL_LOGS = CORPUS / "nccl"

# A GPU host: dgx-a100's facts as if NVML had just read them here; NCCL's log is the stub's.
CONFTEST = """
import dataclasses
import pytest
from pytest_gputopo.core import model
from pytest_gputopo.bench import suite as bench_suite

@pytest.hookimpl(tryfirst=True)
def pytest_gputopo_probe(config):
    from pytest_gputopo.probe import probe_recorded
    topo = probe_recorded("dgx-a100")
    return dataclasses.replace(topo, source=model.Source("nvml"), published=())

def stub_account(n, timeout_s, peer=None, devices=None):
    from pytest_gputopo.parse.nccl_log import parse_nccl_log
    log = parse_nccl_log(open(config_dir + "/nccl.log").read())
    pairs = {}
    for c in log.connections:
        if c.dst_rank >= 0 and c.src_rank != c.dst_rank:
            a, b = sorted((c.src_rank, c.dst_rank))
            pairs.setdefault(f"{a}-{b}", set()).add(c.transport)
    return {"pairs": {k: sorted(v) for k, v in pairs.items()}, "log": log.to_json(), "topo_xml": None, "wrong": 0}

config_dir = None

def pytest_configure(config):
    global config_dir
    config_dir = str(config.rootpath)
    bench_suite.nccl_account = stub_account
"""

SRC = """
import pytest

@pytest.mark.requires_nccl_transport("P2P")
def test_all_pairs_p2p(): pass

@pytest.mark.requires_nccl_transport("NET/IB")
def test_ib(): pass
"""


def _ring(n: int, transport_of=lambda a, b: "P2P/CUMEM/read") -> str:
    """A ring all-reduce's log on one node: each rank connects to its neighbours only."""
    lines = ["host0:100:100 [0] NCCL INFO NCCL version 2.21.5+cuda12.4"]
    for a in range(n):
        b = (a + 1) % n
        lines.append(f"host0:100:200 [{a}] NCCL INFO Channel 00/0 : {a}[{a}] -> {b}[{b}] via {transport_of(a, b)}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def gpu_host(pytester, monkeypatch, tmp_path):
    for name in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NCCL_CONF_FILE", str(tmp_path / "no-such-nccl.conf"))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_nccl=SRC)
    return pytester


@pytest.mark.parametrize("verbosity", [[], ["-q"], ["-v"]], ids=["default", "-q", "-v"])
def test_no_fallback_gate_reads_nccls_own_log_at_every_verbosity(gpu_host, verbosity):
    """At default verbosity NCCL's own account is observed, not the header's cached prediction taken
    for it: the SHM that only NCCL's log shows fails."""
    gpu_host.path.joinpath("nccl.log").write_text(
        _ring(8, lambda a, b: "SHM/direct/direct" if (a, b) == (0, 1) else "P2P/CUMEM/read")
    )
    result = gpu_host.runpytest("-p", "no:cacheprovider", "--gputopo-require", "no-fallback", *verbosity)
    assert result.ret == GATE_EXIT_STATUS
    result.stdout.fnmatch_lines(["*no-fallback: GPU0-GPU1 NV12 uses SHM instead of P2P*"])


def test_pairs_nccl_did_not_connect_are_judged_by_the_prediction(gpu_host):
    """A ring connects neighbours only; GPU0-GPU2 has no line in NCCL's log. A healthy
    NVSwitch box meets requires_nccl_transport("P2P"), and the reason says which pairs are predicted."""
    gpu_host.path.joinpath("nccl.log").write_text(_ring(8))
    result = gpu_host.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=1)  # no network inside one node: NET/IB unmet
    result.stdout.fnmatch_lines(["*requires_nccl_transport('NET/IB'): NCCL used P2P, not NET/IB*"])


def test_unconnected_pairs_unmet_by_prediction_say_it_is_a_prediction(gpu_host, monkeypatch):
    monkeypatch.setenv("NCCL_P2P_LEVEL", "LOC")  # NCCL would take SHM for every pair
    gpu_host.path.joinpath("nccl.log").write_text(_ring(8, lambda a, b: "SHM/direct/direct"))
    result = gpu_host.runpytest("-p", "no:cacheprovider", "-rs")
    result.stdout.fnmatch_lines(
        [
            "*requires_nccl_transport('P2P'): GPU0-GPU1 (NV12) used SHM "
            "(NCCL's log); GPU0-GPU2 (NV12) would use SHM: *(predicted: NCCL's run did "
            "not connect this pair)*"
        ]
    )


def _net_names() -> set:
    names = set()
    for path in sorted(NCCL_LOGS.glob("*.txt")):
        log = parse_nccl_log(path.read_text(encoding="utf-8", errors="replace"))
        names |= {t for t in log.transports if t.startswith("NET/")}
    return names


@pytest.mark.skipif(not NCCL_LOGS.is_dir(), reason=NO_CORPUS)
def test_every_net_plugin_in_the_corpus_meets_its_family():
    """NET/IBext_v8 (nccl-rdma-sharp-plugins, the usual path on clusters) must meet
    requires_nccl_transport("NET/IB"); the same for every network name NCCL printed in the corpus."""
    names = _net_names()
    assert {"NET/IBext_v8", "NET/AWS Libfabric", "NET/Socket"} <= names
    for name in names:
        account = {"transports": [name], "families": [transport_family(name)], "gdrdma": False}
        for kind in {transport_family(name), "NET", name}:
            verdict = TransportRequirement(kind=kind).judge(None, {}, account)
            assert verdict.ok, (name, kind, verdict.reason)
    ib_only = {"transports": ["NET/IBext_v8"], "families": ["NET/IB"], "gdrdma": True}
    assert not TransportRequirement(kind="NET/Socket").judge(None, {}, ib_only).ok


# ------------------------------------------------------------------ a machine given as nvidia-smi text

TEXT_MACHINE = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tSYS\t0-15\t0\nGPU1\tSYS\t X \t16-31\t1\n"


def test_a_text_machine_gets_no_host_fact_and_unknown_p2p_stays_unknown(pytester, monkeypatch, tmp_path):
    """nvidia-smi text is another machine. This runner's CPU vendor must not set NCCL's
    predicted P2P level for it (NCCL's default level rises to SYS on AMD CPUs with <= 2 GPUs,
    src/graph/paths.cc), no NCCL run or benchmark starts for it, and its P2P status, which the
    text does not give, leaves the transport unknown (never "assumed OK")."""
    from pytest_gputopo.runtime import environ as runtime

    monkeypatch.setattr(runtime, "cpu_vendor", lambda: "AuthenticAMD")
    for name in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NCCL_CONF_FILE", str(tmp_path / "no-such-nccl.conf"))
    (pytester.path / "node.txt").write_text(TEXT_MACHINE)
    pytester.makepyfile(
        test_text="""
import pytest

@pytest.mark.requires_nccl_transport("SHM")
def test_shm(): pass

@pytest.mark.requires_nccl_transport("P2P")
def test_p2p(): pass

@pytest.mark.min_allreduce_bw(0.0001)
def test_allreduce(): pass
"""
    )
    result = pytester.runpytest("--gputopo-machine", "node.txt", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=2)  # SYS beyond NCCL's default PXB: SHM, known either way
    result.stdout.fnmatch_lines(
        [
            "*requires_nccl_transport('P2P'): GPU0-GPU1 (SYS) would use SHM: SYS is beyond NCCL's default P2P "
            "level PXB (SYS on an AMD CPU with 2 GPUs or fewer; the CPU vendor was not given)*not this host*",
            "*min_allreduce_bw(0.0001): *no figure (none published for text:node.txt, which is not this host*",
        ]
    )


def test_unknown_p2p_status_is_an_unknown_transport_not_p2p(tmp_path):
    """NCCL takes P2P within its level only when NVML's P2P status allows it
    (src/transport/p2p.cc p2pCanConnect -> ncclTopoCheckP2p, which reads NVML's status); where the
    source did not give the status, the transport is unknown."""
    from pytest_gputopo.nccl.expect import expected_transports
    from pytest_gputopo.nccl.nccl_settings import NcclSettings
    from pytest_gputopo.probe import probe

    path = tmp_path / "pix.txt"
    path.write_text(TEXT_MACHINE.replace("SYS", "PIX"))
    (e,) = expected_transports(probe(str(path)), NcclSettings())
    assert e.transport == "unknown"
    assert "the P2P status is unknown" in e.reason


def test_a_transport_neither_seen_nor_predicted_is_unknown_never_unmet():
    """A pair NCCL's view does not cover, or a network kind on a machine that cannot give NCCL's own
    account, is unknown (reported so in the JSON verdicts), not a transport NCCL was seen to refuse."""
    from pytest_gputopo.probe import probe_recorded

    box = probe_recorded("2x-rtx3090-nvlink")
    verdict = TransportRequirement(kind="P2P").judge(box, {}, None)
    assert not verdict.ok and verdict.unknown and "NCCL's transport is unknown" in verdict.reason
    seen_otherwise = TransportRequirement(kind="P2P").judge(box, {(0, 1): ({"SHM"}, "P2P disabled")}, None)
    assert not seen_otherwise.ok and not seen_otherwise.unknown
    network = TransportRequirement(kind="NET/IB").judge(box, {}, None)
    assert not network.ok and network.unknown
