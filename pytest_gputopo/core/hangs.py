"""Which rank a stuck ``ranks(n)`` test waits for, and in what: one line from each rank's trail of
torch.distributed calls (``plugin.rank_trail`` writes it in the rank) and how each rank ended.

A collective is numbered within its process group (the k-th collective of the group, as NCCL's
flight recorder numbers ``collective_seq_id``); a point-to-point call within its group, its direction
and its peer (the k-th send from rank 0 to rank 1 meets the k-th recv on rank 1 from rank 0, as gloo
and NCCL pair them by order). A rank waits in a call it entered and never left. Its partner either
never entered the call of that number (it is named, with where it was instead), or entered another
one (mismatched collectives or shapes). Pure: the trails are read and validated here, the stacks are
only searched for their innermost frame.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

SENDS = frozenset({"send", "isend", "send_object_list"})
RECVS = frozenset({"recv", "irecv", "recv_object_list"})
MAX_TRAIL_CALLS = 100_000  # a trail is read up to this many calls (a loop of collectives)


@dataclass(frozen=True)
class Call:
    """One torch.distributed call a rank entered."""

    op: str  # its function's name: "all_reduce", "send", "new_group", ...
    group: str  # its process group's name ("default": the world)
    members: tuple[int, ...]  # the group's ranks (global)
    seq: int  # its number, from 1: among the group's collectives, or its p2p calls with ``peer`` one way
    peer: int | None = None  # a point-to-point call's other rank (global)
    shape: str = ""  # its first tensor: "float32[4]"
    left: bool = False  # it returned (an async call: it was issued)

    def __str__(self) -> str:
        group = "" if self.group == "default" else f" of group {self.group}"
        if self.peer is None:
            return f"{self.op} #{self.seq}{group}"
        way = "to" if self.op in SENDS else "from"
        return f"{self.op} #{self.seq} {way} rank {self.peer}{group}"


@dataclass(frozen=True)
class RankEnd:
    """How a rank ended: ``state`` one of "passed", "failed", "skipped", "running" (ended by the
    plugin), "died", "hung in exit"; ``detail`` its error, or where it was running."""

    rank: int
    calls: tuple[Call, ...]
    state: str
    detail: str = ""

    @property
    def waiting_in(self) -> Call | None:
        """The call it entered and never left, where it was running or failed in it."""
        last = self.calls[-1] if self.calls else None
        return last if last is not None and not last.left and self.state in ("running", "failed") else None


def read_trail(text: str) -> tuple[Call, ...]:
    """A rank's trail as ``rank_trail`` writes it (a JSON object per line: a call entered, numbered
    ``"i"``, or ``{"left": i}`` when call i returned); a line that is not one (a rank killed mid-line, or
    anything else in the file) is left out, never trusted."""
    calls: list[Call] = []
    position: dict[int, int] = {}  # a call's number in the rank ("i") -> its place in ``calls``
    for line in text.splitlines()[-2 * MAX_TRAIL_CALLS :]:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        left = record.get("left")
        if type(left) is int and left in position:
            call = calls[position[left]]
            calls[position[left]] = Call(call.op, call.group, call.members, call.seq, call.peer, call.shape, True)
            continue
        entered = _call(record)
        number = record.get("i")
        if entered is not None and type(number) is int and number not in position:
            position[number] = len(calls)
            calls.append(entered)
    return tuple(calls)


def _call(record: dict[str, object]) -> Call | None:
    op, group, members, seq = record.get("op"), record.get("group"), record.get("members"), record.get("seq")
    peer, shape = record.get("peer"), record.get("shape", "")
    if not (isinstance(op, str) and isinstance(group, str) and isinstance(shape, str)):
        return None
    if not (type(seq) is int and seq > 0 and (peer is None or type(peer) is int)):
        return None
    if not (isinstance(members, list) and all(type(m) is int for m in members)):
        return None
    return Call(op[:64], group[:64], tuple(members), seq, peer, shape[:64])


def culprit(ranks: Sequence[RankEnd]) -> str | None:
    """One line naming the rank the others wait for and the call, None where no rank waited for
    another (a test that passed, or ranks that failed each on its own)."""
    by_rank = {end.rank: end for end in ranks}
    for end in ranks:
        call = end.waiting_in
        if call is not None:
            found = _partner_missing(end, call, by_rank)
            if found:
                return found
    stuck = [end for end in ranks if end.state in ("running", "hung in exit")]
    for end in stuck:
        if end.state == "hung in exit":
            return f"rank {end.rank} hung in exit after its body {end.detail or 'ended'}"
    if stuck:
        others = [e for e in ranks if e not in stuck]
        done = "; every other rank had ended its body" if others and not any(e.waiting_in for e in others) else ""
        return f"rank {stuck[0].rank} was running outside any collective{_where(stuck[0].detail)}{done}"
    return None  # ranks that failed on their own, none waiting for another: their errors say it all


def _partner_missing(end: RankEnd, call: Call, by_rank: dict[int, RankEnd]) -> str | None:
    """Why ``end`` waits in ``call``: the partner that never entered the matching call, or the one
    that entered another there."""
    if call.peer is not None:
        partner = by_rank.get(call.peer)
        if partner is None:
            return None
        want = RECVS if call.op in SENDS else SENDS
        matching = [c for c in partner.calls if c.group == call.group and c.peer == end.rank and c.op in want]
        if len(matching) >= call.seq:
            return None
        kind = "recv" if call.op in SENDS else "send"
        return (
            f"rank {partner.rank} never entered the {kind} matching rank {end.rank}'s {call}, which rank "
            f"{end.rank} waits in; rank {partner.rank} {_instead(partner)}"
        )
    for member in call.members:
        partner = by_rank.get(member)
        if partner is None or member == end.rank:
            continue
        theirs = [c for c in partner.calls if c.group == call.group and c.peer is None]
        if len(theirs) < call.seq:
            return (
                f"rank {member} never entered {call}, which rank {end.rank} waits in; rank {member} {_instead(partner)}"
            )
        other = theirs[call.seq - 1]
        if other.op != call.op:
            return (
                f"mismatched collectives: rank {end.rank} waits in {call} and rank {member} entered "
                f"{other} (collective #{call.seq} of the group must be the same call on every rank)"
            )
        if other.shape != call.shape:
            return (
                f"mismatched shapes in {call}: rank {end.rank} gave {call.shape or 'no tensor'}, rank "
                f"{member} {other.shape or 'no tensor'}"
            )
    return None


def _instead(partner: RankEnd) -> str:
    """Where the partner was instead of in the call."""
    waiting = partner.waiting_in
    if waiting is not None:
        return f"waits in {waiting}"
    if partner.state == "running":
        return f"was running outside any collective{_where(partner.detail)}"
    return _how(partner)


def _how(end: RankEnd) -> str:
    return {
        "passed": "had ended its body (passed)",
        "skipped": f"had skipped: {end.detail}",
        "failed": f"had failed: {end.detail}",
        "died": f"had died: {end.detail}",
        "hung in exit": "hung in exit",
    }.get(end.state, end.state)


def _where(detail: str) -> str:
    return f" (in {detail})" if detail else ""


_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def innermost_frame(stack: str, skip: Sequence[str] = ()) -> str:
    """The innermost frame of the main thread of a ``faulthandler`` stack (most recent call first) that
    is not under any path in ``skip`` (torch's, the plugin's): ``wait_in_sleep (test_hang.py:11)``;
    "" where there is none."""
    threads = stack.split("\n\n")
    thread = next((t for t in threads if " in _wrap" in t), threads[0])  # the body's: torch's spawn started it
    for line in thread.splitlines():
        found = _FRAME.match(line)
        if found and not any(found["path"].startswith(prefix) for prefix in skip):
            name = found["path"].rsplit("/", 1)[-1]
            return f"{found['func']} ({name}:{found['line']})"
    return ""
