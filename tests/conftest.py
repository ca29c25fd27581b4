# Root conftest: settings shared by the test suite.
import importlib.util
from pathlib import Path

import pytest

from hypothesis import HealthCheck, settings

# Tests that run a real benchmark (gloo on this host's CPUs) need torch; on a Python whose torch is
# not installed (dev/test-python), they skip saying so.
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed in this environment (dev/setup installs it)")

# The shared corpus of real tool outputs (../shared/corpus): beside the repository, not in it, so a
# clone alone skips the tests that read it, with this reason.
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
NO_CORPUS = f"no conformance corpus at {CORPUS} (it lives beside the repository, not in it)"

# CI machines are small and shared: no per-example deadline (a slow example is not a bug here).
settings.register_profile("gputopo", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gputopo")

# pytester's in-process runs drop the modules they imported when they end; the plugin imports some
# lazily, so import them once here and every run shares one copy (as a real process would).
import pytest_gputopo.plugin.checks  # noqa: E402,F401
import pytest_gputopo.core.requirements  # noqa: E402,F401
