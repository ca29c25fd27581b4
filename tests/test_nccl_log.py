"""NCCL_DEBUG=INFO log parser and NCCL_TOPO_DUMP_FILE XML reader: every real sample in
../shared/corpus/nccl (read in place) against its meta, hand-written lines for every transport line
shape of every NCCL era, and property tests that no text makes the parser raise."""

from __future__ import annotations

import contextlib
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import CORPUS, NO_CORPUS
from pytest_gputopo.core.fact_requirements import TransportRequirement
from pytest_gputopo.parse.nccl_log import Connection, NcclLog, parse_nccl_log, transport_family
from pytest_gputopo.parse.nccl_topo_xml import NcclTopoXmlError, parse_topo_xml
from pytest_gputopo.render.tables import nccl_log_lines

SAMPLES = sorted((CORPUS / "nccl").glob("*.txt"))


def _corpus_params():
    if not SAMPLES:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_CORPUS), id="no-corpus")]
    return [pytest.param(p, id=p.stem) for p in SAMPLES]


def _meta(path: Path) -> dict:
    return json.loads(path.with_suffix(".meta.json").read_text(encoding="utf-8"))["expected"]


def _head(value: str) -> str:
    """Meta values carry notes after the fact: "NET/OFI (AWS Libfabric)" -> "NET/OFI"."""
    return re.sub(r"\s+\(.*\)\s*$", "", value).strip()


def _variant_seen(log: NcclLog, variant: str) -> bool:
    """A variant as the meta writes it: the text after "via" (or its start), or a transport name."""
    return any(c.via == variant or c.via.startswith(variant + "/") or c.transport == variant for c in log.connections)


def _conn_like(log: NcclLog, example: str) -> bool:
    """A connection shaped like the meta's quoted example 'Channel 00 : 2[89000] -> 3[b2000]'."""
    m = re.search(r"Channel (\d+) : (\d+)\[(\w+)\] -> (\d+)\[(\w+)\]", example)
    assert m, f"meta example not understood: {example!r}"
    ch, src, sdev, dst, ddev = m.groups()
    return any(
        (c.channel, c.conn_index, c.src_rank, c.src_dev, c.dst_rank, c.dst_dev)
        == (int(ch), None, int(src), sdev, int(dst), ddev)
        for c in log.connections
    )


# One check per meta key, so that a new key in a meta fails loudly until someone reads it.
CHECKS = {
    "nccl_version": lambda log, v, text: (
        (log.nccl_version, log.cuda_version)
        == (
            # a note instead of a version ("... not in this excerpt") means: no version line in the text
            (None, None) if v is None or " " in v else (v.split("+")[0], v.split("+cuda")[1] if "+cuda" in v else None)
        )
    ),
    "cuda_driver_version": lambda log, v, text: log.cuda_driver_version == v,
    "n_ranks": lambda log, v, text: log.n_ranks == v,
    "n_nodes": lambda log, v, text: (log.n_nodes if log.n_nodes is not None else len(log.hosts)) == v,
    "multi_node": lambda log, v, text: log.multi_node is v,
    "single_node": lambda log, v, text: log.multi_node is not v,
    "single_node_in_excerpt": lambda log, v, text: log.multi_node is not v,
    "transports_seen": lambda log, v, text: log.families == {_head(t) for t in v},
    "transport_lines": lambda log, v, text: all(_variant_seen(log, t.removeprefix("via ")) for t in v),
    "gdrdma": lambda log, v, text: log.gdrdma is v,
    "net_plugin": lambda log, v, text: log.net_plugin == _head(v),
    "net_ib_devices_line": lambda log, v, text: set(re.findall(r"\[\d+\](\S+)", v)) <= set(log.net_devices),
    "has_connected_all_rings": lambda log, v, text: log.rings_connected is v,
    "has_connected_all_trees": lambda log, v, text: log.trees_connected is v,
    "has_warn_lines": lambda log, v, text: any(w.startswith("NCCL WARN") for w in log.warnings) is v,
    "p2p_variant": lambda log, v, text: _variant_seen(log, _head(v)),
    "shm_variant": lambda log, v, text: _variant_seen(log, _head(v)),
    "net_variant": lambda log, v, text: _variant_seen(log, _head(v)),
    "proxy_send_suffix_seen": lambda log, v, text: any(
        c.via == _head(v) and c.direction == "send" and c.proxy_rank is not None for c in log.connections
    ),
    "pairs": lambda log, v, text: (
        {f"{s}->{d}": tuple(sorted({transport_family(t) for t in ts})) for (s, d), ts in log.pair_transports().items()}
        == {k: (t,) for k, t in v.items()}
    ),
    "channel_line_formats": lambda log, v, text: (
        len(v) == 2 and all((c.conn_index is None) == (c.transport == "SHM") for c in log.connections)
    ),
    "channel_line_format": lambda log, v, text: _conn_like(log, v),
    "busid_style_rank_labels": lambda log, v, text: any(
        f"{c.src_rank}[{c.src_dev}]" == v.split()[0] or f"{c.dst_rank}[{c.dst_dev}]" == v.split()[0]
        for c in log.connections
    ),
    "using_network": lambda log, v, text: log.network == v,
    "net_ib_no_device": lambda log, v, text: any("no IB device found" in w for w in log.warnings) is v,
    "net_ib_unavailable": lambda log, v, text: any(_head(v).removeprefix("WARN ") in w for w in log.warnings),
    "net_socket_iface": lambda log, v, text: any(d.startswith(v + ":") for d in log.net_devices),
    "ipv6_link_local_socket_iface": lambda log, v, text: any(":fe80:" in d for d in log.net_devices) is v,
    "p2p_disabled_lines": lambda log, v, text: (
        bool(log.p2p_disabled) and all(p.startswith(v.split(" dev ")[0]) for p in log.p2p_disabled)
    ),
    "p2p_disabled_between_connected_gpus": lambda log, v, text: bool(log.p2p_disabled_pairs) is v,
    "p2p_disabled_pairs_seen": lambda log, v, text: [list(p) for p in log.p2p_disabled_pairs] == v,
    "error": lambda log, v, text: any(v in w for w in log.warnings),
    "nvls_multicast_available": lambda log, v, text: log.nvls_available is v,
    "n_channels": lambda log, v, text: log.n_channels == v,
    "single_process_multi_gpu": lambda log, v, text: any(len(devs) > 1 for _, _, devs in log.processes) is v,
    "same_hostname_on_two_nodes": lambda log, v, text: (log.multi_node and len(log.hosts) == 1) is v,
    # "[1,N]<stdout>:" must not leak into what the prefix gives (host names)
    "line_prefix": lambda log, v, text: bool(log.hosts) and not any("<" in h or "[" in h for h in log.hosts),
}
NOT_CHECKED_HERE = {
    # the nccl-tests result table in the same text: tests/test_nccl_tests_parser.py holds these
    "has_perf_table",
    "contains_perf_table",
    "avg_bus_bandwidth",
    "max_busbw_in_table",
    "perf_rows",
    "zero_size_rows",
    # notes for a human reader, not facts
    "nccl_version_note",
    "transport_note",
    # aws-ofi-nccl's own words ("Selected Provider is efa"), not an NCCL fact
    "net_provider_line",
}


@pytest.mark.parametrize("path", _corpus_params())
def test_corpus_sample_meets_its_meta(path: Path):
    text = path.read_text(encoding="utf-8")
    log = parse_nccl_log(text)
    expected = _meta(path)
    unknown = set(expected) - set(CHECKS) - NOT_CHECKED_HERE
    assert not unknown, f"{path.name}: meta keys nobody checks: {sorted(unknown)}"
    failed = [key for key, value in expected.items() if key in CHECKS and not CHECKS[key](log, value, text)]
    assert not failed, f"{path.name}: {[(k, expected[k]) for k in failed]} -> {log.to_json()}"


@pytest.mark.parametrize("path", _corpus_params())
def test_corpus_sample_to_json_and_summary(path: Path):
    log = parse_nccl_log(path.read_text(encoding="utf-8"))
    data = json.loads(json.dumps(log.to_json()))
    assert data["nccl_version"] == log.nccl_version
    assert data["transports"] == sorted(log.transports)
    assert len(data["connections"]) == len(log.connections)
    lines = nccl_log_lines(log)
    assert lines[0].startswith("NCCL ")
    assert any(line.startswith("transports: ") for line in lines)
    for src, dst in log.pair_transports():
        peer = "CollNet" if dst == -1 else str(dst)
        assert any(line.startswith(f"  {src} -> {peer}: ") for line in lines)


@pytest.mark.parametrize("path", _corpus_params())
def test_corpus_sample_cut_anywhere_never_raises(path: Path):
    text = path.read_text(encoding="utf-8")
    whole = parse_nccl_log(text)
    for cut in range(0, len(text), max(1, len(text) // 40)):
        part = parse_nccl_log(text[:cut])
        # a prefix knows less, never other things: only its last line, cut, may read differently
        assert set(part.connections[:-1]) <= set(whole.connections)


# ------------------------------------------------------------------------------ line shapes by era

PFX = "node1:4242:4300 [0] NCCL INFO "


def _one(line: str) -> Connection:
    log = parse_nccl_log(PFX + line)
    assert len(log.connections) == 1, (line, log.warnings)
    return log.connections[0]


def _shape(c: Connection):
    return (
        c.channel,
        c.conn_index,
        c.src_rank,
        c.src_dev,
        c.dst_rank,
        c.dst_dev,
        c.transport,
        c.detail,
        c.direction,
        c.gdrdma,
    )


# A connection line as each era of NCCL writes it, and its _shape as read.
ERA_LINES = [
    # 2.4-2.6: "Ring", rank[device]
    ("Ring 00 : 0[1] -> 1[2] via P2P/IPC", (0, None, 0, "1", 1, "2", "P2P", "IPC", None, False)),
    ("Ring 03 : 0[1b000] -> 1[1c000] via P2P/IPC", (3, None, 0, "1b000", 1, "1c000", "P2P", "IPC", None, False)),
    (
        "Ring 01 : 1[1] -> 0[0] via direct shared memory",
        (1, None, 1, "1", 0, "0", "SHM", "direct shared memory", None, False),
    ),
    ("Ring 00 : 0 -> 1 [send] via NET/IB/0/GDRDMA", (0, None, 0, None, 1, None, "NET/IB", "IB/0/GDRDMA", "send", True)),
    # 2.7-2.11: "Channel", busids
    (
        "Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC/read",
        (0, None, 0, "1b000", 1, "1c000", "P2P", "IPC/read", None, False),
    ),
    # 2.12-2.18.1: the connection index; SHM keeps the short "Channel NN :" form
    ("Channel 00/0 : 0[1b000] -> 1[1c000] via P2P/IPC", (0, 0, 0, "1b000", 1, "1c000", "P2P", "IPC", None, False)),
    (
        "Channel 05 : 0[1b000] -> 1[1c000] via SHM/direct/direct",
        (5, None, 0, "1b000", 1, "1c000", "SHM", "direct/direct", None, False),
    ),
    (
        "Channel 00/0 : 0[1b000] -> 8[1b000] [send] via NET/IB/0/GDRDMA",
        (0, 0, 0, "1b000", 8, "1b000", "NET/IB", "IB/0/GDRDMA", "send", True),
    ),
    # 2.18.3-2.19: NVML indices in place of busids
    ("Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", (0, 0, 0, "0", 1, "1", "P2P", "CUMEM/read", None, False)),
    (
        "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
        (0, 0, 0, "0", 8, "0", "NET/IB", "IB/0/GDRDMA", "send", True),
    ),
]


@pytest.mark.parametrize("line, shape", ERA_LINES, ids=[line for line, _ in ERA_LINES])
def test_a_connection_line_of_each_era(line, shape):
    assert _shape(_one(line)) == shape


def test_era_2_4_to_2_6_ring_lines():
    c = _one("Ring 00 : 1 -> 0 [receive] via NET/Socket/1")
    assert _shape(c) == (0, None, 1, None, 0, None, "NET/Socket", "Socket/1", "receive", False)
    assert c.net_dev == 1 and c.host == "node1" and c.pid == 4242
    assert _one("Ring 00 : 0[0] -> 1[1] via P2P/direct pointer").detail == "direct pointer"


def test_era_2_4_init_lines_without_busid():
    log = parse_nccl_log(
        PFX
        + "NCCL version 2.4.8+cuda10.1\n"
        + PFX
        + "comm 0x7f3c2c001b20 rank 0 nranks 2 cudaDev 0 nvmlDev 0 - Init COMPLETE\n"
        + "node1:4243:4301 [1] NCCL INFO comm 0x7f3c2c001b30 rank 1 nranks 2 cudaDev 1 nvmlDev 1"
        " - Init COMPLETE\n"
    )
    assert (log.nccl_version, log.cuda_version) == ("2.4.8", "10.1")
    assert log.ranks == {0: ("node1", 0, None), 1: ("node1", 1, None)}
    assert log.n_ranks == 2


def test_era_2_7_to_2_11_channel_lines_with_busids():
    assert _shape(_one("Channel 00 : 2[89000] -> 3[b2000] via direct shared memory"))[6:8] == (
        "SHM",
        "direct shared memory",
    )
    # 2.9-2.11 append the communicator; it is not part of the transport
    c = _one("Channel 01 : 0[1b000] -> 1[1c000] via P2P/IPC/read comm 0x55d0c8e0a1b0 nRanks 02")
    assert (c.detail, c.via) == ("IPC/read", "P2P/IPC/read")
    c = _one("Channel 00 : 1[1c000] -> 0[1b000] [receive] via NET/IB/0/GDRDMA comm 0x55d0c8e0a1b0 nRanks 04")
    assert _shape(c) == (0, None, 1, "1c000", 0, "1b000", "NET/IB", "IB/0/GDRDMA", "receive", True)
    c = _one("Channel 02 : 0[1b000] -> 1[1c000] via P2P/indirect/2[3d000]/read")
    assert (c.transport, c.detail, c.proxy_rank) == ("P2P", "indirect/2[3d000]/read", 2)


def test_era_2_12_to_2_18_1_conn_index_and_busids():
    c = _one("Channel 01/0 : 3[3e000] -> 4[1b000] [send] via NET/IB/0(2)/GDRDMA")  # PXN through rank 2
    assert (c.transport, c.net_dev, c.proxy_rank, c.gdrdma) == ("NET/IB", 0, 2, True)
    assert _one("Channel 00/0 : 0[3e000] -> 1[40000] via P2P/CUMEM").detail == "CUMEM"


def test_era_2_18_3_to_2_19_nvml_indices():
    assert _shape(_one("Channel 00 : 0[0] -> 1[1] via SHM/direct/direct"))[6:8] == ("SHM", "direct/direct")
    assert _one("Channel 07/1 : 6[6] -> 7[7] via P2P/direct pointer").conn_index == 1
    assert _one("Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read/CE").detail == "IPC/read/CE"


def test_era_2_20_to_2_30_mnnvl_pci_shared_and_plugins():
    assert _one("Channel 00/0 : 0[0] -> 4[0] via P2P/MNNVL").detail == "MNNVL"
    c = _one("Channel 03/0 : 8[0] -> 0[0] [receive] via NET/IB/1/GDRDMA(PCI)/Shared")
    assert (c.transport, c.detail, c.net_dev, c.gdrdma, c.direction) == (
        "NET/IB",
        "IB/1/GDRDMA(PCI)/Shared",
        1,
        True,
        "receive",
    )
    assert (_one("Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0").gdrdma) is False
    # external plugin names may hold spaces and digits
    c = _one("Channel 00/0 : 1[0] -> 0[0] [send] via NET/AWS Libfabric/0/GDRDMA")
    assert (c.transport, c.family, c.net_dev, c.gdrdma) == ("NET/AWS Libfabric", "NET/OFI", 0, True)
    c = _one("Channel 03/0 : 11[3] -> 3[3] [send] via NET/NCCL RDMA Plugin v9/3/GDRDMA")
    assert (c.transport, c.family, c.net_dev) == ("NET/NCCL RDMA Plugin v9", "NET/IB", 3)
    c = _one("Channel 00/0 : 3[1] -> 4[0] [send] via NET/IBext_v8/5(2)/GDRDMA")
    assert (c.transport, c.family, c.net_dev, c.proxy_rank) == ("NET/IBext_v8", "NET/IB", 5, 2)


def test_master_shm_direct_only():
    assert _shape(_one("Channel 02 : 3[3] -> 0[0] via SHM/direct"))[6:8] == ("SHM", "direct")


def test_collnet_lines_every_era():
    for line, direction in (
        ("Coll 00 : 0 [send] via COLLNET/SHARP/0/GDRDMA", "send"),  # 2.6
        ("CollNet 01 : 1 [receive] via COLLNET/IBext/0", "receive"),  # 2.7-2.11
        ("CollNet 00/0 : 0 [receive] via COLLNET/SHARP/1/GDRDMA(PCI)", "receive"),
    ):
        c = _one(line)
        assert (c.transport, c.src_rank, c.dst_rank, c.direction) == (
            "COLLNET",
            int(line.split(":")[1].split()[0]),
            -1,
            direction,
        )
    log = parse_nccl_log(PFX + "CollNet 00/0 : 0 [send] via COLLNET/SHARP/1/GDRDMA")
    assert log.collnet and log.gdrdma and log.families == {"COLLNET"}


def test_nvls_used_versus_available():
    available = parse_nccl_log(PFX + "NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)")
    assert (available.nvls_available, available.nvls) == (True, False)
    for line in (
        "NVLS comm 0x55d5 headRank 0 nHeads 8 nvlsRanks 8 buffSize 1048576 nvlsPerRankSize 201326592 "
        "nvlsTotalSize 1610612736",
        "NVLS comm 0x55d5 rank 0 nranks 8 buffSize 1048576 memSize 2097152 nvlsPerRankSize 1 nvlsTotalSize 8",
        "Connected NVLS tree",
        "AllReduce: 4194304 Bytes -> Algo NVLS proto SIMPLE channel{Lo..Hi}={0..15}",
        "32 coll channels, 32 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer",
    ):
        log = parse_nccl_log(PFX + line)
        assert log.nvls and log.nvls_available, line
        assert log.ranks == {}, line  # 2.17's "NVLS comm .. rank R nranks N" is not a rank line
    assert not parse_nccl_log(PFX + "32 coll channels, 0 nvls channels, 32 p2p channels").nvls


# ----------------------------------------------------------------------------------- other lines


def test_prefixes_mpirun_srun_timestamps_tracebacks_and_tables():
    text = "\r\n".join(
        [
            "[1,0]<stdout>:node1:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            "0: node2:20:21 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read",
            "[2026-04-28 14:14:47] node-3.cluster:30:31 [2] NCCL INFO Channel 01 : 2[2] -> 3[3] via SHM/direct/direct",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong",
            "     1048576        262144     float     sum      -1    583.4    1.80    1.80      0",
            "Traceback (most recent call last):",
            '  File "train.py", line 3, in <module>',
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error "
            "(run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
        ]
    )
    log = parse_nccl_log(text)
    assert [(c.host, c.pid) for c in log.connections] == [("node1", 10), ("node2", 20), ("node-3.cluster", 30)]
    assert log.nccl_version == "2.19.3" and log.cuda_version is None
    assert any(w.startswith("torch.distributed.DistBackendError: NCCL error in:") for w in log.warnings)
    assert log.multi_node  # three host names


def test_env_settings_p2p_disabled_and_warn_lines():
    text = "\n".join(
        [
            PFX + "NCCL_P2P_DISABLE set by environment to 1",
            PFX + "NCCL_P2P_LEVEL set by environment to LOC",
            PFX + "NCCL_IB_DISABLE set by environment to 1.",
            PFX + "NCCL_SOCKET_IFNAME set by environment to eth0",
            PFX + "P2P is disabled between connected GPUs 1 and 0. You can repress this message with "
            "NCCL_IGNORE_DISABLED_P2P=1.",
            "",
            "node1:4242:4300 [0] transport/p2p.cc:275 NCCL WARN P2P is disabled between NVLINK connected GPUs 2 "
            "and 3. This should not be the case given their connectivity, and is probably due to a hardware issue. "
            "If you still want to proceed, you can set NCCL_IGNORE_DISABLED_P2P=1.",
            "node1:4242:4300 [0] init.cc:1120 (ncclCommInitRankFunc) NCCL WARN Cuda failure 'out of memory'",
            PFX + "NET/IB : No device found.",
        ]
    )
    log = parse_nccl_log(text)
    assert log.env_settings == {
        "NCCL_P2P_DISABLE": "1",
        "NCCL_P2P_LEVEL": "LOC",
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "eth0",
    }
    assert log.p2p_disabled_pairs == ((1, 0), (2, 3))
    assert log.p2p_disabled[0] == "P2P is disabled between connected GPUs 1 and 0"
    assert "P2P disabled between connected GPUs 1 and 0" in log.warnings
    assert any(w.startswith("P2P disabled between NVLink-connected GPUs 2 and 3") for w in log.warnings)
    assert not any("NVLINK connected" in w for w in log.warnings)  # the WARN is not kept twice
    assert "NCCL WARN Cuda failure 'out of memory'" in log.warnings
    assert "no IB device found (NET/IB : No device found.)" in log.warnings


def test_largest_communicator_names_the_ranks():
    text = "\n".join(
        [
            "h:1:1 [0] NCCL INFO comm 0xa rank 1 nranks 2 cudaDev 3 nvmlDev 3 busId 4c000 commId 0x1 - Init COMPLETE",
            "h:1:1 [0] NCCL INFO comm 0xb rank 3 nranks 4 cudaDev 3 nvmlDev 3 busId 4c000 commId 0x2 - Init COMPLETE",
            "h:2:2 [0] NCCL INFO comm 0xc rank 0 nranks 4 cudaDev 0 busId 1b000 - Init COMPLETE",
            "h:1:1 [0] NCCL INFO comm 0xd rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0",
        ]
    )
    log = parse_nccl_log(text)
    assert log.ranks == {0: ("h", 0, "1b000"), 3: ("h", 3, "4c000")}
    assert (log.n_ranks, log.n_nodes, log.multi_node) == (4, 1, False)


def test_net_devices_network_and_plugin():
    text = "\n".join(
        [
            PFX + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>",
            PFX + "NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:fe80::1%eth1<0>",
            PFX + "Using network IBext_v8",
            PFX + "NCCL version 2.23.4+cuda12.4",
            PFX + "NCCL version 2.21.5+cuda12.4",
        ]
    )
    log = parse_nccl_log(text)
    assert log.net_devices == ("mlx5_0:1/IB", "mlx5_1:1/RoCE", "eth0:10.0.0.1<0>", "eth1:fe80::1%eth1<0>")
    assert (log.network, log.net_plugin) == ("IBext_v8", "IBext_v8")
    assert parse_nccl_log(PFX + "Using network IB").net_plugin is None
    assert log.nccl_version == "2.23.4"
    assert any(w.startswith("several NCCL versions in one log: 2.23.4, 2.21.5") for w in log.warnings)


def test_cut_transport_line_is_reported_not_guessed():
    log = parse_nccl_log(PFX + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n" + PFX + "Channel 11/0 :")
    assert len(log.connections) == 1
    assert any("not understood" in w and "Channel 11/0 :" in w for w in log.warnings)
    # ring orders are not connections and not warnings
    ring = parse_nccl_log(PFX + "Channel 00/02 :    0   7   6   5   4   3   2   1")
    assert (ring.connections, ring.n_channels, ring.n_ranks) == ((), 2, 8)
    assert not any("not understood" in w for w in ring.warnings)


def test_empty_and_non_nccl_text():
    for text in ("", "hello\nworld\n", b""):
        log = parse_nccl_log(text)
        assert log.warnings == ("no NCCL INFO lines",)
        assert (log.nccl_version, log.transports, log.connections, log.gdrdma) == (None, frozenset(), (), False)
    assert "no NCCL INFO lines" in parse_nccl_log(None).warnings  # type: ignore[arg-type]


def test_duplicate_lines_count_once_and_json_shape():
    line = PFX + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
    log = parse_nccl_log(line * 3)
    assert len(log.connections) == 1
    data = log.to_json()
    assert {
        "nccl_version",
        "transports",
        "connections",
        "gdrdma",
        "warnings",
        "ranks",
        "env_settings",
        "net_devices",
        "nvls",
        "collnet",
        "p2p_disabled",
        "multi_node",
    } <= set(data)
    assert {"channel", "src_rank", "src_dev", "dst_rank", "dst_dev", "transport", "detail"} <= set(
        data["connections"][0]
    )
    json.dumps(data)


def test_render_summary_names_pairs_and_warnings():
    text = "\n".join(
        [
            PFX + "NCCL version 2.18.5+cuda12.2",
            PFX + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            PFX + "Channel 00/0 : 1[1] -> 2[0] [send] via NET/IBext_v8/0/GDRDMA",
            PFX + "NET/IB : No device found.",
        ]
    )
    lines = nccl_log_lines(parse_nccl_log(text))
    assert lines[0] == "NCCL 2.18.5 (built for CUDA 12.2)"
    assert "transports: NET/IB (as NET/IBext_v8), P2P" in lines
    assert "GPUDirect RDMA: yes" in lines
    assert "  0 -> 1: P2P (CUMEM/read)" in lines
    assert "  1 -> 2: NET/IBext_v8 (IBext_v8/0/GDRDMA)" in lines
    assert "warning: no IB device found (NET/IB : No device found.)" in lines
    assert nccl_log_lines(NcclLog())[0] == "NCCL version: not in the log"


def test_transport_family():
    assert [
        transport_family(t)
        for t in (
            "P2P",
            "SHM",
            "NET/IB",
            "NET/Socket",
            "NET/IBext",
            "NET/IBext_v8",
            "NET/AWS Libfabric",
            "NET/GPUDirectTCPX",
            "COLLNET",
            "NVLS",
        )
    ] == ["P2P", "SHM", "NET/IB", "NET/Socket", "NET/IB", "NET/IB", "NET/OFI", "NET/GPUDirectTCPX", "COLLNET", "NVLS"]


def test_ucx_plugins_over_verbs_devices_are_the_ib_family():
    """The UCX plugins of nccl-rdma-sharp-plugins ("UCX", "UCX-RMA", "UCX-UCT", "UCX-UCT-RD":
    src/ucx_plugin.c, ucx_rma_plugin.c, ucx_uct_plugin.c, ucx_uct_rd_plugin.c; NCCL_PLUGIN_P2P=ucx, ucx_rma,
    ...) run over IB and meet requires_nccl_transport("NET/IB"). They take their devices from
    ibverbs (nccl_ucx_init -> nccl_p2p_ib_init) and pin UCX to one (UCX NET_DEVICES=<hca>:<port>), and the
    plugin logs them as NCCL's own IB does: "NET/IB : Using [0]mlx5_0:1/IB" (link layer IB or RoCE,
    src/p2p_plugin.c). Transport lines as in ROCm/rccl#1261: "via NET/UCX/0/GDRDMA". Without such a
    device line nothing says where UCX ran: the family stays unknown (its own name)."""
    lines = [
        PFX + "P2P plugin v8 UCX-RMA",
        PFX + "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>",
        PFX + "Using network UCX-RMA",
        PFX + "Channel 00/0 : 0[b7000] -> 1[7000] [send] via NET/UCX-RMA/0/GDRDMA",
        PFX + "Channel 01/0 : 0[b7000] -> 1[7000] [send] via NET/UCX/1/GDRDMA",
    ]
    log = parse_nccl_log("\n".join(lines))
    assert log.transports == {"NET/UCX-RMA", "NET/UCX"} and log.families == {"NET/IB"}
    assert log.net_plugin == "UCX-RMA"
    account = {"transports": sorted(log.transports), "families": sorted(log.families), "gdrdma": log.gdrdma}
    assert TransportRequirement(kind="NET/IB", gdrdma=True).judge(None, {}, account).ok
    assert TransportRequirement(kind="NET/UCX").judge(None, {}, account).ok  # its own name still meets
    assert not TransportRequirement(kind="NET/Socket").judge(None, {}, account).ok
    for name in ("NET/UCX", "NET/UCX-RMA", "NET/UCX_RMA", "NET/UCX-UCT", "NET/UCX-UCT-RD"):
        assert transport_family(name, ("mlx5_0:1/RoCE",)) == "NET/IB"
        assert transport_family(name) == name  # no device seen: unknown, not guessed
        assert transport_family(name, ("eth0:10.0.0.1<0>",)) == name  # socket devices only: not IB
    from pytest_gputopo.render.tables import nccl_log_lines

    assert "transports: NET/IB (as NET/UCX), NET/IB (as NET/UCX-RMA)" in nccl_log_lines(log)  # as judged
    no_devices = parse_nccl_log("\n".join(lines[2:]))
    assert no_devices.families == {"NET/UCX-RMA", "NET/UCX"}
    assert (
        not TransportRequirement(kind="NET/IB")
        .judge(None, {}, {"transports": sorted(no_devices.transports), "families": sorted(no_devices.families)})
        .ok
    )


# ------------------------------------------------------------------------------------- properties

_VOCAB = [
    "NCCL INFO ",
    "NCCL WARN ",
    "Channel ",
    "Ring ",
    "CollNet ",
    "00/0 : ",
    "0[0]",
    " -> ",
    "1[1b000]",
    " [send] ",
    " [receive] ",
    "via ",
    "P2P/",
    "NET/",
    "COLLNET/",
    "IB/0",
    "(2)",
    "/GDRDMA",
    "SHM/direct",
    "direct shared memory",
    "comm 0x1f rank ",
    "nranks ",
    "cudaDev ",
    "busId ",
    "NCCL version 2.18.5+cuda12.2",
    "set by environment to ",
    "P2P is disabled between connected GPUs ",
    " and ",
    "\n",
    "h:1:2 [0] ",
    "99999999999999999999999",
    "NVLS comm ",
    " nvls channels",
    "Using network ",
    "NET/IB : Using [0]",
]


@settings(max_examples=300)
@given(st.text())
def test_arbitrary_text_never_raises(text):
    log = parse_nccl_log(text)
    assert isinstance(log, NcclLog)
    json.dumps(log.to_json())
    nccl_log_lines(log)


@settings(max_examples=300)
@given(st.lists(st.one_of(st.sampled_from(_VOCAB), st.text(max_size=5)), max_size=40).map("".join))
def test_nccl_like_text_never_raises(text):
    log = parse_nccl_log(text)
    json.dumps(log.to_json())
    nccl_log_lines(log)


@pytest.mark.skipif(not SAMPLES, reason=NO_CORPUS)
@settings(max_examples=100)
@given(st.data())
def test_mutated_real_samples_never_raise(data):
    text = SAMPLES[data.draw(st.integers(0, len(SAMPLES) - 1))].read_text(encoding="utf-8")
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    for _ in range(data.draw(st.integers(1, 8))):
        i, j = sorted(rng.randrange(len(text) + 1) for _ in range(2))
        op = rng.choice(("cut", "insert", "dup", "shuffle"))
        if op == "cut":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + data.draw(st.text(max_size=20)) + text[i:]
        elif op == "dup":
            text = text[:j] + text[i:j] + text[j:]
        else:
            lines = text.splitlines(keepends=True)
            rng.shuffle(lines)
            text = "".join(lines)
    log = parse_nccl_log(text)
    json.dumps(log.to_json())
    nccl_log_lines(log)


# ----------------------------------------------------------------------------------- topology XML

TOPO_XML = """<system version="1">
  <cpu numaid="0" affinity="00000000,0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:17:00.0" class="0x060400" vendor="0x1000" device="0xc010" link_speed="16.0 GT/s PCIe" link_width="16">
      <pci busid="0000:19:00.0" class="0x030200" vendor="0x10de" device="0x20b0" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="80" rank="0" gdr="1">
          <nvlink target="0000:c7:00.0" count="2" tclass="0x068000"/>
          <nvlink target="0000:1b:00.0" count="12" tclass="0x030200"/>
        </gpu>
      </pci>
      <pci busid="0000:1a:00.0" class="0x020700" vendor="0x15b3" device="0x101b" link_speed="16.0 GT/s PCIe" link_width="16">
        <nic>
          <net name="mlx5_0" dev="0" speed="200000" port="1" latency="0.000000" guid="0x1c34da0300a1b2c3" maxconn="262144" gdr="1"/>
        </nic>
      </pci>
    </pci>
  </cpu>
  <cpu numaid="1" affinity="ffff0000,00000000" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:1b:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="x16">
      <gpu dev="1" sm="80" rank="1" gdr="0"/>
    </pci>
    <nic>
      <net name="eth0" dev="1" speed="10000" port="0" gdr="0"/>
    </nic>
  </cpu>
</system>
"""  # noqa: E501 (the tool's own lines, verbatim)


def test_topo_xml_reads_cpus_gpus_nvlinks_and_nics():
    topo = parse_topo_xml(TOPO_XML)
    assert [c["numaid"] for c in topo["cpus"]] == [0, 1]
    assert topo["cpus"][0]["affinity"] == "00000000,0000ffff"
    g0, g1 = topo["gpus"]
    assert (g0["busid"], g0["dev"], g0["rank"], g0["sm"], g0["gdr"], g0["numaid"]) == (
        "0000:19:00.0",
        0,
        0,
        80,
        True,
        0,
    )
    assert g0["nvlinks"] == [
        {"target": "0000:c7:00.0", "count": 2, "tclass": "0x068000", "nvswitch": True}
        | {"peer": "nvswitch", "peer_dev": None},
        {"target": "0000:1b:00.0", "count": 12, "tclass": "0x030200", "nvswitch": False}
        | {"peer": "gpu", "peer_dev": 1},  # NCCL's class table; the GPU at that bus is dev 1
    ]
    assert (g1["busid"], g1["gdr"], g1["numaid"], g1["nvlinks"]) == ("0000:1b:00.0", False, 1, [])
    n0, n1 = topo["nics"]
    assert (n0["name"], n0["dev"], n0["speed"], n0["gdr"], n0["busid"]) == ("mlx5_0", 0, 200000, True, "0000:1a:00.0")
    assert (n1["name"], n1["busid"], n1["numaid"]) == ("eth0", None, 1)
    # a bad number is kept as written, with a warning that names the element
    assert g1["link_width"] == "x16"
    assert topo["warnings"] == ["<gpu dev='1'>: link_width='x16' is not a number"]


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty text"),
        ("<system version='1'><cpu></system>", "not well-formed XML: mismatched tag: line 1"),
        ("NCCL INFO not xml", "this is an NCCL_DEBUG=INFO log, not NCCL's topology dump"),
        ("not xml", "not well-formed XML: syntax error"),
        ("<topology/>", "root element is <topology>, expected <system>"),
    ],
)
def test_topo_xml_refuses_malformed_text_in_one_line(text, reason):
    with pytest.raises(NcclTopoXmlError) as info:
        parse_topo_xml(text)
    assert str(info.value).startswith(reason)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_topo_xml_other_version_and_no_gpu_are_warnings():
    topo = parse_topo_xml('<system version="2"><cpu numaid="0"><pci busid="0000:00:1b.0"/></cpu></system>')
    assert topo["gpus"] == [] and topo["cpus"][0]["numaid"] == 0
    assert topo["warnings"][0].startswith("<system version='2'>")
    assert topo["warnings"][1].startswith("no <gpu> element")


@settings(max_examples=200)
@given(st.text(max_size=200))
def test_topo_xml_raises_only_its_error(text):
    with contextlib.suppress(NcclTopoXmlError):
        parse_topo_xml(text)


def test_topo_xml_nested_too_deeply_is_its_error():
    with pytest.raises(NcclTopoXmlError, match="nested too deeply"):
        parse_topo_xml("<system version='1'>" + "<pci>" * 5000 + "</pci>" * 5000 + "</system>")
