"""The self-contained HTML report (``--gputopo-html``, ``gputopo report RUN.json``): drawn
from the JSON document alone, one labelled cell per GPU pair, colour never the only signal, nothing
fetched, and rendered by a real browser without console errors."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from conftest import browser_render, needs_browser
from pytest_gputopo.cli import main as gputopo
from pytest_gputopo.core.run_verdict import decide
from pytest_gputopo.probe import probe
from pytest_gputopo.render.html import html_report

DEGRADED = "hgx-h100-nvlink-down"
TESTS = (
    "import pytest\n"
    "@pytest.mark.requires_nvlink\ndef test_all_nvlink(): pass\n"
    "@pytest.mark.requires_gpus(2)\ndef test_two(): pass\n"
)


class Cells(HTMLParser):
    """Every table cell: its attributes and its text."""

    def __init__(self):
        super().__init__()
        self.cells, self._open = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "td":
            self._open = (dict(attrs), [])
        if tag in ("script", "img", "link", "iframe", "object", "embed"):
            raise AssertionError(f"<{tag}> in a report that must fetch nothing")

    def handle_data(self, data):
        if self._open is not None:
            self._open[1].append(data)

    def handle_endtag(self, tag):
        if tag == "td" and self._open is not None:
            self.cells.append((self._open[0], "".join(self._open[1]).strip()))
            self._open = None


def cells(text: str) -> list:
    parser = Cells()
    parser.feed(text)
    return parser.cells


@pytest.fixture
def degraded_run(pytester):
    pytester.makepyfile(test_x=TESTS)
    result = pytester.runpytest(
        "--gputopo-machine",
        DEGRADED,
        "--gputopo-check",
        "quick",
        "--gputopo-html",
        "run.html",
        "--gputopo-json",
        "run.json",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    doc = json.loads((pytester.path / "run.json").read_text())  # the nvlink[GPU5] check fails; the marker skips
    assert [c["check"] for c in doc["checks"] if c["outcome"] == "failed"] == ["nvlink[GPU5]"]
    assert [u["outcome"] for u in doc["unmet"]] == ["skipped"]
    return pytester.path


def test_the_report_of_a_degraded_machine_labels_every_pair(degraded_run):
    text = (degraded_run / "run.html").read_text()
    found = cells(text)
    topology = probe(DEGRADED)
    pairs = {attrs["data-pair"]: label for attrs, label in found if "data-pair" in attrs}
    assert pairs == {f"{ln.a}-{ln.b}": str(ln.label) for ln in topology.pairs()}  # one label per pair
    assert {label for attrs, label in found if attrs.get("data-pair") == "0-5"} == {"SYS"}
    assert {attrs["class"] for attrs, label in found if label == "SYS"} == {"sys"}  # colour and label agree
    assert "http" not in text.lower() and "url(" not in text and "@import" not in text  # nothing fetched
    assert "recorded:hgx-h100-nvlink-down (a recorded machine, not this host)" in text
    assert "test_x.py::test_all_nvlink" in text and "requires_nvlink" in text  # the unmet requirement
    assert "nvlink[GPU5]" in text and "FAILED" in text  # the failed check, in words beside its colour
    assert "0/18" in text  # GPU5's NVLinks


def test_gputopo_report_draws_the_same_file_from_the_saved_json(degraded_run, capsys):
    assert gputopo(["report", str(degraded_run / "run.json"), "-o", str(degraded_run / "again.html")]) == 0
    assert (degraded_run / "again.html").read_text() == (degraded_run / "run.html").read_text()
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content, says",
    [
        ("{", "not a gputopo JSON report: Expecting property name"),
        ('{"schema": 1, "topology": {"gpus": [{"index": 0, "name": 5}]}}', "topology.gpus[0].name: expected str"),
        (
            '{"schema": 1, "topology": {}, "measurements": [{"key": ["p2p", 0, 1], "gbps": "fast"}]}',
            "measurements[0].gbps: expected a number or null",
        ),
        ('{"schema": 1, "topology": {}, "measurements": [{"key": ["p2p", 0, 1], "gbps": NaN}]}', "NaN is not a number"),
        ('{"schema": 2}', "schema: expected a gputopo JSON report (schema 1)"),
    ],
)
def test_a_report_that_cannot_be_drawn_names_the_field(tmp_path, capsys, content, says):
    (tmp_path / "run.json").write_text(content)
    assert gputopo(["report", str(tmp_path / "run.json"), "-o", str(tmp_path / "out.html")]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "out.html").exists()


def test_measured_bandwidth_is_drawn_against_what_the_link_should_give(pytester):
    pytester.makepyfile(test_x="def test_a(): pass\n")
    pytester.runpytest("--gputopo-machine", "hgx-h100", "--gputopo-check", "full", "--gputopo-html", "full.html")
    found = cells((pytester.path / "full.html").read_text())
    copy = [(attrs, text) for attrs, text in found if attrs.get("data-state") and "recorded" in text]
    assert {attrs["data-state"] for attrs, text in copy if text.startswith("364")} == {"met"}
    assert "364 / 450 = 0.81recorded" in [text for _, text in copy]  # figure, expectation, ratio, origin
    assert any(
        "expected 450.0 GB/s (NV18 NVLink 4.0); needed 315.0 GB/s" in attrs.get("title", "") for attrs, _ in copy
    )


def test_the_html_option_has_ini_and_env_surfaces_and_a_bad_path_stops_at_start(pytester, monkeypatch):
    pytester.makepyfile(test_x="def test_a(): pass\n")
    pytester.makeini("[pytest]\ngputopo_html = ini.html\n")
    pytester.runpytest("--gputopo-machine", "dgx-a100").assert_outcomes(passed=1)
    assert (pytester.path / "ini.html").exists()
    monkeypatch.setenv("PYTEST_GPUTOPO_HTML", "env.html")  # env beats ini
    pytester.runpytest("--gputopo-machine", "dgx-a100").assert_outcomes(passed=1)
    assert (pytester.path / "env.html").exists()
    result = pytester.runpytest("--gputopo-machine", "dgx-a100", "--gputopo-html", "no/such/folder/r.html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gputopo-html: cannot write no/such/folder/r.html: no folder*"])


def test_loading_the_plugin_does_not_load_the_report():
    code = (
        "import sys, importlib.metadata as md\n"
        "[e for e in md.entry_points(group='pytest11') if e.name == 'gputopo'][0].load()\n"
        "print('pytest_gputopo.render.html' in sys.modules)"
    )
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )


@needs_browser
@pytest.mark.slow
def test_a_real_browser_renders_the_report_without_console_errors(degraded_run, tmp_path):
    png, dom, log = browser_render(degraded_run / "run.html", tmp_path)
    assert png > 10_000, log[-2000:]
    assert "CONSOLE" not in log and "Uncaught" not in log, log[-2000:]
    n = len(probe(DEGRADED).gpus)
    rendered = {attrs["data-pair"] for attrs, _ in cells(dom) if "data-pair" in attrs}
    assert len(rendered) == n * (n - 1) // 2  # the browser's DOM holds every pair's cell


def test_every_kind_of_copy_between_gpus_gets_its_grid(pytester):
    """A full check measures P2P copies one way and both ways at once: each kind with figures is its own
    grid (a bidirectional figure counts both directions' bytes and is never read as a one-way copy)."""
    pytester.makepyfile(test_x="def test_a(): pass\n")
    pytester.runpytest("--gputopo-machine", "hgx-h100", "--gputopo-check", "full", "--gputopo-json", "full.json")
    doc = json.loads((pytester.path / "full.json").read_text())
    for m in doc["measurements"]:  # as a node measured here has them: a figure for both ways at once too
        if m["key"][0] == "p2p_bidir":
            m.update(gbps=700.0, origin="measured", error=None)
    page = html_report(doc)
    assert "<h3>P2P copy, GB/s" in page and "<h3>P2P copies both ways at once (both directions' bytes), GB/s" in page
    bidir = page.split("<h3>P2P copies both ways at once")[1].split("</table>")[0]
    assert len([a for a, _ in cells(bidir) if "data-state" in a]) == 28  # every pair, once (a < b)


def test_a_cell_shows_the_state_the_document_holds_and_judges_nothing_itself():
    """The HTML reads each figure's ``state`` (the run's verdict): a P2P copy above its threshold but
    slower than staging is ``staged`` as the marker said, and a figure without a state (a document
    of an older version) is unknown, never judged again from its threshold."""
    from pytest_gputopo.core.schema import to_dict

    expected = {"gbps": 450.0, "basis": "NV18", "floor": 0.7, "needed_gbps": 315.0}
    copies = [
        {
            "key": ["p2p", 0, b],
            "what": f"GPU0->GPU{b} copy, P2P",
            "gbps": 400.0,
            "origin": "measured",
            "expected": expected,
            **state,
        }
        for b, state in ((1, {"state": "staged", "staged_gbps": 420.0}), (2, {"state": "met"}), (3, {}))
    ]
    page = html_report({"schema": 1, "topology": to_dict(probe("hgx-h100")), "measurements": copies})
    shown = {a["title"].split(";")[0]: a["data-state"] for a, _ in cells(page) if "data-state" in a}
    assert [shown[f"GPU0->GPU{b} copy, P2P"] for b in (1, 2, 3)] == ["staged", "met", "unknown"]
    assert "staged through the host: 420.00 GB/s" in page


# ---------------------------------------------------------------------------------------------
# The report opens on the verdict: what failed, where, against what; then the evidence

# The test's own probe, added to a copy of the report (the report itself holds no script): the text
# a reader sees without scrolling, in the browser's layout of a 1400x900 window.
FIRST_SCREEN = """<script>
(function () {
  var seen = [], walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    var node = walk.currentNode, range = document.createRange();
    if (!node.data.trim()) continue;
    range.selectNodeContents(node);
    var box = range.getBoundingClientRect();
    if (box.width > 0 && box.height > 0 && box.top < window.innerHeight && box.bottom > 0) seen.push(node.data.trim());
  }
  var out = document.createElement("pre");
  out.id = "first-screen";
  out.setAttribute("data-viewport", window.innerWidth + "x" + window.innerHeight);
  out.textContent = seen.join("\\n");
  document.body.appendChild(out);
})();
</script>"""


def first_screen(page, tmp_path) -> str:
    """The text on the first screen of ``page`` in chromium at 1400x900 (checked to be laid out 1400 wide)."""
    import html
    import re

    probe_page = tmp_path / "first-screen.html"
    probe_page.write_text(page.read_text().replace("</body>", FIRST_SCREEN + "</body>"))
    _, dom, log = browser_render(probe_page, tmp_path, size="1400,900")
    found = re.search(r'<pre id="first-screen" data-viewport="(\d+)x(\d+)">(.*?)</pre>', dom, re.S)
    assert found, log[-2000:]
    assert found[1] == "1400" and 500 <= int(found[2]) <= 900, found.groups()[:2]
    return html.unescape(found[3])


# The report and the JSON of each run _run made in this process, by machine and options: several tests
# read different things of the same run (a full check of an 8-GPU machine takes seconds of CPU), and a
# run of TESTS on a recorded machine gives the same documents each time.
_RUNS: dict[tuple, tuple[str, str]] = {}


def _run(pytester, machine, *args) -> str:
    """The HTML report of TESTS run on ``machine`` with ``args``; it and the JSON are in the test's
    folder (run.html, run.json), as the run wrote them."""
    key = (machine, *args)
    if key not in _RUNS:
        pytester.makepyfile(test_x=TESTS)
        pytester.runpytest(
            "--gputopo-machine", machine, "--gputopo-html", "run.html", "--gputopo-json", "run.json", *args
        )
        _RUNS[key] = ((pytester.path / "run.html").read_text(), (pytester.path / "run.json").read_text())
    page, doc = _RUNS[key]
    (pytester.path / "run.html").write_text(page)
    (pytester.path / "run.json").write_text(doc)
    return page


@needs_browser
@pytest.mark.parametrize(
    "args, says",
    [
        (["--gputopo-check", "quick"], ["check nvlink", "GPU5", "0/18 up"]),
        (["--gputopo-check", "full"], ["check nvlink", "GPU5", "0/18 up", "Not judged: 109 checks"]),
        (
            ["--gputopo-require", "gpus>=8,p2p,link>=NV12"],
            ["run gate", "GPU5", "all 7 of its pairs fail requires_link('NV12')"],
        ),
    ],
    ids=["check-quick", "check-full", "run-gate"],
)
@pytest.mark.slow
def test_the_first_screen_says_what_failed_and_where(pytester, tmp_path, args, says):
    """Someone opening the report of a degraded node sees, without scrolling, that the run failed,
    which check or gate term failed, on which GPU or pair, and what was found."""
    _run(pytester, DEGRADED, *args)
    seen = first_screen(pytester.path / "run.html", tmp_path)
    assert seen.startswith("FAILED"), seen[:300]
    for words in says:
        assert words in seen, (words, seen)


@needs_browser
@pytest.mark.parametrize(
    "machine, says",
    [
        ("dgx-a100", ["PASSED", "154 health checks: 118 passed, 36 not judged"]),
        (
            "8x-l40s",
            ["PASSED", "requires_nvlink", "test_x.py::test_all_nvlink", "GPU0-GPU1 are linked by PIX, not NVLink"],
        ),
    ],
)
@pytest.mark.slow
def test_the_first_screen_of_a_passing_run_says_so_and_what_was_not_run(pytester, tmp_path, machine, says):
    _run(pytester, machine, "--gputopo-check", "full")
    seen = first_screen(pytester.path / "run.html", tmp_path)
    assert seen.startswith("PASSED") and "FAILED" not in seen, seen[:500]
    for words in says:
        assert words in seen, (words, seen)


def test_the_title_and_banner_carry_the_verdict(pytester):
    """A browser tab, a bookmark or an artifact list shows FAILED and the first cause."""
    page = _run(pytester, DEGRADED, "--gputopo-check", "quick")
    assert "<title>FAILED: check nvlink GPU5 - gputopo report: recorded:hgx-h100-nvlink-down" in page
    banner = page.split('<section id="verdict" class="failed">')[1].split("</section>")[0]
    assert [text for _, text in cells(banner)][:4] == [
        "FAILED",
        "check nvlink",
        "GPU5",
        "GPU5: NVLinks [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17] are down (0/18 up)",
    ]
    assert page.index('id="verdict"') < page.index("<h2>Checks</h2>") < page.index("<h2>Machine</h2>")


def test_a_run_stopped_by_its_gate_is_failed_and_claims_nothing_of_its_tests(pytester):
    """A gate that stops the run leaves a report: FAILED, the gate's causes (GPU5, not its seven pairs)
    with their evidence in the document, and no "every requirement met"."""
    page = _run(pytester, DEGRADED, "--gputopo-require", "gpus>=8,p2p,link>=NV12")
    doc = json.loads((pytester.path / "run.json").read_text())
    assert doc["gate"][0] == "requires_link('NV12'): GPU0-GPU5 are linked by SYS"
    assert [(c["cause"], len(c["evidence"])) for c in doc["gate_causes"]] == [("GPU5", 7)]
    assert "<title>FAILED: run gate GPU5 - gputopo report" in page
    assert "the run gate stopped the run (1 cause)" in page
    assert "Every selected test" not in page and "No test ran: the run gate stopped the run" in page
    # A record without the gate's causes shows each unmet term.
    older = html_report({**doc, "verdict": decide([], [], [], doc["gate"], None, complete=True).document()})
    assert "<title>FAILED: run gate requires_link(&#x27;NV12&#x27;) GPU0-GPU5 and 6 more" in older


def test_a_passing_run_is_passed_and_an_unfinished_one_incomplete(pytester):
    page = _run(pytester, "dgx-a100")
    assert "<title>PASSED - gputopo report: recorded:dgx-a100" in page
    doc = json.loads((pytester.path / "run.json").read_text())
    verdict = decide(doc["checks"], doc["unmet"], [], [], None, complete=False)  # a run not finished
    unfinished = html_report({**doc, "complete": False, "verdict": verdict.document()})
    assert "<title>INCOMPLETE - gputopo report" in unfinished and "every" not in unfinished.lower()


def test_checks_and_unmet_requirements_are_listed_failures_first(pytester):
    """The one failed check of 154 is the table's first row; checks skipped for one reason are one row."""
    page = _run(pytester, DEGRADED, "--gputopo-check", "full", "--gputopo-strict")
    table = page.split("<h2>Checks</h2>")[1].split("</table>")[0]
    rows = [text for _, text in cells(table)]
    assert rows[:2] == ["nvlink[GPU5]", "FAILED"]
    assert rows[4] == "SKIPPED x109" and rows.count("SKIPPED x109") == 1
    assert page.count("none published for recorded:hgx-h100-nvlink-down") == 3  # banner, checks, bandwidth: once each
    unmet = page.split("<h2>Unmet requirements</h2>")[1].split("</table>")[0]
    assert [text for _, text in cells(unmet)][1] == "FAILED"  # strict: the unmet requirement fails


@pytest.mark.slow
def test_a_grid_is_drawn_only_where_it_has_figures_and_the_others_are_said_once(pytester):
    """A recorded machine without published figures: no grid of empty cells, and one line saying why;
    a figure's origin is written only under a figure."""
    page = _run(pytester, DEGRADED, "--gputopo-check", "full")
    bandwidth = page.split("<h2>Bandwidth: measured, cached or recorded</h2>")[1].split("</section>")[0]
    assert "<table" not in bandwidth and "<h3>" not in bandwidth
    assert bandwidth.count("<p>No figure for ") == 1
    assert (
        "No figure for 56 P2P copies, 28 P2P copies both ways at once, 16 host -&gt; device copies, "
        "8 device -&gt; host copies, 1 all-reduce: none published for recorded:hgx-h100-nvlink-down"
    ) in bandwidth
    page = _run(pytester, "dgx-a100", "--gputopo-check", "full")
    bandwidth = page.split("<h2>Bandwidth: measured, cached or recorded</h2>")[1].split("</section>")[0]
    assert "<h3>P2P copy, GB/s" in bandwidth and "both ways at once (both" not in bandwidth
    assert "staged through the host, P2P off" not in bandwidth
    assert not [text for _, text in cells(bandwidth) if text.startswith("—") and "recorded" in text]


def test_nvlinks_down_and_a_pcie_link_trained_down_are_coloured_and_said(pytester):
    page = _run(pytester, DEGRADED)
    gpus = page.split("<h2>Machine</h2>")[1].split("</table>")[0]
    assert [(a.get("class"), t) for a, t in cells(gpus) if "/18" in t] == [(None, "18/18")] * 5 + [
        ("failed", "0/18 down")
    ] + [(None, "18/18")] * 2
    page = _run(pytester, "hgx-h100-pcie-x8")
    gpus = page.split("<h2>Machine</h2>")[1].split("</table>")[0]
    assert [t for a, t in cells(gpus) if a.get("class") == "failed"] == ["Gen3 x8 (max Gen5 x16), trained down"]
    page = _run(pytester, "hgx-h100")
    assert not [
        t for a, t in cells(page.split("<h2>Machine</h2>")[1].split("</table>")[0]) if a.get("class") == "failed"
    ]


def test_the_first_screen_docs_report_md_shows_is_the_one_drawn(pytester):
    """docs/report.md shows the first screen of a degraded machine's report: each piece of it is on the
    page, in that order (the table's columns are written apart by two spaces or more)."""
    import html
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "report.md").read_text()
    shown = doc.split("opens, in a 1400×900 window, on:\n\n```\n")[1].split("```")[0]
    page = _run(pytester, DEGRADED, "--gputopo-check", "full")
    banner = page.split('<section id="verdict"')[1].split("</section>")[0]
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", banner)))
    at = 0
    for piece in (p for line in shown.splitlines() for p in re.split(r"\s{2,}", line.strip()) if p):
        assert piece in text[at:], (piece, text[at : at + 300])
        at = text.index(piece, at) + len(piece)
