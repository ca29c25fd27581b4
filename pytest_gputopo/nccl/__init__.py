"""NCCL as a source of facts: what an ``NCCL_DEBUG=INFO`` log says about the transports a collective
really used (:mod:`pytest_gputopo.nccl.log`), and the ``NCCL_TOPO_DUMP_FILE`` XML that describes the
topology NCCL detected. Parsing only; nothing here starts NCCL or reads the environment.
"""
