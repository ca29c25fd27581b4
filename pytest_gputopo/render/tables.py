"""The ``gputopo`` command's text: tables of bundled machines, the thresholds, and what ``gputopo
parse`` read (an NCCL log, an nccl-tests table, an ``nvidia-smi topo -m`` matrix)."""

from __future__ import annotations

from ..core import model
from ..parse.nccl_log import NcclLog, transport_family
from ..parse.nccl_tests import NcclTestsResult
from ..parse.smi_topo import SmiTopo
from .report import link_matrix


def machine_lines(profiles: list) -> list[str]:
    width = max((len(p.name) for p in profiles), default=0)
    return [f"{p.name.ljust(width)}  {p.description}" for p in profiles]


def spec_lines(rows: list, floors: dict) -> list[str]:
    """``gputopo spec``: every figure the rules use, with its source, and the default floors."""
    width = max(len(f"{c}: {i}") for c, i, _ in rows)
    lines = [f"{(c + ': ' + i).ljust(width)}  {f.gbps:8.2f} GB/s  [{f.source}]" for c, i, f in rows]
    return lines + ["", "efficiency floors (fraction of expected): " + ", ".join(f"{k}={v:g}" for k, v in floors.items())]


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
        cells = [f"{r.busbw_gbps:10.2f}" if r and r.busbw_gbps is not None else f"{'N/A':>10}"
                 for r in (row.out_of_place, row.in_place)]
        wrong = [str(r.wrong) for r in (row.out_of_place, row.in_place) if r and r.wrong is not None]
        lines.append(f"{row.size_bytes:>12}  {cells[0]}  {cells[1]}  {'/'.join(wrong) or '-'}")
    avg, peak = result.avg_busbw_gbps, result.max_busbw_gbps()
    lines.append(f"avg busbw (as printed): {'n/a' if avg is None else f'{avg:.2f}'} GB/s; "
                 f"max busbw: {'n/a' if peak is None else f'{peak:.2f}'} GB/s")
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
        nodes = f" on {log.n_nodes} nodes" if log.n_nodes else ""
        lines.append(f"ranks: {log.n_ranks}{nodes}")
    if log.network:
        plugin = " (external plugin)" if log.net_plugin else ""
        devices = f"; devices {', '.join(log.net_devices)}" if log.net_devices else ""
        lines.append(f"network: {log.network}{plugin}{devices}")
    if log.transports:
        names = [t if transport_family(t) == t else f"{transport_family(t)} (as {t})" for t in sorted(log.transports)]
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
