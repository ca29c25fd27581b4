"""What each rank of a ``ranks(n)`` test is given before its body (``plugin/rank_body.py``), read in
this process: its environment, and the arguments its process group is made with.

Sources: NCCL's docs (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html, NCCL_SOCKET_IFNAME:
"=eth0 : Use only interface eth0": "=" matches a whole interface name, a bare name is a prefix);
torch's ``init_process_group`` (the installed torch/distributed/distributed_c10d.py) takes
``device_id: torch.device | int | None``, with which NCCL's communicator is "immediately formed".
"""

from __future__ import annotations

import os
import shutil
from types import SimpleNamespace

import pytest

from pytest_gputopo.plugin import rank_body
from pytest_gputopo.plugin.rank_body import RankInfo

torch = pytest.importorskip("torch")
GPU = SimpleNamespace(index=1)
RANK = RankInfo(1, 2, 1, "cuda:1", (GPU,))


@pytest.fixture
def environ(monkeypatch):
    """This process's environment as a rank's would start: a copy, so the rank's settings stay here."""
    copy = {k: v for k, v in os.environ.items() if not k.endswith("_SOCKET_IFNAME")}
    monkeypatch.setattr(os, "environ", copy)
    return copy


@pytest.mark.skipif(not os.path.exists("/sys/class/net/lo"), reason="no loopback interface named lo here")
def test_a_rank_talks_on_loopback_only_gloo_and_nccl_alike_unless_the_user_said(environ):
    rank_body._environment(RANK, None)
    assert environ["GLOO_SOCKET_IFNAME"] == "lo" and environ["NCCL_SOCKET_IFNAME"] == "=lo"  # lo, not lo*
    environ.update(NCCL_SOCKET_IFNAME="eth0", GLOO_SOCKET_IFNAME="eth0")
    rank_body._environment(RANK, None)
    assert environ["GLOO_SOCKET_IFNAME"] == environ["NCCL_SOCKET_IFNAME"] == "eth0"


def test_an_nccl_rank_binds_its_group_to_its_gpu_and_other_backends_bind_none(monkeypatch):
    current = []
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    import torch.distributed as dist

    bound = rank_body._bound_to_gpu(dist, "nccl", RANK.gpus)
    assert bound == {"device_id": torch.device("cuda", 1)} and current == [torch.device("cuda", 1)]
    assert rank_body._bound_to_gpu(dist, "gloo", RANK.gpus) == {}
    assert rank_body._bound_to_gpu(dist, "nccl", ()) == {}  # no GPU of its own: nothing to bind


def test_a_torch_without_device_id_is_not_given_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    older = SimpleNamespace(init_process_group=lambda backend=None, timeout=None, store=None, rank=-1: None)
    assert rank_body._bound_to_gpu(older, "nccl", RANK.gpus) == {}


def test_an_nccl_ranks_flight_recorder_dumps_into_the_tests_folder_unless_the_user_said(environ, tmp_path):
    """Checked against torch 2.13's ProcessGroupNCCL variables (libtorch's strings: TORCH_FR_BUFFER_SIZE,
    TORCH_NCCL_TRACE_BUFFER_SIZE, TORCH_FR_DUMP_TEMP_FILE, TORCH_NCCL_DEBUG_INFO_TEMP_FILE;
    TORCH_NCCL_DUMP_ON_TIMEOUT "must be set together with TORCH_NCCL_TRACE_BUFFER_SIZE larger than 0",
    docs/torch_nccl_environment_variables)."""
    for name in [k for k in environ if k.startswith(("TORCH_FR_", "TORCH_NCCL_"))]:
        del environ[name]
    rank_body._flight_recorder(str(tmp_path))
    prefix = str(tmp_path / "nccl_trace_rank_")
    assert environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000" and environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert environ["TORCH_FR_DUMP_TEMP_FILE"] == environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == prefix
    mine = {"TORCH_FR_BUFFER_SIZE": "50", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/x/t"}
    for name in [k for k in environ if k.startswith(("TORCH_FR_", "TORCH_NCCL_"))]:
        del environ[name]
    environ.update(mine)
    rank_body._flight_recorder(str(tmp_path))
    assert {k: v for k, v in environ.items() if k.startswith(("TORCH_FR_", "TORCH_NCCL_"))} == mine


def test_the_ranks_flight_recorder_dumps_are_kept_beside_the_report_and_named(tmp_path):
    from pytest_gputopo.plugin import ranks_report
    from pytest_gputopo.runtime import rank_procs

    workdir = tmp_path / "work"
    workdir.mkdir()
    for rank in (0, 1):
        (workdir / f"nccl_trace_rank_{rank}").write_bytes(b"pickled entries")
    (workdir / "nccl_trace_rank_2").mkdir()  # not a file: not a dump
    item = SimpleNamespace(stash={}, name="test_x[ranks2]", config=SimpleNamespace(_tmp_path_factory=None))
    assert [p.rsplit("/", 1)[1] for p in rank_procs.flight_recorder_dumps(str(workdir))] == [
        "nccl_trace_rank_0",
        "nccl_trace_rank_1",
    ]
    line = ranks_report.keep_flight_recorder_dumps(item, str(workdir))
    kept = item.stash[ranks_report._KEPT]
    assert (
        line
        == f"NCCL's flight recorder dumped 2 rank(s)' last collectives to {kept} (torch's reader: torchfrtrace {kept})"
    )
    assert sorted(os.listdir(kept)) == ["nccl_trace_rank_0", "nccl_trace_rank_1"]
    shutil.rmtree(kept)
    assert ranks_report.keep_flight_recorder_dumps(item, str(tmp_path / "none")) == ""
