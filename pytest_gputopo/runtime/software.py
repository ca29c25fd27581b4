"""The versions of the software a run's figures depend on, as installed: read from the distributions'
metadata, never by importing them (importing torch starts seconds of work, and CUDA's libraries)."""

from __future__ import annotations

import functools
import importlib.metadata
import platform


def installed(dist: str) -> str | None:
    """``dist``'s installed version, or None where it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache  # a report is written again as a run goes: its software stays what it was
def software() -> dict[str, str | None]:
    """What a report document records of this process's software (a copy is the caller's)."""
    return {
        "python": platform.python_version(),
        "pytest-gputopo": installed("pytest-gputopo"),
        "torch": installed("torch"),
        "nvidia-ml-py": installed("nvidia-ml-py"),
    }
