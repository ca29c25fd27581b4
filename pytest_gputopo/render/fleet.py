"""The fleet view written out: terminal lines, GitHub-flavoured Markdown for a CI step's summary, the JSON
document and one self-contained HTML page (a table per group: nodes as rows, the facts and figure classes
that set a node apart as columns, the evidence on hover). Every string from a document is escaped for
the medium it lands in."""

from __future__ import annotations

import re

from ..core.fleet import Fleet, Group
from ..core.units import counted
from .escape import html_attribute, html_text, markdown, terminal

FLEET_SCHEMA = 1


def _verdict(fleet: Fleet, unread: list) -> str:
    nodes = sum(len(g.nodes) for g in fleet.groups)
    said = [f"{counted(len(fleet.named), 'node')} named" if fleet.named else "",
            f"{counted(len(fleet.splits), 'group finding')} (a group split)" if fleet.splits else "",
            f"{counted(len(unread), 'document')} not read" if unread else ""]
    said = [s for s in said if s]
    return (f"gputopo fleet: {counted(nodes, 'node')} in {counted(len(fleet.groups), 'group')}: "
            + ("; ".join(said) if said else "no node differs from its peers"))


def _group_title(group: Group) -> str:
    return f"{group.kind}: {counted(len(group.nodes), 'node')}"


_PAIR_LINK = re.compile(r"(GPU\d+)-(GPU\d+) link")


def _said(findings: list) -> list[str]:
    """What a node's findings say, one line each, except that the links of the pairs of one GPU that all
    differ from the same reference are one line (a GPU that lost its NVLinks changes all its pairs)."""
    pairs = [(f, _PAIR_LINK.fullmatch(f.fact)) for f in findings]
    pairs = [(f, m.groups()) for f, m in pairs if m and f.reference]
    by_gpu: dict = {}
    for f, gpus in pairs:
        for gpu in gpus:
            by_gpu.setdefault((gpu, f.reference), []).append(f)
    gathered, out = set(), []
    for (gpu, reference), group in sorted(by_gpu.items(), key=lambda item: -len(item[1])):
        group = [f for f in group if id(f) not in gathered]
        if len(group) >= 2:
            gathered.update(id(f) for f in group)
            cells = ", ".join(f"{'-'.join(_PAIR_LINK.fullmatch(f.fact).groups())} {f.value}" for f in group)
            out.append(f"{gpu}'s pairs: {cells}, where their peers have {reference}")
    return [f.says for f in findings if id(f) not in gathered] + out


def lines(fleet: Fleet, unread: list) -> list[str]:
    """What the terminal shows: per group, each named node with its findings, then the group's own."""
    out = []
    for group in fleet.groups:
        out.append(_group_title(group))
        for node in group.nodes:
            out += [f"  NAMED {node.name}: {said}" for said in _said(group.of(node.name))]
        out += [f"  SPLIT {f.says}" for f in group.findings if f.kind == "split"]
        out += [f"  not judged: {why}" for why in group.unjudged]
    out += [f"not read: {path}: {why}" for path, why in unread]
    return [terminal(line) for line in out] + [terminal(_verdict(fleet, unread))]


def summary_markdown(fleet: Fleet, unread: list) -> str:
    out = [f"### {markdown(_verdict(fleet, unread))}", ""]
    for group in fleet.groups:
        out += [f"#### {markdown(_group_title(group))}", ""]
        rows = [(n.name, said) for n in group.nodes for said in _said(group.of(n.name))]
        rows += [("(the group)", f.says) for f in group.findings if f.kind == "split"]
        if rows:
            out += ["| node | finding |", "|---|---|"] + [f"| {markdown(n)} | {markdown(said)} |" for n, said in rows]
        else:
            out.append("No node differs from its peers.")
        out += [f"- not judged: {markdown(why)}" for why in group.unjudged] + [""]
    out += [f"- not read: {markdown(path)}: {markdown(why)}" for path, why in unread]
    return "\n".join(out).rstrip() + "\n"


def document(fleet: Fleet, unread: list) -> dict:
    def finding(f):
        return {"kind": f.kind, "fact": f.fact, "says": f.says, "node": f.node}

    return {"schema": FLEET_SCHEMA, "healthy": fleet.healthy and not unread, "named": fleet.named,
            "groups": [{"kind": g.kind, "reference": g.reference,
                        "medians": {c: {"median_gbps": m, "allowed_drop": d, "nodes": n}
                                    for c, (m, d, n) in g.medians.items()},
                        "nodes": [{"name": n.name, "document": n.path, "written": n.when,
                                   "findings": [finding(f) for f in g.of(n.name)],
                                   "not_judged": g.unjudged_of(n)} for n in g.nodes],
                        "group_findings": [finding(f) for f in g.findings if f.node is None],
                        "not_judged": list(g.unjudged)} for g in fleet.groups],
            "not_read": [{"document": p, "why": w} for p, w in unread]}


_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #111; }
table { border-collapse: collapse; margin: .5em 0 1.5em; } th, td { border: 1px solid #ccc; padding: 2px 6px; }
th { background: #f4f4f4; text-align: left; position: sticky; top: 0; }
.named { background: #e06666; color: #fff; } .split { background: #fbe38a; } .same { color: #666; }
.unknown { background: #ddd; } .ok { background: #eef8f0; }
#verdict { border: 3px solid #888; border-radius: 6px; padding: .3em 1em; margin-bottom: 1.2em; }
#verdict.failed { border-color: #c62828; background: #fdecea; }
#verdict.passed { border-color: #1a7f37; background: #eef8f0; }
"""


def _columns(group: Group) -> list[str]:
    """The facts and figure classes with a finding in the group, in the order the findings came."""
    return list(dict.fromkeys(f.fact for f in group.findings))


def _cell(group: Group, node, column: str, split: set) -> str:
    mine = [f for f in group.of(node.name) if f.fact == column]
    if column in group.medians:  # a figure class: the node's lowest figure of it
        figures = [fig.gbps for fig in node.figures if fig.cls == column]
        value = f"{min(figures):.1f}" if figures else "?"
        evidence = (f"lowest of {len(figures)}; group median {group.medians[column][0]:.1f} GB/s" if figures
                    else "no figure of this class in its document")
    else:
        value = node.facts.get(column) or "?"
        reference = group.reference.get(column)
        evidence = f"as the group: {reference}" if reference else ""
    if mine:
        evidence = mine[0].says
    elif column in split:
        evidence = evidence or "the group is split on this fact"
    cls = "named" if mine else "split" if column in split else "unknown" if value == "?" else "same"
    return f'<td class="{cls}" title="{html_attribute(evidence)}">{html_text(value)}</td>'


def _group_html(group: Group) -> list[str]:
    out = [f"<h2>{html_text(_group_title(group))}</h2>"]
    split = {f.fact for f in group.findings if f.kind == "split"}
    out += [f'<p class="split">Split: {html_text(f.says)}</p>' for f in group.findings if f.kind == "split"]
    out += [f"<p>Not judged: {html_text(why)}</p>" for why in group.unjudged]
    columns = _columns(group)
    agree = len(group.reference) - len([c for c in columns if c in group.reference])
    out.append(f"<p>{html_text(counted(agree, 'fact'))} the same on every node that says it; the columns are "
               f"the facts and figure classes that set a node apart.</p>")
    out.append("<table><tr><th>node</th><th>findings</th>" + "".join(f"<th>{html_text(c)}</th>" for c in columns)
               + "<th>not judged</th></tr>")
    named = [n for n in group.nodes if group.of(n.name)]
    for node in named + [n for n in group.nodes if not group.of(n.name)]:
        count = len(group.of(node.name))
        out.append(f'<tr><td title="{html_attribute(node.path)}">{html_text(node.name)}</td>'
                   f'<td class="{"named" if count else "ok"}">{count}</td>'
                   + "".join(_cell(group, node, c, split) for c in columns)
                   + f"<td>{html_text('; '.join(group.unjudged_of(node)))}</td></tr>")
    return out + ["</table>"]


def html_page(fleet: Fleet, unread: list) -> str:
    verdict = _verdict(fleet, unread)
    state = "passed" if fleet.healthy and not unread else "failed"
    body = [f'<div id="verdict" class="{state}"><h1>{html_text(verdict)}</h1>'
            "<p>Each node is judged against the nodes of its GPU model: the value most of them share, and "
            "the median and spread of their measured figures. Hover over a cell for the evidence.</p></div>"]
    for group in fleet.groups:
        body += _group_html(group)
    if unread:
        body += ["<h2>Not read</h2><ul>"] + [f"<li>{html_text(p)}: {html_text(w)}</li>" for p, w in unread] + ["</ul>"]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html_text(verdict)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")
