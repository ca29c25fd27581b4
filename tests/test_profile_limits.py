"""A machine profile is untrusted input: every field's type and range is
checked in ``schema.from_dict`` before anything is built from it, with limits no real machine
reaches (``model.MAX_*``, each with its source), and a bad one is the project's own error naming
the file and the field: exit 2 from ``gputopo``, a usage error (4) from pytest, never a crash."""

from __future__ import annotations

import copy
import json
import resource
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings, strategies as st

from conftest import json_paths
from pytest_gputopo.core import limits, schema
from pytest_gputopo.probe.recorded import BUNDLED_DIR, ProfileError, load_profile

BASE = json.loads((BUNDLED_DIR / "hgx-h100.json").read_text())


def mutated(path: str, value) -> dict:
    data = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[int(last) if last.isdigit() else last] = value
    return data


def children_cpu_s() -> float:
    """CPU seconds used so far by this process's children that ended (show's, below)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def show(tmp_path, data, text=None):
    path = tmp_path / "m.json"
    path.write_text(text if text is not None else json.dumps(data))
    return subprocess.run(
        [sys.executable, "-m", "pytest_gputopo.cli", "show", "--machine", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "path, value, says",
    [
        ("topology.gpus.0.numa_node", -1, "topology.gpus[0].numa_node: -1 is not from 0 to 1023"),
        ("topology.gpus.0.nvlinks.0.link", -3, "topology.gpus[0].nvlinks[0].link: -3 is not from 0 to 35"),
        (
            "topology.gpus.0.nvlinks.0.link",
            10**30,
            "topology.gpus[0].nvlinks[0].link: an integer of 100 bits is not from 0 to 35",
        ),
        ("topology.links.0.nvlinks", 10**9, "topology.links[0].nvlinks: 1000000000 is not from 0 to 36"),
        ("topology.links.0.nvlinks", -2, "topology.links[0].nvlinks: -2 is not from 0 to 36"),
        ("topology.gpus.0.memory_total_bytes", -1, "topology.gpus[0].memory_total_bytes: -1 is not from 1 to"),
        ("topology.gpus.0.pcie_width_max", 4096, "topology.gpus[0].pcie_width_max: 4096 is not from 1 to 32"),
        (
            "topology.gpus.0.cpu_affinity",
            "0-99999999999",
            "topology.gpus[0].cpu_affinity: '0-99999999999' is not a CPU range list below 65536",
        ),
        ("topology.gpus.1.uuid", BASE["topology"]["gpus"][0]["uuid"], "topology.gpus[1].uuid: 'GPU-"),
        ("topology.gpus.1.pci_bus_id", BASE["topology"]["gpus"][0]["pci_bus_id"], "is also gpus[0]'s"),
        ("topology.nics", [1, 2], "topology.nics[0]: expected str, got 1"),
        (
            "topology.published",
            [{"kind": "p2p", "gbps": 1e999, "source": "x"}],
            "not valid JSON: Infinity is not a JSON number",
        ),
        (
            "topology.published",
            [{"kind": "p2p", "gbps": 10**30, "source": "x"}],
            "topology.published[0].gbps: must be a number above 0 and at most 1e+06, got an integer of 100 bits",
        ),
        ("schema", "<5000 digits>", "not valid JSON: a number of 5000 digits is not a profile's"),
    ],
    ids=lambda v: v[:30] if isinstance(v, str) else None,
)
def test_an_impossible_field_is_refused_with_its_path(tmp_path, path, value, says):
    """9.3: negative numa_node ("negative shift count"), negative or huge link indices (IndexError,
    MemoryError), huge nvlinks (44 s, gigabytes), a 5,000-digit schema, non-string nics (TypeError
    in report.py) were "internal error" exits; 9.4/9.11: NaN or inf published gbps, negative
    memory, duplicate uuid or bus id were accepted."""
    start = children_cpu_s()
    text = json.dumps(mutated(path, value)).replace('"<5000 digits>"', "1" * 5000)  # json.dumps refuses to
    result = show(tmp_path, None, text)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr and str(tmp_path / "m.json") in result.stderr
    assert "internal error" not in result.stderr
    assert children_cpu_s() - start < 30  # the CPU it used: a loaded machine stretches the wall clock only


@pytest.mark.parametrize(
    "text, says",
    [
        ("[" * 200_000 + "]" * 200_000, "not valid JSON: nested too deeply"),
        ('{"gbps": NaN}', "not valid JSON: NaN is not a JSON number"),
    ],
)
def test_json_that_python_reads_but_a_profile_cannot_hold(tmp_path, text, says):
    result = show(tmp_path, None, text)
    assert result.returncode == 2 and says in result.stderr, result.stderr


def test_pytest_reports_a_bad_profile_as_a_usage_error(pytester):
    """9.3: it was INTERNALERROR, exit 3."""
    pytester.makepyfile(test_f="def test_x(): pass\n")
    (pytester.path / "m.json").write_text(json.dumps(mutated("topology.gpus.0.numa_node", -1)))
    result = pytester.runpytest("--gputopo-machine", "m.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*m.json: field topology.gpus[[]0[]].numa_node: -1 is not from 0 to 1023*"])


def test_published_gbps_nan_no_longer_passes_a_marker(pytester):
    """9.11: published ``gbps: NaN`` passed markers needing 10000 GB/s (``gputopo check`` failed
    them) and the JSON report held NaN; such a profile is now refused as it is read."""
    data = mutated("topology.published", [{"kind": "allreduce", "gbps": 1.0, "source": "x"}])
    text = json.dumps(data).replace('"gbps": 1.0', '"gbps": NaN')
    (pytester.path / "m.json").write_text(text)
    pytester.makepyfile(test_f="import pytest\n@pytest.mark.min_allreduce_bw(10000)\ndef test_x(): pass\n")
    result = pytester.runpytest("--gputopo-machine", "m.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "NaN is not a JSON number" in result.stderr.str()


# ---------------------------------------------------------------------------------------------
# Property tests: the class, not the instances

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


PATHS = [p for p in json_paths(BASE) if p]
BUNDLED = [json.loads(p.read_text()) for p in sorted(BUNDLED_DIR.glob("*.json"))]


@st.composite
def mutated_profiles(draw):
    data = copy.deepcopy(draw(st.sampled_from(BUNDLED)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in json_paths(data) if p]
        path = draw(st.sampled_from(paths))
        node = data
        for part in path[:-1]:
            node = node[part]
        if draw(st.booleans()) and isinstance(node, dict):
            del node[path[-1]]
        else:
            node[path[-1]] = draw(json_values)
    return data


def _load(tmp_path, data) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    try:
        profile = load_profile(str(path))
    except ProfileError as exc:
        assert str(exc).startswith(str(path))
        return
    # what was accepted can be used: rendered, round-tripped, its figures finite and plausible
    from pytest_gputopo.render import report

    report.full_report(profile.topology)
    assert schema.from_dict(schema.to_dict(profile.topology)) == profile.topology
    for fig in profile.topology.published:
        assert 0 < fig["gbps"] <= limits.MAX_GBPS


@settings(max_examples=300)
@given(mutated_profiles())
def test_a_mutated_bundled_profile_is_used_or_refused_by_field(tmp_path_factory, data):
    start, rss = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _load(tmp_path_factory.mktemp("p"), data)
    # Bounded in this process's CPU time (other processes' load stretches the wall clock only):
    # tools/perf/bench_profile_refusal.py measures the figure (tens of milliseconds) for
    # docs/performance.md.
    assert time.process_time() - start < 10.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 100 * 1024  # KiB: under 100 MB


@given(json_values)
def test_arbitrary_json_is_used_or_refused_by_field(tmp_path_factory, data):
    _load(tmp_path_factory.mktemp("p"), data)
