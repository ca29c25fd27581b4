"""NCCL log personalities: NCCL 2.18, 2.21 and >= 2.27 as their sources print them.

``tests/nccl_logs/<version>-<machine>.log`` are stub logs whose every line is an NCCL format string of
that tag (NVIDIA/nccl v2.18.3-1, v2.21.5-1, v2.27.7-1; ``generate.py`` names file and line for each),
for three machines: two NVLink A100s, two nodes of two A100s over IB with GPUDirect RDMA, four NVSwitch
H100s with NVLS. Whatever the version, the parser must read the same machine: version, transports per
pair of ranks, GPUDirect RDMA, NVLS. What differs between the tags, and is held here:

- 2.18.3: bracket = NVML index (busId up to 2.18.1), cuMem off by default: ``P2P/IPC``; only rank 0
  prints the version; no "nNodes" line; connections at init.
- 2.21.5: ``P2P/CUMEM``; "ncclCommInitRank comm ..."; the "comm .. nRanks .. nNodes .." line; NET/IB
  merges the ports of one NIC in its device list (2.20.3-2.23.4, ``net_ib.cc``).
- 2.27.7: connections at the first collective of each algorithm, after Init COMPLETE (runtime connect,
  2.22+); "Connected all rings, use ring PXN 0 GDR 1"; every rank prints the version; NET/IB's
  "Using" line even without a device; the ring dump unpadded and cut with "..." (2.23.4+).

When this was written the real corpus (../shared/corpus/nccl) held logs of 2.5.6, 2.7.8, 2.12.7,
2.18.3 (no transport lines) and 2.23.4, none with NCCL_GRAPH lines, none of 2.21 or >= 2.27: for
those, these stubs are the evidence.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from conftest import CORPUS, NO_CORPUS
from pytest_gputopo.parse.nccl_log import parse_nccl_log
from pytest_gputopo.render.tables import nccl_log_lines

LOGS = Path(__file__).resolve().parent / "nccl_logs"
VERSIONS = ("2.18.3", "2.21.5", "2.27.7")
CASES = ("nvlink-2gpu", "ib-2node", "nvls-4gpu")
CUDA = {"2.18.3": "12.2", "2.21.5": "12.4", "2.27.7": "12.9"}
PFX = "node1:4242:4300 [0] NCCL INFO "


def _text(version: str, case: str) -> str:
    return (LOGS / f"{version}-{case}.log").read_text(encoding="utf-8")


def _generator():
    spec = importlib.util.spec_from_file_location("nccl_logs_generate", LOGS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------- the stubs


def test_stubs_are_what_the_generator_writes():
    """The files are the generator's output (edit generate.py, then run it): their provenance holds."""
    gen = _generator()
    assert (gen.VERSIONS, gen.CASES) == (VERSIONS, CASES)
    for version in VERSIONS:
        for case in CASES:
            assert _text(version, case) == gen.render(version, case), f"{version}-{case}.log: run generate.py"


def test_stub_header_comments_are_not_nccl_lines():
    for version in VERSIONS:
        for case in CASES:
            header = "\n".join(ln for ln in _text(version, case).splitlines() if ln.startswith("#"))
            assert f"NVIDIA/nccl v{version}-1" in header
            log = parse_nccl_log(header)
            assert (log.nccl_lines, log.nccl_version, log.connections) == (0, None, ())


# Per machine: what NCCL did, the same at every version.
P2P_PAIRS = {
    "nvlink-2gpu": {(0, 1), (1, 0)},
    "ib-2node": {(0, 1), (1, 0), (2, 3), (3, 2)},
    "nvls-4gpu": {(0, 1), (1, 2), (2, 3), (3, 0), (1, 0), (2, 1), (3, 2)},
}
NET_PAIRS = {"nvlink-2gpu": set(), "ib-2node": {(1, 2), (3, 0), (0, 2), (2, 0)}, "nvls-4gpu": set()}
HOSTS = {"nvlink-2gpu": ("a100-box",), "ib-2node": ("node-a", "node-b"), "nvls-4gpu": ("h100-box",)}
BUSES = {
    "nvlink-2gpu": ("7000", "b000"),
    "ib-2node": ("7000", "b000", "7000", "b000"),
    "nvls-4gpu": ("18000", "2a000", "3a000", "5d000"),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_reads_the_same_machine(version: str, case: str):
    log = parse_nccl_log(_text(version, case))
    ib, nvls = case == "ib-2node", case == "nvls-4gpu"
    n = len(BUSES[case])
    assert (log.nccl_version, log.cuda_version) == (version, CUDA[version])
    assert log.families == ({"P2P", "NET/IB"} if ib else {"P2P"}) and log.transports == log.families
    expected = {pair: ("P2P",) for pair in P2P_PAIRS[case]} | {pair: ("NET/IB",) for pair in NET_PAIRS[case]}
    assert log.pair_transports() == dict(sorted(expected.items()))
    assert log.gdrdma is ib
    assert all(c.gdrdma for c in log.connections if c.transport == "NET/IB")
    assert (log.nvls, log.nvls_available) == (nvls, nvls)
    assert (log.n_ranks, log.n_channels) == (n, 2)
    per_node = 2 if ib else n
    assert log.ranks == {r: (HOSTS[case][r // per_node], r % per_node, BUSES[case][r]) for r in range(n)}
    assert log.hosts == HOSTS[case] and log.multi_node is ib
    # 2.18 prints no "nNodes" (the "comm .. nRanks .. nNodes" line is 2.20.3+): the hosts say it instead
    assert log.n_nodes == (None if version == "2.18.3" else len(HOSTS[case]))
    assert (log.network, log.net_plugin) == ("IB" if ib else "Socket", None)
    assert log.net_devices == (("mlx5_0:1/IB",) if ib else ("eth0:10.0.0.10<0>",))
    assert log.rings_connected and log.trees_connected
    # nothing misread: the only warning is NCCL's own "no IB device" on the boxes without one
    assert log.warnings == (() if ib else ("no IB device found (NET/IB : No device found.)",))


@pytest.mark.parametrize("version", VERSIONS)
def test_transport_wording_per_version(version: str):
    """The words after "via", as each tag prints them (p2p.cc, net.cc)."""
    mechanism = "IPC" if version == "2.18.3" else "CUMEM"  # NCCL_CUMEM_ENABLE: 0 in 2.18, -2 from 2.19
    a100 = parse_nccl_log(_text(version, "ib-2node"))
    assert {c.via for c in a100.connections} == {f"P2P/{mechanism}/read", "NET/IB/0/GDRDMA"}  # A100: P2P read
    h100 = parse_nccl_log(_text(version, "nvls-4gpu"))
    assert {c.via for c in h100.connections} == {f"P2P/{mechanism}"}  # read is for compute capability 8.0 only
    # brackets are NVML indices since 2.18.3, and every P2P/NET line has its connection index
    assert all(c.src_dev == str(c.src_rank % 2) and c.conn_index == 0 for c in a100.connections)
    sends = {(c.src_rank, c.dst_rank, c.host) for c in a100.connections if c.direction == "send"}
    receives = {(c.src_rank, c.dst_rank, c.host) for c in a100.connections if c.direction == "receive"}
    # a NET send is printed on the sender's node, its receive on the receiver's
    assert sends == {(1, 2, "node-a"), (0, 2, "node-a"), (3, 0, "node-b"), (2, 0, "node-b")}
    assert receives == {(1, 2, "node-b"), (0, 2, "node-b"), (3, 0, "node-a"), (2, 0, "node-a")}


@pytest.mark.parametrize("case", CASES)
def test_runtime_connect_from_2_22_connects_after_init_complete(case: str):
    """2.22+ connects each algorithm at its first collective (init.cc NCCL_RUNTIME_CONNECT, group.cc
    ncclCollPreconnectFunc), so the transport lines follow "Init COMPLETE"; before, they precede it.
    The parser reads the same either way."""
    for version in VERSIONS:
        order = {}
        for i, line in enumerate(_text(version, case).splitlines()):
            m = re.match(r"(\S+):(\d+):\d+ \[\d+\] NCCL INFO (.*)", line)
            if m and "Init COMPLETE" in m.group(3):
                order.setdefault(m.group(2), {})["complete"] = i
            elif m and " via " in m.group(3):
                order.setdefault(m.group(2), {}).setdefault("first_via", i)
        lazy = version == "2.27.7"
        assert all((o["first_via"] > o["complete"]) is lazy for o in order.values()), version
    eager, lazy_log = parse_nccl_log(_text("2.21.5", case)), parse_nccl_log(_text("2.27.7", case))
    assert eager.pair_transports() == lazy_log.pair_transports()
    assert (eager.gdrdma, eager.nvls, eager.n_ranks) == (lazy_log.gdrdma, lazy_log.nvls, lazy_log.n_ranks)


def test_runtime_connect_in_a_real_2_23_log():
    """The same order in a published 2.23.4 log (corpus nccl/002, nccl-tests#311): each process that
    shows its Init COMPLETE prints its transport lines after it."""
    path = CORPUS / "nccl" / "002.txt"
    if not path.exists():
        pytest.skip(NO_CORPUS)
    complete, first_via = {}, {}
    for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines()):
        m = re.match(r"(\S+):(\d+):\d+ \[\d+\] NCCL INFO ", line)
        if m:
            if "Init COMPLETE" in line:
                complete.setdefault(m.groups(), i)
            elif " via " in line:
                first_via.setdefault(m.groups(), i)
    both = set(complete) & set(first_via)
    assert len(both) >= 4 and all(first_via[p] > complete[p] for p in both)


@pytest.mark.parametrize("version", VERSIONS)
def test_version_line_printers(version: str):
    """2.18/2.21 print the version on rank 0 only (init.cc: ``if (myrank == 0) showVersion()``);
    2.27 in every process (``pthread_once(&once, showVersion)``)."""
    text = _text(version, "ib-2node")
    printers = {m.group(1) for m in re.finditer(r"^\S+:(\d+):\d+ \[\d\] NCCL INFO NCCL version ", text, re.M)}
    assert printers == ({"3101", "3102", "4101", "4102"} if version == "2.27.7" else {"3101"})


@pytest.mark.parametrize("version", VERSIONS)
def test_summary_renders_each_version(version: str):
    lines = nccl_log_lines(parse_nccl_log(_text(version, "ib-2node")))
    assert lines[0] == f"NCCL {version} (built for CUDA {CUDA[version]})"
    assert "GPUDirect RDMA: yes" in lines
    assert not any("not understood" in line for line in lines)
    json.dumps(parse_nccl_log(_text(version, "nvls-4gpu")).to_json())


# ---------------------------------------------------------------- lines the parser misread (fixed)


def test_graph_ring_neighbour_lines_are_not_cut_transport_lines():
    """NCCL_GRAPH's "Ring %02d : %d -> %d -> %d" (prev, rank, next: init.cc v2.18.3-1:1042,
    v2.21.5-1:1221, v2.27.7-1:1051; still in v2.29.7-1) was taken for a transport line cut short: a
    warning per channel and rank in every log the plugin writes itself (bench/allreduce.py asks for
    NCCL_DEBUG_SUBSYS=...,GRAPH,...). A transport line that is really cut is still reported."""
    log = parse_nccl_log(PFX + "Ring 00 : 3 -> 0 -> 1\n" + PFX + "Ring 15 : 7 -> 0 -> 1\n")
    assert log.warnings == (
        "no transport lines (Channel ... via ...): the log ends before NCCL connected the "
        "ranks, or NCCL_DEBUG_SUBSYS leaves out INIT",
    )
    assert (log.connections, log.n_ranks) == ((), 8)  # prev/next name ranks: a lower bound without nranks
    cut = parse_nccl_log(PFX + "Ring 00 : 0[1] -> 1[2]\n" + PFX + "Ring 00 : 0 -> 1 -> \n")
    assert sum("not understood" in w for w in cut.warnings) == 2
    # the <= 2.6 transport shape (one arrow, then the transport) still reads as a connection
    old = parse_nccl_log(PFX + "Ring 00 : 0 -> 1 [send] via NET/IB/0/GDRDMA")
    assert [(c.src_rank, c.dst_rank, c.transport) for c in old.connections] == [(0, 1, "NET/IB")]


def test_merged_ib_ports_2_20_to_2_23():
    """2.20.3 to 2.23.4 list the ports of one NIC merged (NCCL_IB_MERGE_NICS=1, net_ib.cc v2.21.5-1:
    " [%d]={" then "[%d] %s:%d/%s%s" per port, ", " between, "}"); the other devices as before
    (" [%d]%s:%d/%s" with the IB device index). The devices were read as "={[0]", the ports lost."""
    line = "NET/IB : Using [0]={[0] mlx5_0:1/IB, [1] mlx5_1:1/IB} [2]mlx5_2:1/RoCE [RO]; OOB ib0:10.0.0.1<0>"
    log = parse_nccl_log(PFX + line + "\n" + PFX + "Using network IB")
    assert log.net_devices == ("mlx5_0:1/IB", "mlx5_1:1/IB", "mlx5_2:1/RoCE")
    assert "network: IB; devices mlx5_0:1/IB, mlx5_1:1/IB, mlx5_2:1/RoCE" in nccl_log_lines(log)
    # only merged devices, no RO; a line cut inside the group keeps the whole ports it has
    assert parse_nccl_log(
        PFX + "NET/IB : Using [0]={[0] mlx5_0:1/IB, [1] mlx5_1:1/IB} ; OOB ib0:10.0.0.1<0>"
    ).net_devices == ("mlx5_0:1/IB", "mlx5_1:1/IB")
    assert parse_nccl_log(PFX + "NET/IB : Using [0]={[0] mlx5_0:1/IB, [1] mlx5_1:1/I").net_devices[0] == "mlx5_0:1/IB"
    # the forms before and after are unchanged
    assert parse_nccl_log(
        PFX + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [RO]; OOB ib0:10.0.0.1<0>"
    ).net_devices == ("mlx5_0:1/IB", "mlx5_1:1/IB")


def _dump_line_2_23(values, prefix):
    """src/graph/rings.cc dumpLine from v2.23.4-1 on: " %*d" per value into 128 bytes, and "..." over
    the last three when it does not fit."""
    line = prefix
    width = len(str(len(values) - 1))
    for v in values:
        if len(line) >= 127:
            break
        line += " %*d" % (width, v)
    return line if len(line) < 128 else line[:124] + "..."


def _order(nranks: int, kind: str) -> list:
    if kind == "interleaved":
        return list(range(0, nranks, 2)) + list(range(1, nranks, 2))
    return list(range(21)) + [nranks - 1] + list(range(21, nranks - 1))  # "... 20 204..." (2047 cut)


@pytest.mark.parametrize("nranks, kind", [(64, "interleaved"), (256, "interleaved"), (2048, "big-number-cut")])
def test_ring_dump_cut_with_dots_from_2_23_4(nranks: int, kind: str):
    """From 2.23.4 the ring order line ends in "..." once it passes 127 characters (40 ranks or so);
    the channel count it carries was lost, and a number cut by the dots must not count as a rank."""
    line = _dump_line_2_23(_order(nranks, kind), "Channel %02d/%02d :" % (0, 32))
    # 256 ranks fill exactly 127 characters: NCCL stops there without the dots
    assert len(line) == 127 and line.endswith("...") is (nranks != 256)
    assert line.endswith(" 20 204...") is (kind == "big-number-cut")
    log = parse_nccl_log(PFX + line)
    assert log.n_channels == 32 and not any("not understood" in w for w in log.warnings)
    body = line[len("Channel 00/32 :") :]
    # the numbers printed whole: the last token is "..." or a number whose last digits the dots took
    shown = body.split()[:-1] if body.endswith("...") else body.split()
    assert log.n_ranks == max(int(t) for t in shown) + 1
