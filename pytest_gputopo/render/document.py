"""The report document (``--gputopo-json``, ``gputopo bench allreduce --json``) as one schema, checked
whole before ``gputopo report`` draws it: a document from someone else's run is untrusted input.

``check_document`` walks the document against ``DOCUMENT`` and raises ``ReportError`` naming the first
field that is not what the schema says, by its path (``measurements[0].key: ...``). Every number is
finite and bounded (``1e400`` reads as infinity, ``10**400`` formats as no float), every string a
string, every key a benchmark key, every list a list of what the renderer draws from it; a field
the renderer does not draw and the schema does not name is kept only when it is plain JSON (finite
numbers, at most ``untrusted.MAX_DEPTH`` levels). Whatever passes, ``html.html_report`` draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..bench.untrusted import ORIGINS, detail_problem, json_problem
from ..core import keys, schema
from ..core.figure_states import STATES
from ..core.limits import MAX_BYTES, MAX_GBPS, show_value

MAX_COUNT = 2**63 - 1  # elements of an all-reduce, iterations: an int64 of nccl-tests
MAX_TIME_US = 1e15  # about 30 years
MAX_RATIO = 1e6


class ReportError(ValueError):
    """A saved report cannot be drawn; the message names the field by its path."""


Check = Callable[[Any, str], None]


def _fail(path: str, what: str, value: Any, bounds: str = "") -> None:
    raise ReportError(f"{path}: expected {what}{bounds}, got {show_value(value)}")


def _json(value: Any, path: str) -> None:
    problem = json_problem(value)
    if problem:
        raise ReportError(f"{path}: {problem}")


def text(value: Any, path: str) -> None:
    if not isinstance(value, str):
        _fail(path, "a string", value)


def flag(value: Any, path: str) -> None:
    if type(value) is not bool:
        _fail(path, "true or false", value)


def number(low: float, high: float, integer: bool = False, null: bool = False) -> Check:
    """A finite number (an int, not a bool) from low to high; or null."""
    what = ("an integer" if integer else "a number") + (" or null" if null else "")
    bounds = f" (from {low:g} to {high:g})"

    def check(value: Any, path: str) -> None:
        kinds = (int,) if integer else (int, float)
        if value is None and null:
            return
        if (
            type(value) not in kinds
            or (isinstance(value, float) and not math.isfinite(value))
            or not low <= value <= high
        ):
            _fail(path, what, value, bounds)

    return check


def null_or(inner: Check) -> Check:
    def check(value: Any, path: str) -> None:
        if value is not None:
            inner(value, path)

    return check


def one_of(*values: Any) -> Check:
    def check(value: Any, path: str) -> None:
        if not any(type(value) is type(v) and value == v for v in values):
            _fail(path, " or ".join(repr(v) for v in values), value)

    return check


def list_of(item: Check, non_empty: bool = False) -> Check:
    def check(value: Any, path: str) -> None:
        if not isinstance(value, list) or (non_empty and not value):
            _fail(path, "a non-empty list" if non_empty else "a list", value)
        for i, entry in enumerate(value):
            item(entry, f"{path}[{i}]")

    return check


def obj(required: dict[str, Check] | None = None, optional: dict[str, Check] | None = None) -> Check:
    """An object with these fields; any other field is kept when it is plain JSON."""
    required, optional = required or {}, optional or {}

    def check(value: Any, path: str) -> None:
        if not isinstance(value, dict):
            _fail(path, "an object", value)
        for name in required:
            if name not in value:
                raise ReportError(f"{path}.{name}: missing" if path else f"{name}: missing")
        for name, entry in value.items():
            where = f"{path}.{name}" if path else name
            (required.get(name) or optional.get(name) or _json)(entry, where)

    return check


def _topology(value: Any, path: str) -> None:
    try:
        schema.from_dict(value, path)
    except schema.SchemaError as exc:
        raise ReportError(str(exc)) from None


def _key(value: Any, path: str) -> None:
    try:
        keys.from_list(value)
    except ValueError:
        _fail(path, 'a benchmark key (["p2p", 0, 1], ["h2d", 0, true], ["allreduce", 8, 1048576], ...)', value)


def _detail(value: Any, path: str) -> None:
    problem = detail_problem(value)  # "detail.size_bytes -1 is not ...", "detail holds NaN ..."
    if problem:
        field, _, rest = problem.partition(" ")
        raise ReportError(f"{path}{field.removeprefix('detail')}: {rest}")


GBPS = number(0, MAX_GBPS)
BANDWIDTH = number(1e-300, MAX_GBPS)  # an expected figure: above 0 (a ratio divides by it)
GBPS_OR_NULL = number(0, MAX_GBPS, null=True)
BANDWIDTH_OR_NULL = number(1e-300, MAX_GBPS, null=True)

MEASUREMENT = obj(
    {"key": _key},
    {
        "what": text,
        "gbps": GBPS_OR_NULL,
        "origin": one_of(*ORIGINS),
        "source": null_or(text),
        "error": null_or(text),
        "detail": _detail,
        "state": one_of(*STATES),
        "staged_gbps": GBPS,  # the verdict the run gave it (core.judgement decides it)
        "expected": null_or(
            obj(
                {},
                {
                    "gbps": BANDWIDTH_OR_NULL,
                    "basis": null_or(text),
                    "floor": number(0, MAX_RATIO, null=True),
                    "needed_gbps": GBPS_OR_NULL,
                },
            )
        ),
    },
)

ROW = obj(
    {
        "size_bytes": number(1, MAX_BYTES, integer=True),
        "count": number(0, MAX_COUNT, integer=True),
        "time_us": number(0, MAX_TIME_US),
        "algbw_gbps": GBPS,
        "busbw_gbps": GBPS,
        "wrong": number(0, MAX_COUNT, integer=True),
    }
)

SWEEP = obj(
    {
        "what": text,
        "origin": text,
        "expected": obj({"gbps": BANDWIDTH_OR_NULL, "basis": text}, {"source": null_or(text)}),
        "result": obj({"rows": list_of(ROW, non_empty=True)}),
    },
    {"host": null_or(text), "devices": null_or(list_of(number(0, 2**31 - 1, integer=True)))},
)

STRINGS = list_of(text)

# A figure a test's requirement was judged on: the state it gave it and what it needed there (its own
# threshold: the marker's gbps or floor), which the HTML report marks on the figure's cell.
JUDGED = obj({"key": _key, "state": one_of(*STATES)}, {"needed_gbps": GBPS_OR_NULL})

NCCL = obj(
    {},
    {
        "origin": text,
        "account_line": null_or(text),
        "pairs": null_or(list_of(obj({"pair": text, "transports": STRINGS, "why": text}))),
        "fallbacks": null_or(
            list_of(obj({"pair": text, "label": text, "actual": text, "expected": text, "causes": STRINGS}))
        ),
    },
)


def _nvlink_faults(value: Any, path: str) -> None:
    """{"5": "NVLinks [0, 1] are down (16/18 up)"}: a GPU's index, and why its links down are a fault."""
    if not isinstance(value, dict):
        _fail(path, "an object", value)
    for index, fault in value.items():
        if not index.isdigit() or len(index) > 6:
            _fail(f"{path}.{index}", "a GPU's index", index)
        text(fault, f"{path}.{index}")


NVLINK_FAULTS = _nvlink_faults

# The run's one verdict (``core.run_verdict``), which every medium draws.
VERDICT = obj(
    {"word": one_of("PASSED", "FAILED", "INCOMPLETE"), "complete": flag},
    {
        "counts": STRINGS,
        "causes": list_of(
            obj(
                {
                    "outcome": one_of("failed", "error", "skipped"),
                    "what": text,
                    "where": text,
                    "found": text,
                    "kind": one_of("run gate", "check", "requirement"),
                    "name": text,
                },
                {"evidence": STRINGS},
            )
        ),
        "not_judged": list_of(obj({"checks": STRINGS, "kinds": text, "reason": text})),
    },
)

DOCUMENT = obj(
    {"schema": one_of(1), "topology": _topology},
    {
        "complete": flag,
        "source": text,
        "recorded": flag,
        "measurements": null_or(list_of(MEASUREMENT)),
        "lost_measurements": null_or(list_of(_json)),
        "test_measurements": null_or(list_of(_json)),
        "checks": null_or(list_of(obj({}, {"check": text, "outcome": text, "message": text}))),
        "unmet": null_or(list_of(obj({}, {"test": text, "outcome": text, "requirement": text, "reason": text}))),
        "verdicts": null_or(
            list_of(
                obj(
                    {"test": text, "requirement": text, "verdict": one_of("met", "unmet", "unknown", "broken")},
                    {"reason": null_or(text), "recorded": flag, "figures": list_of(JUDGED)},
                )
            )
        ),
        "gate": null_or(STRINGS),  # the unmet run-gate terms of a run stopped before its tests
        "gate_causes": null_or(list_of(obj({"cause": text, "headline": text}, {"evidence": STRINGS}))),
        # the failed check items by cause (a GPU, the machine, or one item alone), each with its items' names
        "check_causes": null_or(
            list_of(obj({"cause": text, "headline": text}, {"evidence": STRINGS, "checks": STRINGS}))
        ),
        "verdict": VERDICT,
        "nvlink_faults": NVLINK_FAULTS,
        "nccl": null_or(NCCL),
        "nodes": null_or(
            list_of(obj({"topology": _topology}, {"where": text, "differs": flag, "nvlink_faults": NVLINK_FAULTS}))
        ),
        "sweeps": null_or(list_of(SWEEP)),
        "written": null_or(text),  # when, UTC, ISO 8601
        "settings": null_or(obj()),
        "software": null_or(obj()),
    },
)


def check_document(doc: Any) -> None:
    """That a report document read back from a file has, field by field, what the report draws:
    raises ReportError naming the first field that does not (the topology by its own schema)."""
    if not isinstance(doc, dict) or not (type(doc.get("schema")) is int and doc["schema"] == 1):
        raise ReportError("schema: expected a gputopo JSON report (schema 1)")
    DOCUMENT(doc, "")
