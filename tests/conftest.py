# Root conftest: settings shared by the test suite.
from hypothesis import HealthCheck, settings

# CI machines are small and shared: no per-example deadline (a slow example is not a bug here).
settings.register_profile("gputopo", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gputopo")
