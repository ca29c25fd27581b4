"""The layers of the package hold: imports point down (pyproject.toml's import-linter contracts),
no module imports the hook module, and no cycle runs through a layer."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold():
    pytest.importorskip("importlinter", reason="import-linter is not installed (requirements-dev.txt)")
    # A child: import-linter builds its graph by importing nothing, but prints with rich to stdout.
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                           "sys.exit(lint_imports(no_cache=True, no_logo=True))"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_requirement_built_directly_is_validated():
    """Validation lives in the requirement classes, not in the marker factories."""
    from pytest_gputopo.core import requirements as reqs
    from pytest_gputopo.core import gpu_requirements

    for build, says in ((lambda: gpu_requirements.GpuRequirement(gpus=-1), "n must be a number of GPUs from 0 to 1024"),
                        (lambda: reqs.P2PRequirement(gpus=0), "gpus must be a number of GPUs from 1 to 1024"),
                        (lambda: reqs.LinkRequirement(need="XYZ"), "XYZ"),
                        (lambda: reqs.BandwidthRequirement(gbps=float("nan")), "gbps must be a number above 0"),
                        (lambda: reqs.BandwidthRequirement(metric="bogus"), "metric must be one of"),
                        (lambda: reqs.TransportRequirement(kind="UDP"), "kind must be one of")):
        with pytest.raises(reqs.RequirementError, match=says):
            build()
    assert reqs.LinkRequirement(need="nv12") == reqs.LinkRequirement(need=reqs.LinkLabel.parse("NV12"), spelled="NV12")
    assert reqs.BandwidthRequirement(gbps=50) == reqs.BandwidthRequirement(gbps=50.0)


def test_the_floor_options_are_the_cores_floors():
    from pytest_gputopo.core import thresholds
    from pytest_gputopo.plugin import options

    assert options.FLOOR_KEYS == thresholds.FLOOR_KEYS
