"""One decision across the ranks of a distributed pytest run (torchrun, or any launcher that sets
RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT).

Every rank probes its own node; the ranks exchange what they found through the launcher's key-value
store (torch.distributed's TCPStore, as a client of torchrun's agent store; without one, rank 0
serves a store on MASTER_PORT + 1 so that the user's own ``init_process_group`` keeps MASTER_PORT,
listening on MASTER_ADDR's address only: ``listener``). Records are signed when the run has a secret
(``signing``) and every record read is checked whole: the store is open to whoever reaches it.
Every gating decision is then computed from the combined view, so it is the same on every rank and
no rank waits in a collective another rank skipped. A rank that does not report in time ends the
run with a reason instead of a hang. torch is imported only here, only under a launcher.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import dataclass
from datetime import timedelta

from ..core import limits, model, schema
from . import environ as runtime, listener
from .signing import Signer


class RankError(Exception):
    """The ranks could not agree: one did not report in time, or the store is unreachable."""


@dataclass(frozen=True)
class RankView:
    """What one rank found: its host and node, and its topology."""

    rank: int
    hostname: str | None
    node_rank: int | None
    topology: model.Topology
    fallback: str = ""  # the fallback NCCL's settings and NVML predict on that rank's node

    @property
    def where(self) -> str:
        return f"rank {self.rank} ({self.hostname or 'unknown host'})"


class Exchange:
    """This rank's way into the ranks' store: records written signed (when the run has a secret) and
    read back as untrusted input."""

    def __init__(
        self,
        launch: runtime.Launch,
        store,
        timeout_s: float,
        signer: Signer | None = None,
        listening: str = "",
        loopback_only: bool = False,
    ) -> None:
        self.launch = launch
        self.store = store
        self.timeout_s = timeout_s
        self.prefix = f"gputopo/{launch.run_id}/"
        self.signer = signer or Signer(None)
        self.listening = listening  # where rank 0's own store listens ("" under torchrun's store)
        self.loopback_only = loopback_only  # no other host can reach the store (torchrun's listens everywhere)

    @classmethod
    def connect(cls, launch: runtime.Launch, timeout_s: float, secret: tuple[bytes, str] | None = None) -> Exchange:
        """Join the store: torchrun's agent store, else the one rank 0 serves on MASTER_PORT + 1,
        listening on MASTER_ADDR's address only (``listener.bind_store``). ``secret``: (the secret, the
        variable it came from), from ``environ.store_secret``."""
        import torch.distributed as dist

        port = launch.master_port if launch.agent_store else launch.master_port + 1
        is_master = launch.rank == 0 and not launch.agent_store
        bound, listening, loopback_only = None, "", False
        try:
            if is_master:
                bound, listening = listener.bind_store(launch.master_addr, port, launch.nodes)
                loopback_only = bound is not None and listener.is_loopback(bound)
            # torch takes the descriptor over (uv_tcp_open) and closes it with the store: hand it a copy
            given = {"master_listen_fd": os.dup(bound.fileno())} if bound is not None else {}
            store = dist.TCPStore(
                launch.master_addr,
                port,
                launch.world_size,
                is_master,
                timeout=timedelta(seconds=timeout_s),
                wait_for_workers=False,
                **given,
            )
        except Exception as exc:  # OSError (port taken), RuntimeError / DistStoreError: name the address
            raise RankError(
                f"rank {launch.rank}: cannot reach the launcher's store at {launch.master_addr}:{port}: {exc}"
            ) from None
        finally:
            if bound is not None:
                bound.close()
        return cls(launch, store, timeout_s, Signer(*secret) if secret else None, listening, loopback_only)

    def describe(self) -> str:
        """Where the ranks meet and whether their records are signed: one line for the header."""
        launch = self.launch
        if launch.agent_store:
            where = f"torchrun's store at {launch.master_addr}:{launch.master_port}"
        else:
            where = f"rank 0's store on port {launch.master_port + 1}, listening on {self.listening or 'its host'}"
        if self.signer.signs:
            signed = f"records signed with the run's secret ({self.signer.source})"
        elif self.loopback_only:
            signed = (
                "records not signed (no PYTEST_GPUTOPO_STORE_SECRET_FILE: whoever reaches the store can "
                "write one; docs/distributed.md)"
            )
        else:  # the exposure the threat model is about: say it plainly
            signed = (
                "records NOT signed, and the store is reachable from other hosts: a record forged there can "
                "make the ranks disagree; set PYTEST_GPUTOPO_STORE_SECRET_FILE (docs/distributed.md)"
            )
        return f"gputopo: the ranks meet at {where}; {signed}"

    def put(self, key: str, value: dict) -> None:
        self.store.set(key, self.signer.seal(key, json.dumps(value)))

    def get(self, key: str) -> bytes:
        """The value under ``key`` as a rank wrote it; ValueError saying why it is not taken."""
        return self.signer.open(key, self.store.get(key))

    def all_gather(self, name: str, value: dict) -> list[dict]:
        """Every rank's ``value`` for ``name``, in rank order; raises RankError naming the missing ranks."""
        check_of(name)  # a record kind without a validator is refused before anything is sent
        key = f"{self.prefix}{name}/"
        self.put(f"{key}{self.launch.rank}", value)
        keys = [f"{key}{r}" for r in range(self.launch.world_size)]
        try:
            self.store.wait(keys, timedelta(seconds=self.timeout_s))
        except Exception:
            missing = [r for r, k in enumerate(keys) if not self.store.check([k])]
            raise RankError(
                f"rank(s) {', '.join(map(str, missing))} did not report {name!r} within "
                f"{self.timeout_s:.0f} s (a rank died, hung, or runs a different test selection)"
            ) from None
        return [self._record(r, name, k) for r, k in enumerate(keys)]

    def _record(self, rank: int, name: str, key: str) -> dict:
        """A rank's record as read from the store: untrusted (anyone who reaches the store's port can
        write it). Its signature is checked when the run has a secret, then its shape, whole, against
        what a rank writes under that name (``RECORDS``): anything else is a RankError naming the rank
        and the key, never a KeyError further on and never a verdict taken."""
        try:
            raw = self.get(key)
        except ValueError as exc:
            raise RankError(f"rank {rank}'s {name!r} record is not taken (key {key}): {exc}") from None
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            data = None
        if not isinstance(data, dict):
            raise RankError(f"rank {rank} sent a {name!r} record that is not a JSON object (key {key})")
        problem = record_problem(name, data, rank)
        if problem:
            raise RankError(f"rank {rank} sent a {name!r} record that is not valid (key {key}): {problem}")
        return data


# ---------------------------------------------------------------------------------------------
# What a rank writes under each record name: one validator per kind, each returning why a record
# is not one (None when it is). The writers: gather_views ("topology"), plugin.verdicts
# ("verdict/<requirement>": {"reason", "broken", "unknown"}; "gate": {"problems"}), rendezvous
# ("rendezvous/<key>": {"port"}).


def _fields_problem(data: dict, required: set, optional: set | frozenset = frozenset()) -> str | None:
    missing = sorted(required - set(data))
    if missing:
        return f"field {missing[0]!r} is missing"
    extra = sorted(set(data) - required - optional)
    if extra:
        return f"unknown field {limits.show_value(extra[0])}"
    return None


def topology_record_problem(data: dict, rank: int) -> str | None:
    """The fields only; their values are read (and refused, naming the field) by ``_view``."""
    return _fields_problem(data, {"topology"}, {"hostname", "node_rank", "fallback"})


def verdict_record_problem(data: dict, rank: int) -> str | None:
    """``{"reason": None (met) or the reason it is unmet, "broken": bool, "unknown": bool (optional)}``,
    as ``verdicts._evaluate`` writes it: a broken node, or one unmet only for unknown facts, is unmet."""
    problem = _fields_problem(data, {"reason", "broken"}, {"unknown"})
    if problem:
        return problem
    reason = data["reason"]
    if not (reason is None or (isinstance(reason, str) and reason)):
        return f"reason {limits.show_value(reason)} is neither null (met) nor a reason"
    for flag in ("broken", "unknown"):
        value = data.get(flag, False)  # "broken" is there (checked above); "unknown" may be left out
        if type(value) is not bool:
            return f"{flag} {limits.show_value(value)} is not true or false"
        if value and reason is None:
            return f"{flag} is true for a requirement it says is met"
    return None


def gate_record_problem(data: dict, rank: int) -> str | None:
    """``{"problems": [str, ...]}``, as ``verdicts._fact_gate_problems`` writes it."""
    problem = _fields_problem(data, {"problems"})
    if problem:
        return problem
    problems = data["problems"]
    if not isinstance(problems, list):
        return f"problems {limits.show_value(problems)} is not a list"
    for i, item in enumerate(problems):
        if not isinstance(item, str) or not item:
            return f"problems[{i}] {limits.show_value(item)} is not a reason"
    return None


def rendezvous_record_problem(data: dict, rank: int) -> str | None:
    """``{"port": int}`` from rank 0 (the port it picked), ``{"port": null}`` from every other rank."""
    problem = _fields_problem(data, {"port"})
    if problem:
        return problem
    port = data["port"]
    if rank == 0 and not (type(port) is int and 1 <= port <= 65535):
        return f"port {limits.show_value(port)} is not a TCP port"
    if rank != 0 and port is not None:
        return f"port {limits.show_value(port)} is not null (only rank 0 picks the port)"
    return None


RECORDS = {
    "topology": topology_record_problem,
    "verdict/": verdict_record_problem,
    "gate": gate_record_problem,
    "rendezvous/": rendezvous_record_problem,
}


def check_of(name: str):
    """The validator of the records written under ``name``."""
    for kind, check in RECORDS.items():
        if name == kind or (kind.endswith("/") and name.startswith(kind)):
            return check
    raise ValueError(f"no validator for the ranks' record {name!r}")  # a record kind added without one


def record_problem(name: str, data: dict, rank: int) -> str | None:
    """Why ``data`` is not the record a rank writes under ``name``."""
    return check_of(name)(data, rank)


def gather_views(exchange: Exchange, topology: model.Topology, fallback: str = "") -> list[RankView]:
    mine = {
        "hostname": topology.hostname or runtime.hostname(),
        "node_rank": exchange.launch.node_rank,
        "topology": schema.to_dict(topology),
        "fallback": fallback,
    }
    return [_view(rank, data) for rank, data in enumerate(exchange.all_gather("topology", mine))]


def _view(rank: int, data: dict) -> RankView:
    hostname, node_rank, fallback = data.get("hostname"), data.get("node_rank"), data.get("fallback", "")
    try:
        if not (hostname is None or isinstance(hostname, str)):
            raise schema.SchemaError("hostname", f"expected str, got {limits.show_value(hostname)}")
        if not (node_rank is None or (type(node_rank) is int and 0 <= node_rank < 2**31)):
            raise schema.SchemaError("node_rank", f"expected a rank, got {limits.show_value(node_rank)}")
        if not isinstance(fallback, str):
            raise schema.SchemaError("fallback", f"expected str, got {limits.show_value(fallback)}")
        topology = schema.from_dict(data.get("topology"), "topology")
    except schema.SchemaError as exc:
        raise RankError(f"rank {rank} sent a topology record that cannot be read: {exc}") from None
    return RankView(rank, hostname, node_rank, topology, fallback)


def distinct(views: list[RankView]) -> list[RankView]:
    """One view per distinct topology (ranks on one node usually see the same machine)."""
    seen, out = set(), []
    for view in views:
        key = json.dumps(schema.to_dict(view.topology), sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(view)
    return out


class NodeShare:
    """Benchmark results the ranks on one node share, kept in the launcher's store: the first rank
    to need a copy benchmark measures it (under the host lock), the others on that node take its
    figures. A "node" is a host name with the GPUs a rank sees, in order (their UUIDs): ranks that
    see different GPUs, or hosts that share a name, never share figures keyed by GPU index."""

    def __init__(self, exchange: Exchange, topology: model.Topology) -> None:
        sees = [topology.hostname or runtime.hostname(), [gpu.uuid for gpu in topology.gpus]]
        node = hashlib.sha256(json.dumps(sees).encode()).hexdigest()[:16]
        self.exchange = exchange
        self.prefix = f"{exchange.prefix}bench/{node}/"

    def get_figure(self, key: object, name: str, uuids: object) -> object:
        """``get(name)``: the ranks of one node number its GPUs alike (the node is its GPUs, in order)."""
        return self.get(name)

    def put_figure(self, key: object, name: str, uuids: object, data: dict) -> None:
        self.put(name, data)

    def get(self, name: str):
        """The record another rank stored, None when there is none; ValueError, naming the key, when
        it is not JSON or has fields a ``BenchResult.to_json()`` does not. The store is untrusted
        input: the suite checks the rest (``BenchResult.from_json``, and that it is the figure of
        ``name``), measures again when it is not whole, and says why."""
        key = self.prefix + name
        if not self.exchange.store.check([key]):
            return None
        try:
            raw = self.exchange.get(key)
        except ValueError as exc:
            raise ValueError(f"the store's {key} is not taken: {exc}") from None
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            raise ValueError(f"the store's {key} is not JSON") from None
        problem = _fields_problem(data, {"key", "what", "gbps", "origin"}, {"source", "error", "detail"})
        if problem:
            raise ValueError(f"the store's {key} is not a benchmark result: {problem}")
        return data

    def put(self, name: str, data: dict) -> None:
        self.exchange.put(self.prefix + name, data)


def rendezvous(exchange: Exchange):
    """For benchmarks that span the ranks (one worker per rank, across nodes): ``key`` -> (rank,
    world size, the workers' init URL, this rank's GPU). Rank 0 picks a free port on its host
    (MASTER_ADDR) and every rank learns it through the store, once per benchmark."""
    launch = exchange.launch
    agreed: dict = {}

    def across(key: tuple) -> tuple:
        if key not in agreed:
            port = None
            if launch.rank == 0 and key != ("world",):
                with socket.socket() as s:
                    s.bind(("", 0))
                    port = s.getsockname()[1]
            if key == ("world",):
                url = None
            else:
                values = exchange.all_gather("rendezvous/" + "-".join(map(str, key)), {"port": port})
                url = f"tcp://{launch.master_addr}:{values[0]['port']}"
            agreed[key] = (launch.rank, launch.world_size, url, launch.local_rank)
        return agreed[key]

    return across
