"""Text other tools write, read by each format's own rules: ``nvidia-smi topo -m`` (``smi_topo``),
NCCL's ``NCCL_DEBUG=INFO`` log (``nccl_log``). Pure: text in, the core's objects out; nothing here
starts a process or reads the environment."""
