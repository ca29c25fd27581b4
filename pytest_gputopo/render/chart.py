"""busbw against message size as inline SVG, for the HTML report: written here (a few shapes), no
plotting library on any path. Every point carries its figures on hover, and the chart is drawn
beside the table that holds the same figures, so that no figure exists only as a colour or a height.
Inline SVG in HTML needs no ``xmlns``: the file names no URL."""

from __future__ import annotations

import math

from ..core.units import size_text
from .escape import html_text

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 20, 20, 46


def _nice_step(top: float) -> float:
    """A round tick step giving about five ticks up to ``top``."""
    raw = top / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)


def busbw_chart(rows: list[dict], expected_gbps: float | None, expected_label: str) -> str:
    """``rows`` (``AllReduceRow.to_json``: size_bytes, busbw_gbps, algbw_gbps, time_us, wrong) as
    points joined by a line on a log2 size axis; a row with wrong data as a labelled cross; the busbw
    the links should give as a dashed line named in words."""
    sizes = [r["size_bytes"] for r in rows]
    top = max([r["busbw_gbps"] for r in rows] + [expected_gbps or 0.0]) * 1.1 or 1.0
    step = _nice_step(top)
    top = step * math.ceil(top / step)
    low, high = math.log2(min(sizes)), math.log2(max(sizes))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(size: int) -> float:
        return LEFT + (plot_w / 2 if high == low else (math.log2(size) - low) / (high - low) * plot_w)

    def y(gbps: float) -> float:
        return TOP + plot_h - gbps / top * plot_h

    out = [
        f'<svg width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="all-reduce busbw against message size" font-size="11" font-family="sans-serif">'
    ]
    for i in range(int(round(top / step)) + 1):  # y grid and labels
        v = i * step
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
            f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>'
        )
    every = max(1, math.ceil(len(sizes) / 8))  # at most eight size labels
    for i, size in enumerate(sizes):
        if i % every == 0 or i == len(sizes) - 1:
            out.append(
                f'<text x="{x(size):.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
                f"{html_text(size_text(size))}</text>"
            )
    out.append(
        f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#333"/>'
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" y2="{TOP + plot_h}" stroke="#333"/>'
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 8}" text-anchor="middle">message size (log scale)</text>'
        f'<text x="14" y="{TOP + plot_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {TOP + plot_h / 2})">busbw, GB/s</text>'
    )
    if expected_gbps is not None:
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(expected_gbps):.1f}" y2="{y(expected_gbps):.1f}" '
            f'stroke="#1a7f37" stroke-width="2" stroke-dasharray="6 4" data-expected="{expected_gbps:g}"/>'
            f'<text x="{WIDTH - RIGHT - 4}" y="{y(expected_gbps) - 5:.1f}" text-anchor="end" fill="#1a7f37">'
            f"expected {expected_gbps:g} GB/s ({html_text(expected_label)})</text>"
        )
    points = " ".join(f"{x(r['size_bytes']):.1f},{y(r['busbw_gbps']):.1f}" for r in rows)
    out.append(f'<polyline points="{points}" fill="none" stroke="#1f4e9c" stroke-width="2"/>')
    for r in rows:
        px, py = x(r["size_bytes"]), y(r["busbw_gbps"])
        tip = (
            f"{size_text(r['size_bytes'])}: busbw {r['busbw_gbps']:.2f} GB/s, algbw {r['algbw_gbps']:.2f} GB/s, "
            f"time {r['time_us']:.1f} us, #wrong {r['wrong']}"
        )
        if r["wrong"]:
            mark = (
                f'<path d="M{px - 5:.1f},{py - 5:.1f}L{px + 5:.1f},{py + 5:.1f}M{px - 5:.1f},{py + 5:.1f}'
                f'L{px + 5:.1f},{py - 5:.1f}" stroke="#b00" stroke-width="2.5"/>'
                f'<text x="{px:.1f}" y="{py - 8:.1f}" text-anchor="middle" fill="#b00">wrong</text>'
            )
        else:
            mark = f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4" fill="#1f4e9c"/>'
        out.append(f'<g data-size="{r["size_bytes"]}"><title>{html_text(tip)}</title>{mark}</g>')
    return "\n".join(out + ["</svg>"])
