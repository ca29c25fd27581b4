"""The words a figure's verdict takes (``core.judgement`` decides which one; the report document and
its readers carry them): absent, broken, unknown, below, staged, met."""

ABSENT, BROKEN, UNKNOWN, BELOW, STAGED, MET = "absent", "broken", "unknown", "below", "staged", "met"
STATES = (ABSENT, BROKEN, UNKNOWN, BELOW, STAGED, MET)
