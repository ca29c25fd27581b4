"""No function over 80 lines (issue 45 item 4): every function and method in the package, nested ones
included, counted from its ``def`` to its last line, docstring included (``ast``'s ``end_lineno -
lineno + 1``; decorators not counted). A longer one is split by what its steps do, not cut at a line
number."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pytest_gputopo"
MOST_LINES = 80

# "module::function" -> why it is still long; taken out when it is split
KNOWN_LONG: dict[str, str] = {}


def long_functions(package: Path = PACKAGE, most: int = MOST_LINES) -> dict[str, int]:
    """``"module::function"`` -> its length in lines, for each function or method over ``most`` lines."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > most:
                    found[f"{path.relative_to(package).as_posix()}::{node.name}"] = lines
    return found


def test_no_function_is_over_80_lines():
    found = long_functions()
    over = {name: lines for name, lines in found.items() if name not in KNOWN_LONG}
    assert not over, f"functions over {MOST_LINES} lines: {over}"


def test_the_count_runs_from_def_to_the_last_line(tmp_path):
    """The measure itself: a method's docstring and body count, its decorator does not."""
    (tmp_path / "m.py").write_text(
        "class C:\n"
        "    @staticmethod\n"
        "    def long():\n"
        '        """Doc."""\n' + "        x = 1\n" * 3 + "\n"
        "def short():\n"
        "    pass\n"
    )
    assert long_functions(tmp_path, most=4) == {"m.py::long": 5}
    assert long_functions(tmp_path, most=5) == {}
