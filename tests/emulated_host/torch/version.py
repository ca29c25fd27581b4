from ._emu import CUDA as cuda  # noqa: F401
