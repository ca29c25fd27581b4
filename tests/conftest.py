# Root conftest: settings shared by the test suite.
from hypothesis import HealthCheck, settings

# CI machines are small and shared: no per-example deadline (a slow example is not a bug here).
settings.register_profile("gputopo", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gputopo")

# pytester's in-process runs drop the modules they imported when they end; the plugin imports some
# lazily, so import them once here and every run shares one copy (as a real process would).
import pytest_gputopo.plugin.checks  # noqa: E402,F401
import pytest_gputopo.core.requirements  # noqa: E402,F401
