"""Every value from a profile, a log, a saved report or a test id is untrusted where
it meets a browser, a terminal (and the CI runner reading it), GitHub's job summary and its workflow
commands. One escaping function per medium (``render.escape``), each property-tested over arbitrary
strings, and each place that writes a medium shown using it with a crafted input."""

from __future__ import annotations

import dataclasses
import json
import re
from html.parser import HTMLParser
from pathlib import Path

from hypothesis import example, given, settings, strategies as st
from markdown_it import MarkdownIt

from pytest_gputopo.cli import main as gputopo
from pytest_gputopo.core.run_verdict import decide
from pytest_gputopo.probe import probe
from pytest_gputopo.render import escape, markdown, report
from pytest_gputopo.render.html import html_report

MACHINES = Path(__file__).parent.parent / "pytest_gputopo" / "machines"
HOSTILE = [
    "x\n::add-mask::y",
    "x\r\n::error::pwn",
    "<script>alert(1)</script>",
    'x" onerror="alert(1)',
    "<!-- hidden",
    "`code` | pipe",
    "# heading",
    "- item",
    "> quote",
    "1. list",
    "\x1b[2J\x85\u2028\u202e",
    "&amp; &lt;",
    "\\|",
    "  lead",
    "trail  ",
    "www.example.com http://x.y a@b.c",
    "~~s~~ **b** _i_ $m$",
    "",
    " ",
    "\t",
    "\x00",
    "\ud800",
]
# Every string field a profile, a log or a test id can carry: any code point, surrogates included.
ANY = st.text(st.characters(blacklist_categories=()), max_size=60) | st.sampled_from(HOSTILE)
C0_C1 = re.compile("[\x00-\x1f\x7f-\x9f]")
OUTCOME_ATTACK = 'x" onerror="alert(1)'


# ---------------------------------------------------------------------------------------------
# Terminal lines


@given(ANY)
@settings(max_examples=400)
def test_a_terminal_line_holds_no_control_character(text):
    shown = escape.terminal(text)
    assert not C0_C1.search(shown) and shown.isprintable()
    assert escape.terminal(shown) == shown  # what is printable stays as it is
    if text.isprintable():
        assert shown == text
    # Visible and unambiguous enough to read back: Python's own escapes of each refused character.
    assert "\n" not in shown and ("\\n" in shown) == ("\n" in text or "\\n" in text)


def _hostile_profile(tmp_path: Path) -> Path:
    doc = json.loads((MACHINES / "4x-rtx4090.json").read_text())
    doc["name"] = "x\n::add-mask::y"
    doc["topology"]["gpus"][0]["name"] = "RTX\r\n::error::pwn\x1b[2J"
    doc["topology"]["warnings"] = ["w\n::warning::z\x85"]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    return path


def _no_command_line(text: str) -> None:
    for line in text.splitlines():
        assert not line.lstrip().startswith("::"), line  # no line the runner would act on
        assert not C0_C1.search(line) and "\u2028" not in line, repr(line)


def test_gputopo_show_prints_a_hostile_profile_one_line_per_line(tmp_path, capsys):
    assert gputopo(["show", "--machine", str(_hostile_profile(tmp_path))]) == 0
    out = capsys.readouterr().out
    _no_command_line(out)
    assert "recorded:x\\n::add-mask::y (a recorded machine" in out  # escaped visibly, not dropped
    assert "RTX\\r\\n::error::pwn\\x1b[2J" in out


def test_warnings_and_problems_are_escaped_in_every_report_line(tmp_path):
    topology = dataclasses.replace(
        probe(str(_hostile_profile(tmp_path))), warnings=("w\n::warning::z\x85",), nics=("mlx5\n::stop-commands::x",)
    )
    lines = report.full_report(topology)
    _no_command_line("\n".join(lines))
    assert "warning: w\\n::warning::z\\x85" in lines
    empty = dataclasses.replace(topology, gpus=(), links=(), problem="none\n::add-mask::p")
    _no_command_line(report.header_line(empty))


def test_the_header_and_the_unmet_line_of_a_run_escape_a_hostile_profile(pytester, tmp_path):
    pytester.makepyfile(test_x="import pytest\n@pytest.mark.requires_nvlink\ndef test_nv(): pass\n")
    for verbose in ((), ("-v",)):
        result = pytester.runpytest("--gputopo-machine", str(_hostile_profile(tmp_path)), "-rs", *verbose)
        result.assert_outcomes(skipped=1)
        _no_command_line(result.stdout.str())
        assert "x\\n::add-mask::y" in result.stdout.str()


def test_a_skip_reason_naming_a_hostile_gpu_name_is_one_line(pytester, tmp_path):
    """A requirement's reason names GPUs by their profile's names: the skip (and the strict failure,
    and a run gate's problem line) writes it escaped, so "-rs" prints no line a CI runner acts on."""
    pytester.makepyfile(test_x="import pytest\n@pytest.mark.requires_gpus(model='A100')\ndef test_a(): pass\n")
    for extra in ((), ("--gputopo-strict",)):
        result = pytester.runpytest("--gputopo-machine", str(_hostile_profile(tmp_path)), "-rsf", *extra)
        _no_command_line(result.stdout.str())
        assert "RTX\\r\\n::error::pwn\\x1b[2J" in result.stdout.str()
    gate = pytester.runpytest("--gputopo-machine", str(_hostile_profile(tmp_path)), "--gputopo-require", "gpus>=8")
    _no_command_line(gate.stdout.str())


def test_gputopo_report_says_what_it_wrote_on_one_line(tmp_path, capsys):
    topology = probe(str(_hostile_profile(tmp_path)))
    (tmp_path / "run.json").write_text(json.dumps(report.machine_document(topology)))
    assert gputopo(["report", str(tmp_path / "run.json"), "-o", str(tmp_path / "run.html")]) == 0
    out = capsys.readouterr().out
    _no_command_line(out)
    assert out.startswith("wrote ") and "x\\n::add-mask::y" in out


# ---------------------------------------------------------------------------------------------
# HTML text and attributes


class _Parsed(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.data = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, attrs))

    def handle_data(self, data):
        self.data.append(data)

    def handle_comment(self, data):
        self.tags.append(("<!--", data))


def _parse(page: str) -> _Parsed:
    parser = _Parsed()
    parser.feed(page)
    parser.close()
    return parser


@given(ANY)
@settings(max_examples=400)
@example("<img src=x onerror=alert(1)>")
def test_html_text_reads_back_as_itself_with_no_tag(text):
    parsed = _parse(f"<p>{escape.html_text(text)}</p>")
    assert [tag for tag, _ in parsed.tags] == ["p"]
    assert "".join(parsed.data) == text


@given(ANY, ANY)
@settings(max_examples=400)
@example(OUTCOME_ATTACK, "' onmouseover='x")
def test_an_html_attribute_reads_back_as_itself_with_no_attribute_added(first, second):
    parsed = _parse(f"<td class=\"{escape.html_attribute(first)}\" title='{escape.html_attribute(second)}'>x</td>")
    assert parsed.tags == [("td", [("class", first), ("title", second)])]


def _run_document(topology, outcome: str, text: str) -> dict:
    return {
        **report.machine_document(topology),
        "measurements": [],
        "complete": True,
        "checks": [{"check": text, "outcome": outcome, "message": text}],
        "unmet": [{"test": text, "outcome": outcome, "requirement": text, "reason": text}],
        "nccl": None,
    }


def test_a_crafted_run_json_draws_no_script_and_no_attribute(tmp_path, capsys):
    """20.2: ``checks[].outcome`` and ``unmet[].outcome`` went into class="..." as they were."""
    topology = probe(str(_hostile_profile(tmp_path)))
    doc = _run_document(topology, OUTCOME_ATTACK, "<script>alert(1)</script>")
    (tmp_path / "run.json").write_text(json.dumps(doc))
    assert gputopo(["report", str(tmp_path / "run.json"), "-o", str(tmp_path / "run.html")]) == 0, (
        capsys.readouterr().err
    )
    page = (tmp_path / "run.html").read_text()
    parsed = _parse(page)
    assert "script" not in {tag for tag, _ in parsed.tags}
    for tag, attrs in parsed.tags:
        for name, value in attrs if isinstance(attrs, list) else ():
            assert not name.startswith("on"), (tag, name, value)
            if name == "class":
                assert value in {
                    "passed",
                    "failed",
                    "skipped",
                    "error",
                    "unknown",
                    "text",
                    "origin",
                    "legend",
                    "matrix",
                    "nv",
                    "pix",
                    "pxb",
                    "phb",
                    "node",
                    "sys",
                    "ok",
                    "refused",
                    "above",
                    "met",
                    "below",
                    "broken",
                    "absent",
                    "self",
                    "differs",
                }, value
    text = "".join(parsed.data)
    assert "<script>alert(1)</script>" in text and OUTCOME_ATTACK.upper() in text  # shown, as text
    assert "x\\n::add-mask::y" in text and "RTX\\r\\n::error::pwn" in text


@given(ANY, ANY)
@settings(max_examples=60, deadline=None)
@example(OUTCOME_ATTACK, "<script>alert(1)</script>")
@example("' onload='x", "<!-- a")
def test_every_string_of_a_document_stays_text_in_the_report(outcome, text):
    topology = probe("4x-rtx4090")
    parsed = _parse(html_report(_run_document(topology, outcome, text)))
    assert "script" not in {tag for tag, _ in parsed.tags}
    assert all(not name.startswith("on") for _, attrs in parsed.tags if isinstance(attrs, list) for name, _ in attrs)
    assert {tag for tag, _ in parsed.tags} - {"!--"} <= {
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "h1",
        "h2",
        "h3",
        "p",
        "span",
        "section",
        "table",
        "tr",
        "th",
        "td",
        "b",
        "br",
        "small",
    }


# ---------------------------------------------------------------------------------------------
# Markdown (GitHub's job summary)

MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _inline_text(token) -> str:
    assert {c.type for c in token.children} <= {"text"}, [(c.type, c.content) for c in token.children]
    return "".join(c.content for c in token.children)


@given(ANY)
@settings(max_examples=400)
def test_a_markdown_cell_is_one_cell_of_plain_text(text):
    tokens = MD.parse(f"| a | b | c |\n|---|---|---|\n| x | {escape.markdown(text)} | y |\n| z | z | z |\n")
    assert not [t for t in tokens if t.type.startswith("html")]
    cells = [t for t in tokens if t.type == "td_open"]
    assert len(cells) == 6 and sum(t.type == "tr_open" for t in tokens) == 3  # no row split, none added
    inline = [t for t in tokens if t.type == "inline"]
    assert [_inline_text(t) for t in inline][3:6] == ["x", escape.terminal(text), "y"]


@given(ANY)
@settings(max_examples=400)
def test_markdown_text_opens_no_block_and_reads_as_itself(text):
    for page in (f"{escape.markdown(text)}\n", f"- {escape.markdown(text)}\n", f"**a** {escape.markdown(text)}\n"):
        tokens = MD.parse(page)
        assert not [t for t in tokens if t.type.startswith("html")], page
        blocks = {t.type for t in tokens if t.block and t.type != "inline"}
        assert blocks <= {
            "paragraph_open",
            "paragraph_close",
            "bullet_list_open",
            "bullet_list_close",
            "list_item_open",
            "list_item_close",
        }, (page, blocks)
        inline = [t for t in tokens if t.type == "inline"]
        if page.startswith("**a**"):
            assert len(inline) == 1 and inline[0].children[-1].content.endswith(escape.terminal(text))
        elif escape.terminal(text):
            assert [_inline_text(t) for t in inline] == [escape.terminal(text)], page


def test_a_summary_cell_cannot_split_a_row_hide_the_rest_or_open_a_code_span(tmp_path):
    """20.4: _cell() escaped only ``|`` and ``\\n``: a CR split the row, ``<!--`` hid the rest."""
    topology = probe("4x-rtx4090")
    bad = "a\rb | <!-- c `d` <b>e</b> &amp;"
    doc = {**_run_document(topology, "skipped", bad), "measurements": []}
    doc["checks"][0]["outcome"] = "failed"
    gate = [{"cause": bad, "headline": bad, "evidence": [bad]}]
    doc["verdict"] = decide(doc["checks"], doc["unmet"], gate, [], None, complete=True).document()
    text = markdown.summary(doc)
    assert "\r" not in text and "<!--" not in text and "`" not in text.replace("\\`", "")
    tokens = MD.parse(text)
    assert not [
        t
        for t in tokens
        if t.type == "html_inline"
        or (
            t.type == "html_block"
            and t.content.strip() not in ("<details><summary>Link classes</summary>", "</details>")
        )
    ]
    rows = [t for t in tokens if t.type == "tr_open"]
    unmet_table = text.split("**Tests not run for unmet requirements:**")[1].split("\n\n")[1]
    assert len(unmet_table.splitlines()) == 3  # the head, the rule, one row
    assert all(
        _inline_text(t) in (escape.terminal(bad), "SKIPPED", "skipped")
        for t in tokens
        if t.type == "inline" and "a\\rb" in t.content
    )
    assert rows


# ---------------------------------------------------------------------------------------------
# GitHub workflow commands


def _unescape(text: str, prop: bool) -> str:
    """The runner's reading (actions/runner ActionCommand): each %XX of the escaping, in one pass."""
    codes = {"%25": "%", "%0D": "\r", "%0A": "\n"} | ({"%3A": ":", "%2C": ","} if prop else {})
    return re.sub("|".join(codes), lambda m: codes[m.group()], text)


@given(ANY, ANY)
@settings(max_examples=400)
@example("p2p[GPU0,GPU1]: x", "50% of\nexpected\r\n::add-mask::y")
def test_an_annotation_is_one_command_that_reads_back_as_written(title, message):
    line = markdown.annotation(title, message)
    assert "\n" not in line and "\r" not in line
    head, sep, data = line.partition("::")[2].partition("::")
    assert sep and head.startswith("error title=")
    prop = head.removeprefix("error title=")
    assert ":" not in prop and "," not in prop  # the property ends where the runner ends it
    assert _unescape(prop, True) == title and _unescape(data, False) == message
    assert escape.workflow_property(title) == prop and escape.workflow_data(message) == data
