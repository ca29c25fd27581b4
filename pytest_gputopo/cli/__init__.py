"""The ``gputopo`` command: show, record, parse, check, benchmark and report machines. One module
per command (``show`` also lists the machines), each with its arguments; ``common`` holds what they
share, ``stop_signals`` how Ctrl-C and SIGTERM end them.

Exit status: 0 done; 2 bad input (unreadable file, unknown machine, bad arguments), with one line
on stderr saying why; 130 or 143 when SIGINT (Ctrl-C) or SIGTERM ended it, with one line, after every
process it started was ended; never a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ..render.escape import terminal
from .bench import add_bench, cmd_bench, sweep_plan
from .check import add_check, cmd_check
from .common import CliError
from .docs import add_docs
from .fleet import add_fleet
from .parse import add_parse
from .record import add_record
from .report import add_report
from .show import add_machines, add_show
from .spec import add_spec
from .stop_signals import Stopped, catch_stop_signals, stopped

__all__ = ["CliError", "build_parser", "main", "sweep_plan"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gputopo",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="GPU interconnect topology: show, record, parse, check, benchmark, report, compare a fleet.",
        epilog="`gputopo COMMAND --help`: what a command does, an example and its exit statuses.\n"
        "Exit status: 0 done; 2 bad input or arguments (one line on stderr says why); check,\n"
        "bench and fleet also say what they found (see their --help): fleet 1 a node named or a\n"
        "group split, 5 too few nodes to judge by their peers. Docs: `gputopo docs cli`\n"
        "(`gputopo docs` lists them; each docs/NAME.md named in a --help is `gputopo docs NAME`).",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="one of these (each says more with --help):"
    )
    for add in (
        add_show,
        add_machines,
        add_record,
        add_spec,
        add_check,
        add_bench,
        add_report,
        add_fleet,
        add_parse,
        add_docs,
    ):
        add(sub)  # in the order --help lists them
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # gputopo check hands the process to pytest, which answers Ctrl-C itself (exit status 2).
    previous = None if args.func is cmd_check else catch_stop_signals()
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
    except Stopped as exc:
        return stopped(exc.signum, args.func is cmd_bench)
    except KeyboardInterrupt:  # Ctrl-C where the handler is not ours (main called from a thread)
        return stopped(signal.SIGINT, args.func is cmd_bench)
    except Exception as exc:  # a bug: still one line, never a traceback for the user
        print(terminal(f"gputopo: internal error ({type(exc).__name__}: {exc}); please report it"), file=sys.stderr)
        return 3
    finally:
        for sig, handler in (previous or {}).items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
