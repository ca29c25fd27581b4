"""Micro-benchmarks: one measurement harness (``harness``) shared by every benchmark, and the
benchmarks themselves (``allreduce``, ...). Nothing here imports ``torch`` at module level; the
benchmark modules import it inside the functions (and worker processes) that need it."""
