"""``gputopo docs [NAME]``: the project's docs, as the package carries them (a wheel holds them as
``pytest_gputopo/docs``, ``setup.py``; a checkout has them in ``docs/``), for the names ``--help`` gives."""

from __future__ import annotations

import sys
from pathlib import Path

from ..render.escape import terminal
from .common import CliError, add_command

PACKAGE = Path(__file__).resolve().parents[1]


def folder() -> Path | None:
    """Where the docs are: in the installed package, else in the checkout it was installed from."""
    for candidate in (PACKAGE / "docs", PACKAGE.parent / "docs"):
        if (candidate / "parallel.md").is_file():
            return candidate
    return None


def add_docs(sub) -> None:
    p = add_command(
        sub,
        "docs",
        "print one of the docs (--help names them), or list them",
        "Print one of pytest-gputopo's docs as Markdown (docs/NAME.md, carried by the package), or,\n"
        "without a name, list them with their titles.",
        "  gputopo docs parallel | less",
        "  0 printed; 2 no such doc",
    )
    p.add_argument("name", nargs="?", help="the doc's name: parallel, options, markers, ... (none: list them)")
    p.set_defaults(func=cmd_docs)


def cmd_docs(args) -> int:
    where = folder()
    if where is None:
        raise CliError("the docs are not installed with this package (a wheel built without setup.py's step)")
    docs = {path.stem: path for path in sorted(where.glob("*.md"))}
    if args.name is None:
        for name, path in docs.items():
            title = next(
                (line.lstrip("# ").strip() for line in path.open(encoding="utf-8") if line.startswith("#")), ""
            )
            print(f"{name:18} {terminal(title)}")
        return 0
    name = args.name.removeprefix("docs/").removesuffix(".md")
    if name not in docs:
        raise CliError(f"no doc named {args.name!r}; one of: {', '.join(docs)}")
    sys.stdout.write(docs[name].read_text(encoding="utf-8"))
    return 0
