"""The ``gputopo`` command: show, record, parse, check, benchmark and report machines. One module
per command (``show`` also lists the machines), each with its arguments; ``common`` holds what they
share, ``stop_signals`` how Ctrl-C and SIGTERM end them.

Exit status: 0 done; 2 bad input (unreadable file, unknown machine, bad arguments), with one line
on stderr saying why; 130 or 143 when SIGINT (Ctrl-C) or SIGTERM ended it, with one line, after every
process it started was ended; never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys

from ..render.escape import terminal
from .common import CliError
from .stop_signals import Stopped, catch_stop_signals, stopped

__all__ = ["CliError", "build_parser", "main"]

# Each command, by name: its module and the function that adds its arguments, in the order --help lists
# them. A run of one command imports that command's module alone (what `gputopo fleet` holds while it
# reads a thousand documents starts with what it imported); --help, or a command no one knows, all.
COMMANDS = {
    "show": ("show", "add_show"),
    "machines": ("show", "add_machines"),
    "record": ("record", "add_record"),
    "spec": ("spec", "add_spec"),
    "check": ("check", "add_check"),
    "bench": ("bench", "add_bench"),
    "report": ("report", "add_report"),
    "fleet": ("fleet", "add_fleet"),
    "parse": ("parse", "add_parse"),
    "docs": ("docs", "add_docs"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every command's, or ``command``'s alone."""
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
    for name, (module, adder) in COMMANDS.items():
        if command in (None, name):
            getattr(importlib.import_module(f"{__name__}.{module}"), adder)(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    first = next((a for a in argv if not a.startswith("-")), None)  # the command: no option comes before it
    args = build_parser(first if first in COMMANDS else None).parse_args(argv)
    # gputopo check hands the process to pytest, which answers Ctrl-C itself (exit status 2).
    previous = None if args.command == "check" else catch_stop_signals()
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
        return stopped(exc.signum, args.command == "bench")
    except KeyboardInterrupt:  # Ctrl-C where the handler is not ours (main called from a thread)
        return stopped(signal.SIGINT, args.command == "bench")
    except Exception as exc:  # a bug: still one line, never a traceback for the user
        print(terminal(f"gputopo: internal error ({type(exc).__name__}: {exc}); please report it"), file=sys.stderr)
        return 3
    finally:
        for sig, handler in (previous or {}).items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
