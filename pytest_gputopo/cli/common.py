"""What every ``gputopo`` command shares: its refusal (``CliError``), reading a file or a tool's
text, printing a result as text or JSON, refusing an unwritable output path, and its --help's form."""

from __future__ import annotations

import argparse
import json
import sys

from ..render.escape import terminal_lines
from ..runtime import files


class CliError(Exception):
    """Bad input: ``main`` prints it as one line on stderr and exits 2."""


def read_file(path: str) -> str:
    try:
        return files.read_text(path)
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None


def read_tool(path: str, parse, errors):
    """``parse`` of the file's text; its format's refusal is a CliError naming the file."""
    try:
        return parse(read_file(path))
    except errors as exc:
        raise CliError(f"{path}: {exc}") from None


def emit(data, as_json: bool, lines=None) -> None:
    if as_json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:  # lines of text from data: each one terminal line, no control character (escape.terminal)
        sys.stdout.write("\n".join(terminal_lines(lines)) + "\n")


def check_writable(flag: str, path: str | None) -> None:
    """Refuse, before any work, a path ``files.write_text`` would not write (its rule: a regular
    file or a new path replaced atomically, a symlink's file replaced, /dev/null written through,
    anything else refused), naming the option and the path."""
    problem = None if path is None else files.unwritable(path)
    if problem:
        raise CliError(f"{flag} {path}: cannot write: {problem}")


# What every command's exit status may also be (docs/cli.md, "Exit status").
_COMMON_EXITS = (
    "  3    an internal error (one line asking to report it; never a traceback)\n"
    "  130  ended by Ctrl-C (SIGINT); 143 by SIGTERM: every process it started has ended\n"
    "  141  the reader of the output went away (a pipe into `head`, quietly)"
)


def add_command(sub, name: str, summary: str, description: str, example: str, exits: str):
    """A subcommand whose --help says what it does, an example and its exit statuses."""
    common = "" if name == "check" else "\n" + _COMMON_EXITS
    return sub.add_parser(
        name,
        help=summary,
        description=description,
        epilog=f"example:\n{example}\n\nexit status:\n{exits}{common}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
