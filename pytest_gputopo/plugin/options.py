"""One setting, three surfaces: ``--gputopo-<name>``, ini ``gputopo_<name>``, env ``PYTEST_GPUTOPO_<NAME>``.

Precedence: ini < env < command line (< a marker's own argument, applied by the plugin). Every
value is returned with where it came from, so that an error names its source.
"""

from __future__ import annotations

from typing import overload

import pytest

from ..core import numtext
from ..core.limits import MAX_BYTES
from ..core.units import read_size
from ..runtime import environ as runtime
from ..runtime.files import unwritable
from .option_table import FLOOR_KEYS, OPTIONS, Option  # noqa: F401  (the table, read here)

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")


def value(config: pytest.Config, name: str) -> tuple[str | None, str]:
    """The setting's raw value (None when unset) and a description of where it came from."""
    opt = OPTIONS[name]
    cli = config.getoption(opt.ini)
    if cli is not None:
        return (str(cli) if opt.metavar else "true"), opt.flag
    env = runtime.env_option(name.replace("-", "_"))
    if env is not None and env.strip():  # empty is unset, as an empty ini key is
        return env, f"environment variable {opt.env}"
    ini = config.getini(opt.ini)
    if ini not in (None, ""):
        return str(ini).strip(), f"ini option {opt.ini}" + (f" in {config.inipath}" if config.inipath else " (-o)")
    return None, ""


def flag(config: pytest.Config, name: str) -> bool:
    opt = OPTIONS[name]
    on, off = config.getoption(opt.ini), config.getoption(f"gputopo_no_{name}")
    if on and off:
        raise pytest.UsageError(f"{opt.flag} and --gputopo-no-{name} contradict each other; give one")
    if off:
        return False
    raw, where = value(config, name)
    if raw is None:
        return False
    if raw.strip().lower() in TRUE:
        return True
    if raw.strip().lower() in FALSE:
        return False
    raise pytest.UsageError(
        f"{where}: {raw!r} is not a boolean (use one of {', '.join(TRUE)} / {', '.join(f for f in FALSE if f)})"
    )


def choice(config: pytest.Config, name: str, choices: tuple[str, ...], default: str) -> str:
    raw, where = value(config, name)
    if raw is None:
        return default
    if raw.strip().lower() not in choices:
        raise pytest.UsageError(f"{where}: {raw!r} is not one of {', '.join(choices)}")
    return raw.strip().lower()


# The range of each numeric setting: above 0, up to a limit no real run needs.
LIMITS = {
    "bench-timeout": 7 * 24 * 3600.0,  # seconds: a week
    "bench-budget": 3600.0,  # seconds per size: an hour
    "rank-timeout": 7 * 24 * 3600.0,
    "cache-max-age": 365 * 24.0,  # hours: a year
    "lease-timeout": 7 * 24 * 3600.0,
    "lease-memory": 1024.0,  # GiB per GPU: beyond any GPU's memory
    "allreduce-world-size": 1024,  # gloo processes on one host
}


def parse_number(raw: str, where: str, *, integer: bool = False, maximum: float) -> float:
    """A number above 0 and at most ``maximum`` (``1e3`` allowed unless ``integer``): NaN,
    infinity, ``²`` and 5,000-digit numbers are usage errors naming ``where``."""
    parsed = numtext.read_int(raw, 1, int(maximum)) if integer else numtext.read_number(raw, 0, maximum, above_low=True)
    if parsed is None:
        kind = "an integer" if integer else "a number"
        raise pytest.UsageError(f"{where}: {raw[:40]!r} is not {kind} above 0 and at most {maximum:g}")
    return parsed


@overload
def number(config: pytest.Config, name: str, default: float, *, integer: bool = False) -> float: ...
@overload
def number(config: pytest.Config, name: str, default: None, *, integer: bool = False) -> float | None: ...
def number(config: pytest.Config, name: str, default: float | None, *, integer: bool = False) -> float | None:
    raw, where = value(config, name)
    if raw is None:
        return default
    return parse_number(raw, where, integer=integer, maximum=LIMITS[name])


def size(config: pytest.Config, name: str) -> int | None:
    """A size in bytes: ``1073741824``, ``1G``, ``256M`` (binary units, as nccl-tests reads them)."""
    raw, where = value(config, name)
    if raw is None:
        return None
    found = read_size(raw, 4, MAX_BYTES)
    if found is None:
        raise pytest.UsageError(
            f"{where}: {raw[:40]!r} is not a size in bytes from 4 to 1T, such as 1073741824, 1G or 256M"
        )
    return found


def floor_overrides(config: pytest.Config) -> dict[str, float]:
    """The efficiency floors the user set (option, env or ini), checked."""
    names = [f"floor-{key.replace('_', '-')}" for key in FLOOR_KEYS]
    if all(value(config, name)[0] is None for name in names):
        return {}
    from ..core import thresholds  # its ratio rule, only when a floor is set

    found = {}
    for key, name in zip(FLOOR_KEYS, names, strict=True):
        raw, where = value(config, name)
        if raw is not None:
            try:
                found[key] = thresholds.parse_floor_ratio(raw, where)
            except ValueError as exc:
                raise pytest.UsageError(str(exc)) from None
    return found


def writable_path(config: pytest.Config, name: str) -> str | None:
    """A file setting (``json``, ``html``) whose file can be written by ``runtime.files.write_text``'s
    rule (a regular file or a symlink's file replaced, /dev/null written through, a FIFO, device or
    /dev/stdout refused): checked at start, so that a bad path is a usage error before any test
    runs, not a report lost after them."""
    raw, where = value(config, name)
    if raw is None:
        return None

    problem = unwritable(raw)
    if problem is None:
        return raw
    raise pytest.UsageError(f"{where}: cannot write {raw}: {problem}")
