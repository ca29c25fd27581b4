"""``gputopo show`` (a machine's link and P2P matrices) and ``gputopo machines`` (the bundled ones)."""

from __future__ import annotations

from ..core import model, schema
from ..probe import MachineError, probe
from ..probe.recorded import bundled_names, load_profile
from ..render import report, tables
from .common import CliError, add_command, emit


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
    emit(data, args.json, report.full_report(topology) + legend)
    return 0


def cmd_machines(args) -> int:
    profiles = [load_profile(name) for name in bundled_names()]
    if args.json:
        emit([{"name": p.name, "description": p.description, "gpus": len(p.topology.gpus)} for p in profiles], True)
    else:
        emit(None, False, tables.machine_lines(profiles))
    return 0


def add_show(sub) -> None:
    p = add_command(
        sub,
        "show",
        "print this host's (or a recorded machine's) link and P2P matrices",
        "This host's topology (through NVML), or a recorded machine's: the link matrix as nvidia-smi\n"
        "topo -m prints it, the P2P read/write status under a line naming its source, one line per\n"
        "GPU, the versions, and the legend; '?' marks a fact the source did not give. Where there is\n"
        "no GPU, one line says so and why.",
        "  gputopo show --machine hgx-h100-nvlink-down",
        "  0    shown (also where there is no GPU)\n"
        "  2    an unknown machine, or a file that is no profile nor nvidia-smi topo -m text",
    )
    p.add_argument(
        "--machine",
        metavar="NAME|PATH",
        help="a bundled machine (gputopo machines), a profile, or nvidia-smi topo -m text "
        "(default: this host, through NVML)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the topology as JSON, in the profile's topology form plus source_text (default: text)",
    )
    p.set_defaults(func=cmd_show)


def add_machines(sub) -> None:
    p = add_command(
        sub,
        "machines",
        "list the bundled recorded machines",
        "The recorded machines bundled with pytest-gputopo, one per line with a description: names\n"
        "for --gputopo-machine, --gputopo-expect and gputopo show/check --machine.",
        "  gputopo machines --json",
        "  0    listed",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list of {name, description, gpus} (default: one line per machine)",
    )
    p.set_defaults(func=cmd_machines)
