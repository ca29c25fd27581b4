"""The ``gputopo`` command: show, record, parse, check, benchmark and report machines.

Exit status: 0 done; 2 bad input (unreadable file, unknown machine, bad arguments), with one line
on stderr saying why; 130 or 143 when SIGINT (Ctrl-C) or SIGTERM ended it, with one line, after every
process it started was ended; never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
from pathlib import Path

from .core import model, schema, spec_table, thresholds
from .core.units import counted
from .parse import smi_machine
from .parse import smi_topo as smi_text
from .parse.cuda_samples import P2PParseError, parse_p2p_bandwidth_latency
from .parse.nccl_log import parse_nccl_log
from .parse.nccl_tests import NcclTestsParseError, parse_nccl_tests
from .parse.nvbandwidth import NvbandwidthParseError, parse_nvbandwidth
from .parse.nvlink_status import NvlinkStatusParseError, parse_nvlink_status
from .parse.smi_list import SmiListParseError, parse_smi_list
from .parse.smi_query import SmiQueryParseError, parse_smi_query
from .parse.smi_xml import SmiXmlParseError, parse_smi_xml
from .probe import MachineError, probe
from .probe.recorded import bundled_names, load_profile, profile_dict
from .render import report, tables
from .render.escape import terminal, terminal_lines
from .runtime import files

P2P_CAPS = {"r": "read", "w": "write", "n": "nvlink", "a": "atomics"}


class CliError(Exception):
    pass


def _read(path: str) -> str:
    try:
        return files.read_text(path)
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None


def _emit(data, as_json: bool, lines=None) -> None:
    if as_json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:  # lines of text from data: each one terminal line, no control character (escape.terminal)
        sys.stdout.write("\n".join(terminal_lines(lines)) + "\n")


def _topology(machine: str | None) -> model.Topology:
    try:
        return probe(machine)
    except MachineError as exc:
        raise CliError(str(exc)) from None


def cmd_show(args) -> int:
    topology = _topology(args.machine)
    data = {**schema.to_dict(topology), "source_text": report.source_text(topology)}
    # No GPU: the one line that says so and why (exit 0: shown, as docs/cli.md says); no legend.
    legend = [""] + report.legend().split("\n") if topology.gpus else []
    _emit(data, args.json, report.full_report(topology) + legend)
    return 0


def cmd_machines(args) -> int:
    profiles = [load_profile(name) for name in bundled_names()]
    if args.json:
        _emit([{"name": p.name, "description": p.description, "gpus": len(p.topology.gpus)} for p in profiles], True)
    else:
        _emit(None, False, tables.machine_lines(profiles))
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
            raise CliError(f"--p2p {value!r}: {''.join(bad) or 'nothing'!r} before ':' is no capability letter "
                           f"(r read, w write, n nvlink, a atomics)")
        matrix = _read_tool(path, smi_machine.parse_p2p_matrix, smi_text.SmiParseError)
        for c in caps:
            out[P2P_CAPS[c]] = (path, matrix)
    return out


def _check_writable(flag: str, path: str | None) -> None:
    """Refuse, before any work, a path ``files.write_text`` would not write (its rule: a regular
    file or a new path replaced atomically, a symlink's file replaced, /dev/null written through,
    anything else refused), naming the option and the path."""
    problem = None if path is None else files.unwritable(path)
    if problem:
        raise CliError(f"{flag} {path}: cannot write: {problem}")


def cmd_record(args) -> int:
    _check_writable("-o", args.output)
    if args.from_smi:
        smi = _read_tool(args.from_smi, smi_text.parse_topo_matrix, smi_text.SmiParseError)
        p2p_files = _p2p_args(args.p2p)
        topology = smi_machine.to_topology(smi, {cap: matrix for cap, (_, matrix) in p2p_files.items()},
                                        name=args.from_smi)
        _same_gpus_as_p2p(topology, p2p_files)
        sources = [{"what": "nvidia-smi topo -m", "file": args.from_smi}]
        sources += [{"what": f"nvidia-smi topo -p2p ({cap})", "file": path} for cap, (path, _) in p2p_files.items()]
        inferred = ["every fact the text does not give is recorded as null (unknown)"]
    else:
        for flag, given in (("--p2p", args.p2p), ("--nvlink-status", args.nvlink_status),
                            ("--smi-query", args.smi_query)):
            if given:
                raise CliError(f"{flag} goes with --from-smi (NVML reports P2P status, NVLink states and each "
                               f"GPU's facts itself)")
        topology = probe(None)
        if not topology.gpus:
            raise CliError(f"no GPU to record: {topology.problem or 'NVML lists none'}")
        sources = [{"what": "NVML (nvidia-ml-py) on this host", "host": topology.hostname}]
        inferred = []
    topology, sources = _with_tool_outputs(args, topology, sources)
    name = args.name or Path(args.output).stem
    data = profile_dict(name, topology, args.description or f"recorded by gputopo from {sources[0]['what']}",
                        sources, inferred)
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


def _same_gpus_as_p2p(topology: model.Topology, p2p_files: dict) -> None:
    """Refuse topo -p2p text of another GPU count, as nvbandwidth's and p2pBandwidthLatencyTest's are:
    its statuses would be read onto other GPUs, and pairs it never saw recorded from nothing."""
    from .parse.published import ToolOutputError, _same_gpus

    try:
        for path, matrix in p2p_files.values():  # {capability: (file, matrix)}
            _same_gpus("nvidia-smi topo -p2p", path, len(matrix), topology, visible="NVIDIA_VISIBLE_DEVICES")
    except ToolOutputError as exc:
        raise CliError(str(exc)) from None


def _with_tool_outputs(args, topology: model.Topology, sources: list):
    """The machine with what operators' tools printed about it: nvlink -s link states, nvbandwidth
    and p2pBandwidthLatencyTest figures (recorded, with their source); each file is a source."""
    from .parse.published import RecordedFigures, ToolOutputError, with_nvlink_states
    from .parse.smi_gpus import GpuListingError, with_gpu_facts

    sources = list(sources)
    try:
        for path in args.smi_query:  # first: the UUIDs and bus ids the other outputs are checked against
            before = set(topology.warnings)
            listing = _smi_listing(path)
            topology = with_gpu_facts(topology, listing, path)
            sources.append({"what": listing.tool, "file": path,
                            "notes": [f"{path}: {w}" for w in listing.warnings]
                            + [w for w in topology.warnings if w not in before]})
        for path in args.nvlink_status:
            before = set(topology.warnings)
            topology = with_nvlink_states(topology, _read_tool(path, parse_nvlink_status, NvlinkStatusParseError),
                                          path)
            sources.append({"what": "nvidia-smi nvlink -s", "file": path,
                            "notes": [w for w in topology.warnings if w not in before]})
        figures = RecordedFigures(topology)
        for paths, parse, errors, add, what in (
                (args.nvbandwidth, parse_nvbandwidth, NvbandwidthParseError, figures.add_nvbandwidth, "nvbandwidth"),
                (args.p2p_bandwidth, parse_p2p_bandwidth_latency, P2PParseError, figures.add_p2p_test,
                 "cuda-samples p2pBandwidthLatencyTest")):
            for path in paths:
                known = len(figures.notes)
                add(_read_tool(path, parse, errors), path)
                sources.append({"what": what, "file": path, "notes": figures.notes[known:]})
    except (ToolOutputError, GpuListingError) as exc:
        raise CliError(str(exc)) from None
    if figures.published:
        topology = dataclasses.replace(topology, published=topology.published + tuple(figures.published))
    return topology, sources


def cmd_parse(args) -> int:
    data, lines = _PARSERS[args.format](args.file)
    _emit(data, args.json, lines)
    return 0


def _read_tool(path: str, parse, errors):
    """``parse`` of the file's text; its format's refusal is a CliError naming the file."""
    try:
        return parse(_read(path))
    except errors as exc:
        raise CliError(f"{path}: {exc}") from None


def _smi_listing(path: str):
    """A ``--smi-query`` file, its format told by its text: XML (``nvidia-smi -q -x``), ``nvidia-smi -L``
    lines (``GPU 0: ...``), else ``--query-gpu`` CSV."""
    text = _read(path)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "").lstrip("\ufeff")
    parse, errors = ((parse_smi_xml, SmiXmlParseError) if first.startswith("<")
                     else (parse_smi_list, SmiListParseError) if first.startswith("GPU ")
                     else (parse_smi_query, SmiQueryParseError))
    try:
        return parse(text)
    except errors as exc:
        raise CliError(f"{path}: {exc}") from None


def _smi_topo(path: str):
    smi = _read_tool(path, smi_text.parse_topo_matrix, smi_text.SmiParseError)
    return smi.to_json(), tables.smi_topo_lines(smi, smi_machine.to_topology(smi, name=path))


def _smi_p2p(path: str):
    matrix = _read_tool(path, smi_machine.parse_p2p_matrix, smi_text.SmiParseError)
    return {"n_gpus": len(matrix), "matrix": [list(r) for r in matrix]}, tables.p2p_status_lines(matrix)


def _nccl_log(path: str):
    log = parse_nccl_log(_read(path))
    if not log.nccl_lines and log.nccl_version is None:
        raise CliError(f"{path}: no NCCL log: not one line NCCL writes (\"NCCL INFO\", \"NCCL WARN\", "
                       f"\"NCCL version\"); run with NCCL_DEBUG=INFO")
    return log.to_json(), tables.nccl_log_lines(log)


def _reader(parse, errors, lines):
    """A format whose parsed result gives its own JSON (``to_json``) and whose text is ``lines``."""
    def read(path: str):
        result = _read_tool(path, parse, errors)
        return result.to_json(), lines(result)
    return read


# gputopo parse FORMAT FILE: (JSON, text lines) of what a tool printed, read as it writes it.
_PARSERS = {"smi-topo": _smi_topo, "smi-p2p": _smi_p2p,
            "nvlink-status": _reader(parse_nvlink_status, NvlinkStatusParseError, tables.nvlink_status_lines),
            "smi-query": _reader(parse_smi_query, SmiQueryParseError, lambda listing: listing.lines()),
            "smi-list": _reader(parse_smi_list, SmiListParseError, lambda listing: listing.lines()),
            "smi-xml": _reader(parse_smi_xml, SmiXmlParseError, lambda listing: listing.lines()),
            "nccl-tests": _reader(parse_nccl_tests, NcclTestsParseError, tables.nccl_tests_lines),
            "nccl-log": _nccl_log,
            "nvbandwidth": _reader(parse_nvbandwidth, NvbandwidthParseError, tables.nvbandwidth_lines),
            "p2p-bandwidth": _reader(parse_p2p_bandwidth_latency, P2PParseError, tables.p2p_test_lines)}


def cmd_spec(args) -> int:
    rows = spec_table.table_rows()
    if args.json:
        _emit([{"category": c, "item": i, "gbps": f.gbps, "source": f.source} for c, i, f in rows], True)
        return 0
    _emit(None, False, tables.spec_lines(rows, thresholds.DEFAULT_FLOORS))
    return 0


def cmd_report(args) -> int:
    """An HTML report drawn from a saved --gputopo-json document."""
    from .render.html import ReportError, check_document, html_report

    def refuse(token):
        raise ValueError(f"{token} is not a number strict JSON allows")

    _check_writable("-o", args.output)
    text = _read(args.report)
    try:
        doc = json.loads(text, parse_constant=refuse)
        check_document(doc)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and ReportError are ValueErrors
        raise CliError(f"{args.report}: not a gputopo JSON report: {exc}") from None
    try:
        files.write_text(args.output, html_report(doc))
    except OSError as exc:
        raise CliError(f"-o {args.output}: cannot write: {exc.strerror or exc}") from None
    print(terminal(f"wrote {args.output}: {report.header_line(schema.from_dict(doc['topology']))}"))
    return 0


def cmd_check(args) -> int:
    """A node health check: pytest with only the generated --gputopo-check items."""
    import tempfile

    import pytest

    # --assert=plain: no test of the user's runs here, and rewriting would warn that this package,
    # imported already by this command, cannot be rewritten.
    argv = ["-p", "no:cacheprovider", "--no-header", "--assert=plain", f"--gputopo-check={args.level}"]
    argv += [f"--gputopo-machine={args.machine}"] if args.machine else []
    argv += [f"--gputopo-json={args.json}"] if args.json else []
    argv += [f"--gputopo-html={args.html}"] if args.html else []
    argv += [f"--junitxml={args.junitxml}"] if args.junitxml else []
    argv += [f"--gputopo-allreduce-backend={args.allreduce_backend}"] if args.allreduce_backend else []
    argv += ["-v"] if args.verbose else []
    # Nothing of the user's is collected: the one path is an empty folder, and no conftest.py above it
    # is read. The root is where gputopo was started, so that no item's id names that folder.
    with tempfile.TemporaryDirectory(prefix="gputopo-check-") as empty:
        code = pytest.main(argv + ["--rootdir", os.getcwd(), "--confcutdir", empty, empty])
    return int(code)


def _size_arg(flag: str, text: str) -> int:
    from .core.limits import MAX_BYTES
    from .core.units import read_size

    found = read_size(text, 1, MAX_BYTES)
    if found is None:
        raise CliError(f"{flag} {text[:40]!r}: not a size in bytes from 1 to 1T, such as 8, 64K, 256M or 1G")
    return found


def sweep_plan(args, topology: model.Topology):
    """(backend, the GPU of each rank or None for gloo's CPU processes, ranks, the busbw the links
    should give or None, what that rests on) for ``gputopo bench allreduce``; each refusal names the option."""
    from .core.collectives import allreduce_expected_busbw

    backend = args.backend or ("nccl" if topology.gpus else "gloo")
    if backend == "gloo":
        if args.gpus is not None:
            raise CliError("--gpus goes with --backend nccl (gloo ranks are CPU processes)")
        return backend, None, 2 if args.ranks is None else args.ranks, None, "gloo on CPUs (no link to judge it by)"
    if not topology.gpus:
        raise CliError(f"--backend nccl: no GPU on this host ({topology.problem or 'NVML lists none'}); "
                       f"use --backend gloo")
    count = len(topology.gpus)
    if args.gpus is None:
        ranks = count if args.ranks is None else args.ranks
        if ranks > count:
            raise CliError(f"--ranks {ranks}: this host has {counted(count, 'GPU')} (one rank per GPU)")
        devices = list(range(ranks))
    else:
        named = args.gpus.split(",")
        devices = [int(v) for v in named if v.strip().isascii() and v.strip().isdigit()]
        if len(devices) != len(named) or len(set(devices)) != len(devices) or max(devices) >= count:
            raise CliError(f"--gpus {args.gpus!r}: expected distinct GPU indices 0..{count - 1}, comma-separated")
        if args.ranks is not None and args.ranks != len(devices):
            raise CliError(f"--ranks {args.ranks} and --gpus {args.gpus}: one rank per GPU named")
    expected = allreduce_expected_busbw(topology, len(devices), tuple(devices))
    basis = expected.label if expected else f"links among {', '.join(f'GPU{d}' for d in devices)} (unknown)"
    return backend, devices, len(devices), expected, basis


def _check_gloo_ranks(args, ranks: int, max_bytes: int) -> None:
    """Refuse more gloo ranks than this machine runs (``bench.sweep.gloo_rank_limit``: its CPUs, and
    its memory for the largest size), naming the option and why."""
    from .bench.sweep import gloo_rank_limit
    from .core.units import size_text

    limit, why = gloo_rank_limit(max_bytes)
    if ranks <= limit:
        return
    if args.ranks is None:
        raise CliError(f"-e {args.maxbytes}: the default {ranks} gloo ranks do not fit this host at "
                       f"{size_text(max_bytes)} ({why})")
    raise CliError(f"--ranks {ranks}: at most {counted(limit, 'gloo rank')} on this host for "
                   f"sizes up to {size_text(max_bytes)} ({why})")


def cmd_bench(args) -> int:
    """The all-reduce sweep: nccl-tests' table on stdout, JSON and HTML on request."""
    from .bench.allreduce import BenchError, run_allreduce
    from .bench.sweep import element_sizes, sweep_entry, sweep_sizes
    from .core.collectives import NCCL_TESTS_TYPES
    from .render.nccl_tests import sweep_table

    for flag, value, low in (("--ranks", args.ranks, 1), ("-w", args.warmup_iters, 0), ("--budget", args.budget, 1e-3),
                             ("--timeout", args.timeout, 1.0)):
        if value is not None and not (low <= value <= 1e6):
            raise CliError(f"{flag} {value:g}: expected a number from {low:g} to 1e6")
    for flag, path in (("--json", args.json), ("--html", args.html)):
        _check_writable(flag, path)
    try:
        wanted = sweep_sizes(_size_arg("-b", args.minbytes), _size_arg("-e", args.maxbytes), args.stepfactor)
    except ValueError as exc:
        raise CliError(f"-b/-e/-f: {exc}") from None
    sizes = element_sizes(wanted, NCCL_TESTS_TYPES[args.datatype])
    topology = probe(None)  # learned in children: this process never starts CUDA
    backend, devices, ranks, expected, basis = sweep_plan(args, topology)
    if backend == "gloo":
        _check_gloo_ranks(args, ranks, max(sizes))
    timeout = args.timeout if args.timeout is not None else 60 + 4 * args.budget * len(sizes)
    print(f"gputopo: measuring an all-reduce sweep: {counted(ranks, 'rank')}, {backend}, {counted(len(sizes), 'size')} "
          f"(up to {timeout:g} s) ...", file=sys.stderr, flush=True)
    try:
        result = run_allreduce(ranks, sizes, backend=backend, dtype=NCCL_TESTS_TYPES[args.datatype],
                               devices=devices, budget_s_per_size=args.budget, timeout_s=timeout,
                               warmup=args.warmup_iters)
    except BenchError as exc:
        print(f"gputopo: the sweep gave no figures: {exc.reason}", file=sys.stderr)
        return 1
    sweep = sweep_entry(result, host=topology.hostname, devices=devices,
                        sizes=(wanted[0], wanted[-1], args.stepfactor), expected=expected, basis=basis)
    sys.stdout.write(sweep_table(sweep))
    document = {**report.machine_document(topology), "sweeps": [sweep], "complete": True}
    for flag, path, text in (("--json", args.json, lambda: json.dumps(document, indent=1, allow_nan=False) + "\n"),
                             ("--html", args.html, lambda: _html_report(document))):
        if path is not None:
            try:
                files.write_text(path, text())
            except OSError as exc:
                raise CliError(f"{flag} {path}: cannot write: {exc.strerror or exc}") from None
    print(f"gputopo: done in {result.wall_s:.1f} s" + ("" if result.ok else f"; data wrong: {'; '.join(result.errors)}"),
          file=sys.stderr)
    return 0 if result.ok else 1


def _html_report(document: dict) -> str:
    from .render.html import html_report

    return html_report(document)


# What every command's exit status may also be (docs/cli.md, "Exit status").
_COMMON_EXITS = ("  3    an internal error (one line asking to report it; never a traceback)\n"
                 "  130  ended by Ctrl-C (SIGINT); 143 by SIGTERM: every process it started has ended\n"
                 "  141  the reader of the output went away (a pipe into `head`, quietly)")


def _command(sub, name: str, summary: str, description: str, example: str, exits: str):
    """A subcommand whose --help says what it does, an example and its exit statuses."""
    common = "" if name == "check" else "\n" + _COMMON_EXITS
    return sub.add_parser(name, help=summary, description=description,
                          epilog=f"example:\n{example}\n\nexit status:\n{exits}{common}",
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gputopo", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="GPU interconnect topology: show, record, parse, check, benchmark, report.",
        epilog="`gputopo COMMAND --help`: what a command does, an example and its exit statuses.\n"
               "Exit status: 0 done; 2 bad input or arguments (one line on stderr says why); check and\n"
               "bench also say what they found (see their --help). Docs: docs/cli.md.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                help="one of these (each says more with --help):")

    p = _command(sub, "show", "print this host's (or a recorded machine's) link and P2P matrices",
                 "This host's topology (through NVML), or a recorded machine's: the link matrix as nvidia-smi\n"
                 "topo -m prints it, the P2P read/write status under a line naming its source, one line per\n"
                 "GPU, the versions, and the legend; '?' marks a fact the source did not give. Where there is\n"
                 "no GPU, one line says so and why.",
                 "  gputopo show --machine hgx-h100-nvlink-down",
                 "  0    shown (also where there is no GPU)\n"
                 "  2    an unknown machine, or a file that is no profile nor nvidia-smi topo -m text")
    p.add_argument("--machine", metavar="NAME|PATH",
                   help="a bundled machine (gputopo machines), a profile, or nvidia-smi topo -m text "
                        "(default: this host, through NVML)")
    p.add_argument("--json", action="store_true",
                   help="print the topology as JSON, in the profile's topology form plus source_text "
                        "(default: text)")
    p.set_defaults(func=cmd_show)

    p = _command(sub, "machines", "list the bundled recorded machines",
                 "The recorded machines bundled with pytest-gputopo, one per line with a description: names\n"
                 "for --gputopo-machine, --gputopo-expect and gputopo show/check --machine.",
                 "  gputopo machines --json",
                 "  0    listed")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list of {name, description, gpus} (default: one line per machine)")
    p.set_defaults(func=cmd_machines)

    p = _command(sub, "record", "write a machine profile from NVML, or from nvidia-smi text",
                 "Write a machine profile (docs/profile-format.md) from this host through NVML, or, with\n"
                 "--from-smi, from nvidia-smi text captured on any machine (every fact the text does not give\n"
                 "is recorded as unknown). nvbandwidth and p2pBandwidthLatencyTest output run on that machine\n"
                 "add its figures, labelled recorded. The profile works wherever a machine is named.",
                 "  nvidia-smi topo -m > topo.txt; nvidia-smi topo -p2p r > p2p_r.txt; nvidia-smi topo -p2p w > p2p_w.txt\n"
                 "  gputopo record --from-smi topo.txt --p2p r:p2p_r.txt --p2p w:p2p_w.txt -o node.json\n"
                 "  pytest --gputopo-machine node.json",
                 "  0    written, and what each file gave printed\n"
                 "  2    an unreadable or refused file (named), -o not writable, or no GPU to record")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the profile to write, as JSON (required; a regular file is replaced whole, "
                        "see docs/cli.md)")
    p.add_argument("--from-smi", metavar="FILE",
                   help="`nvidia-smi topo -m` output to build the profile from (default: this host's NVML)")
    p.add_argument("--p2p", action="append", default=[], metavar="[CAPS:]FILE",
                   help="with --from-smi: `nvidia-smi topo -p2p CAPS` output (CAPS letters r,w,n,a; default r); "
                        "repeatable (default: none, P2P status unknown)")
    p.add_argument("--nvlink-status", action="append", default=[], metavar="FILE",
                   help="with --from-smi: `nvidia-smi nvlink -s` output, each GPU's NVLink states; repeatable "
                        "(default: none)")
    p.add_argument("--smi-query", action="append", default=[], metavar="FILE",
                   help="with --from-smi: `nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,"
                        "compute_cap,driver_version,... --format=csv`, `nvidia-smi -L` or `nvidia-smi -q -x` "
                        "output (told by its text), each GPU's name, UUID, bus id, memory, capability, PCIe and "
                        "the driver and CUDA versions; repeatable (default: none)")
    p.add_argument("--nvbandwidth", action="append", default=[], metavar="FILE",
                   help="nvbandwidth output run on this machine: its P2P and host<->device figures, recorded; "
                        "repeatable (default: none)")
    p.add_argument("--p2p-bandwidth", action="append", default=[], metavar="FILE",
                   help="cuda-samples p2pBandwidthLatencyTest output run on this machine: its copy figures, "
                        "recorded; repeatable (default: none)")
    p.add_argument("--name", help="the machine's name (default: the output file's stem)")
    p.add_argument("--description",
                   help="one line saying what the machine is (default: 'recorded by gputopo from <source>')")
    p.set_defaults(func=cmd_record)

    p = _command(sub, "spec", "print the expected-bandwidth table with the source of every figure",
                 "The figures links should give (PCIe per generation and width, NVLink per link and per GPU,\n"
                 "host<->device, published per-SKU all-reduce floors), each with its source, and the default\n"
                 "efficiency floors (docs/thresholds.md).",
                 "  gputopo spec --json",
                 "  0    printed")
    p.add_argument("--json", action="store_true",
                   help="print the table and floors as JSON (default: one line per figure)")
    p.set_defaults(func=cmd_spec)

    p = _command(sub, "check", "run the node health check (pytest --gputopo-check) and report like pytest",
                 "Run pytest with only the generated health-check items (pytest --gputopo-check) on this host\n"
                 "or a recorded machine, and exit with pytest's status.",
                 "  gputopo check --level full --junitxml node.xml --html node.html\n"
                 "  gputopo check --machine hgx-h100-nvlink-down",
                 "  0    every check passed (or was skipped, saying why)\n"
                 "  1    a check failed\n"
                 "  2    interrupted (Ctrl-C), as pytest; or a bad argument of gputopo check itself\n"
                 "  3    an internal error, as pytest\n"
                 "  4    a usage error, as pytest: an unknown --machine, a report path that cannot be written")
    p.add_argument("--level", choices=["quick", "full"], default="quick",
                   help="quick: the topology, each GPU's PCIe width and NVLinks, NVML's P2P status per pair "
                        "(seconds); full: quick, plus measured P2P copies per pair, host<->device copies per "
                        "GPU and one all-reduce (default: quick)")
    p.add_argument("--machine", metavar="NAME|PATH",
                   help="check a recorded machine instead of this host (default: this host)")
    p.add_argument("--json", metavar="PATH",
                   help="write topology, measurements and outcomes as JSON (default: none)")
    p.add_argument("--html", metavar="PATH", help="write the self-contained HTML report (default: none)")
    p.add_argument("--junitxml", metavar="PATH", help="write JUnit XML (default: none)")
    p.add_argument("--allreduce-backend", choices=["nccl", "gloo"],
                   help="torch.distributed backend of the all-reduce: nccl (GPUs) or gloo (CPUs) "
                        "(default: nccl, as --gputopo-allreduce-backend)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print every item's measured, expected, floor and ratio (default: failed and "
                        "skipped items only)")
    p.set_defaults(func=cmd_check)

    from .core.collectives import NCCL_TESTS_TYPES

    p = _command(sub, "bench", "benchmarks for people: the all-reduce sweep (nccl-tests' table, JSON, HTML)",
                 "The all-reduce sweep: sizes stepped as nccl-tests' -b -e -f step them, each timed for\n"
                 "--budget seconds with torch.distributed (nccl with one rank per GPU, else gloo CPU\n"
                 "processes), printed as nccl-tests' table with the busbw the links should give.",
                 "  gputopo bench allreduce -b 64K -e 4M -f 4 --budget 0.2 --json sweep.json --html sweep.html",
                 "  0    every size's data came back right\n"
                 "  1    a size's data came back wrong, or the sweep gave no figure\n"
                 "  2    bad arguments (named), refused before anything runs")
    p.add_argument("benchmark", choices=["allreduce"], help="the benchmark: allreduce (the only one)")
    p.add_argument("-b", "--minbytes", default="1M", metavar="SIZE", help="first size (default 1M; 8, 64K, 1G)")
    p.add_argument("-e", "--maxbytes", default="64M", metavar="SIZE", help="last size (default 64M)")
    p.add_argument("-f", "--stepfactor", type=int, default=2, metavar="N", help="multiply the size by N (default 2)")
    p.add_argument("--backend", choices=["nccl", "gloo"], help="default: nccl where NVML lists GPUs, else gloo")
    p.add_argument("--ranks", type=int, metavar="N", help="ranks (gloo default 2; nccl: GPU0..N-1, default all)")
    p.add_argument("--gpus", metavar="LIST", help="nccl: the GPUs to use, one rank each (0,2,5; default: all)")
    p.add_argument("-d", "--datatype", choices=sorted(NCCL_TESTS_TYPES), default="float",
                   help="the element type, by nccl-tests' names (default float)")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, metavar="N",
                   help="untimed all-reduces before each size is timed (default 5)")
    p.add_argument("--budget", type=float, default=1.0, metavar="S", help="seconds of timing per size (default 1)")
    p.add_argument("--timeout", type=float, metavar="S", help="bound on the whole sweep (default 60 + 4 x budget x sizes)")
    p.add_argument("--json", metavar="PATH",
                   help="write the sweep as a report document (gputopo report reads it; default: none)")
    p.add_argument("--html", metavar="PATH",
                   help="write the HTML report: busbw against size with the expected line (default: none)")
    p.set_defaults(func=cmd_bench)

    p = _command(sub, "report", "draw the self-contained HTML report of a saved --gputopo-json document",
                 "Draw the self-contained HTML report (docs/report.md) of a --gputopo-json, gputopo check\n"
                 "--json or gputopo bench --json document: the page --gputopo-html writes during a run.",
                 "  pytest --gputopo-machine hgx-h100-nvlink-down --gputopo-json run.json\n"
                 "  gputopo report run.json -o run.html",
                 "  0    written\n"
                 "  2    not such a document (the field it cannot draw is named), or -o not writable")
    p.add_argument("report", metavar="RUN.json", help="the JSON document a run wrote")
    p.add_argument("-o", "--output", required=True, metavar="PATH.html",
                   help="the page to write (required; a regular file is replaced whole, see docs/cli.md)")
    p.set_defaults(func=cmd_report)

    p = _command(sub, "parse", "read tool output and print what it says",
                 "Read what a tool printed, as it prints it (cut or pasted text gives what can be read, plus\n"
                 "warnings), and print what it says; each format refuses another tool's text, naming it.",
                 "  nvidia-smi topo -m > topo.txt\n"
                 "  gputopo parse smi-topo topo.txt --json",
                 "  0    read\n"
                 "  2    unreadable, or text that is not the format's (one line says what it is)")
    p.add_argument("format", choices=list(_PARSERS),
                   help="smi-topo: `nvidia-smi topo -m` text; smi-p2p: `nvidia-smi topo -p2p r|w|n|a`; nvlink-status: "
                        "`nvidia-smi nvlink -s`; smi-query: `nvidia-smi --query-gpu=... --format=csv`; smi-list: "
                        "`nvidia-smi -L`; smi-xml: `nvidia-smi -q -x`; nccl-tests: all_reduce_perf (or other *_perf) output; nccl-log: "
                        "NCCL_DEBUG=INFO output; nvbandwidth: NVIDIA nvbandwidth output; p2p-bandwidth: cuda-samples' "
                        "p2pBandwidthLatencyTest output")
    p.add_argument("file", help="the tool's output, saved to a file")
    p.add_argument("--json", action="store_true", help="print what was read as JSON (default: text)")
    p.set_defaults(func=cmd_parse)
    return parser


class _Stopped(BaseException):
    """SIGINT or SIGTERM reached the command: a BaseException, so that no ``except Exception`` takes
    it, and every ``finally`` on the way out runs (``runtime.procs.Children`` ends every worker's group,
    ``run_allreduce`` removes its folder)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _on_stop_signal(signum, frame) -> None:
    for sig in _STOP_SIGNALS:  # the first one ends the command; the cleanup it starts runs to its end
        signal.signal(sig, signal.SIG_IGN)
    raise _Stopped(signum)


def _catch_stop_signals() -> dict | None:
    """Install ``_on_stop_signal`` for SIGINT and SIGTERM (SIGTERM's default would end the process
    without a ``finally``); the handlers they replace, for ``main`` to put back. Only the CLI's own
    ``main`` does this, in the main thread; the pytest plugin never touches a user's handlers."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _on_stop_signal)
    return previous


def _stopped(signum: int, bench: bool) -> int:
    """One line and the status of a command ended by ``signum`` (128 + its number, as a shell
    reports it): 130 for SIGINT, 143 for SIGTERM."""
    if threading.current_thread() is threading.main_thread():  # main's finally puts the caller's back
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
    said = ""
    if bench:
        from .bench.allreduce import remove_workdirs_of

        remove_workdirs_of(os.getpid())  # a signal inside run_allreduce's own cleanup cut it short
        said = "; the sweep's workers were ended and its temporary folder removed"
    print(f"gputopo: interrupted by {signal.Signals(signum).name}{said}", file=sys.stderr)
    return 128 + signum


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # gputopo check hands the process to pytest, which answers Ctrl-C itself (exit status 2).
    previous = None if args.func is cmd_check else _catch_stop_signals()
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, not at exit: a reader that went away is caught below
        return code
    except BrokenPipeError:
        # The reader went away (`gputopo spec --json | head`): not an error of ours. Quiet, with the
        # status of a writer ended by SIGPIPE; stdout goes to devnull so the exit's flush is quiet too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    except CliError as exc:
        print(terminal(f"gputopo: {exc}"), file=sys.stderr)
        return 2
    except _Stopped as exc:
        return _stopped(exc.signum, args.func is cmd_bench)
    except KeyboardInterrupt:  # Ctrl-C where the handler is not ours (main called from a thread)
        return _stopped(signal.SIGINT, args.func is cmd_bench)
    except Exception as exc:  # a bug: still one line, never a traceback for the user
        print(terminal(f"gputopo: internal error ({type(exc).__name__}: {exc}); please report it"), file=sys.stderr)
        return 3
    finally:
        for sig, handler in (previous or {}).items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


if __name__ == "__main__":
    sys.exit(main())
