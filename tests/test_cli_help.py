"""`gputopo --help` and each command's: what it does, an example, its exit statuses, and every
argument with a help text that says its default."""

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gputopo.cli import build_parser

DOC = (Path(__file__).parents[1] / "docs" / "cli.md").read_text()


def _commands():
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return parser, sub.choices


def test_every_argument_of_every_command_has_help_and_its_default():
    """Each argument (the commands' own included) has a help text; an option says its default (or
    that it is required), and a default value that is not off or none is spelled in the help."""
    parser, commands = _commands()
    problems = []
    for name, command in [("gputopo", parser), *commands.items()]:
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            where = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not (action.help or "").strip():
                problems.append(f"{where}: no help")
                continue
            if action.option_strings and not re.search(r"\bdefault\b|\brequired\b", action.help):
                problems.append(f"{where}: its help does not say its default")
            default = action.default
            if default not in (None, False, [], argparse.SUPPRESS):
                shown = f"{default:g}" if isinstance(default, float) else str(default)
                if shown not in action.help:
                    problems.append(f"{where}: default {shown!r} not in its help")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", ["show", "machines", "record", "spec", "check", "bench", "report", "parse"])
def test_each_command_help_says_what_it_does_an_example_and_its_exit_statuses(name):
    out = subprocess.run([sys.executable, "-m", "pytest_gputopo.cli", name, "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    description = text.split("\n\n")[1]  # after the usage
    assert not description.startswith(("positional arguments", "options")) and len(description) > 40
    example = text.split("\nexample:\n", 1)[1].split("\n\n", 1)[0]
    assert any(line.strip().startswith(f"gputopo {name}") for line in example.splitlines()), example
    statuses = text.split("\nexit status:\n", 1)[1]
    assert re.search(r"^  0 ", statuses, re.M) and (name in ("machines", "spec") or re.search(r"^  2 ", statuses, re.M))
    assert f"## `gputopo {name}" in DOC  # and docs/cli.md has its section


def test_the_command_list_says_where_each_command_says_more():
    out = subprocess.run([sys.executable, "-m", "pytest_gputopo.cli", "--help"], capture_output=True, text=True)
    assert "`gputopo COMMAND --help`: what a command does, an example and its exit statuses." in out.stdout


def test_docs_name_every_option_the_help_lists():
    """docs/cli.md and --help agree: each command's options appear (short or long) in its section."""
    _, commands = _commands()
    sections = re.split(r"^## ", DOC, flags=re.M)
    missing = []
    for name, command in commands.items():
        text = "".join(s for s in sections if s.startswith(f"`gputopo {name}"))
        for action in command._actions:
            flags = [f for f in action.option_strings if f not in ("-h", "--help")]
            if flags and not any(re.search(rf"`[^`]*{re.escape(f)}\b[^`]*`", text) for f in flags):
                missing.append(f"{name} {'/'.join(flags)}")
    assert not missing, "docs/cli.md does not name: " + ", ".join(missing)


def test_each_command_is_found_under_its_name_and_loads_alone():
    """``COMMANDS`` names each command as its module adds it, so that a run of one builds its parser
    alone; ``gputopo spec`` imports no other command's module (``gputopo fleet`` holds less while it
    reads a thousand documents), and --help still lists them all."""
    from pytest_gputopo.cli import COMMANDS

    assert set(_commands()[1]) == set(COMMANDS)
    for name in COMMANDS:
        [sub] = [a for a in build_parser(name)._actions if isinstance(a, argparse._SubParsersAction)]
        assert list(sub.choices) == [name]
    code = (
        "import sys; from pytest_gputopo.cli import main; main(['spec']); "
        "print(sorted(m for m in sys.modules if m.startswith('pytest_gputopo.cli.')), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr.strip().splitlines()[-1] == str(
        ["pytest_gputopo.cli.common", "pytest_gputopo.cli.spec", "pytest_gputopo.cli.stop_signals"]
    )
