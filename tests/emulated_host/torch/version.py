from ._emu import CUDA as cuda, RELEASE as __version__  # noqa: F401
