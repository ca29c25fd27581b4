"""Messages that send the user the right way: counts that agree with their noun, a missing fact
named with the way to add it, a source named as it is, one wording for one fact."""

import re

import pytest

from pytest_gputopo.core import requirements as reqs
from pytest_gputopo.core.keys import AllReduce
from pytest_gputopo.core.units import counted
from pytest_gputopo.plugin.run import GATE_EXIT_STATUS
from pytest_gputopo.probe import reference


def test_counted_agrees_with_its_number():
    assert counted(1, "test") == "1 test"
    assert [counted(n, "test") for n in (0, 2)] == ["0 tests", "2 tests"]
    assert counted(1, "more pair") == "1 more pair"
    assert counted(3, "entry", "entries") == "3 entries"


def test_one_more_pair_is_singular():
    """A reason that names three failing pairs and leaves one out says '1 more pair'."""
    verdict = reqs.unmet(reqs.P2PRequirement(), ["a", "b", "c", "d"], max_pairs=3)
    assert verdict.reason.endswith("; and 1 more pair")


def test_one_rank_all_reduce_is_singular():
    assert AllReduce(1, 2**20).describe() == "all-reduce busbw, 1 rank, 1 MiB"


def test_one_test_not_run_and_one_gate_problem_are_singular(pytester):
    """The run's summary counts '1 test not run', and a gate with one cause says '1 cause'."""
    pytester.makepyfile("""
        import pytest

        @pytest.mark.requires_gpus(2)
        def test_two(): pass
    """)
    result = pytester.runpytest("--gputopo-machine", "single-gpu")
    result.stdout.fnmatch_lines(["gputopo: 1 test not run for unmet requirements: requires_gpus(2) x1 *"])
    gated = pytester.runpytest("--gputopo-machine", "single-gpu", "--gputopo-require", "gpus>=2")
    assert gated.ret == GATE_EXIT_STATUS
    printed = result.stdout.str() + gated.stdout.str() + gated.stderr.str()
    assert "gputopo: run gate unmet: 1 cause " in printed
    assert not re.search(r"\b1 (tests|problems|causes|pairs|GPUs)\b", printed)


TOPO_2 = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-63\t0\nGPU1\tPHB\t X \t0-63\t0\n"
P2P_OK = " \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n GPU1\tOK\tX\t\n\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"


def test_p2p_unknown_names_the_capability_missing_and_how_to_record_it(tmp_path, pytester):
    """A profile recorded with the read status only: requires_p2p is unknown (skipped), and its reason
    says the write status is what no source gave and how to record it, not 'no source reported it'."""
    from pytest_gputopo import cli

    (tmp_path / "topo.txt").write_text(TOPO_2)
    (tmp_path / "p2p_r.txt").write_text(P2P_OK)
    out = tmp_path / "node.json"
    assert (
        cli.main(
            ["record", "--from-smi", str(tmp_path / "topo.txt"), "--p2p", f"r:{tmp_path / 'p2p_r.txt'}", "-o", str(out)]
        )
        == 0
    )
    pytester.makepyfile("import pytest\n@pytest.mark.requires_p2p\ndef test_x(): pass\n")
    result = pytester.runpytest("--gputopo-machine", str(out), "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*requires_p2p: GPU0-GPU1 P2P write status is unknown (read OK; no source reported "
            "write: record `nvidia-smi topo -p2p w` with `gputopo record --from-smi TOPO "
            "--p2p w:FILE`)*"
        ]
    )


def test_p2p_unknown_both_ways_names_both_recordings():
    from pytest_gputopo.core.model import P2P, Link, P2PStatus

    link = Link(0, 1, p2p=P2P())
    assert reqs.P2PRequirement().check_pair(link) == (
        "P2P status is unknown (no source reported read or write: record `nvidia-smi topo -p2p r` and `-p2p w` "
        "with `gputopo record --from-smi TOPO --p2p r:FILE --p2p w:FILE`)"
    )
    assert "read status is unknown (write OK;" in reqs.P2PRequirement().check_pair(
        Link(0, 1, p2p=P2P(write=P2PStatus.OK))
    )


P2P_TEST = (
    "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)\n   D\\D     0      1\n"
    "     0 500.00  20.00\n     1  20.00 500.00\n"
)


@pytest.mark.parametrize("fmt", ["nccl-tests", "nvbandwidth"])
def test_parse_of_another_tools_output_names_the_command_that_reads_it(tmp_path, capsys, fmt):
    """p2pBandwidthLatencyTest text given to the wrong parser names the gputopo command that reads it."""
    from pytest_gputopo import cli

    (tmp_path / "p2p.txt").write_text(P2P_TEST)
    assert cli.main(["parse", fmt, str(tmp_path / "p2p.txt")]) == 2
    err = capsys.readouterr().err
    assert (
        f"this is p2pBandwidthLatencyTest output (cuda-samples), not {fmt}: read it with gputopo parse p2p-bandwidth"
        in err
    )
    assert cli.main(["parse", "p2p-bandwidth", str(tmp_path / "p2p.txt")]) == 0  # the command named reads it


def test_show_names_where_p2p_statuses_come_from(tmp_path, capsys):
    """The P2P matrix's heading names its real source; nvidia-smi topo -m text, which gives no P2P
    status, gets one line saying so instead of a matrix of U headed 'NVML'."""
    from dataclasses import replace

    from pytest_gputopo import cli
    from pytest_gputopo.core.model import Source
    from pytest_gputopo.render.report import full_report

    (tmp_path / "topo.txt").write_text(TOPO_2)
    assert cli.main(["show", "--machine", str(tmp_path / "topo.txt")]) == 0
    out = capsys.readouterr().out
    assert "P2P read/write status: unknown for every pair (nvidia-smi topo -m text does not give it)" in out
    assert "(NVML)" not in out and "GPU0  X     U" not in out
    assert cli.main(["show", "--machine", "dgx-a100"]) == 0
    assert "P2P read/write status (as the profile records them; U where no source gave one):" in capsys.readouterr().out
    this_host = replace(reference("dgx-a100"), source=Source("nvml"))
    assert "P2P read/write status (NVML):" in full_report(this_host)


def test_show_without_a_gpu_is_one_line_and_exit_0(capsys):
    """No GPU: one line saying so and why, no legend for a matrix that is not there; exit status 0,
    as docs/cli.md shows it."""
    from pathlib import Path

    from pytest_gputopo import cli

    assert cli.main(["show", "--machine", "no-gpu"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "gputopo: no GPU (NVML library not found (libnvidia-ml.so.1): no NVIDIA driver installed); "
        "source recorded:no-gpu (a recorded machine, not this host)"
    ]
    doc = (Path(__file__).parents[1] / "docs" / "cli.md").read_text()
    assert "`gputopo show --machine no-gpu` prints:\n\n```\n" + out + "```\n" in doc


def test_a_pcie_drop_is_worded_alike_by_expect_and_check(capsys):
    """The same lost PCIe width reads the same in --gputopo-expect and in the check's pcie item: one
    wording for one fact, each saying what it is held against."""
    from pytest_gputopo import cli
    from pytest_gputopo.core.regressions import regressions

    assert regressions(reference("hgx-h100"), reference("hgx-h100-pcie-x8")) == [
        "GPU2 PCIe link trained down: x8 of x16 (the reference's width; Gen3 of Gen5)"
    ]
    cli.main(["check", "--machine", "hgx-h100-pcie-x8"])
    assert "GPU2 PCIe link trained down: x8 of x16 (its maximum width; Gen3 of Gen5)" in capsys.readouterr().out


def test_a_cause_counts_its_evidence_in_agreement():
    """Three GPUs, GPU2 in both failing pairs: the one pair without it 'passes' (not '1 pairs pass')."""
    from pytest_gputopo.core.causes import Finding, Group, causes

    found = (
        Finding("GPU0-GPU2 are linked by SYS", ("GPU0", "GPU2"), "are linked by SYS"),
        Finding("GPU1-GPU2 are linked by SYS", ("GPU1", "GPU2"), "are linked by SYS"),
    )
    [cause] = causes([Group("requires_link('NV1')", ("GPU0", "GPU1", "GPU2"), found)])
    assert "the 1 pair without GPU2 passes" in cause.headline
    assert not re.search(r"\b1 (pairs|GPUs|problems)\b", cause.headline)
