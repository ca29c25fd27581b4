"""Messages that send the user the right way: counts that agree with their noun, a missing fact
named with the way to add it, a source named as it is, one wording for one fact."""

import pytest

from pytest_gputopo.core import requirements as reqs
from pytest_gputopo.core.keys import AllReduce
from pytest_gputopo.core.units import counted
from pytest_gputopo.plugin.hooks import GATE_EXIT_STATUS


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
    """The run's summary counts '1 test not run', and a gate with one problem says '1 problem'."""
    pytester.makepyfile("""
        import pytest

        @pytest.mark.requires_gpus(2)
        def test_two(): pass
    """)
    result = pytester.runpytest("--gputopo-machine", "single-gpu")
    result.stdout.fnmatch_lines(["gputopo: 1 test not run for unmet requirements: requires_gpus(2) x1 *"])
    gated = pytester.runpytest("--gputopo-machine", "single-gpu", "--gputopo-require", "gpus>=2")
    assert gated.ret == GATE_EXIT_STATUS
    assert "(1 problem)" in gated.stdout.str() + gated.stderr.str()
    assert "1 tests" not in result.stdout.str() and "1 problems" not in gated.stdout.str() + gated.stderr.str()
