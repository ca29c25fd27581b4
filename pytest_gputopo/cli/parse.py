"""``gputopo parse FORMAT FILE``: what a tool printed, read as it writes it, printed as text or JSON."""

from __future__ import annotations

from ..parse import smi_machine, smi_table, smi_topo as smi_text
from ..parse.cuda_samples import P2PParseError, parse_p2p_bandwidth_latency
from ..parse.nccl_log import parse_nccl_log
from ..parse.nccl_tests import NcclTestsParseError, parse_nccl_tests
from ..parse.nccl_topo_xml import NcclTopoXmlError, parse_topo_xml
from ..parse.nvbandwidth import NvbandwidthParseError, parse_nvbandwidth
from ..parse.nvlink_status import NvlinkStatusParseError, parse_nvlink_status
from ..parse.smi_list import SmiListParseError, parse_smi_list
from ..parse.smi_q import SmiQParseError, parse_smi_q
from ..parse.smi_query import SmiQueryParseError, parse_smi_query
from ..parse.smi_xml import SmiXmlParseError, parse_smi_xml
from ..parse.text_machine import TextMachine
from ..parse.which_tool import refusal
from ..render import tables
from .common import CliError, add_command, emit, read_file, read_tool


def cmd_parse(args) -> int:
    data, lines = _PARSERS[args.format](args.file)
    emit(data, args.json, lines)
    return 0


def _smi_topo(path: str):
    smi = read_tool(path, smi_text.parse_topo_matrix, smi_table.SmiParseError)
    return smi.to_json(), tables.smi_topo_lines(smi, TextMachine(smi, name=path).finish())


def _smi_p2p(path: str):
    matrix = read_tool(path, smi_machine.parse_p2p_matrix, smi_table.SmiParseError)
    return {"n_gpus": len(matrix), "matrix": [list(r) for r in matrix]}, tables.p2p_status_lines(matrix)


def _nccl_log(path: str):
    text = read_file(path)
    log = parse_nccl_log(text)
    if not log.nccl_lines and log.nccl_version is None:
        raise CliError(
            f"{path}: "
            + (
                refusal(text, "nccl-log")
                or 'no NCCL log: not one line NCCL writes ("NCCL INFO", "NCCL WARN", "NCCL version"); '
                "run with NCCL_DEBUG=INFO"
            )
        )
    return log.to_json(), tables.nccl_log_lines(log)


def _nccl_topo(path: str):
    topo = read_tool(path, parse_topo_xml, NcclTopoXmlError)  # a dict already: its own JSON
    return topo, tables.nccl_topo_lines(topo)


def _reader(parse, errors, lines):
    """A format whose parsed result gives its own JSON (``to_json``) and whose text is ``lines``."""

    def read(path: str):
        result = read_tool(path, parse, errors)
        return result.to_json(), lines(result)

    return read


# gputopo parse FORMAT FILE: (JSON, text lines) of what a tool printed, read as it writes it.
_PARSERS = {
    "smi-topo": _smi_topo,
    "smi-p2p": _smi_p2p,
    "nvlink-status": _reader(parse_nvlink_status, NvlinkStatusParseError, tables.nvlink_status_lines),
    "smi-query": _reader(parse_smi_query, SmiQueryParseError, lambda listing: listing.lines()),
    "smi-list": _reader(parse_smi_list, SmiListParseError, lambda listing: listing.lines()),
    "smi-xml": _reader(parse_smi_xml, SmiXmlParseError, lambda listing: listing.lines()),
    "smi-q": _reader(parse_smi_q, SmiQParseError, lambda listing: listing.lines()),
    "nccl-tests": _reader(parse_nccl_tests, NcclTestsParseError, tables.nccl_tests_lines),
    "nccl-log": _nccl_log,
    "nccl-topo": _nccl_topo,
    "nvbandwidth": _reader(parse_nvbandwidth, NvbandwidthParseError, tables.nvbandwidth_lines),
    "p2p-bandwidth": _reader(parse_p2p_bandwidth_latency, P2PParseError, tables.p2p_test_lines),
}


def add_parse(sub) -> None:
    p = add_command(
        sub,
        "parse",
        "read tool output and print what it says",
        "Read what a tool printed, as it prints it (cut or pasted text gives what can be read, plus\n"
        "warnings), and print what it says; each format refuses another tool's text, naming it.",
        "  nvidia-smi topo -m > topo.txt\n  gputopo parse smi-topo topo.txt --json",
        "  0    read\n  2    unreadable, or text that is not the format's (one line says what it is)",
    )
    p.add_argument(
        "format",
        choices=list(_PARSERS),
        help="smi-topo: `nvidia-smi topo -m` text; smi-p2p: `nvidia-smi topo -p2p r|w|n|a`; nvlink-status: "
        "`nvidia-smi nvlink -s`; smi-query: `nvidia-smi --query-gpu=... --format=csv`; smi-list: "
        "`nvidia-smi -L`; smi-xml: `nvidia-smi -q -x`; smi-q: `nvidia-smi -q` (its text report); "
        "nccl-tests: all_reduce_perf (or other *_perf) output; nccl-log: "
        "NCCL_DEBUG=INFO output; nccl-topo: the XML NCCL writes to NCCL_TOPO_DUMP_FILE (the topology it "
        "detected); nvbandwidth: NVIDIA nvbandwidth output; p2p-bandwidth: cuda-samples' "
        "p2pBandwidthLatencyTest output",
    )
    p.add_argument("file", help="the tool's output, saved to a file")
    p.add_argument("--json", action="store_true", help="print what was read as JSON (default: text)")
    p.set_defaults(func=cmd_parse)
