"""What a test's report carries for pytest-gputopo, as ``user_properties``, so that it reaches the
controller (and JUnit XML) from xdist workers too; the run's record (``run_record``) reads them back.
A health-check item's outcome is ``CHECK_PROPERTY``; the check's other properties are ``check_report``'s."""

CHECK_PROPERTY = "gputopo_check"  # a health-check item's outcome (JSON: check, outcome, message)

OWN_PROPERTY = "gputopo_test_measurement"  # a test's own measurement (``gputopo_bench``)
UNMET_PROPERTY = "gputopo_unmet"  # the requirement a test did not run for
CAUSE_PROPERTY = "gputopo_cause"  # what made it unmet, where one GPU or the machine did (``core.causes``)
RECORDED_PROPERTY = "gputopo_recorded"  # a met requirement that rests on recorded figures, not measured here
RANKS_PROPERTY = "gputopo_rank_failed"  # a rank of a ranks(n) test that did not pass: which, how, why (JSON)
# Each requirement of a gated test with its verdict (JSON), met ones too, and the figures it was judged
# on at its own threshold.
VERDICT_PROPERTY = "gputopo_verdict"
# A leased test's GPU memory: its budget, its peak as NVML saw its processes use it, or why unknown (JSON)
LEASE_PROPERTY = "gputopo_lease"
