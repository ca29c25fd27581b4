"""The ``gputopo`` command's text: tables of bundled machines, the thresholds, and what ``gputopo
parse`` read (an NCCL log, an nccl-tests table, ``nvidia-smi topo -m`` / ``topo -p2p`` / ``nvlink -s``
output, nvbandwidth and p2pBandwidthLatencyTest matrices, NCCL's topology dump)."""

from __future__ import annotations

from ..core import model
from ..core.units import counted
from ..parse.cuda_samples import P2PBandwidthLatency
from ..parse.nccl_log import NcclLog, transport_family
from ..parse.nccl_tests import NcclTestsResult
from ..parse.nccl_topo_xml import HIDDEN_TARGET
from ..parse.nvbandwidth import Nvbandwidth
from ..parse.nvlink_status import NvlinkStatus
from ..parse.smi_topo import SmiTopo
from .report import aligned, link_matrix


def machine_lines(profiles: list) -> list[str]:
    width = max((len(p.name) for p in profiles), default=0)
    return [f"{p.name.ljust(width)}  {p.description}" for p in profiles]


def spec_lines(rows: list, floors: dict) -> list[str]:
    """``gputopo spec``: every figure the rules use, with its source, and the default floors."""
    width = max(len(f"{c}: {i}") for c, i, _ in rows)
    lines = [f"{(c + ': ' + i).ljust(width)}  {f.gbps:8.2f} GB/s  [{f.source}]" for c, i, f in rows]
    floors_text = ", ".join(f"{k}={v:g}" for k, v in floors.items())
    return lines + ["", "efficiency floors (fraction of expected): " + floors_text]


def smi_topo_lines(smi: SmiTopo, topology: model.Topology) -> list[str]:
    lines = link_matrix(topology)
    lines += [f"NICs: {', '.join(smi.nics)}"] if smi.nics else []
    lines += [f"warning: {w}" for w in smi.warnings]
    return lines or ["(no GPU in the matrix)"]


def nccl_tests_lines(result: NcclTestsResult) -> list[str]:
    """Per size the busbw of both placements and #wrong, the average as printed, and nccl-tests'
    own verdict on the data."""
    lines = [f"{'size_bytes':>12}  {'busbw out':>10}  {'busbw in':>10}  wrong"]
    for row in result.rows:
        cells = [
            f"{r.busbw_gbps:10.2f}" if r and r.busbw_gbps is not None else f"{'N/A':>10}"
            for r in (row.out_of_place, row.in_place)
        ]
        wrong = [str(r.wrong) for r in (row.out_of_place, row.in_place) if r and r.wrong is not None]
        lines.append(f"{row.size_bytes:>12}  {cells[0]}  {cells[1]}  {'/'.join(wrong) or '-'}")
    avg, peak = result.avg_busbw_gbps, result.max_busbw_gbps()
    lines.append(
        f"avg busbw (as printed): {'n/a' if avg is None else f'{avg:.2f}'} GB/s; "
        f"max busbw: {'n/a' if peak is None else f'{peak:.2f}'} GB/s"
    )
    if result.wrong_data():  # nccl-tests' own verdict on the data: a broken node
        lines.append(f"wrong data: {result.wrong_data()}")
    return lines + [f"warning: {w}" for w in result.warnings]


_MAX_PAIRS = 64


def nccl_log_lines(log: NcclLog) -> list[str]:
    """Human lines for the CLI: version, network, transports, per rank pair the transports, warnings."""
    lines = []
    if log.nccl_version:
        cuda = f" (built for CUDA {log.cuda_version})" if log.cuda_version else ""
        lines.append(f"NCCL {log.nccl_version}{cuda}")
    else:
        lines.append("NCCL version: not in the log")
    if log.n_ranks is not None:
        nodes = f" on {counted(log.n_nodes, 'node')}" if log.n_nodes else ""
        lines.append(f"ranks: {log.n_ranks}{nodes}")
    if log.network:
        plugin = " (external plugin)" if log.net_plugin else ""
        devices = f"; devices {', '.join(log.net_devices)}" if log.net_devices else ""
        lines.append(f"network: {log.network}{plugin}{devices}")
    if log.transports:
        family = {t: transport_family(t, log.net_devices) for t in log.transports}  # UCX over IB is NET/IB
        names = [t if family[t] == t else f"{family[t]} (as {t})" for t in sorted(log.transports)]
        lines.append("transports: " + ", ".join(names))
    else:
        lines.append("transports: none seen")
    lines.append(f"GPUDirect RDMA: {'yes' if log.gdrdma else 'no'}")
    if log.nvls or log.nvls_available:
        lines.append(f"NVLS: {'used' if log.nvls else 'available, not seen in use'}")
    pairs = log.pair_transports()
    for (src, dst), transports in list(pairs.items())[:_MAX_PAIRS]:
        details = sorted({c.detail for c in log.connections if (c.src_rank, c.dst_rank) == (src, dst)})
        peer = "CollNet" if dst == -1 else str(dst)
        lines.append(f"  {src} -> {peer}: {', '.join(transports)} ({', '.join(details)})")
    if len(pairs) > _MAX_PAIRS:
        lines.append(f"  ... {len(pairs) - _MAX_PAIRS} more rank pairs")
    for name, value in sorted(log.env_settings.items()):
        lines.append(f"set: {name}={value}")
    lines += [f"warning: {w}" for w in log.warnings]
    return lines


def _spread(values: list[float]) -> str:
    """``min .. max`` of the printed figures, or ``none printed``."""
    return f"{min(values):.2f} .. {max(values):.2f}" if values else "none printed"


def p2p_status_lines(matrix: tuple[tuple[str, ...], ...]) -> list[str]:
    """An ``nvidia-smi topo -p2p`` matrix as read, and how many ordered pairs are OK."""
    n = len(matrix)
    rows = [[""] + [f"GPU{j}" for j in range(n)]] + [[f"GPU{i}"] + list(row) for i, row in enumerate(matrix)]
    ok = sum(1 for i in range(n) for j in range(n) if i != j and matrix[i][j] == "OK")
    return aligned(rows) + [f"OK on {ok} of {n * (n - 1)} ordered pairs"]


def p2p_test_lines(result: P2PBandwidthLatency) -> list[str]:
    """Per p2pBandwidthLatencyTest matrix: its size and the off-diagonal (GPU pairs) spread."""
    lines = [f"p2pBandwidthLatencyTest: {counted(result.n_gpus, 'GPU')}"]
    for title, matrix in result.matrices.items():
        pairs = [v for i, row in enumerate(matrix) for j, v in enumerate(row) if i != j and v is not None]
        lines.append(f"{title}: {len(matrix)}x{max(map(len, matrix), default=0)}, pairs {_spread(pairs)}")
    return lines + [f"warning: {w}" for w in result.warnings]


def nvbandwidth_lines(result: Nvbandwidth) -> list[str]:
    """Versions, devices, and per testcase its status and each matrix's spread and SUM."""
    lines = [
        f"nvbandwidth {result.version or '(version not printed)'}, driver {result.driver_version or '?'}, "
        f"CUDA runtime {result.cuda_runtime_version or '?'}"
    ]
    lines += [f"device {i}: {name}" + (f" ({bus})" if bus else "") for i, name, bus in result.devices]
    for case in result.testcases:
        if case.status != "ran":
            lines.append(f"{case.name}: {case.status}" + (f": {case.message}" if case.message else ""))
        for m in case.matrices:
            cells = [
                v
                for r, row in enumerate(m.cells)
                for c, v in enumerate(row)
                if v is not None and (len(m.cells) == 1 or r != c)
            ]
            total = "" if m.sum is None else f", SUM {m.sum:.2f}"
            lines.append(f"{m.key}: {m.title}: {len(m.rows)}x{len(m.columns)}, {_spread(cells)} {m.unit}{total}")
    return lines + [f"warning: {w}" for w in result.warnings]


def nvlink_status_lines(status: NvlinkStatus) -> list[str]:
    """Per GPU: its links up and down, the speeds printed, and which links are down."""
    lines = []
    for g in status.gpus:
        head = f"GPU{g.index}: {g.name or '?'}" + (f" ({g.uuid})" if g.uuid else "")
        if g.all_inactive:
            lines.append(f"{head}: all links inactive (nvidia-smi does not say how many)")
            continue
        speeds = sorted({s.gbps for s in g.links if s.gbps is not None})
        down = [s.link for s in g.links if not s.active]
        lines.append(
            f"{head}: {g.active_links}/{len(g.links)} links up"
            + (f", {' / '.join(f'{v:g}' for v in speeds)} GB/s" if speeds else "")
            + (f"; down: {', '.join(map(str, down))}" if down else "")
        )
    return lines + [f"warning: {w}" for w in status.warnings]


def _shown(value) -> str:
    return "?" if value is None else str(value)


def _nvlink_line(link: dict) -> str:
    """One ``<nvlink>`` as NCCL takes it: how many links, to what (its tclass's meaning), at which bus."""
    count, target = f"NVLink x{_shown(link['count'])}", _shown(link["target"])
    if link["peer"] == "gpu":
        dev = f"GPU dev {link['peer_dev']}" if link["peer_dev"] is not None else "a GPU not in the file"
        return f"  {count} to {dev} ({target})"
    if link["peer"] == "cpu":
        return f"  {count} to the CPU ({target})"
    if link["peer"] is None:
        return f"  {count} to {target}: no tclass (NCCL refuses such a link)"
    if link["target"] == HIDDEN_TARGET:
        return f"  {count} to an NVSwitch NVML could not see ({target})"
    return f"  {count} to NVSwitch {target}" + ("" if link["tclass"] == "0x068000" else f" (tclass {link['tclass']})")


def _gdr(value: bool) -> str:
    return "GPUDirect RDMA" if value else "no GPUDirect RDMA"


def nccl_topo_lines(topo: dict) -> list[str]:
    """What NCCL detected, as its NCCL_TOPO_DUMP_FILE says: each CPU (NUMA node), each GPU with its
    NVLinks and C2C links, each NIC (speed in Mb/s, NCCL's unit, and GB/s), and the warnings."""
    lines = [
        f"NCCL topology (version {_shown(topo['version'])}): {counted(len(topo['gpus']), 'GPU')}, "
        f"{counted(len(topo['nics']), 'NIC')}, {counted(len(topo['cpus']), 'CPU')}"
    ]
    for cpu in topo["cpus"]:
        kind = " ".join(str(cpu[k]) for k in ("arch", "vendor") if cpu.get(k))
        lines.append(
            f"CPU NUMA {_shown(cpu['numaid'])}: {kind or 'arch not given'}"
            + (f", affinity {cpu['affinity']}" if cpu.get("affinity") else "")
        )
    for gpu in topo["gpus"]:
        rank = f"rank {gpu['rank']}" if gpu["rank"] is not None else "no rank (NCCL leaves it out)"
        width = f"x{gpu['link_width']}" if gpu["link_width"] is not None else None
        pcie = " ".join(str(v) for v in (gpu["link_speed"] or None, width) if v is not None) or "?"
        lines.append(
            f"GPU dev {_shown(gpu['dev'])}, {rank}: bus {_shown(gpu['busid'])}, sm {_shown(gpu['sm'])}, "
            f"NUMA {_shown(gpu['numaid'])}, PCIe {pcie}, {_gdr(gpu['gdr'])}"
        )
        lines += [_nvlink_line(link) for link in gpu["nvlinks"]] or ["  no NVLink"]
        lines += [f"  C2C x{_shown(c['count'])} to the CPU, {_shown(c['bw'])} MB/s each" for c in gpu["c2c"]]
    for nic in topo["nics"]:
        speed = nic["speed"]
        if isinstance(speed, int) and speed > 0:
            rate = f"{speed} Mb/s ({speed / 8000:g} GB/s)"
        else:  # topo.cc ncclTopoAddNet: "Some NICs define speed = -1", taken as 10000 Mb/s
            rate = f"speed {_shown(speed)} (NCCL takes 10000 Mb/s)"
        lines.append(
            f"NIC {_shown(nic.get('name'))} dev {_shown(nic['dev'])}: {rate}, port {_shown(nic['port'])}, "
            f"bus {_shown(nic['busid'])}, NUMA {_shown(nic['numaid'])}, {_gdr(nic['gdr'])}"
        )
    return lines + [f"warning: {w}" for w in topo["warnings"]]
