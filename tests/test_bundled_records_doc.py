"""docs/profile-format.md's table of what each bundled machine records (versions, multicast,
recorded figures) is the profiles' own: a row per bundled machine, each cell what the profile holds,
"—" where it holds no version, "none" where it holds no figure; and a degraded twin carries none of its
healthy machine's figures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_gputopo.probe.recorded import bundled_names, load_profile

DOC = Path(__file__).resolve().parent.parent / "docs" / "profile-format.md"
TITLE = "### Versions and figures each bundled machine records"
UNKNOWN = "—"
NONE = "none"  # no public figure of such a machine was found


def _rows() -> dict[str, list[str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(TITLE) :]
    rows = {}
    for line in section.splitlines()[1:]:
        if line.startswith("#"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 7:
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_the_table_has_one_row_per_bundled_machine():
    assert sorted(_rows()) == sorted(bundled_names())


@pytest.mark.parametrize("name", bundled_names())
def test_a_row_says_what_the_profile_records(name):
    driver, cuda, runtime, nccl, multicast, figures = _rows()[name]
    t = load_profile(name).topology
    for cell, value in (
        (driver, t.driver_version),
        (cuda, t.cuda_driver_version),
        (runtime, t.cuda_runtime_version),
        (nccl, t.nccl_version),
    ):
        assert cell == (value or UNKNOWN), (name, cell, value)
    flags = {g.multicast for g in t.gpus}
    if flags <= {None}:
        assert multicast == UNKNOWN
    else:
        assert multicast.startswith("yes" if True in flags else "no"), (name, multicast)
        assert ("unknown" in multicast) == (None in flags), (name, multicast)
    if not t.published:
        assert figures == NONE, (name, figures)
    for fig in t.published:
        assert f"`{fig['kind']}`" in figures, (name, fig)
        assert re.search(rf"\b{re.escape(str(fig['gbps']))}\b", figures), (name, fig)


@pytest.mark.parametrize("twin", ["hgx-h100-nvlink-down", "hgx-h100-pcie-x8", "8x-l40s-p2p-disabled"])
def test_a_degraded_twin_carries_no_figure_of_its_healthy_machine(twin):
    """A published figure is of the machine its source measured: no public output measures these
    degraded states, so the twin's bandwidth markers skip rather than pass on the healthy twin's."""
    assert load_profile(twin).topology.published == ()


@pytest.mark.parametrize("name", bundled_names())
def test_every_recorded_figure_names_its_publication(name):
    for fig in load_profile(name).topology.published:
        # a URL, a GitHub issue, or a public file of the code-search index whose repository was not
        # recorded, by its id (scripts/build_machines.py's citation forms)
        assert re.search(r"https://|github\.com|#\d+|find_string id \d+", fig["source"]), fig
