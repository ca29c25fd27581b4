"""The fleet view written out: terminal lines, GitHub-flavoured Markdown for a CI step's summary, the JSON
document and one self-contained HTML page (a table per group: nodes as rows, one column per kind of fact
that sets a node apart, the evidence on hover and in a details row). It draws what ``core.fleet``
decided, from its records (``core.fleet_findings``): one line per finding (a cause), the two kinds of
finding (a node's own fault, a difference from its peers) said apart. Every string from a document is
escaped for the medium it lands in."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..core.fleet_facts import Node
from ..core.fleet_findings import FAULT, IDENTITY, SPLIT, Finding, Fleet, Group
from ..core.units import counted
from .escape import html_attribute, html_text, markdown, terminal_lines

FLEET_SCHEMA = 1
FLEET_KIND = "gputopo fleet"  # the JSON document's "kind": the reader sets its own document aside by it


def _tag(f: Finding) -> str:
    """The kind of finding, said: a node's own fault (whatever its peers hold), or unlike its peers."""
    return "its own fault" if f.kind in (FAULT, IDENTITY) else "unlike its peers"


def _not_compared(fleet: Fleet) -> str:
    return "; ".join(f"{g.kind}: {counted(len(g.nodes), 'node')}" for g in fleet.not_compared)


def _verdict(fleet: Fleet, unread: list) -> str:
    nodes = sum(len(g.nodes) for g in fleet.groups)
    own = [n.name for g in fleet.groups for n in g.nodes if any(f.kind in (FAULT, IDENTITY) for f in g.of(n.name))]
    whose = "a fault of its own" if len(own) == 1 else "faults of their own"
    said = [
        f"{counted(len(fleet.named), 'node')} named" + (f" ({len(own)} for {whose})" if own else "")
        if fleet.named
        else "",
        f"{counted(len(fleet.splits), 'group finding')} (a group split)" if fleet.splits else "",
        f"{counted(sum(len(g.nodes) for g in fleet.not_compared), 'node')} not judged by its peers "
        f"(too few of its GPU model: {_not_compared(fleet)}; 3 needed)"
        if fleet.not_compared
        else "",
        f"{counted(len(unread), 'document')} not read" if unread else "",
        f"{counted(len(fleet.superseded), 'document')} superseded by another of its node" if fleet.superseded else "",
        f"{counted(len(fleet.set_aside), 'document')} set aside (not a node's)" if fleet.set_aside else "",
    ]
    said = [s for s in said if s]
    if fleet.healthy:
        said.insert(0, "every node judged by its peers; none has a fault of its own or differs from them")
    elif not fleet.named and not fleet.splits:
        said.append("no node has a fault of its own")
    return f"gputopo fleet: {counted(nodes, 'node')} in {counted(len(fleet.groups), 'group')}: " + "; ".join(said)


def _group_title(group: Group) -> str:
    return f"{group.kind}: {counted(len(group.nodes), 'node')}"


def lines(fleet: Fleet, unread: list) -> list[str]:
    """What the terminal shows: per group, each named node with one line per finding (its own faults
    first), the group's splits, what it could not judge; then the documents superseded and not read, and
    one verdict line. Each line escaped as a whole line (no control character, no workflow command)."""
    out = []
    for group in fleet.groups:
        out.append(_group_title(group))
        for node in group.nodes:
            out += [f"  NAMED {node.name}: {_tag(f)}: {f.says}" for f in group.of(node.name)]
        out += [f"  SPLIT {f.says}" for f in group.findings if f.kind == SPLIT]
        out += [f"  not judged: {why}" for why in group.unjudged]
    out += [f"superseded: {s.path}: {s.why}" for s in fleet.superseded]
    out += [f"set aside: {path}: {why}" for path, why in fleet.set_aside]
    out += [f"not read: {path}: {why}" for path, why in unread]
    return terminal_lines(out + [_verdict(fleet, unread)])


def summary_markdown(fleet: Fleet, unread: list) -> str:
    out = [f"### {markdown(_verdict(fleet, unread))}", ""]
    for group in fleet.groups:
        out += [f"#### {markdown(_group_title(group))}", ""]
        rows = [(n.name, _tag(f), f.says) for n in group.nodes for f in group.of(n.name)]
        rows += [("(the group)", "split", f.says) for f in group.findings if f.kind == SPLIT]
        if rows:
            out += ["| node | kind | finding |", "|---|---|---|"]
            out += [f"| {markdown(n)} | {kind} | {markdown(said)} |" for n, kind, said in rows]
        elif group.compared:
            out.append("No node has a fault of its own or differs from its peers.")
        else:
            out.append("No node has a fault of its own; too few nodes to judge them by their peers.")
        out += [f"- not judged: {markdown(why)}" for why in group.unjudged] + [""]
    out += [f"- superseded: {markdown(s.path)}: {markdown(s.why)}" for s in fleet.superseded]
    out += [f"- set aside: {markdown(path)}: {markdown(why)}" for path, why in fleet.set_aside]
    out += [f"- not read: {markdown(path)}: {markdown(why)}" for path, why in unread]
    return "\n".join(out).rstrip() + "\n"


def _finding(f: Finding) -> dict:
    out: dict[str, Any] = {
        "kind": f.kind,
        "fact": f.fact,
        "says": f.says,
        "node": f.node,
        "column": f.column,
        "items": list(f.items),
        "evidence": list(f.evidence),
    }
    if f.kind == SPLIT:
        out["sides"] = [
            {
                "nodes": list(nodes),
                "values": dict(zip(f.items, values, strict=True))
                if len(values) == len(f.items)
                else {f.fact: values[0]},
            }
            for values, nodes in f.sides
        ]
        out["disagreeing"] = list(f.disagreeing)
    return out


def _node_entry(g: Group, n: Node) -> dict:
    return {
        "name": n.name,
        "document": n.path,
        "written": n.when,
        "judged_because": n.judged_because,
        "gpu_uuids": list(n.uuids),
        "findings": [_finding(f) for f in g.of(n.name)],
        "disagrees": [f.fact for f in g.disagreeing(n.name)],
        "not_judged": g.unjudged_of(n),
    }


def _document(fleet: Fleet, unread: list, entries: Callable[[Group], Iterable[dict]]) -> dict:
    """The fleet's JSON document, each group's node entries as ``entries`` gives them."""
    return {
        "schema": FLEET_SCHEMA,
        "kind": FLEET_KIND,
        "healthy": fleet.healthy and not unread,
        "named": fleet.named,
        "verdict": _verdict(fleet, unread),
        "not_compared": [n.name for g in fleet.not_compared for n in g.nodes],
        "groups": [
            {
                "kind": g.kind,
                "compared": g.compared,
                "reference": g.reference,
                "medians": {c: {"median_gbps": m, "allowed_drop": d, "nodes": k} for c, (m, d, k) in g.medians.items()},
                "nodes": entries(g),
                "group_findings": [_finding(f) for f in g.findings if f.node is None],
                "not_judged": list(g.unjudged),
            }
            for g in fleet.groups
        ],
        "superseded": [{"document": s.path, "node": s.node, "by": s.by, "why": s.why} for s in fleet.superseded],
        "set_aside": [{"document": p, "why": w} for p, w in fleet.set_aside],
        "not_read": [{"document": p, "why": w} for p, w in unread],
    }


def document(fleet: Fleet, unread: list) -> dict:
    return _document(fleet, unread, lambda g: [_node_entry(g, n) for n in g.nodes])


class _Entries:
    """A group's node entries, each made when the text reaches it (``document_text``)."""

    def __init__(self, group: Group) -> None:
        self.group = group

    def __iter__(self) -> Iterator[dict]:
        return (_node_entry(self.group, n) for n in self.group.nodes)


# Encoded whole from this nesting on: a node's entry (the document, "groups", a group, "nodes", the
# entry), a piece of some 700 bytes, which the nodes' figures let go of once judged make room for.
_WHOLE_LEVEL = 4


def document_text(fleet: Fleet, unread: list) -> str:
    """``json.dumps(document(fleet, unread), indent=1)`` and a newline, each node's entry made and
    encoded on its own: a fleet's entries, and the encoder's thousands of small pieces of each, are
    never all held at once (they were the fleet view's largest use of memory after its nodes')."""
    out: list[str] = []
    _encode(_document(fleet, unread, _Entries), 0, out)
    out.append("\n")  # in the one join: a text and a copy of it with its newline would be held at once
    return "".join(out)


def _encode(value: Any, level: int, out: list[str]) -> None:
    """``value`` as ``json.dumps(value, indent=1)`` writes it at nesting ``level``, in pieces: a
    container above ``_WHOLE_LEVEL`` item by item, anything else whole (json indents each line of it by
    its depth, and a string's newline is escaped, so each line break takes the ``level`` spaces)."""
    pad = "\n" + " " * (level + 1)
    if isinstance(value, _Entries) or (isinstance(value, (list, tuple)) and value and level < _WHOLE_LEVEL):
        first = True
        for item in value:
            out.append(("[" if first else ",") + pad)
            _encode(item, level + 1, out)
            first = False
        out.append("[]" if first else "\n" + " " * level + "]")
    elif isinstance(value, dict) and value and level < _WHOLE_LEVEL and all(type(k) is str for k in value):
        for i, (key, item) in enumerate(value.items()):
            out.append(("," if i else "{") + pad + json.dumps(key) + ": ")
            _encode(item, level + 1, out)
        out.append("\n" + " " * level + "}")
    else:
        out.append(json.dumps(value, indent=1).replace("\n", "\n" + " " * level))


_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #111; max-width: 1360px; }
table { border-collapse: collapse; margin: .5em 0 1.5em; table-layout: fixed; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 2px 6px; overflow-wrap: anywhere; vertical-align: top; }
th { background: #f4f4f4; text-align: left; position: sticky; top: 0; }
.named { background: #e06666; color: #fff; } .split { background: #fbe38a; } .same { color: #666; }
.unknown { background: #ddd; } .ok { background: #eef8f0; }
details { font-size: 90%; } summary { cursor: pointer; } details ul { margin: .2em 0; padding-left: 1.2em; }
#verdict { border: 3px solid #888; border-radius: 6px; padding: .3em 1em; margin-bottom: 1.2em; }
#verdict.failed { border-color: #c62828; background: #fdecea; }
#verdict.unjudged { border-color: #b58900; background: #fff8e1; }
#verdict.passed { border-color: #1a7f37; background: #eef8f0; }
"""


def _columns(group: Group) -> list[str]:
    """One column per kind of fact with a finding in the group (a pair's link, P2P, a figure class), in
    the order the findings came: 28 pairs' P2P are one column."""
    return list(dict.fromkeys(f.column or f.fact for f in group.findings))


def _cell(group: Group, node, column: str) -> str:
    mine = [f for f in group.of(node.name) if (f.column or f.fact) == column]
    split = [f for f in group.findings if f.kind == SPLIT and (f.column or f.fact) == column]
    if mine:
        text = "; ".join(f.says for f in mine)
        items = sum(max(1, len(f.items)) for f in mine)
        one = mine[0]
        where = one.fact.removesuffix(one.column).strip() if one.column and one.fact.endswith(one.column) else ""
        value = (
            f"{where} {one.value}".strip()
            if len(mine) == 1 and one.value is not None
            else ("fault" if all(f.kind in (FAULT, IDENTITY) for f in mine) else "differs")
        )
        if items > 1:
            value = f"{value} ({counted(items, 'fact')})"
        said = [e for f in mine for e in f.evidence]
        body = html_text(value) + (
            f"<details><summary>{len(said)}</summary><ul>"
            + "".join(f"<li>{html_text(e)}</li>" for e in said)
            + "</ul></details>"
            if said
            else ""
        )
        return f'<td class="named" title="{html_attribute(text)}">{body}</td>'
    if split:
        side = [values for f in split for values, nodes in f.sides if node.name in nodes]
        value = ", ".join(dict.fromkeys(v for values in side for v in values)) or "?"
        return f'<td class="split" title="{html_attribute(split[0].says)}">{html_text(value)}</td>'
    if column in group.medians:  # a figure class: the node's lowest figure of it
        lowest = group.lowest.get(column, {}).get(node.name)
        value = f"{lowest[0]:.1f}" if lowest else "?"
        evidence = (
            f"lowest of {lowest[1]}; group median {group.medians[column][0]:.1f} GB/s"
            if lowest
            else "no figure of this class in its document"
        )
    else:
        value = node.facts.get(column)
        reference = group.reference.get(column)
        value, evidence = (value or "as its peers", f"as the group: {reference}" if reference else "")
    css = "unknown" if value == "?" else "same"
    return f'<td class="{css}" title="{html_attribute(evidence)}">{html_text(value)}</td>'


def _state(group: Group, node) -> tuple[str, str]:
    mine, split = group.of(node.name), group.disagreeing(node.name)
    if mine:
        return "named", str(len(mine))
    if split:
        return "split", f"0 named; disagrees in {counted(len(split), 'split')}"
    if not group.compared:
        return "unknown", "0 faults; not compared"
    if any(f.kind == SPLIT for f in group.findings):
        return "same", "0 named; group split"
    return "ok", "0"


def _group_html(group: Group) -> list[str]:
    out = [f"<h2>{html_text(_group_title(group))}</h2>"]
    out += [f'<p class="split">Split: {html_text(f.says)}</p>' for f in group.findings if f.kind == SPLIT]
    out += [f"<p>Not judged: {html_text(why)}</p>" for why in group.unjudged]
    columns = _columns(group)
    out.append(
        f"<p>{html_text(counted(len(group.reference), 'fact'))} compared with peers; a column per kind of "
        "fact that sets a node apart (red: named, yellow: split), the evidence on hover and under the "
        "count.</p>"
    )
    out.append(
        "<table><tr><th>node</th><th>findings</th>"
        + "".join(f"<th>{html_text(c)}</th>" for c in columns)
        + "<th>not judged</th></tr>"
    )
    first = [n for n in group.nodes if group.of(n.name)] + [
        n for n in group.nodes if group.disagreeing(n.name) and not group.of(n.name)
    ]
    for node in first + [n for n in group.nodes if n not in first]:
        state, count = _state(group, node)
        out.append(
            f'<tr><td title="{html_attribute(node.path)}">{html_text(node.name)}</td>'
            f'<td class="{state}">{html_text(count)}</td>'
            + "".join(_cell(group, node, c) for c in columns)
            + f"<td>{html_text('; '.join(group.unjudged_of(node)))}</td></tr>"
        )
    return out + ["</table>"]


def html_page(fleet: Fleet, unread: list) -> str:
    verdict = _verdict(fleet, unread)
    state = (
        "passed" if fleet.healthy and not unread else "failed" if fleet.named or fleet.splits or unread else "unjudged"
    )
    body = [
        f'<div id="verdict" class="{state}"><h1>{html_text(verdict)}</h1>'
        "<p>Each node is named for a fault of its own (a fact with a healthy value it does not have), "
        "whatever its peers hold, and for a difference from the nodes of its GPU model: the value most "
        "of them share, and the median and spread of their measured figures.</p></div>"
    ]
    for group in fleet.groups:
        body += _group_html(group)
    if fleet.superseded:
        body += (
            ["<h2>Superseded</h2><ul>"]
            + [f"<li>{html_text(s.path)}: {html_text(s.why)}</li>" for s in fleet.superseded]
            + ["</ul>"]
        )
    if fleet.set_aside:
        body += (
            ["<h2>Set aside</h2><ul>"]
            + [f"<li>{html_text(p)}: {html_text(w)}</li>" for p, w in fleet.set_aside]
            + ["</ul>"]
        )
    if unread:
        body += ["<h2>Not read</h2><ul>"] + [f"<li>{html_text(p)}: {html_text(w)}</li>" for p, w in unread] + ["</ul>"]
    head = (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html_text(verdict)}</title>\n<style>{_CSS}</style>\n</head>\n<body>"
    )
    return "\n".join([head, *body, "</body>\n</html>\n"])  # one join: no copy of a fleet's page held twice
