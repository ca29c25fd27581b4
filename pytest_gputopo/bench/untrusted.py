"""Benchmark results read back from places others can write: pytest's cache (``--gputopo-cache``),
the folder xdist workers share, the store torchrun ranks share. A figure from there decides
verdicts, so it is checked whole first: NaN passes every ``>=`` floor, ``1e999`` every floor, a
list where an object belongs crashes the reader. Each function says why a value cannot be
trusted, or returns None."""

from __future__ import annotations

import math
from typing import Any

from ..core import keys, limits

MAX_DEPTH = 32  # our own details nest 4 levels deep
FUTURE_SLACK_S = 300.0  # clocks of one host may step back this far (NTP) without a cache entry being doubted
ORIGINS = ("measured", "cached", "recorded")


def gbps_problem(value: Any) -> str | None:
    if not limits.is_bandwidth(value):
        return f"gbps {limits.show_value(value)} is not a bandwidth above 0 and at most {limits.MAX_GBPS:g} GB/s"
    return None


def json_problem(value: Any) -> str | None:
    """Why ``value`` is not plain JSON with finite numbers, at most MAX_DEPTH levels deep."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep"
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return "an object key is not a string"
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, float) and not math.isfinite(item):
            return "holds NaN or infinity"
        elif item is not None and not isinstance(item, (str, int, float)):
            return f"holds a {type(item).__name__}"
    return None


def _interval_problem(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or any(type(v) not in (int, float) for v in value)
        or not value[0] <= value[1]
    ):
        return f"{where} {limits.show_value(value)} is not an interval [low, high]"
    return None


def detail_problem(detail: Any) -> str | None:
    """The measurement's detail: plain JSON, and the fields verdicts read of the right kind."""
    if not isinstance(detail, dict):
        return f"detail is {limits.show_value(detail)}, not an object"
    problem = json_problem(detail)
    if problem:
        return f"detail {problem}"
    size = detail.get("size_bytes")
    if size is not None and (type(size) is not int or not 1 <= size <= limits.MAX_BYTES):
        return f"detail.size_bytes {limits.show_value(size)} is not a size in bytes"
    for flag in ("nvls", "peer_access"):
        if detail.get(flag) not in (None, True, False):
            return f"detail.{flag} {limits.show_value(detail[flag])} is not true, false or null"
    judged = detail.get("judged", {})
    if not isinstance(judged, dict):
        return "detail.judged is not an object"
    return _interval_problem(detail.get("bw_ci95_gbps"), "detail.bw_ci95_gbps") or _interval_problem(
        judged.get("busbw_ci95_gbps"), "detail.judged.busbw_ci95_gbps"
    )


def cache_entry_problem(entry: Any, now: float) -> str | None:
    """An entry of pytest's cache as ``BenchSuite`` writes it: ``{"gbps", "detail", "time"}``."""
    if not isinstance(entry, dict):
        return f"it is {limits.show_value(entry)}, not an object"
    extra = sorted(set(entry) - {"gbps", "detail", "time"})
    if extra:
        return f"unknown field {extra[0]!r}"
    stamp = entry.get("time")
    if type(stamp) not in (int, float) or not 0 < stamp < float("inf"):  # type: ignore[operator]  # a number
        return f"time {limits.show_value(stamp)} is not a time"
    if stamp > now + FUTURE_SLACK_S:  # type: ignore[operator]  # a number (above)
        return "its time lies in the future (it would never expire)"
    return gbps_problem(entry.get("gbps")) or detail_problem(entry.get("detail", {}))


def result_problem(data: Any) -> str | None:
    """A ``BenchResult.to_json()`` another process of this run wrote."""
    if not isinstance(data, dict):
        return f"it is {limits.show_value(data)}, not an object"
    try:
        keys.from_list(data.get("key"))
    except ValueError:
        return f"key {limits.show_value(data.get('key'))} is not a benchmark key"
    if not isinstance(data.get("what"), str) or data.get("origin") not in ORIGINS:
        return "what or origin is missing"
    for name in ("source", "error"):
        if not isinstance(data.get(name), (str, type(None))):
            return f"{name} is not a string"
    gbps = gbps_problem(data["gbps"]) if data.get("gbps") is not None else None
    return gbps or detail_problem(data.get("detail", {}))
