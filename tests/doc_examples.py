"""The fenced blocks of README.md and docs/*.md, read as a reader copies them: which are examples to
run (Python test files and conftests, shell commands, CI workflows, ini files), what a block shown as
output must match, and the one way a doc says an example is not run here:

    <!-- example: not run (needs srun and two GPU nodes) -->

as the last line before the block's fence (an HTML comment: invisible where the page is rendered).
"""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
_NOTE = re.compile(r"^\s*<!--\s*example:\s*(?P<note>.*?)\s*-->\s*$")
# "not run (WHY)": the whole block; "not run: CMD, CMD (WHY)": the lines (or "&&"/";" parts of a line)
# that start with one of those commands, the rest of the block being run.
NOT_RUN = re.compile(r"^not run(?::\s*(?P<commands>[^()]+?))?\s+\((?P<reason>.+)\)$")

# A shell line that is a command (after a "$ " prompt): the tools these docs tell a reader to run. A
# line "gputopo: ..." or "gputopo node-a ..." is output; "gputopo <subcommand>" is a command.
_SUBCOMMANDS = "show|machines|record|parse|spec|report|check|bench|fleet"
_COMMAND = re.compile(
    rf"^(\$ )?(pytest\b|gputopo ({_SUBCOMMANDS})\b|\.venv/bin/|dev/|pip |python |torchrun |srun "
    rf"|sbatch |nvidia-smi |nvbandwidth |export |#!)"
)


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository: "docs/markers.md"
    line: int  # the opening fence's line, 1-based
    info: str  # the fence's language ("python", "bash", "" ...)
    text: str  # the block's content, its list indentation removed
    note: str | None  # the "<!-- example: ... -->" just before the fence

    def __str__(self) -> str:
        first = next((ln for ln in self.text.splitlines() if ln.strip()), "")
        return f"{self.path}:{self.line} ({first[:60]})"

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    @property
    def kind(self) -> str | None:
        """What running it means: 'python' (a test module or conftest), 'shell' (commands),
        'workflow' (a CI file whose steps run commands), 'ini' (a pytest ini file); None for a block
        shown as output or as data (a profile, a grammar, a folder tree)."""
        if self.info == "python":
            return "python"
        if self.info == "ini":
            return "ini"
        if self.info == "yaml":
            return "workflow" if workflow_steps(self.text) else None
        first = next((ln.strip() for ln in self.lines if ln.strip() and not ln.startswith("# ")), "")
        if self.info in ("bash", "sh", "shell", "console") or (self.info == "" and _COMMAND.match(first)):
            return "shell"
        return None

    @property
    def not_run(self) -> tuple[tuple[str, ...], str] | None:
        """What the doc says is not run here, and why: (the commands not run, or () for the whole
        block; the reason), or None."""
        found = NOT_RUN.match(self.note or "")
        if not found:
            return None
        commands = tuple(c.strip() for c in (found["commands"] or "").split(",") if c.strip())
        return commands, found["reason"]


@functools.lru_cache(maxsize=1)
def blocks() -> tuple[Block, ...]:
    """Every fenced block of the docs, in order (read once per session)."""
    found = []
    for doc in DOCS:
        lines = doc.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            opening = _FENCE.match(lines[i])
            if not opening:
                i += 1
                continue
            fence, indent = opening["fence"], len(opening["indent"]) or len(lines[i]) - len(lines[i].lstrip())
            body, j = [], i + 1
            while j < len(lines) and not (
                lines[j].strip().startswith(fence[0] * len(fence)) and set(lines[j].strip()) == {fence[0]}
            ):
                body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
                j += 1
            before = next((ln for ln in reversed(lines[:i]) if ln.strip()), "")
            note = _NOTE.match(before)
            found.append(
                Block(
                    str(doc.relative_to(ROOT)),
                    i + 1,
                    opening["info"],
                    "\n".join(body) + "\n",
                    note["note"] if note else None,
                )
            )
            i = j + 1
    return tuple(found)


def commands(block: Block) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """A shell block as (command, the output lines shown under it) -- a transcript's "$ cmd" lines with
    what follows each, or every line of a block without prompts, its comments left to the shell --
    and the commands left out because the doc's note says they are not run here."""
    lines, joined = [], ""
    for ln in block.lines:  # a line ending in "\" goes on in the next
        joined = joined + ln.strip() if joined else ln
        if joined.endswith("\\"):
            joined = joined[:-1].rstrip() + " "
            continue
        lines.append(joined)
        joined = ""
    if any(ln.startswith("$ ") for ln in lines):
        steps: list[tuple[str, list[str]]] = []
        for ln in lines:
            if ln.startswith("$ "):
                steps.append((ln[2:], []))
            elif steps:
                steps[-1][1].append(ln)
    else:
        steps = [(ln, []) for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
    skip = block.not_run[0] if block.not_run else ()
    kept, left_out = [], []
    for command, shown in steps:
        parts = _split(command)  # command, separator, command, ... (a trailing comment dropped)
        out = []
        for k in range(0, len(parts), 2):
            if skip and parts[k].lstrip().startswith(skip):
                left_out.append(parts[k].strip())
            else:
                out += [parts[k], parts[k + 1] if k + 1 < len(parts) else ""]
        command = re.sub(r"\s*(&&|;)\s*$", "", "".join(out).strip())
        if command:
            kept.append((command, shown))
    return kept, left_out


def _split(line: str) -> list[str]:
    """A shell line as its commands and the "&&" / ";" between them, outside quotes and
    "$(...)"; a comment ("  # ...") ends it."""
    parts, current, quote, depth, i = [], "", None, 0, 0
    while i < len(line):
        c = line[i]
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif line.startswith("$(", i):
            depth += 1
        elif c == ")" and depth:
            depth -= 1
        elif not depth and c == "#" and (i == 0 or line[i - 1].isspace()):
            break
        elif not depth and (line.startswith("&&", i) or c == ";"):
            sep = "&&" if c == "&" else ";"
            parts += [current, f" {sep} "]
            current, i = "", i + len(sep)
            continue
        current += c
        i += 1
    return parts + [current]


@dataclass
class Step:
    command: str
    shown: list[str]  # the output the doc shows under it
    printed: str  # stdout and stderr, as a terminal shows them
    status: int


def run_shell(block: Block, cwd: Path, env: dict[str, str], timeout: float = 120) -> list[Step]:
    """Runs the block's commands as written, in order, in one bash in ``cwd`` (so ``$?`` and files
    carry from one to the next), each one's output and exit status apart."""
    steps, _ = commands(block)
    script = ["__status=0"]
    for i, (command, _) in enumerate(steps):
        script += [
            f"printf '\\n@@step {i}@@\\n'",
            "(exit $__status)",
            "{",
            command,
            "} 2>&1",
            "__status=$?",
            f"printf '\\n@@status {i} %d@@\\n' $__status",
        ]
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    found = re.split(r"\n@@step (\d+)@@\n", done.stdout)
    results = []
    for i, (command, shown) in enumerate(steps):
        body = found[2 + 2 * i]
        printed, status = re.match(r"(?s)(.*)\n@@status \d+ (\d+)@@\n$", body).groups()
        results.append(Step(command, shown, printed, int(status)))
    return results


def workflow_steps(text: str) -> list[tuple[str, str]]:
    """(job, command) of each step of a GitHub Actions or GitLab CI file that runs a command: a
    `- run: CMD` (or a folded `run: >` block) of GitHub's, a `script:` item of GitLab's."""
    steps, job, folded, script = [], None, None, False

    def scalar(style: str, lines: list[str]) -> str:  # YAML's ">" folds lines, "|" keeps them
        margin = min((len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()), default=0)
        return " ".join(ln.strip() for ln in lines) if style.startswith(">") else "\n".join(ln[margin:] for ln in lines)

    for ln in text.splitlines():
        indent = len(ln) - len(ln.lstrip())
        stripped = ln.strip()
        if folded is not None:
            if not stripped or indent > folded[0]:
                folded[2].append(ln)
                continue
            steps.append((job, scalar(folded[1], folded[2]).strip()))
            folded = None
        key = re.match(r"^ {0,2}(?P<key>[\w-]+):\s*(#.*)?$", ln)
        if key and key["key"] not in ("jobs", "steps", "script", "artifacts", "reports"):
            job = key["key"]
        found = re.match(r"^-?\s*-?\s*run:\s*(?P<cmd>.*)$", stripped)
        if found:
            cmd = found["cmd"]
            if cmd in (">", "|", ">-", "|-"):
                folded = (indent, cmd, [])
            else:
                steps.append((job, cmd))
            script = False
        elif stripped.startswith("script:"):
            script = True
        elif script and stripped.startswith("- "):
            steps.append((job, stripped[2:]))
        elif script and stripped and not stripped.startswith("#"):
            script = False
    if folded is not None:
        steps.append((job, scalar(folded[1], folded[2]).strip()))
    return steps


def workflow_plan(block: Block) -> tuple[list[tuple[str, str]], list[str]]:
    """The steps of a workflow block a test runs, (job, command), and the commands left out because
    the doc's note says they are not run here."""
    skip = block.not_run[0] if block.not_run else ()
    steps = workflow_steps(block.text)
    return (
        [(job, c) for job, c in steps if not (skip and c.startswith(skip))],
        [c for _, c in steps if skip and c.startswith(skip)],
    )


def _pattern(shown: str) -> re.Pattern:
    """A line as a doc shows it, with "..." standing for text it leaves out."""
    return re.compile(".*".join(re.escape(part) for part in shown.rstrip().split("...")))


def assert_shows(shown: list[str] | str, printed: str) -> None:
    """Every line the doc shows is printed, in the doc's order ("..." in a line: any text; a line that
    is only "..." leaves lines out)."""
    shown = shown.splitlines() if isinstance(shown, str) else shown
    real = [ln.rstrip() for ln in printed.splitlines()]
    at = 0
    for line in shown:
        if not line.strip() or line.strip() == "...":
            continue
        pattern = _pattern(line)
        for k in range(at, len(real)):
            if pattern.fullmatch(real[k]):
                at = k + 1
                break
        else:
            raise AssertionError(
                f"the doc shows\n  {line}\nbut the command printed (from line {at + 1})\n"
                + "\n".join("  " + ln for ln in real[at:][:60])
            )
