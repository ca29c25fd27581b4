"""The CI summary: Markdown for GitHub's job summary (``GITHUB_STEP_SUMMARY``), drawn from the
``--gputopo-json`` document as the HTML report is, and GitHub's error annotations
(``::error title=...::message`` workflow commands) for a failed run gate or check."""

from ..core import schema
from ..core.model import Topology
from .escape import markdown, workflow_data, workflow_property
from .report import header_line, source_text
from .verdict import failed_causes, floorless, no_figures, verdict

EVIDENCE_LINES = 8  # a cause's findings shown under it in the summary and its annotation, then how many more


def _cell(text) -> str:
    """A value from data in a table cell or running text: GitHub-flavoured Markdown's escaping whole
    (``escape.markdown``): no row split, comment, raw HTML, code span, link or block opened."""
    return markdown(text)


def _table(head: list[str], rows: list[list], row_heads: bool = False) -> list[str]:
    """A table of values from data, each escaped (``_cell``); the head is ours; ``row_heads``: each
    row's first cell in bold."""

    def first(c):
        return f"**{_cell(c)}**" if row_heads else _cell(c)

    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
        "| " + " | ".join([first(row[0])] + [_cell(c) for c in row[1:]]) + " |" for row in rows
    ]


def _matrix(topology: Topology) -> list[str]:
    n = len(topology.gpus)
    rows = [
        [f"GPU{a}"] + ["X" if a == b else str(topology.link(a, b).label or "?") for b in range(n)] for a in range(n)
    ]
    return _table([""] + [f"GPU{b}" for b in range(n)], rows, row_heads=True)


def _figures(doc: dict) -> list[str]:
    """A row per figure, with its origin (measured, cached, recorded); then the measurements without a
    figure, each reason once with what it left without one: no row and no origin where nothing was had."""
    rows = []
    for m in doc.get("measurements") or []:
        if m.get("gbps") is None:
            continue
        exp = m.get("expected") or {}
        expected = "?" if exp.get("gbps") is None else f"{exp['gbps']:.3g}"
        needed = "?" if exp.get("needed_gbps") is None else f"{exp['needed_gbps']:.3g}"
        if floorless(m) and m.get("state") is None:  # the staged twin: nothing to reach, never judged
            expected, needed = "—", "none (the host path P2P must beat)"
        rows.append(
            [m.get("what", ""), f"{m['gbps']:.3g}", expected, needed, m.get("origin", ""), m.get("error") or ""]
        )
    lines = _table(["measurement", "GB/s", "expected", "needed", "origin", "error"], rows) if rows else []
    absent = [f"- No figure for {_cell(what)}: {_cell(reason)}" for what, reason in no_figures(doc)]
    return lines + ([""] if lines and absent else []) + absent


def summary(doc: dict) -> str:
    """The job summary of a run: the header line, the run's verdict (the document's: ``core.run_verdict``)
    with its unmet run gate cause by cause (each cause, then the findings that show it) and its failed
    checks, the unmet requirements, the link matrix and the measured figures (each with its origin)."""
    topology = schema.from_dict(doc["topology"])
    lines = ["## gputopo", "", _cell(header_line(topology)), ""]
    v = verdict(doc)
    if v is None:
        lines += ["No verdict in the document.", ""]
    else:
        counts = "; ".join(v.get("counts") or []) or "nothing judged"
        lines += [f"**{_cell(v['word'])}**: {_cell(counts)}", ""]
        causes = failed_causes(v)
        gate = [c for c in causes if c["kind"] == "run gate"]
        if gate:
            lines += [f"**Run gate unmet** \\[{_cell(source_text(topology))}\\]:", ""]
            lines += [line for c in gate for line in _cause_lines(_cell(c["where"]), c)] + [""]
        checks = [c for c in causes if c["kind"] == "check"]
        if checks:
            lines += ["**Failed checks:**", ""]
            lines += [line for c in checks for line in _cause_lines(f"**{_cell(c['what'])}** ({_cell(c['where'])})", c)]
            lines += [""]
    unmet = doc.get("unmet") or []
    if unmet:
        lines += ["**Tests not run for unmet requirements:**", ""]
        lines += _table(
            ["test", "outcome", "requirement", "reason"],
            [[u["test"], u["outcome"], u["requirement"], u["reason"]] for u in unmet],
        ) + [""]
    if topology.gpus:
        lines += ["<details><summary>Link classes</summary>", ""] + _matrix(topology) + ["", "</details>", ""]
    figures = _figures(doc)
    if figures:
        lines += (
            ["<details><summary>Bandwidth: measured, cached or recorded</summary>", ""]
            + figures
            + ["", "</details>", ""]
        )
    return "\n".join(lines) + "\n"


def _cause_lines(label: str, cause: dict) -> list[str]:
    """A cause as a list item (its label already escaped), then its findings indented under it."""
    return [f"- {label}: {_cell(cause['found'])}"] + [f"  - {_cell(e)}" for e in _evidence(cause)]


def _evidence(cause: dict) -> list[str]:
    evidence = [str(e) for e in cause.get("evidence") or []]
    more = len(evidence) - EVIDENCE_LINES
    return evidence[:EVIDENCE_LINES] + ([f"and {more} more"] if more > 0 else [])


# GitHub shows at most 10 error annotations of a step: the causes beyond them are one more, which says so.
ANNOTATIONS = 10


def annotations(doc: dict) -> list[str]:
    """The run's error annotations: one per cause of its verdict's failures (an unmet run gate's causes,
    the failed checks' causes: one cause of 28 failed items is one annotation), the evidence in the
    message, at most ``ANNOTATIONS``, the last then counting the causes left to the job summary."""
    v = verdict(doc)
    found = [
        (f"gputopo {c['kind']} {c['name']}", "\n".join([str(c["found"]), *_evidence(c)]))
        for c in (failed_causes(v) if v else [])
        if c["kind"] in ("run gate", "check")
    ]
    if len(found) > ANNOTATIONS:
        rest = found[ANNOTATIONS - 1 :]
        found = found[: ANNOTATIONS - 1] + [
            (
                f"gputopo: {len(rest)} more causes",
                "; ".join(title.removeprefix("gputopo ") for title, _ in rest)
                + " (the job summary and the report list each one)",
            )
        ]
    return [annotation(title, message) for title, message in found]


def annotation(title: str, message: str) -> str:
    """``::error title=...::message``: an error annotation on the run's summary page (the title
    escaped as a command's property, the message as its data: actions/toolkit's command.ts)."""
    return f"::error title={workflow_property(title)}::{workflow_data(message)}"
