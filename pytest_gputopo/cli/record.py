"""``gputopo record``: a machine profile from NVML, or from nvidia-smi text with what other tools
printed about that machine (nvlink -s, GPU listings, nvbandwidth, p2pBandwidthLatencyTest)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from ..core import model
from ..core.units import counted
from ..parse import smi_machine, smi_table, smi_topo as smi_text
from ..parse.cuda_samples import P2PParseError, parse_p2p_bandwidth_latency
from ..parse.nvbandwidth import NvbandwidthParseError, parse_nvbandwidth
from ..parse.nvlink_status import NvlinkStatusParseError, parse_nvlink_status
from ..parse.published import RecordedFigures, ToolOutputError
from ..parse.text_machine import LISTING_ERRORS, TextMachine, TextMachineError, read_listing
from ..probe import probe
from ..probe.recorded import profile_dict
from ..render import report
from ..render.escape import terminal
from ..runtime import files
from .common import CliError, add_command, check_writable, read_tool

P2P_CAPS = {"r": "read", "w": "write", "n": "nvlink", "a": "atomics"}


def cmd_record(args) -> int:
    check_writable("-o", args.output)
    if args.from_smi:
        topology, sources, inferred = _text_machine(args)
    else:
        for flag, given in (
            ("--p2p", args.p2p),
            ("--nvlink-status", args.nvlink_status),
            ("--smi-query", args.smi_query),
        ):
            if given:
                raise CliError(
                    f"{flag} goes with --from-smi (NVML reports P2P status, NVLink states and each GPU's facts itself)"
                )
        topology = probe(None)
        if not topology.gpus:
            raise CliError(f"no GPU to record: {topology.problem or 'NVML lists none'}")
        sources = [{"what": "NVML (nvidia-ml-py) on this host", "host": topology.hostname}]
        inferred = []
    topology, sources = _with_figures(args, topology, sources)
    name = args.name or Path(args.output).stem
    data = profile_dict(
        name, topology, args.description or f"recorded by gputopo from {sources[0]['what']}", sources, inferred
    )
    try:
        files.write_text(args.output, json.dumps(data, indent=1) + "\n")
    except OSError as exc:
        raise CliError(f"-o {args.output}: cannot write: {exc.strerror or exc}") from None
    for w in topology.warnings:
        print(terminal(f"warning: {w}"), file=sys.stderr)
    print(terminal(f"wrote {args.output}: {counted(len(topology.gpus), 'GPU')}, {report.header_line(topology)}"))
    for source in sources:
        for note in source.get("notes", ()):
            print(terminal(f"  {note}"))
    return 0


def _p2p_args(values: list[str]) -> dict:
    """``[CAPS:]FILE`` -> {capability: (file, parsed matrix)}; CAPS are letters of nvidia-smi's
    -p2p (r, w, n, a). Each error names the argument, the letter or the file at fault."""
    out = {}
    for value in values:
        caps, sep, path = value.partition(":")
        if not sep or os.path.lexists(value):  # a file named "x:y" is a file
            caps, path = "r", value
        bad = sorted(set(caps) - set(P2P_CAPS))
        if bad or not caps:
            raise CliError(
                f"--p2p {value!r}: {''.join(bad) or 'nothing'!r} before ':' is no capability letter "
                f"(r read, w write, n nvlink, a atomics)"
            )
        matrix = read_tool(path, smi_machine.parse_p2p_matrix, smi_table.SmiParseError)
        for c in caps:
            out[P2P_CAPS[c]] = (path, matrix)
    return out


def _text_machine(args):
    """The machine nvidia-smi's text says (``parse.text_machine``): topo -m and -p2p, then the GPU
    listings (first: the UUIDs and bus ids the other outputs are checked against), then nvlink -s."""
    smi = read_tool(args.from_smi, smi_text.parse_topo_matrix, smi_table.SmiParseError)
    try:
        machine = TextMachine(smi, _p2p_args(args.p2p), name=args.from_smi)
        for path in args.smi_query:
            machine.add_listing(read_tool(path, read_listing, LISTING_ERRORS), path)
        for path in args.nvlink_status:
            machine.add_nvlink_status(read_tool(path, parse_nvlink_status, NvlinkStatusParseError), path)
    except TextMachineError as exc:
        raise CliError(str(exc)) from None
    return machine.finish(), machine.sources, machine.inferred


def _with_figures(args, topology: model.Topology, sources: list):
    """The machine with the nvbandwidth and p2pBandwidthLatencyTest figures run on it (recorded, with
    their source); each file is a source."""
    sources = list(sources)
    try:
        figures = RecordedFigures(topology)
        for paths, parse, errors, add, what in (
            (args.nvbandwidth, parse_nvbandwidth, NvbandwidthParseError, figures.add_nvbandwidth, "nvbandwidth"),
            (
                args.p2p_bandwidth,
                parse_p2p_bandwidth_latency,
                P2PParseError,
                figures.add_p2p_test,
                "cuda-samples p2pBandwidthLatencyTest",
            ),
        ):
            for path in paths:
                known = len(figures.notes)
                add(read_tool(path, parse, errors), path)
                sources.append({"what": what, "file": path, "notes": figures.notes[known:]})
    except ToolOutputError as exc:
        raise CliError(str(exc)) from None
    if figures.published:
        topology = dataclasses.replace(topology, published=topology.published + tuple(figures.published))
    return topology, sources


def add_record(sub) -> None:
    p = add_command(
        sub,
        "record",
        "write a machine profile from NVML, or from nvidia-smi text",
        "Write a machine profile (docs/profile-format.md) from this host through NVML, or, with\n"
        "--from-smi, from nvidia-smi text captured on any machine (every fact the text does not give\n"
        "is recorded as unknown). nvbandwidth and p2pBandwidthLatencyTest output run on that machine\n"
        "add its figures, labelled recorded. The profile works wherever a machine is named.",
        "  nvidia-smi topo -m > topo.txt; nvidia-smi topo -p2p r > p2p_r.txt; "
        "nvidia-smi topo -p2p w > p2p_w.txt\n"
        "  gputopo record --from-smi topo.txt --p2p r:p2p_r.txt --p2p w:p2p_w.txt -o node.json\n"
        "  pytest --gputopo-machine node.json",
        "  0    written, and what each file gave printed\n"
        "  2    an unreadable or refused file (named), -o not writable, or no GPU to record",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="the profile to write, as JSON (required; a regular file is replaced whole, see docs/cli.md)",
    )
    p.add_argument(
        "--from-smi",
        metavar="FILE",
        help="`nvidia-smi topo -m` output to build the profile from (default: this host's NVML)",
    )
    p.add_argument(
        "--p2p",
        action="append",
        default=[],
        metavar="[CAPS:]FILE",
        help="with --from-smi: `nvidia-smi topo -p2p CAPS` output (CAPS letters r,w,n,a; default r); "
        "repeatable (default: none, P2P status unknown)",
    )
    p.add_argument(
        "--nvlink-status",
        action="append",
        default=[],
        metavar="FILE",
        help="with --from-smi: `nvidia-smi nvlink -s` output, each GPU's NVLink states; repeatable (default: none)",
    )
    p.add_argument(
        "--smi-query",
        action="append",
        default=[],
        metavar="FILE",
        help="with --from-smi: `nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,"
        "compute_cap,driver_version,... --format=csv`, `nvidia-smi -L`, `nvidia-smi -q -x` or "
        "`nvidia-smi -q` "
        "output (told by its text), each GPU's name, UUID, bus id, memory, capability, PCIe and "
        "the driver and CUDA versions, MIG devices, and from -q and -q -x the fabric and each GPU's health "
        "(ECC, remapped rows, retired pages, clocks events, persistence, VBIOS, InfoROM); repeatable "
        "(default: none)",
    )
    p.add_argument(
        "--nvbandwidth",
        action="append",
        default=[],
        metavar="FILE",
        help="nvbandwidth output run on this machine: its P2P and host<->device figures, recorded; "
        "repeatable (default: none)",
    )
    p.add_argument(
        "--p2p-bandwidth",
        action="append",
        default=[],
        metavar="FILE",
        help="cuda-samples p2pBandwidthLatencyTest output run on this machine: its copy figures, "
        "recorded; repeatable (default: none)",
    )
    p.add_argument("--name", help="the machine's name (default: the output file's stem)")
    p.add_argument(
        "--description", help="one line saying what the machine is (default: 'recorded by gputopo from <source>')"
    )
    p.set_defaults(func=cmd_record)
