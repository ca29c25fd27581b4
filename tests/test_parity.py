"""Twins that cannot be forgotten: what is said in one room and must be said again in another.

- every marker (``plugin/marker_table.py``) has its run-gate term (``core/expressions.py``) stating the
  same requirement, or an exemption that says why;
- every module of ``parse/`` is reached from ``gputopo parse`` (``cli/parse.py``), or is named here
  with what it is instead (a helper, or a format read elsewhere);
- every option (``plugin/options.py``), set in an ini file, changes the run's settings
  (``plugin/run_settings.py``), and every ini key pytest or the docs show is one of them;
- the docs say each of them: every marker's signature is a row of docs/markers.md's table, the gate's
  grammar in docs/options.md is the one it prints, every format has its `gputopo parse` heading in
  docs/cli.md.

Each check is a function that returns its problems; the tests below assert that there are none, and
that each one bites (a twin-less marker, keyword, format or option, patched in, is named).
"""

from __future__ import annotations

import inspect
import pkgutil
import re
import types
from pathlib import Path

import pytest

from pytest_gputopo.cli import parse as cli_parse
from pytest_gputopo.core import expressions
from pytest_gputopo.core.requirements import RequirementError
from pytest_gputopo.plugin import markers, options, run_settings

ROOT = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------
# Markers and their run-gate terms

# (marker args, marker kwargs, the --gputopo-require term that states the same requirement). Every
# argument of a twinned marker but ``strict`` is set in one of its rows, so a new keyword needs a term.
GATE_TWINS: dict[str, list[tuple[tuple, dict, str]]] = {
    "requires_gpus": [
        ((8,), {}, "gpus>=8"),
        ((), {"min_memory_gb": 80}, "memory>=80@1"),
        ((), {"compute_capability": ">=9.0"}, "cc>=9.0@1"),
        ((), {"arch": ">=hopper"}, "arch>=hopper@1"),
        ((), {"model": "H100"}, "model=H100@1"),
        ((), {"bf16": True}, "bf16@1"),
        ((), {"multicast": True}, "multicast@1"),
        ((), {"healthy": True}, "healthy@1"),
    ],
    "requires_versions": [
        ((), {"driver": ">=535"}, "driver>=535"),
        ((), {"cuda": ">=12.4"}, "cuda>=12.4"),
        ((), {"cuda_runtime": ">=12.1"}, "cuda_runtime>=12.1"),
        ((), {"nccl": ">=2.18"}, "nccl>=2.18"),
    ],
    "requires_p2p": [((), {}, "p2p"), ((4,), {}, "p2p@4")],
    "requires_nvlink": [((), {"gpus": 4, "min_links": 2}, "nvlink>=2@4")],
    "requires_link": [(("NV18",), {"gpus": 2}, "link>=NV18@2")],
}

# A marker with no run-gate term, and why.
GATE_EXEMPT = {
    "min_allreduce_bw": "a figure is measured, not a fact of the machine: the gate is judged from the "
    "machine's facts before collection; `--gputopo-check full` measures the node instead",
    "min_p2p_bw": "measured, as min_allreduce_bw",
    "min_h2d_bw": "measured, as min_allreduce_bw",
    "requires_nccl_transport": "the gate states NCCL's transports as `no-fallback` (no pair that deserves P2P "
    "falls back); a kind per pair (SHM, NET/IB, NVLS, COLLNET) has no term",
    "ranks": "how a test runs (as n spawned ranks), not what the machine has",
}

# A marker argument with no term of its own, and why.
ARG_EXEMPT = {"strict": "the test's own choice between skip and fail; an unmet gate always stops the run"}


def markers_without_twin() -> list[str]:
    """Markers that neither have a run-gate twin nor are exempt (or are both)."""
    return sorted(name for name in markers.MARKERS if (name in GATE_TWINS) == (name in GATE_EXEMPT))


def arguments_without_twin() -> list[str]:
    """``marker.argument`` of a twinned marker that no twin sets and no exemption names."""
    missing = []
    for name, rows in GATE_TWINS.items():
        sig = inspect.signature(markers.MARKERS[name])
        given = {arg for args, kwargs, _ in rows for arg in sig.bind(*args, **kwargs).arguments}
        missing += [f"{name}.{arg}" for arg in sig.parameters if arg not in given and arg not in ARG_EXEMPT]
    return missing


def twins_that_differ() -> list[str]:
    """Twins whose term is not read, or reads as another requirement than the marker's."""
    wrong = []
    for name, rows in GATE_TWINS.items():
        for args, kwargs, term in rows:
            marked = markers.from_marker(name, args, kwargs)[0]
            try:
                gated = expressions.parse_expression(term)
            except RequirementError as exc:
                wrong.append(f"{name}: {term!r} is no term: {str(exc).splitlines()[0]}")
                continue
            if gated != (marked,):
                wrong.append(f"{name}{args}{kwargs}: {marked!r}, but {term!r} is {gated!r}")
    return wrong


def test_every_marker_has_its_run_gate_term_or_says_why_not():
    assert markers_without_twin() == []
    assert arguments_without_twin() == []
    assert twins_that_differ() == []


def with_keyword(marker, name: str):
    """``marker`` with one more keyword argument, ``name``, that no gate term knows (and it ignores)."""
    signature = inspect.signature(marker)
    extra = inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None)

    def patched(*args, **kwargs):
        kwargs.pop(name, None)
        return marker(*args, **kwargs)

    patched.__signature__ = signature.replace(parameters=[*signature.parameters.values(), extra])
    return patched


def test_the_marker_parity_bites(monkeypatch):
    monkeypatch.setitem(markers.MARKERS, "requires_widget", lambda n=1, *, strict=None: None)
    assert markers_without_twin() == ["requires_widget"]

    monkeypatch.setitem(markers.MARKERS, "requires_gpus", with_keyword(markers.MARKERS["requires_gpus"], "ecc"))
    assert arguments_without_twin() == ["requires_gpus.ecc"]

    monkeypatch.setattr(expressions, "_FLAGS", {k: v for k, v in expressions._FLAGS.items() if k != "p2p"})
    assert [w.split(":")[0] for w in twins_that_differ()] == ["requires_p2p", "requires_p2p"]


def fenced(text: str) -> list[str]:
    """The fenced blocks of a Markdown page, each without its fences."""
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def markers_undocumented(page: str) -> list[str]:
    """Markers whose signature, as ``pytest --markers`` registers it, is no row of the page's table."""
    signatures = [line.split(": ", 1)[0] for line in markers.registration_lines()]
    return [sig for sig in signatures if f"| `{sig}` |" not in page]


def grammar_differs(page: str) -> list[str]:
    """The gate's grammar as the page shows it, where it is not the one a malformed gate prints."""
    shown = [block for block in fenced(page) if block.startswith("  EXPR  :=")]
    return [] if shown == [expressions.REQUIRE_GRAMMAR] else [f"{len(shown)} grammar block(s), not REQUIRE_GRAMMAR"]


def test_the_docs_show_every_marker_and_the_grammar_the_gate_prints():
    assert markers_undocumented((ROOT / "docs" / "markers.md").read_text(encoding="utf-8")) == []
    assert grammar_differs((ROOT / "docs" / "options.md").read_text(encoding="utf-8")) == []


def test_the_marker_docs_parity_bites(monkeypatch):
    page = (ROOT / "docs" / "markers.md").read_text(encoding="utf-8")
    monkeypatch.setitem(markers.MARKERS, "requires_widget", lambda n=1, *, strict=None: None)
    monkeypatch.setitem(markers.MARKER_HELP, "requires_widget", "a widget")
    markers.registration_lines.cache_clear()
    try:
        assert markers_undocumented(page) == ["requires_widget(n=1, strict=False)"]
    finally:
        monkeypatch.undo()
        markers.registration_lines.cache_clear()
    grammar = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    monkeypatch.setattr(
        expressions,
        "REQUIRE_GRAMMAR",
        expressions.REQUIRE_GRAMMAR.replace('"bf16" [@N]', '"bf16" [@N]\n         | "ecc" [@N]'),
    )
    assert grammar_differs(grammar) == ["1 grammar block(s), not REQUIRE_GRAMMAR"]


# ---------------------------------------------------------------------------------------------
# parse/ modules and `gputopo parse`

# A module of parse/ that `gputopo parse` does not reach, and what it is instead.
PARSE_EXEMPT = {
    "nccl_tuning": "NCCL's TUNING lines, read by bench/allreduce from its own run's log (each size's algorithm); "
    "`gputopo parse nccl-log` does not show them",
    "published": "no format: tools' figures (nvbandwidth, p2p-bandwidth) as a profile's recorded ones, for "
    "`gputopo record`",
}


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def reached_modules(entries) -> set[str]:
    """The package's modules whose functions or classes ``entries`` call, as far as their code names them
    (globals, closures, ``module.attr``, a class's methods): an over-estimate, never an under-estimate."""
    seen, todo, found = set(), list(entries), set()
    while todo:
        obj = todo.pop()
        module = getattr(obj, "__module__", None) or ""
        if id(obj) in seen or not module.startswith("pytest_gputopo."):
            continue
        seen.add(id(obj))
        found.add(module)
        if isinstance(obj, type):
            for member in vars(obj).values():
                todo += [
                    f for f in (member, getattr(member, "fget", None), getattr(member, "__func__", None)) if callable(f)
                ]
        elif isinstance(obj, types.FunctionType):
            todo += [cell.cell_contents for cell in obj.__closure__ or () if callable(cell.cell_contents)]
            names = {name for code in _codes(obj.__code__) for name in code.co_names}
            for name in names:
                value = obj.__globals__.get(name)
                if isinstance(value, types.ModuleType):
                    todo += [getattr(value, attr) for attr in names if callable(getattr(value, attr, None))]
                elif callable(value):
                    todo.append(value)
    return found


def parse_modules() -> list[str]:
    import pytest_gputopo.parse as package

    return sorted(m.name for m in pkgutil.iter_modules(package.__path__))


def formats_unreached(modules: list[str]) -> list[str]:
    """parse/ modules neither reached from a `gputopo parse` format nor exempt, and exemptions that are
    reached (stale)."""
    reached = {
        m.rpartition(".")[2]
        for m in reached_modules(cli_parse._PARSERS.values())
        if m.startswith("pytest_gputopo.parse.")
    }
    return [m for m in modules if m not in reached and m not in PARSE_EXEMPT] + [
        f"{m} (exempt, but reached)" for m in PARSE_EXEMPT if m in reached
    ]


def test_every_parse_module_is_reached_from_gputopo_parse_or_says_why_not():
    assert formats_unreached(parse_modules()) == []
    assert set(PARSE_EXEMPT) <= set(parse_modules())


def formats_undocumented(page: str) -> list[str]:
    """`gputopo parse` formats that no ``## `gputopo parse ...``` heading of docs/cli.md names."""
    named = {
        word
        for heading in re.findall(r"^## `gputopo parse (.*?)`", page, re.M)
        for word in re.split(r"[\s|]+", heading)
    }
    return [fmt for fmt in cli_parse._PARSERS if fmt not in named]


def test_docs_cli_names_every_format():
    assert formats_undocumented((ROOT / "docs" / "cli.md").read_text(encoding="utf-8")) == []


def test_the_parse_parity_bites(monkeypatch):
    assert formats_unreached([*parse_modules(), "widget_log"]) == ["widget_log"]  # a new format, not wired
    monkeypatch.delitem(cli_parse._PARSERS, "nvbandwidth")  # a format whose `gputopo parse` entry is forgotten
    assert formats_unreached(parse_modules()) == ["nvbandwidth", "nvbandwidth_lines"]
    monkeypatch.setitem(cli_parse._PARSERS, "gpu-burn", cli_parse._PARSERS["smi-q"])  # wired, not documented
    assert formats_undocumented((ROOT / "docs" / "cli.md").read_text(encoding="utf-8")) == ["gpu-burn"]


# ---------------------------------------------------------------------------------------------
# Options and the run's settings

# One value of each kind of option, by its metavar (a choice "a|b": each is tried).
SAMPLES = {
    "NAME|PATH": ["hgx-h100"],
    "EXPR": ["p2p"],
    "LEVEL": ["full"],
    "N": ["3"],
    "BYTES": ["1M"],
    "SECONDS": ["7"],
    "HOURS": ["7"],
    "RATIO": ["0.5"],
    "GIB|measured": ["10", "measured"],
}


class IniOnly:
    """A config whose only settings are ini keys (as an ini file sets them): no option given, no variable."""

    inipath = None

    def __init__(self, ini: dict[str, str]):
        self.ini = ini

    def getoption(self, dest: str):
        return None

    def getini(self, name: str):
        return self.ini.get(name)


def options_unknown_to_settings(tmp_path: Path) -> list[str]:
    """Options whose ini key, set to a valid value, leaves ``read_run_settings`` as it was."""
    unset = run_settings.read_run_settings(IniOnly({}))
    unknown = []
    for name, opt in options.OPTIONS.items():
        if opt.metavar is None:
            values = ["true"]
        elif opt.metavar == "PATH":
            values = [str(tmp_path / f"{name}.out")]
        else:
            values = SAMPLES.get(opt.metavar) or opt.metavar.split("|")
        settings = [run_settings.read_run_settings(IniOnly({opt.ini: v})) for v in values]
        if all(s == unset for s in settings):
            unknown.append(name)
    return unknown


def ini_keys_unknown(text: str) -> list[str]:
    """``gputopo_*`` keys an ini file sets in ``text`` that are no option's."""
    known = {opt.ini for opt in options.OPTIONS.values()}
    return sorted({k for k in re.findall(r"^(gputopo_[a-z0-9_]+)\s*=", text, re.M) if k not in known})


@pytest.fixture
def no_option_variables(monkeypatch):
    for opt in options.OPTIONS.values():
        monkeypatch.delenv(opt.env, raising=False)


def test_every_ini_option_is_one_the_run_settings_know(tmp_path, no_option_variables):
    assert options_unknown_to_settings(tmp_path) == []


def test_every_ini_key_pytest_and_the_docs_show_is_an_option(pytester):
    shown = pytester.runpytest_inprocess("--help").stdout.str()
    registered = set(re.findall(r"^  (gputopo_[a-z0-9_]+) \(\w+\):", shown, re.M))  # "  name (type):"
    assert registered == {opt.ini for opt in options.OPTIONS.values()}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        assert ini_keys_unknown(doc.read_text(encoding="utf-8")) == [], doc.name


def test_the_option_parity_bites(tmp_path, monkeypatch, no_option_variables):
    assert ini_keys_unknown("[pytest]\ngputopo_strict = true\ngputopo_widget = 1\n") == ["gputopo_widget"]
    monkeypatch.setitem(options.OPTIONS, "widget", options.Option("widget", None, "a flag nothing reads"))
    monkeypatch.setitem(options.OPTIONS, "gadget", options.Option("gadget", "N", "a number nothing reads"))
    monkeypatch.setitem(options.LIMITS, "gadget", 10)
    assert options_unknown_to_settings(tmp_path) == ["widget", "gadget"]
