"""The HTML report's stylesheet (``render.html``) and the class names a cell may carry: a class
built from data is one of these or none, so a document cannot style the page."""

from __future__ import annotations

from ..core.model import LinkClass

STYLESHEET = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #111; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #bbb; padding: 3px 7px; text-align: center; }
td.text, th.text { text-align: left; }
.origin { display: inline-block; padding: 1px 6px; border-radius: 3px; background: #eee; font-weight: 600; }
.legend td { text-align: left; }
.nv { background: #1a7f37; color: #fff; } .pix, .pxb { background: #9fd3a8; } .phb { background: #fbe38a; }
.node { background: #f6b26b; } .sys { background: #e06666; color: #fff; } .unknown { background: #ddd; }
.ok { background: #9fd3a8; } .refused { background: #e06666; color: #fff; }
.above { background: #1a7f37; color: #fff; } .met { background: #9fd3a8; }
.below, .staged { background: #e06666; color: #fff; }
.broken { background: #7b1fa2; color: #fff; } .absent { background: #fff; color: #666; }
.reference { background: #e8eef7; }
.passed { background: #9fd3a8; } .failed, .error { background: #e06666; color: #fff; } .skipped { background: #fbe38a; }
.self { background: #f4f4f4; color: #888; }
.differs { color: #b00; font-weight: 700; }
#verdict { border: 3px solid #888; border-radius: 6px; padding: .2em 1em .6em; margin-bottom: 1.2em; \
background: #fafafa; color: #111; }
#verdict.failed { border-color: #c62828; background: #fdecea; } \
#verdict.passed { border-color: #1a7f37; background: #eef8f0; }
#verdict.skipped { border-color: #c9a400; background: #fffbe6; }
#verdict h1 { font-size: 1.6em; margin: .4em 0; } #verdict h1 span { padding: 1px 12px; border-radius: 4px; }
#verdict td.text { background: #fff; max-width: 60em; }
@media print { * { -webkit-print-color-adjust: exact; print-color-adjust: exact; } body { margin: 0; } }
"""

# A link's cell in the matrices, by its class.
LINK_CLASSES = {
    LinkClass.NV: "nv",
    LinkClass.PIX: "pix",
    LinkClass.PXB: "pxb",
    LinkClass.PHB: "phb",
    LinkClass.NODE: "node",
    LinkClass.SYS: "sys",
}

# Every class the stylesheet gives a cell.
CELL_CLASSES = frozenset(
    {
        "text",
        "origin",
        "legend",
        "matrix",
        "nv",
        "pix",
        "pxb",
        "phb",
        "node",
        "sys",
        "unknown",
        "ok",
        "refused",
        "above",
        "met",
        "below",
        "staged",
        "reference",
        "broken",
        "absent",
        "passed",
        "failed",
        "error",
        "skipped",
        "self",
        "differs",
    }
)
