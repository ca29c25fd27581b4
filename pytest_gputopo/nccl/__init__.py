"""NCCL's rules: which transport NCCL would take between two GPUs given its settings and the
machine (``expect``). Pure; its own log is read by ``parse.nccl_log``."""
