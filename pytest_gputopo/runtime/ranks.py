"""One decision across the ranks of a distributed pytest run (torchrun, or any launcher that sets
RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT).

Every rank probes its own node; the ranks exchange what they found through the launcher's key-value
store (torch.distributed's TCPStore, as a client of torchrun's agent store; without one, rank 0
serves a store on MASTER_PORT + 1 so that the user's own ``init_process_group`` keeps MASTER_PORT).
Every gating decision is then computed from the combined view, so it is the same on every rank and
no rank waits in a collective another rank skipped. A rank that does not report in time ends the
run with a reason instead of a hang. torch is imported only here, only under a launcher.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..core import limits, model, schema
from . import environ as runtime


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
    def __init__(self, launch: runtime.Launch, store, timeout_s: float):
        self.launch = launch
        self.store = store
        self.timeout_s = timeout_s
        self.prefix = f"gputopo/{launch.run_id}/"

    @classmethod
    def connect(cls, launch: runtime.Launch, timeout_s: float) -> "Exchange":
        from datetime import timedelta

        import torch.distributed as dist

        port = launch.master_port if launch.agent_store else launch.master_port + 1
        is_master = launch.rank == 0 and not launch.agent_store
        try:
            store = dist.TCPStore(launch.master_addr, port, launch.world_size, is_master,
                                  timeout=timedelta(seconds=timeout_s), wait_for_workers=False)
        except Exception as exc:  # RuntimeError / DistStoreError: name the address
            raise RankError(f"rank {launch.rank}: cannot reach the launcher's store at "
                            f"{launch.master_addr}:{port}: {exc}") from None
        return cls(launch, store, timeout_s)

    def all_gather(self, name: str, value: dict) -> list[dict]:
        """Every rank's ``value`` for ``name``, in rank order; raises RankError naming the missing ranks."""
        from datetime import timedelta

        key = f"{self.prefix}{name}/"
        self.store.set(f"{key}{self.launch.rank}", json.dumps(value))
        keys = [f"{key}{r}" for r in range(self.launch.world_size)]
        try:
            self.store.wait(keys, timedelta(seconds=self.timeout_s))
        except Exception:
            missing = [r for r, k in enumerate(keys) if not self.store.check([k])]
            raise RankError(f"rank(s) {', '.join(map(str, missing))} did not report {name!r} within "
                            f"{self.timeout_s:.0f} s (a rank died, hung, or runs a different test selection)") from None
        return [_record(self.store.get(k), r, name) for r, k in enumerate(keys)]


def _record(raw: bytes, rank: int, name: str) -> dict:
    """A rank's record as sent through the store: untrusted (anyone who reaches the store's port
    can write it), so anything but a JSON object is a RankError naming the rank."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        data = None
    if not isinstance(data, dict):
        raise RankError(f"rank {rank} sent a {name!r} record that is not a JSON object")
    return data


def gather_views(exchange: Exchange, topology: model.Topology, fallback: str = "") -> list[RankView]:
    mine = {"hostname": topology.hostname or runtime.hostname(), "node_rank": exchange.launch.node_rank,
            "topology": schema.to_dict(topology), "fallback": fallback}
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
        import hashlib

        sees = [topology.hostname or runtime.hostname(), [gpu.uuid for gpu in topology.gpus]]
        node = hashlib.sha256(json.dumps(sees).encode()).hexdigest()[:16]
        self.store = exchange.store
        self.prefix = f"{exchange.prefix}bench/{node}/"

    def get(self, name: str):
        """The JSON value another rank stored, None when there is none; ValueError when it is not
        JSON (``BenchResult.from_json`` checks the rest: the store is untrusted input)."""
        key = self.prefix + name
        if not self.store.check([key]):
            return None
        try:
            return json.loads(self.store.get(key))
        except (ValueError, RecursionError):
            raise ValueError(f"the store's {name!r} is not JSON") from None

    def put(self, name: str, data: dict) -> None:
        self.store.set(self.prefix + name, json.dumps(data))


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
                import socket

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
