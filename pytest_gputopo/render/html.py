"""The report people look at: one self-contained HTML file drawn from a ``--gputopo-json`` document
(``report.json_document``), so that ``--gputopo-html`` and ``gputopo report RUN.json`` draw the same.

Plain HTML and CSS written here: no script, no font, no image, nothing fetched; sources are cited
without their scheme, so the file holds no URL a browser could request. Colour is never the only
signal: every cell carries its label (``NV18``, ``OK``, ``0.81``), and the legend says what each
colour means.
"""

from __future__ import annotations

import re
from collections import Counter

from ..core import keys, schema
from ..core.hardware import GB, architecture
from ..core.model import Topology
from ..core.units import size_text
from .chart import busbw_chart
from .document import ReportError, check_document  # the document's one schema, checked before it is drawn
from .escape import html_attribute, html_text
from .html_style import CELL_CLASSES, LINK_CLASSES, STYLESHEET
from .report import header_line, source_text
from .verdict import FAILED, failed_causes, floorless, no_figures, verdict

__all__ = ["ReportError", "check_document", "html_report"]  # ``gputopo report`` checks, then draws

_URL = re.compile(r"\b(?:https?|ftp)://", re.IGNORECASE)


def _t(text) -> str:
    """Text as HTML, with any URL's scheme dropped: cited, never fetched."""
    return html_text(_URL.sub("", str(text)))


def _a(text) -> str:
    """An attribute value (written between double quotes), with any URL's scheme dropped."""
    return html_attribute(_URL.sub("", str(text)))


def _known(cls) -> str:
    """A class name built from data (an outcome): a known one, or none."""
    return cls if isinstance(cls, str) and cls in CELL_CLASSES else ""


def _table(rows: list[list[str]], head: list[str] | None = None, cls: str = "") -> str:
    out = [f'<table class="{_a(cls)}">' if cls else "<table>"]
    if head:
        out.append("<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>")
    out += ["<tr>" + "".join(row) + "</tr>" for row in rows]
    return "\n".join(out + ["</table>"])


def _cell(text: str, cls: str = "", title: str = "", attrs: str = "") -> str:
    klass = f' class="{_a(_known(cls))}"' if _known(cls) else ""
    tip = f' title="{_a(title)}"' if title else ""
    return f"<td{klass}{tip}{attrs}>{_t(text)}</td>"


# ---------------------------------------------------------------------------------------------
# The machine


def _gpu_table(topology: Topology, faults: dict) -> str:
    rows = []
    for g in topology.gpus:
        arch = architecture(g.compute_capability)
        rows.append(
            [
                _cell(f"GPU{g.index}"),
                _cell(g.name or "?", "text"),
                _cell("?" if g.memory_total_bytes is None else f"{g.memory_total_bytes / GB:.1f} GB"),
                _cell((g.compute_capability or "?") + (f" ({arch.title()})" if arch else "")),
                _pcie_cell(g),
                _nvlinks_cell(faults, g),
                _cell("?" if g.numa_node is None else str(g.numa_node)),
                _cell({None: "?", True: "yes", False: "no"}[g.multicast]),
            ]
        )
    head = ["GPU", "model", "memory", "compute", "PCIe now (max)", "NVLinks up", "NUMA", "multicast"]
    return _table(rows, head)


def _pcie_cell(g) -> str:
    """PCIe now and max; red, and said, where the link trained below its width (the ``pcie`` check's rule)."""
    text = (
        f"Gen{g.pcie_gen_current or '?'} x{g.pcie_width_current or '?'} "
        f"(max Gen{g.pcie_gen_max or '?'} x{g.pcie_width_max or '?'})"
    )
    if g.pcie_width_current is not None and g.pcie_width_max is not None and g.pcie_width_current < g.pcie_width_max:
        return _cell(f"{text}, trained down", "failed", f"GPU{g.index}: x{g.pcie_width_current} of x{g.pcie_width_max}")
    return _cell(text)


def _nvlinks_cell(faults: dict, g) -> str:
    """NVLinks up of listed; red, and said, where the document says the links down are a fault (``faults``:
    the ``nvlink`` check's rule, ``core.nvlinks``: a PCIe card without a bridge lists links that are all
    down, and is no fault). A document without them colours none: not judged here."""
    if not g.nvlinks:
        return _cell("none listed")
    text = f"{g.active_nvlinks}/{len(g.nvlinks)}"
    fault = faults.get(str(g.index))
    if fault:
        return _cell(f"{text} down", "failed", f"GPU{g.index}: {fault}")
    return _cell(text)


def _versions(topology: Topology) -> str:
    pairs = [
        ("driver", topology.driver_version),
        ("CUDA (driver)", topology.cuda_driver_version),
        ("CUDA runtime (torch)", topology.cuda_runtime_version),
        ("NCCL (torch)", topology.nccl_version),
    ]
    return "<p>" + ", ".join(f"{_t(what)} <b>{_t(have or '?')}</b>" for what, have in pairs) + "</p>"


def _matrix(topology: Topology, cell) -> str:
    n = len(topology.gpus)
    head = [""] + [f"GPU{b}" for b in range(n)]
    rows = []
    for a in range(n):
        rows.append(
            [f"<th>GPU{a}</th>"] + [_cell("X", "self") if a == b else cell(topology.link(a, b), a, b) for b in range(n)]
        )
    return _table(rows, head, "matrix")


def _link_cell(link, a, b) -> str:
    label = link.label
    cls = "unknown" if label is None else LINK_CLASSES[label.cls]
    text = "?" if label is None else str(label)
    pcie = "unknown" if link.pcie is None else link.pcie.name
    return _cell(
        text,
        cls,
        f"GPU{a}-GPU{b}: {text}; PCIe path {pcie}; NVLinks {link.nvlinks}",
        f' data-pair="{min(a, b)}-{max(a, b)}"',
    )


def _p2p_cell(link, a, b) -> str:
    r, w = link.p2p.read.value, link.p2p.write.value
    works = link.p2p_works
    cls = "unknown" if works is None else ("ok" if works else "refused")
    peer = {None: "not asked", True: "yes", False: "no"}[link.cuda_peer]
    return _cell(
        r if r == w else f"{r}/{w}",
        cls,
        f"GPU{a}-GPU{b}: read {link.p2p.read.description}, write {link.p2p.write.description}; "
        f"CUDA peer access: {peer}",
        f' data-p2p="{min(a, b)}-{max(a, b)}"',
    )


def _legends() -> str:
    links = _table(
        [
            [_cell("NV#", "nv"), _cell("a bonded set of # NVLinks", "text")],
            [_cell("PIX / PXB", "pix"), _cell("one / several PCIe bridges", "text")],
            [_cell("PHB", "phb"), _cell("PCIe and a host bridge (the CPU)", "text")],
            [_cell("NODE", "node"), _cell("PCIe and the interconnect between host bridges of one NUMA node", "text")],
            [_cell("SYS", "sys"), _cell("PCIe and the SMP interconnect between NUMA nodes", "text")],
            [_cell("?", "unknown"), _cell("not known: the source did not say", "text")],
        ],
        ["link", "meaning"],
        "legend",
    )
    p2p = _table(
        [
            [_cell("OK", "ok"), _cell("P2P read and write OK", "text")],
            [
                _cell("CNS GNS TNS DR NS", "refused"),
                _cell("refused: chipset, GPU, topology not supported; disabled by regkey; not supported", "text"),
            ],
            [_cell("U", "unknown"), _cell("unknown", "text")],
        ],
        ["P2P", "meaning"],
        "legend",
    )
    return links + p2p


def _machine(topology: Topology, faults: dict) -> str:
    parts = [f"<p>{_t(header_line(topology))}</p>"]
    if topology.problem:
        parts.append(f"<p>No GPU facts: {_t(topology.problem)}</p>")
    if topology.gpus:
        parts += [
            _gpu_table(topology, faults),
            _versions(topology),
            "<h3>Link class</h3>",
            _matrix(topology, _link_cell),
            "<h3>P2P read/write (NVML, joined with CUDA's peer access)</h3>",
            _matrix(topology, _p2p_cell),
        ]
    parts += [f"<p>warning: {_t(w)}</p>" for w in topology.warnings]
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Measurements, against what the links should give


# A measurement's state as the run judged it (``core.judgement``, written into the document by the
# reporter) in words: the report reads the verdict, never decides one.
_STATE_WORDS = {
    "absent": "no figure",
    "broken": "data wrong",
    "unknown": "nothing to judge it by",
    "below": "below the threshold",
    "met": "meets the threshold",
    "staged": "meets the threshold, but slower than the same copy staged through the host: not P2P",
}


def _state(m: dict) -> tuple[str, str]:
    """(css class, words) of one measurement as the run judged it; a met figure at or above what the
    link should give is shaded ``above``. A document without a state (one written before states
    were) is not judged here: unknown."""
    state = m.get("state")
    if state is None and m.get("gbps") is None:
        state = "absent"
    against = floorless(m)
    if state is None and against:
        return "reference", f"not judged: {against}"
    if state not in _STATE_WORDS:
        return "unknown", "no verdict in the document"
    exp = (m.get("expected") or {}).get("gbps")
    if state == "met" and exp and isinstance(m.get("gbps"), (int, float)) and m["gbps"] >= exp:
        return "above", _STATE_WORDS[state]
    return state, _STATE_WORDS[state]


def _ratio_text(m: dict) -> str:
    exp = (m.get("expected") or {}).get("gbps")
    if m.get("gbps") is None:
        return "—"
    return f"{m['gbps']:.3g}" + (f" / {exp:.3g} = {m['gbps'] / exp:.2f}" if exp else " / ?")


def _tip(m: dict) -> str:
    exp = m.get("expected") or {}
    needed = exp.get("needed_gbps")
    parts = [
        m.get("what", ""),
        f"{m.get('origin')}: {m['gbps']:.2f} GB/s" if m.get("gbps") is not None else f"no figure: {m.get('error')}",
    ]
    if exp.get("gbps"):
        parts.append(f"expected {exp['gbps']:.1f} GB/s ({exp.get('basis')})")
    if needed is not None:
        parts.append(f"needed {needed:.1f} GB/s")
    if m.get("staged_gbps") is not None:
        parts.append(f"staged through the host: {m['staged_gbps']:.2f} GB/s")
    if m.get("source"):
        parts.append(f"source: {m['source']}")
    return "; ".join(parts)


def _measured_cell(m: dict | None, judged: list[dict] | None = None) -> str:
    """The figure, its expectation and ratio, and its origin (measured, cached, recorded) in words;
    ``judged``: the tests' verdicts that rest on it (``_judged``), each with its own need."""
    if m is None:
        return _cell("", "absent", "not measured in this run")
    cls, words = _state(m)
    origin = f"<br><small>{_t(m.get('origin', ''))}</small>" if m.get("gbps") is not None else ""
    tip = _tip(m)
    if judged:
        cls, words, needs = _as_judged(cls, words, judged)
        origin += f"<br><small>{_t(needs)}</small>"
        tip += "".join(
            f"; {j['test']}: {j['requirement']} needed {_gbps(j['needed_gbps'])}, {j['state']}" for j in judged
        )
    return (
        f'<td class="{_a(cls)}" title="{_a(tip)} ({_a(words)})" data-state="{_a(cls)}">{_t(_ratio_text(m))}'
        f"{origin}</td>"
    )


# A test's state of a figure, worst first: a cell takes the worst any test judged it, so that no cell
# is green where a test's own threshold was not met, whatever the run's own threshold says.
_WORST_FIRST = ("broken", "below", "staged", "unknown", "absent", "met")


def _gbps(needed) -> str:
    return "nothing known" if needed is None else f"{needed:.1f} GB/s"


def _as_judged(cls: str, words: str, judged: list[dict]) -> tuple[str, str, str]:
    """(css class, words, the needs in a line) of a figure tests were judged on: the worst state a
    test gave it where one was not met, else the run's own; and each need with its state, once."""
    states = [j["state"] for j in judged if j.get("state") in _WORST_FIRST]
    worst = min(states, key=_WORST_FIRST.index, default="met")
    tests = [j for j in judged if j.get("state") == worst]
    if worst != "met":
        cls, words = worst, f"{_STATE_WORDS[worst]} of {len(tests)} test{'' if len(tests) == 1 else 's'}"
    needs = Counter((j.get("needed_gbps"), j.get("state")) for j in judged)  # each need once, its tests counted
    parts = [
        f"{'?' if n is None else f'{n:.1f}'} ({state}{f', {count} tests' if count > 1 else ''})"
        for (n, state), count in sorted(needs.items(), key=lambda e: (e[0][0] is None, e[0][0] or 0))
    ]
    return cls, words, "tests needed " + ", ".join(parts)


def _judged(doc: dict) -> dict[str, list[dict]]:
    """Each figure a test's requirement was judged on (the document's ``verdicts[].figures``), by its
    key: the test, the requirement, the state it gave the figure and what it needed there."""
    out: dict[str, list[dict]] = {}
    for v in doc.get("verdicts") or []:
        for f in v.get("figures") or []:
            out.setdefault(repr(f["key"]), []).append(
                {
                    "test": v.get("test", ""),
                    "state": f["state"],
                    "requirement": v.get("requirement", ""),
                    "needed_gbps": f.get("needed_gbps"),
                }
            )
    return out


# Copies between GPUs, one grid per kind a run has (core.keys.COPY_KINDS).
_COPY_GRIDS = (
    ("p2p", "P2P copy"),
    ("p2p_bidir", "P2P copies both ways at once (both directions' bytes)"),
    ("p2p_staged", "Copy staged through the host, P2P off"),
)


def _absent(doc: dict) -> str:
    """The measurements without a figure, each reason said once with what it left without one."""
    return "\n".join(f"<p>No figure for {_t(what)}: {_t(reason)}.</p>" for what, reason in no_figures(doc))


def _bandwidth(doc: dict, topology: Topology) -> str:
    measured = [m for m in doc.get("measurements") or [] if isinstance(m.get("key"), list) and m["key"]]
    absent = _absent(doc)
    measured_kinds = {m["key"][0] for m in measured if m.get("gbps") is not None}
    measured = [m for m in measured if m["key"][0] in measured_kinds]  # a kind without any figure: said once, above
    parts = []
    n = len(topology.gpus)
    judged = _judged(doc)

    def cell(m: dict | None) -> str:
        return _measured_cell(m, judged.get(repr(m["key"]), []) if m is not None else [])

    for kind, title in _COPY_GRIDS:
        copies = {(m["key"][1], m["key"][2]): m for m in measured if m["key"][0] == kind}
        if copies and n:
            rows = [
                [f"<th>GPU{a}</th>"] + [_cell("X", "self") if a == b else cell(copies.get((a, b))) for b in range(n)]
                for a in range(n)
            ]
            parts += [
                f"<h3>{title}, GB/s / expected = ratio, origin under each (row: from, column: to)</h3>",
                f"<p>Judged against {_t(keys.JUDGED_AGAINST[kind])}.</p>",
                _table(rows, [""] + [f"GPU{b}" for b in range(n)], "matrix"),
            ]
    host = [m for m in measured if m["key"][0] in ("h2d", "d2h") and m.get("gbps") is not None]
    if host:
        rows = [[_cell(m.get("what", "")), cell(m)] for m in host]
        parts += ["<h3>Host &lt;-&gt; device copies</h3>", _table(rows, ["copy", "GB/s / expected = ratio, origin"])]
    reduce = [m for m in measured if m["key"][0] == "allreduce" and m.get("gbps") is not None]
    if reduce:
        rows = [[_cell(m.get("what", ""), "text"), cell(m), _cell(m.get("origin", ""))] for m in reduce]
        parts += ["<h3>All-reduce bus bandwidth</h3>", _table(rows, ["all-reduce", "GB/s / expected", "origin"])]
    if not parts:
        if absent:
            return absent
        return (
            "<p>Nothing was measured in this run.</p>"
            if doc.get("complete", True) is not False
            else "<p>Nothing had been measured when this was written.</p>"
        )
    legend = _table(
        [
            [_cell("1.00", "above"), _cell("at or above what the link should give", "text")],
            [_cell("0.81", "met"), _cell("meets the threshold (the floor x expected, or a published floor)", "text")],
            [_cell("0.40", "below"), _cell("below the threshold: a slow link", "text")],
            [
                _cell("0.89", "staged"),
                _cell("a P2P copy slower than the same copy staged through the host: not getting P2P", "text"),
            ],
            [_cell("/ ?", "unknown"), _cell("nothing says what it should reach: unknown, not OK", "text")],
            [_cell("—", "absent"), _cell("no figure (none published, or the run failed)", "text")],
            [_cell("data wrong", "broken"), _cell("the benchmark's data came back wrong: a broken node", "text")],
        ]
        + (
            [
                [
                    _cell("tests needed 445.5 (below)", "below"),
                    _cell(
                        "what the tests judged on the figure needed, each at its own threshold (its marker's "
                        "gbps or floor); coloured by the worst verdict a test gave it",
                        "text",
                    ),
                ]
            ]
            if any(repr(m["key"]) in judged for m in measured)
            else []
        ),
        ["cell", "meaning"],
        "legend",
    )
    return "\n".join(([absent] if absent else []) + parts + [legend])


# ---------------------------------------------------------------------------------------------
# Verdicts, NCCL, nodes


def _sweeps(doc: dict) -> str:
    """Each all-reduce sweep (``gputopo bench allreduce``): busbw against size with the expected line,
    and its nccl-tests table."""
    parts = []
    for sweep in doc["sweeps"]:
        rows, exp = sweep["result"]["rows"], sweep["expected"]
        expected = (
            f"expected busbw {exp['gbps']:g} GB/s ({exp['basis']})"
            if exp["gbps"] is not None
            else f"no expected line: {exp['basis']}"
        )
        parts += [
            f"<h3>{_t(sweep['what'])}</h3>",
            f'<p><span class="origin">{_t(sweep["origin"])}</span> on {_t(sweep.get("host") or "?")}; '
            f"{_t(expected)}</p>",
            busbw_chart(rows, exp["gbps"], exp["basis"]),
        ]
        body = [
            [
                _cell(size_text(r["size_bytes"])),
                _cell(str(r["count"])),
                _cell(f"{r['time_us']:.1f}"),
                _cell(f"{r['algbw_gbps']:.2f}"),
                _cell(f"{r['busbw_gbps']:.2f}"),
                _cell(str(r["wrong"]), "broken" if r["wrong"] else ""),
            ]
            for r in rows
        ]
        parts.append(_table(body, ["size", "count", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "#wrong"]))
    return "\n".join(parts)


def _outcome_class(outcome) -> str:
    """The class of an outcome cell: a test outcome pytest gives, or ``unknown``; never the document's text."""
    return outcome if outcome in ("passed", "failed", "skipped", "error") else "unknown"


def _outcome_cell(entry: dict) -> str:
    """An entry's outcome in capitals, in the cell of its class."""
    return _cell(str(entry.get("outcome", "")).upper(), _outcome_class(entry.get("outcome")))


_GATED = "<p>No test ran: the run gate stopped the run (see above).</p>"


def _checks(doc: dict) -> str:
    checks = doc.get("checks") or []
    if not checks and doc.get("gate"):
        return _GATED
    if not checks:
        return (
            "<p>No health-check items ran (--gputopo-check).</p>"
            if doc.get("complete", True) is not False
            else "<p>No health-check item had an outcome when this was written.</p>"
        )

    def row(c):
        return [_cell(c.get("check", ""), "text"), _outcome_cell(c), _cell(c.get("message", ""), "text")]

    ordered = sorted(checks, key=lambda c: _FIRST.get(c.get("outcome"), 2))  # failures first; stable within
    rows = [row(c) for c in ordered if c.get("outcome") in ("failed", "error")]
    # Checks skipped for one reason: one row, the reason said once (as the verdict says it).
    groups = (verdict(doc) or {}).get("not_judged") or [{"checks": [c.get("check")]} for c in ordered]
    for group in groups:
        names = group["checks"]
        if len(names) == 1:
            rows += [row(c) for c in ordered if c.get("check") == names[0] and c.get("outcome") == "skipped"][:1]
        else:
            rows.append(
                [
                    _cell(group["kinds"], "text"),
                    _cell(f"SKIPPED x{len(names)}", "skipped"),
                    f'<td class="text">{_t(group["reason"])}<br><small>{_t(", ".join(names))}</small></td>',
                ]
            )
    rows += [row(c) for c in ordered if c.get("outcome") not in ("failed", "error", "skipped")]
    return _table(rows, ["check", "outcome", "message"])


_FIRST = {"failed": 0, "error": 0, "skipped": 1}  # the order of outcomes in a table: what failed first


def _unmet(doc: dict) -> str:
    unmet = doc.get("unmet") or []
    if not unmet and doc.get("gate"):
        return _GATED
    if not unmet:  # "every" only of a finished run: an incomplete one does not know the rest
        return (
            "<p>Every selected test's requirements were met.</p>"
            if doc.get("complete", True) is not False
            else "<p>No test had been skipped for an unmet requirement when this was written "
            "(the run had not finished).</p>"
        )
    unmet = sorted(unmet, key=lambda u: _FIRST.get(u.get("outcome"), 2))
    rows = [
        [
            _cell(u.get("test", ""), "text"),
            _outcome_cell(u),
            _cell(u.get("requirement", "")),
            _cell(u.get("reason", ""), "text"),
        ]
        for u in unmet
    ]
    return _table(rows, ["test", "outcome", "requirement", "reason"])


def _leased(doc: dict) -> str | None:
    """Each leased test's GPU memory: its budget per GPU and its peak (NVML's per-process used memory),
    over the budget in red; None (no section) where no test was leased."""
    leased = doc.get("leased") or []
    if not leased:
        return None
    rows = []
    for e in leased:
        budget, peak = e.get("budget_gib"), e.get("peak_gib")
        over = isinstance(budget, (int, float)) and isinstance(peak, (int, float)) and peak > budget
        peak_text = f"{peak:.2f} GiB" if isinstance(peak, (int, float)) else f"unknown: {e.get('peak_unknown') or ''}"
        budget_text = f"{budget:g} GiB" if isinstance(budget, (int, float)) else "whole GPUs"
        rows.append(
            [
                _cell(e.get("test", ""), "text"),
                _cell(budget_text),
                _cell(peak_text + (" (over its budget)" if over else ""), "failed" if over else ""),
            ]
        )
    return _table(rows, ["test", "budget per GPU", "peak on one GPU (NVML, measured)"])


def _nccl(doc: dict) -> str:
    nccl = doc.get("nccl")
    if not nccl:
        return "<p>NCCL's view was not needed in this run.</p>"
    parts = [f'<p>Origin: <span class="origin">{_t(nccl.get("origin", ""))}</span></p>']
    if nccl.get("account_line"):
        parts.append(f"<p>{_t(nccl['account_line'])}</p>")
    fallbacks = nccl.get("fallbacks") or []
    if fallbacks:
        rows = [
            [
                _cell(f["pair"]),
                _cell(f["label"]),
                _cell(f["actual"], "below"),
                _cell(f["expected"], "ok"),
                _cell("; ".join(f["causes"]), "text"),
            ]
            for f in fallbacks
        ]
        parts += ["<h3>Fallback</h3>", _table(rows, ["pair", "link", "uses", "instead of", "cause"])]
    pairs = nccl.get("pairs") or []
    if pairs:
        rows = [[_cell(p["pair"]), _cell(", ".join(p["transports"]) or "?"), _cell(p["why"], "text")] for p in pairs]
        parts += ["<h3>Transport per pair</h3>", _table(rows, ["pair", "transport", "why"])]
    return "\n".join(parts)


def _nodes(doc: dict) -> str:
    nodes = doc.get("nodes") or []
    parts = []
    for node in nodes:
        topology = schema.from_dict(node["topology"])
        flag = ' <span class="differs">DIFFERS from rank 0\'s</span>' if node.get("differs") else ""
        parts += [f"<h3>{_t(node.get('where', ''))}{flag}</h3>", _machine(topology, node.get("nvlink_faults") or {})]
    return "\n".join(parts)


# The verdict's banner: its colour by word (a class the stylesheet knows), the word itself always written.
_VERDICT_CLASS = {"FAILED": "failed", "PASSED": "passed", "INCOMPLETE": "skipped"}
_BANNER_ROWS = 8  # causes on the first screen; the sections below list every one, failures first


def _banner(v: dict, origin: str, state: str) -> tuple[str, str]:
    """The run's verdict first (the document's, ``core.run_verdict``): PASSED, FAILED or INCOMPLETE,
    what was judged, and each cause (what failed, where, what was found against what was wanted), then
    the tests not run and what could not be judged, each shared reason once. Returns the banner and
    the page's title."""
    word = str(v["word"])
    cls = _VERDICT_CLASS.get(word, "unknown")
    counts = "; ".join(v.get("counts") or []) or (
        "no health check ran (--gputopo-check) and no test was held back by a requirement"
    )
    if word == FAILED and not v.get("complete", True):
        counts += "; the run had not finished: more may have failed"
    parts = [
        f'<section id="verdict" class="{cls}">',
        f'<h1><span class="{cls}">{_t(word)}</span> gputopo report{_t(state)}</h1>',
        f'<p>{_t(counts)}. Source: <span class="origin">{_t(origin)}</span></p>',
    ]
    causes = v.get("causes") or []
    if causes:
        shown = causes[:_BANNER_ROWS]
        rows = [
            [
                _cell(str(c["outcome"]).upper(), _outcome_class(c["outcome"])),
                _cell(c["what"]),
                _cell(c["where"], "text"),
                _cell(c["found"], "text"),
            ]
            for c in shown
        ]
        if len(causes) > len(shown):
            rows.append(
                [
                    f'<td colspan="4" class="text">and {len(causes) - len(shown)} more: the sections below '
                    f"list each one, failures first</td>"
                ]
            )
        parts.append(_table(rows, ["outcome", "what", "where", "found"]))
    for group in v.get("not_judged") or []:
        n = len(group["checks"])
        parts.append(
            f"<p>Not judged: {_t(f'{n} check' + ('' if n == 1 else 's'))} ({_t(group['kinds'])}): "
            f"{_t(group['reason'])}</p>"
        )
    parts.append("</section>")
    failed = failed_causes(v)
    title = word + (f": {failed[0]['what']} {failed[0]['where']}" if failed else "")
    if len(failed) > 1:
        title += f" and {len(failed) - 1} more"
    return "\n".join(parts), f"{title} - gputopo report: {origin}"


def html_report(doc: dict) -> str:
    """The whole report, from a ``--gputopo-json`` document (``check_document`` holds for it): a run's
    verdict first, then its evidence (the checks and requirements, failures first), then the machine."""
    topology = schema.from_dict(doc["topology"])
    origin = source_text(topology)
    state = "" if doc.get("complete", True) else " (incomplete: the run had not finished)"
    # A run's document holds every section's key; a sweep's (gputopo bench) the machine and its sweeps.
    drawn = [
        ("checks", "Checks", _checks),
        ("unmet", "Unmet requirements", _unmet),
        ("topology", "Machine", None),
        ("measurements", "Bandwidth: measured, cached or recorded", lambda d: _bandwidth(d, topology)),
        ("sweeps", "All-reduce sweeps", _sweeps),
        ("nccl", "NCCL", _nccl),
        ("nodes", "Nodes of the run", _nodes),
        ("leased", "Leased tests' GPU memory", _leased),
    ]
    drawn_sections = [
        (title, _machine(topology, doc.get("nvlink_faults") or {}) if draw is None else draw(doc))
        for key, title, draw in drawn
        if key in doc
    ]
    sections = [(title, content) for title, content in drawn_sections if content is not None]
    body = "\n".join(f"<section><h2>{title}</h2>\n{content}\n</section>" for title, content in sections)
    v = verdict(doc)
    if v is not None:
        head, title = _banner(v, origin, state)
    else:
        head = f'<h1>gputopo report{_t(state)}</h1>\n<p>Source: <span class="origin">{_t(origin)}</span></p>'
        title = f"gputopo report: {origin}"
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{_t(title)}</title>\n<style>{STYLESHEET}</style>\n</head>\n<body>\n{head}\n"
        f"{body}\n<section><h2>Legend</h2>\n{_legends()}</section>\n</body>\n</html>\n"
    )
