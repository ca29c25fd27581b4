"""Writes the stub NCCL_DEBUG=INFO logs beside it: ``python tests/nccl_logs/generate.py``.

Every line is the output of an NCCL format string copied verbatim from NVIDIA/nccl at the tag named
(``file:line`` beside each), printed through NCCL's own prefix (``src/debug.cc``: ``"%s:%d:%d [%d]
NCCL INFO "``, the same bytes at all three tags when no timestamp is asked for). What is stubbed is the
machine and the run, not the text: host names, pids, bus ids, pointers and timings are made up, the
channel counts are small, and a process prints a subset of what a real one does (the lines the parser
reads, with the neighbours that could be mistaken for them). The logs are what the plugin reads after
its logged all-reduce (``bench/allreduce.py``): one file per process, concatenated in file-name
order, written under ``NCCL_DEBUG_SUBSYS=INIT,TUNING,P2P,SHM,NET,GRAPH,ENV`` -- so 2.27's Bootstrap line
(``NCCL_BOOTSTRAP``) and the NVLS-only allocation lines (``NCCL_NVLS``) are absent, as they would be.

Machines:

- ``nvlink-2gpu``: 2 x A100-SXM (compute capability 8.0: P2P read, ``paths.cc``) on NVLink, one
  process per GPU, no IB device. NVLS is never set up for 2 GPUs (``nvls.cc``: ``gpuCount <= 2``).
- ``ib-2node``: 2 nodes x 2 A100, one ConnectX port each (mlx5_0), GPUDirect RDMA; ranks 0-1 on
  node-a, 2-3 on node-b; ring 0 1 2 3 and the double binary tree between the node heads 0 and 2.
- ``nvls-4gpu``: 4 x H100-SXM (8.0 only reads: no ``/read`` on 9.0) on NVSwitch with multicast.

Versions (what changes, with the tag's file and line):

- v2.18.3-1: bracket = nvmlDev (since 2.18.3; busId before), cuMem off by default (``init.cc``
  ``CUMEM_ENABLE`` 0) so multi-process P2P is ``P2P/IPC``; only rank 0 prints the version
  (``init.cc:1570``); no nNodes line; connections at init; ``Connected NVLS tree`` on one node.
- v2.21.5-1: cuMem on where the driver has it (``CUMEM_ENABLE`` -2): ``P2P/CUMEM``; "ncclCommInitRank
  comm ..." and a "comm .. nRanks .. nNodes .." line; "collnet channels" in the channel summary;
  NET/IB's device list merges the ports of one NIC (``[0]={[0] mlx5_0:1/IB, [1] mlx5_1:1/IB}``,
  2.20.3-2.23.4; the machines here have one port, the merged form is in the tests).
- v2.27.7-1: connections at the first collective of each algorithm (runtime connect, 2.22+, after
  Init COMPLETE), "Connected all rings, use ring PXN %d GDR %d" (``transport/generic.cc``), every
  rank prints the version (``pthread_once``), "NET/IB : Using ; OOB" even without a device, the ring
  dump without padding (2.23.4+), ``GDRDMA(PCI)`` possible (2.26+), "Init timings", the NVLS channel
  count in the multicast line, the NVLS buffers (and their "NVLS comm" line) only when NVLS runs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSIONS = ("2.18.3", "2.21.5", "2.27.7")
CASES = ("nvlink-2gpu", "ib-2node", "nvls-4gpu")
TAGS = {"2.18.3": "v2.18.3-1", "2.21.5": "v2.21.5-1", "2.27.7": "v2.27.7-1"}
CUDA = {"2.18.3": "12.2", "2.21.5": "12.4", "2.27.7": "12.9"}
DRIVER = {"2.18.3": 12020, "2.21.5": 12040, "2.27.7": 12090}

_C_CONV = re.compile(r"%([-0-9.]*)(?:ll|l|z)?([diuxsfp])")


def _v(version: str) -> tuple:
    return tuple(int(x) for x in version.split("."))


def cfmt(fmt: str, *args) -> str:
    """C printf as NCCL calls it: length modifiers dropped, %p given as text."""
    return _C_CONV.sub(lambda m: "%" + m.group(1) + ("s" if m.group(2) == "p" else m.group(2)), fmt) % args


class Rank:
    def __init__(self, rank, host, pid, dev, bus, node, local_rank, local_ranks):
        self.rank, self.host, self.pid, self.dev, self.bus = rank, host, pid, dev, bus
        self.node, self.local_rank, self.local_ranks = node, local_rank, local_ranks
        self.comm = "0x%x" % (0x55D0C8E0A000 + 0x1B0 * rank)
        self.lines: list[str] = []

    def info(self, thread: int, fmt: str, *args) -> None:
        # src/debug.cc (v2.18.3-1:175, v2.21.5-1:183; v2.27.7-1:352+366 in two parts)
        tid = self.pid + (0, 31, 62)[thread]
        self.lines.append(cfmt("%s:%d:%d [%d] NCCL INFO ", self.host, self.pid, tid, self.dev) + cfmt(fmt, *args))


def machine(case: str) -> list[Rank]:
    if case == "nvlink-2gpu":
        return [Rank(r, "a100-box", 2201 + r, r, (0x7000, 0xB000)[r], 0, r, 2) for r in range(2)]
    if case == "ib-2node":
        return [
            Rank(
                r,
                ("node-a", "node-b")[r // 2],
                (3101, 4101)[r // 2] + r % 2,
                r % 2,
                (0x7000, 0xB000)[r % 2],
                r // 2,
                r % 2,
                2,
            )
            for r in range(4)
        ]
    return [Rank(r, "h100-box", 5101 + r, r, (0x18000, 0x2A000, 0x3A000, 0x5D000)[r], 0, r, 4) for r in range(4)]


# The ring and the trees (2 channels), and which sends each connects: ring first, then the trees
# (a send already connected is skipped: transport.cc ncclTransportP2pConnect).
def topology(case: str, n: int):
    ring = list(range(n))
    if case == "ib-2node":
        # double binary tree over the nodes' heads 0 and 2, a chain inside each node
        trees = {
            0: [("1/2/-1", -1), ("1/-1/-1", 2)],
            1: [("-1/-1/-1", 0), ("-1/-1/-1", 0)],
            2: [("3/-1/-1", 0), ("3/0/-1", -1)],
            3: [("-1/-1/-1", 2), ("-1/-1/-1", 2)],
        }
    else:
        trees = {r: [(f"{r + 1 if r + 1 < n else -1}/-1/-1", r - 1 if r else -1)] * 2 for r in range(n)}
    ring_sends = [(ring[i], ring[(i + 1) % n]) for i in range(n)]
    tree_sends = []
    for r, chans in trees.items():
        for down, up in chans:
            for peer in [int(d) for d in down.split("/") if d != "-1"] + ([up] if up >= 0 else []):
                if (r, peer) not in ring_sends and (r, peer) not in tree_sends:
                    tree_sends.append((r, peer))
    return ring, trees, ring_sends, tree_sends


def render(version: str, case: str) -> str:
    tag = TAGS[version]
    ranks = machine(case)
    n = len(ranks)
    by_rank = {r.rank: r for r in ranks}
    ring, trees, ring_sends, tree_sends = topology(case, n)
    lazy = _v(version) >= (2, 22)  # NCCL_RUNTIME_CONNECT (init.cc), needs cuMem
    ib = case == "ib-2node"
    nvls = case == "nvls-4gpu"
    read = "" if nvls else "/read"  # paths.cc: P2P read on compute capability 8.0 only
    n_nodes = 2 if ib else 1
    nvls_channels = 16 if nvls else 0
    version_string = f"NCCL version {version}+cuda{CUDA[version]}"

    for r in ranks:
        addr = f"10.0.{r.node}.1{r.node}<0>"
        iface = "ib0" if ib else "eth0"
        if version != "2.27.7":
            r.info(0, "Bootstrap : Using%s", f" {iface}:{addr}")  # bootstrap.cc:52 / :56
        if version == "2.18.3":
            r.info(
                0,
                "NET/Plugin : Plugin load (%s) returned %d : %s",
                "libnccl-net.so",
                2,  # net.cc:179
                "libnccl-net.so: cannot open shared object file: No such file or directory",
            )
            r.info(0, "NET/Plugin : No plugin found, using internal implementation")  # net.cc:180
        elif version == "2.21.5":
            r.info(0, "NET/Plugin: No plugin found (%s)", "libnccl-net.so")  # net.cc:349
            r.info(0, "NET/Plugin: Using internal network plugin.")  # net.cc:422
        else:
            r.info(0, "NET/Plugin: Could not find:%s. %s", " libnccl-net.so", "")  # plugin_open.cc:103
        if version == "2.27.7" or r.rank == 0:  # showVersion
            r.info(0, "%s", version_string)  # init.cc:455/479/543
        r.info(1, "cudaDriverVersion %d", DRIVER[version])  # cudawrap.cc:206/185/260
        if ib:
            r.info(1, "NET/IB : Using%s %s; OOB %s:%s", " [0]mlx5_0:1/IB", "[RO]", iface, addr)  # net_ib.cc:264/538/762
        else:
            r.info(1, "NET/IB : No device found.")  # net_ib.cc:252/511/749
            if version == "2.27.7":  # 2.24+: the device list is printed even when empty
                r.info(1, "NET/IB : Using%s %s; OOB %s:%s", "", "", iface, addr)  # net_ib.cc:762
            r.info(1, "NET/Socket : Using%s", f" [0]{iface}:{addr}")  # net_socket.cc:62/62/67
        network = "IB" if ib else "Socket"
        if version == "2.27.7":
            r.info(1, "Initialized NET plugin %s", network)  # plugin/net.cc:147
            r.info(1, "Assigned NET plugin %s to comm", network)  # plugin/net.cc:175
        r.info(1, "Using network %s", network)  # init.cc:310/322/346
        if version == "2.27.7" and r.rank == 0:
            r.info(1, "CC %s, workFifoBytes %d", "Off", 1048576)  # init.cc:481
        start = ("comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init START",)
        args = (r.comm, r.rank, n, r.dev, r.dev, r.bus, 0x70FBA02A8D314739)
        if version == "2.18.3":
            r.info(1, *start, *args)  # init.cc:1356
        elif version == "2.21.5":
            r.info(1, "ncclCommInitRank " + start[0], *args)  # init.cc:1544
        else:
            r.info(1, "%s " + start[0], "ncclCommInitRankConfig", *args)  # init.cc:1441
        r.info(1, "Setting affinity for GPU %d to %s", r.dev, "ffff,ffffffff")  # topo.cc:876/936/1602
        if ib:
            r.info(
                1, "NET/%s : GPU Direct RDMA %s for HCA %d '%s'", "IB", "Enabled", 0, "mlx5_0"
            )  # topo.cc:643/720/1259
        if nvls:
            if version == "2.27.7":
                r.info(
                    1,
                    "NVLS multicast support is %savailable on dev %d (NVLS_NCHANNELS %d)",  # nvls.cc:200
                    "",
                    r.dev,
                    nvls_channels,
                )
            else:
                r.info(1, "NVLS multicast support is %savailable on dev %d", "", r.dev)  # nvls.cc:256/258
        if version != "2.18.3":
            r.info(
                1,
                "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d",  # init.cc:1160/998
                r.comm,
                r.rank,
                n,
                n_nodes,
                r.local_ranks,
                r.local_rank,
                0,
            )
        # search.cc:983 / 1047 / (2.27) : the graph NCCL found, then the per-channel rings
        r.info(
            1,
            "Pattern %d, crossNic %d, nChannels %d, bw %f/%f, type %s/%s, sameChannels %d",
            4,
            0,
            2,
            20.0 if ib else 40.0,
            20.0 if ib else 40.0,
            "NVL",
            "PIX" if ib else "LOC",
            1,
        )
        if r.rank == 0:
            for c in range(2):
                if _v(version) < (2, 23, 4):  # rings.cc:35 + dumpLine (PREFIXLEN 15, " %3d" per rank)
                    line = "Channel %02d/%02d :" % (c, 2) + " " + "".join(" %3d" % x for x in ring)
                else:  # rings.cc:41 + dumpLine (2.23.4+: " %*d", width of nranks-1)
                    width = len(str(n - 1))
                    line = "Channel %02d/%02d :" % (c, 2) + "".join(" %*d" % (width, x) for x in ring)
                r.info(1, "%s", line)
        if nvls and r.node == 0:
            for h in range(n):
                r.info(1, "%s", "NVLS Head %2d:" % h + " %2d" % h)  # connect.cc:269-274
        trees_line = "".join(" [%d] %s->%d->%d" % (c, down, r.rank, up) for c, (down, up) in enumerate(trees[r.rank]))
        for c in range(2):
            i = ring.index(r.rank)
            r.info(1, "Ring %02d : %d -> %d -> %d", c, ring[i - 1], r.rank, ring[(i + 1) % n])  # init.cc:1042/1221/1051
        r.info(1, "Trees%s", trees_line)  # init.cc:1045/1224/1054
        r.info(1, "P2P Chunksize set to %d", 524288)  # init.cc:535/578/651
        if version == "2.27.7" and r.rank == 0:
            r.info(1, "Check P2P Type isAllDirectP2p %d directMode %d", 0, 0)  # transport.cc:99

    # p2p.cc v2.18.3-1:366 (legacy IPC; cuMem off); v2.21.5-1:371, v2.27.7-1:393 ("MNNVL" or "CUMEM")
    p2p_fmt = (
        "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/IPC%s%s"
        if version == "2.18.3"
        else "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s"
    )
    # net.cc v2.18.3-1:186+227, v2.21.5-1:195+235, v2.27.7-1:218+264 (2.26+: "(PCI)" after GDRDMA)
    net_tail = "%s%s%s" if version == "2.27.7" else "%s%s"
    net_send = "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d" + net_tail
    net_recv = "Channel %02d/%d : %d[%d] -> %d[%d] [receive] via NET/%s/%d" + net_tail
    net_args = ("/GDRDMA", "", "") if version == "2.27.7" else ("/GDRDMA", "")

    def connect(sends, thread):
        for c in range(2):
            for src, dst in sends:
                s, d = by_rank[src], by_rank[dst]
                if s.node == d.node:  # the sender prints it (p2pSendSetup)
                    p2p_args = (read, "") if version == "2.18.3" else ("CUMEM", read, "")
                    s.info(thread, p2p_fmt, c, 0, src, s.dev, dst, d.dev, *p2p_args)
                else:  # sendSetup on the sender, recvSetup on the receiver
                    s.info(thread, net_send, c, 0, src, s.dev, dst, d.dev, "IB", 0, *net_args)
                    d.info(thread, net_recv, c, 0, src, s.dev, dst, d.dev, "IB", 0, *net_args)

    def rings_done(thread):
        for r in ranks:
            if version == "2.27.7":
                r.info(thread, "Connected all rings, use ring PXN %d GDR %d", 0, 1 if ib else 0)  # generic.cc:31
            else:
                r.info(thread, "Connected all rings")  # init.cc:1080/1264

    def trees_done(thread):
        for r in ranks:
            r.info(thread, "Connected all trees")  # init.cc:1090/1274; generic.cc:50

    def nvls_setup(thread):
        for r in ranks:
            if version == "2.27.7":  # nvls.cc:339, at the first NVLS collective (group.cc:156)
                buff = 131072 * 8
                r.info(
                    thread,
                    "NVLS comm %p headRank %d nHeads %d nvlsRanks %d buffSize %zu nvlsPerRankSize %zu "
                    "nvlsTotalSize %zu",
                    r.comm,
                    r.rank,
                    n,
                    n,
                    buff,
                    16 * 2 * buff,
                    16 * 2 * buff * n,
                )
            else:  # nvls.cc:310 / 316, at init (2.18: SIMPLE buffer; 2.21: chunk x steps)
                buff, mem = (4194304 if version == "2.18.3" else 131072 * 8), 2097152
                r.info(
                    thread,
                    "NVLS comm %p headRank %d nHeads %d buffSize %zi memSize %zi nvlsPerRankSize %zi nvlsTotalSize %zi",
                    r.comm,
                    r.rank,
                    n,
                    buff,
                    mem,
                    16 * 2 * (buff + mem),
                    16 * 2 * (buff + mem) * n,
                )
            if version == "2.18.3":  # init.cc:1102: nvlsSupport && localRanks > 1 (2.21: nNodes > 1 only)
                r.info(thread, "Connected NVLS tree")

    def summary():
        for r in ranks:
            r.info(
                1, "threadThresholds %ld/%ld/%ld | %ld/%ld/%ld | %ld | %ld", 8, 8, 64, 16, 8, 64, 512, 512
            )  # tuning.cc
            if version == "2.18.3":
                r.info(
                    1,
                    "%d coll channels, %d nvls channels, %d p2p channels, %d p2p channels per peer",  # init.cc:1113
                    2,
                    nvls_channels,
                    2,
                    2,
                )
            else:
                r.info(
                    1,
                    "%d coll channels, %d collnet channels, %d nvls channels, %d p2p channels, "  # init.cc:1297/1232
                    "%d p2p channels per peer",
                    2,
                    2,
                    nvls_channels,
                    2,
                    2,
                )

    def complete():
        for r in ranks:
            args = (r.comm, r.rank, n, r.dev, r.dev, r.bus, 0x70FBA02A8D314739)
            fmt = "comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE"
            if version == "2.18.3":
                r.info(1, fmt, *args)  # init.cc:1375
            elif version == "2.21.5":
                r.info(1, "ncclCommInitRank " + fmt, *args)  # init.cc:1573
            else:
                r.info(1, "%s " + fmt, "ncclCommInitRankConfig", *args)  # init.cc:1469
                r.info(
                    1,
                    "Init timings - %s: rank %d nranks %d total %.2f (kernels %.2f, alloc %.2f, bootstrap %.2f, "
                    "allgathers %.2f, topo %.2f, graphs %.2f, connections %.2f, rest %.2f)",  # init.cc:1476
                    "ncclCommInitRankConfig",
                    r.rank,
                    n,
                    0.61,
                    0.16,
                    0.02,
                    0.01,
                    0.00,
                    0.33,
                    0.00,
                    0.08,
                    0.01,
                )

    def tuning(size, algo, proto, hi, algo_id, proto_id):
        r0 = by_rank[0]
        if version == "2.21.5":  # enqueue.cc:1534 (rank 0; numbers: include/nccl_common.h NCCL_ALGO_/PROTO_)
            r0.info(0, "%ld Bytes -> Algo %d proto %d time %f", size, algo_id, proto_id, 12.5)
        elif version == "2.27.7":  # enqueue.cc:745 (rank 0)
            r0.info(
                0, "%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}", "AllReduce", size, algo, proto, 0, hi
            )

    if not lazy:  # connected at init: init.cc (2.18.3:1069-1090, 2.21.5:1255-1274)
        connect(ring_sends, 1)
        rings_done(1)
        connect(tree_sends, 1)
        trees_done(1)
        if nvls:
            nvls_setup(1)
        summary()
        complete()
        tuning(1024, "TREE", "LL", 0, 0, 0)
        tuning(
            1048576,
            "NVLS" if nvls else "RING",
            "SIMPLE" if nvls else "LL128",
            15 if nvls else 1,
            4 if nvls else 1,
            2 if nvls else 1,
        )
    else:  # runtime connect: init.cc:1148-1155, then group.cc ncclCollPreconnectFunc per algorithm
        summary()
        complete()
        tuning(1024, "RING", "LL", 1, 1, 0)
        connect(ring_sends, 2)
        rings_done(2)
        tuning(65536, "TREE", "LL128", 1, 0, 1)
        connect(tree_sends, 2)
        trees_done(2)
        if nvls:
            tuning(1048576, "NVLS", "SIMPLE", 15, 2, 2)
            nvls_setup(2)
    for r in ranks:  # init.cc:1948 / 2154; 2.27 init.cc:270 ("- %s COMPLETE", "Destroy")
        r.info(0, "comm %p rank %d nranks %d cudaDev %d busId %lx - Destroy COMPLETE", r.comm, r.rank, n, r.dev, r.bus)

    files = {
        "2.18.3": "src/init.cc src/bootstrap.cc src/net.cc src/transport/{p2p,net,net_ib,net_socket,nvls}.cc "
        "src/graph/{rings,search,connect,topo,tuning}.cc src/misc/cudawrap.cc src/debug.cc",
        "2.21.5": "src/init.cc src/bootstrap.cc src/net.cc src/enqueue.cc src/transport/{p2p,net,net_ib,net_socket,"
        "nvls}.cc src/graph/{rings,search,connect,topo,tuning}.cc src/misc/cudawrap.cc src/debug.cc",
        "2.27.7": "src/init.cc src/enqueue.cc src/transport.cc src/plugin/{net,plugin_open}.cc src/transport/{p2p,net,"
        "net_ib,net_socket,nvls,generic}.cc src/graph/{rings,search,connect,topo,tuning}.cc "
        "src/misc/cudawrap.cc src/debug.cc",
    }
    header = [
        f"# Stub log: NVIDIA/nccl {tag}, machine '{case}' (tests/nccl_logs/generate.py says what is stubbed).",
        f"# Every line is a format string of {tag} as printed: {files[version]}.",
        "# One file per process, concatenated in the order the plugin reads them (bench/allreduce.py).",
    ]
    body = [line for r in ranks for line in r.lines]
    return "\n".join(header + body) + "\n"


def main(argv: list[str]) -> int:
    for version in VERSIONS:
        for case in CASES:
            (HERE / f"{version}-{case}.log").write_text(render(version, case), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
