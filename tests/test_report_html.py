"""Issue 12.1: the self-contained HTML report (``--gputopo-html``, ``gputopo report RUN.json``): drawn
from the JSON document alone, one labelled cell per GPU pair, colour never the only signal, nothing
fetched, and rendered by a real browser without console errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from conftest import browser_render, needs_browser
from pytest_gputopo.cli import main as gputopo
from pytest_gputopo.probe import probe

DEGRADED = "hgx-h100-nvlink-down"
TESTS = ("import pytest\n"
         "@pytest.mark.requires_nvlink\ndef test_all_nvlink(): pass\n"
         "@pytest.mark.requires_gpus(2)\ndef test_two(): pass\n")


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
    result = pytester.runpytest("--gputopo-machine", DEGRADED, "--gputopo-check", "quick",
                                "--gputopo-html", "run.html", "--gputopo-json", "run.json")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1 and outcomes["skipped"] == 1  # the nvlink[GPU5] check fails; the marker skips
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


@pytest.mark.parametrize("content, says", [
    ("{", "not a gputopo JSON report: Expecting property name"),
    ('{"schema": 1, "topology": {"gpus": [{"index": 0, "name": 5}]}}', "topology.gpus[0].name: expected str"),
    ('{"schema": 1, "topology": {}, "measurements": [{"key": ["p2p", 0, 1], "gbps": "fast"}]}',
     "measurements[0].gbps: expected a number or null"),
    ('{"schema": 1, "topology": {}, "measurements": [{"key": ["p2p", 0, 1], "gbps": NaN}]}', "NaN is not a number"),
    ('{"schema": 2}', "schema: expected a gputopo JSON report (schema 1)"),
])
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
    assert any("expected 450.0 GB/s (NV18 NVLink 4.0); needed 315.0 GB/s" in attrs.get("title", "")
               for attrs, _ in copy)


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
    code = ("import sys, importlib.metadata as md\n"
            "[e for e in md.entry_points(group='pytest11') if e.name == 'gputopo'][0].load()\n"
            "print('pytest_gputopo.render.html' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


@needs_browser
def test_a_real_browser_renders_the_report_without_console_errors(degraded_run, tmp_path):
    png, dom, log = browser_render(degraded_run / "run.html", tmp_path)
    assert png > 10_000, log[-2000:]
    assert "CONSOLE" not in log and "Uncaught" not in log, log[-2000:]
    n = len(probe(DEGRADED).gpus)
    rendered = {attrs["data-pair"] for attrs, _ in cells(dom) if "data-pair" in attrs}
    assert len(rendered) == n * (n - 1) // 2  # the browser's DOM holds every pair's cell


def test_every_kind_of_copy_between_gpus_gets_its_grid(pytester):
    """A full check measures P2P copies one way and both ways at once: each kind is its own grid (a
    bidirectional figure counts both directions' bytes and is never read as a one-way copy)."""
    pytester.makepyfile(test_x="def test_a(): pass\n")
    pytester.runpytest("--gputopo-machine", "hgx-h100", "--gputopo-check", "full", "--gputopo-html", "full.html")
    page = (pytester.path / "full.html").read_text()
    assert "<h3>P2P copy, GB/s" in page and "<h3>P2P copies both ways at once (both directions' bytes), GB/s" in page
    bidir = page.split("<h3>P2P copies both ways at once")[1].split("</table>")[0]
    assert len([a for a, _ in cells(bidir) if "data-state" in a]) == 28  # every pair, once (a < b)
