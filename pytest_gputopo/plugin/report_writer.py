"""The run's report documents, written from its record (``run_record``): the ``--gputopo-json``
document, the ``--gputopo-html`` report drawn from it, and under GitHub Actions the job summary and
the annotations. Loaded when a report is asked for (``reporter.write_reports``,
``reporter.write_github_summary``); nothing here judges: it reads the record and draws."""

from __future__ import annotations

import json
import time

from ..bench.shared_folder import SharedFolder
from ..render import markdown, report
from ..render.html import html_report
from ..runtime import files
from ..runtime.software import software
from .run import GputopoRun
from .run_record import RunRecord, build, finished, gate_cause_documents


def write(run: GputopoRun, complete: bool, changed: bool = False) -> None:
    """--gputopo-json and --gputopo-html: the topology, every measurement against what it should give,
    every check, every unmet requirement and NCCL's view, as one document (and the report drawn from
    it). Written again (``"complete": false``) whenever a test changes what is known -- a measurement,
    a check's outcome, a test's own figure, a test not run for an unmet requirement (``changed``) --
    and once at the end, so that a run ended by SIGTERM (a CI cancel, ``timeout``) leaves what it knew
    -- without a signal handler in the user's process. A report lost at the end is said beside
    pytest's own summary (``report_errors``), never in its place."""
    settings = run.settings
    suite = run.state.suite
    if not complete:  # cheap: the measurements there are, by count (the rest comes as ``changed``)
        seen = (len(suite.results) if suite else 0, sum(len(SharedFolder(f).names()) for f in run.shared_folders))
        if run.state.json_seen == seen and not changed:
            return  # nothing new since the last write
        run.state.json_seen = seen
    record = finished(run) if complete else build(run, complete=False)
    document = {**report_document(record), "complete": complete}
    outputs = [(settings.json, settings.json_from, lambda: json.dumps(document, indent=1, allow_nan=False) + "\n")]
    if run.speaks:  # one report for the run, drawn by the process that speaks for it
        outputs.append((settings.html, settings.html_from, lambda: html_report(document)))
    for path, where, text in outputs:
        if path is None:
            continue
        try:  # strict JSON: a NaN would be a figure no strict reader takes
            files.write_text(path, text())
        except (OSError, ValueError) as exc:
            # checked at start; a disk that filled since loses the report, not the outcome
            if complete:
                run.state.report_errors.append(
                    f"ERROR: {where}: cannot write {path}: {getattr(exc, 'strerror', None) or exc}"
                )


def report_document(record: RunRecord) -> dict:
    """What the JSON report holds, read from the run's record: ``render.report.json_document`` over
    every measurement of the run (xdist workers' too) with the run's own verdict of it (``state``,
    what it should give), the tests not run for an unmet requirement, each test's verdicts with the
    figures it was judged on at its own threshold, NCCL's view, and every node of a distributed run;
    when it was written and by what software."""
    document = report.json_document(
        record.topology,
        [m.document() for m in record.measurements.values()],
        list(record.checks),
        list(record.own),
        list(record.lost),
    )
    document["unmet"] = [u.document() for u in record.unmet]
    document["verdicts"] = [v.document() for v in record.verdicts]
    document["ranks_failed"] = list(record.ranks_failed)
    document["leased"] = list(record.leased)  # each leased test's GPU memory: budget, peak (NVML), or why unknown
    document["gate"] = list(record.gate_problems)  # the run gate that stopped the run, if one did
    document["gate_causes"] = gate_cause_documents(record.gate_causes)  # the same, cause by cause
    if record.check_causes is not None:  # the failed check items by cause (check_report.check_causes)
        document["check_causes"] = list(record.check_causes)
    document["verdict"] = record.verdict.document()  # the run's one verdict: every medium draws it
    document["nvlink_faults"] = dict(record.nvlink_faults)
    document["nccl"] = record.nccl.document() if record.nccl is not None else None
    document["written"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    document["settings"] = dict(record.settings)
    document["software"] = dict(software())
    if record.nodes is not None:
        document["nodes"] = list(record.nodes)
    return document


def github_summary(run: GputopoRun, write_line) -> None:
    """Append the run's Markdown summary to the job summary (``GITHUB_STEP_SUMMARY``), and write an
    error annotation per cause of an unmet run gate (its evidence in the message) and per cause of the
    failed checks through pytest's terminal writer (``write_line``)."""
    path = run.settings.github_summary
    if path is None:  # (``reporter.write_github_summary`` asks first)
        return
    record = finished(run)
    document = report_document(record)
    for line in markdown.annotations(document):  # one per cause of the verdict's failures
        write_line(line)
    try:
        files.append_text(path, markdown.summary(document))
    except OSError as exc:
        write_line(f"ERROR: GITHUB_STEP_SUMMARY: cannot append to {path}: {exc.strerror or exc}")
