"""One escaping function per medium a value from data is written to: a terminal line, Markdown
(GitHub's job summary, a table cell or running text), HTML text, an HTML attribute value, and a
GitHub workflow command's message and property. Every string a profile, a log, a saved report or a
test id carries is untrusted: it is escaped where it is written, by the function of that medium.

- ``terminal``: no control character reaches a terminal line (C0, DEL, C1, line and paragraph
  separators, format characters such as bidi overrides): each is shown as Python shows it in a
  string (``\\n``, ``\\r``, ``\\t``, ``\\x1b``, ``\\u202e``), so a name holding
  ``"x\\n::add-mask::y"`` is one line a CI runner does not act on; ``terminal_line`` (a whole line)
  also shows the colon or bracket that would start a workflow command (``::add-mask::y``) escaped.
- ``markdown``: what a GitHub-flavoured Markdown renderer shows as exactly this text (controls shown
  as ``terminal`` shows them), in a table cell or a paragraph: every ASCII punctuation character is
  backslash-escaped (no emphasis, code span, link, autolink, raw HTML, comment, heading, list, quote
  or math), ``|`` is a character reference (it never splits a table row), and leading or trailing
  spaces are references too (no indented code block, nothing trimmed).
- ``html_text`` / ``html_attribute``: text that an HTML parser reads back as exactly this text, in
  element content or in a double- or single-quoted attribute value.
- ``workflow_data`` / ``workflow_property``: actions/toolkit's ``escapeData`` and ``escapeProperty``
  (command.ts), as the runner unescapes them.
"""

from __future__ import annotations

import html
import re
import string

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _shown(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else (f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")


def terminal(text) -> str:
    """``text`` for one terminal line: every character ``str.isprintable`` refuses, shown escaped."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _shown(ch) for ch in text)


# A GitHub runner reads a line of a step's output as a workflow command where it starts with "::" after
# its leading whitespace (actions/runner ActionCommand.TryParseV2: ``message.TrimStart()``), and as an
# old-style one where it holds "##[" (TryParse): such a line, unless the tool meant it, is written with
# its first colon (or bracket) shown as an escape, as ``terminal`` shows a control character.
_WORKFLOW_COMMAND = re.compile(r"^(\s*):(?=:)")


def terminal_line(text) -> str:
    """``text`` as one whole line of a terminal or CI log: ``terminal``'s escaping, and no workflow
    command a CI runner would act on ("::add-mask::x" is written "\\x3a:add-mask::x")."""
    line = _WORKFLOW_COMMAND.sub(lambda m: m.group(1) + "\\x3a", terminal(text))
    return line.replace("##[", "##\\x5b")


def terminal_lines(lines) -> list[str]:
    """Each line escaped with ``terminal_line``: lines from data, each still one line, none a workflow
    command."""
    return [terminal_line(line) for line in lines]


# ASCII punctuation with no meaning to GitHub-flavoured Markdown inside a line of text: kept as it is
# (readable); every other punctuation character is backslash-escaped, ``|`` written as a reference.
_MD_PLAIN = frozenset(",;/=?%'\"^{}()-.:")
_MD_PUNCT = {c: "\\" + c for c in string.punctuation if c not in _MD_PLAIN}
_MD_PUNCT["|"] = "&#124;"  # a reference: no table row is ever split by it, whatever precedes it
_MD_LIST = re.compile(r"\d{1,9}(?=[.)])")  # "1." or "1)" at the start: an ordered list
_MD_LINK = re.compile(r"(?i)(?<=www)\.|:(?=//)")  # where an autolink (www. or scheme://) starts


def markdown(text) -> str:
    """``text`` as GitHub-flavoured Markdown shows it, in a table cell or running text."""
    text = terminal(text)
    out = "".join(_MD_PUNCT.get(ch, ch) for ch in _MD_LINK.sub(lambda m: "\x00" + m.group(), text))
    out = out.replace("\x00", "\\")  # (no NUL survives terminal(): a marker for an escape)
    body = out.lstrip(" ")
    lead = len(out) - len(body)
    number = _MD_LIST.match(body)
    if number:  # the list's delimiter escaped
        body = body[: number.end()] + "\\" + body[number.end() :]
    elif body[:1] in _MD_PLAIN and body[:1] in string.punctuation:  # a block's start: "-", "=" (setext)...
        body = "\\" + body
    core = body.rstrip(" ")
    if not core:
        return "&#32;" * len(out)
    return "&#32;" * lead + core + "&#32;" * (len(body) - len(core))


def html_text(text) -> str:
    """``text`` as HTML element content (and safe in a quoted attribute too)."""
    return html.escape(str(text), quote=True)


def html_attribute(text) -> str:
    """``text`` as an HTML attribute value, to be written between double (or single) quotes."""
    return html.escape(str(text), quote=True)


def workflow_data(text) -> str:
    """A workflow command's message (actions/toolkit ``escapeData``)."""
    return str(text).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def workflow_property(text) -> str:
    """A workflow command's property value (actions/toolkit ``escapeProperty``)."""
    return workflow_data(text).replace(":", "%3A").replace(",", "%2C")
