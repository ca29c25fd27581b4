"""NCCL's settings as NCCL reads them: the ``NCCL_*`` environment first, then ``NCCL_CONF_FILE`` or
``~/.nccl.conf``, then ``/etc/nccl.conf`` (``src/misc/param.cc``), numbers parsed as C's ``strtol``
parses them. Pure: the caller passes the environment mapping and the files' text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["PATH_TYPES", "NcclSettings", "conf_file_paths", "read_settings"]

# topoPathTypeStr[0..PATH_SYS] of current NCCL: the strings NCCL_P2P_LEVEL / NCCL_NET_GDR_LEVEL accept
# (strcmp, case-sensitive). NET and DIS exist as path types but are not accepted as levels.
PATH_TYPES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
# levelsOldToNew: the legacy integers 0..5; larger values clamp to the last entry.
_LEGACY_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")
_ENV = "environment"


# ------------------------------------------------------------------------------------ C parsing

_C_SPACE = " \t\n\v\f\r"
_INT64 = (-(2**63), 2**63 - 1)


def _strtol(text: str) -> tuple[int, bool]:
    """C ``strtol(text, NULL, 0)`` / ``strtoll`` on a 64-bit libc: leading blanks, a sign, ``0x``
    (hex) or a leading ``0`` (octal), trailing junk ignored, no digits -> 0. Returns (value, ERANGE)."""
    i, n = 0, len(text)
    while i < n and text[i] in _C_SPACE:
        i += 1
    neg = False
    if i < n and text[i] in "+-":
        neg = text[i] == "-"
        i += 1
    base, digits = 10, "0123456789"
    if text[i : i + 2] in ("0x", "0X") and i + 2 < n and text[i + 2] in "0123456789abcdefABCDEF":
        base, digits, i = 16, "0123456789abcdefABCDEF", i + 2
    elif text[i : i + 1] == "0":
        base, digits = 8, "01234567"
    j = i
    while j < n and text[j] in digits:
        j += 1
    significant = text[i:j].lstrip("0")
    if len(significant) > 24:  # past any int64 in any base (and past int()'s 4,300-digit limit): ERANGE, as strtol says
        return (_INT64[0] if neg else _INT64[1]), True
    value = int(significant, base) if significant else 0
    value = -value if neg else value
    if value < _INT64[0] or value > _INT64[1]:
        return (_INT64[0] if value < 0 else _INT64[1]), True
    return value, False


def _int32(value: int) -> int:
    """A C ``long`` stored in an ``int`` (two's complement truncation, as gcc does)."""
    return ((value + 2**31) % 2**32) - 2**31


def _show(value: str) -> str:
    return value if value and value.isprintable() and " " not in value else repr(value)


# -------------------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class NcclSettings:
    """The NCCL settings that decide a pair's transport, as NCCL will read them.

    ``p2p_level`` is normalised to a path type name (``"LOC"``, ``"NVL"``, ``"PIX"``, ...; a legacy
    number is converted, ``NCCL_P2P_DISABLE=1`` gives ``"LOC"``); None means NCCL's default.
    ``values`` holds the raw text of every ``NCCL_*`` variable in the environment and of every
    variable the config files set; ``sources`` says where each came from (``"environment"``,
    ``"/etc/nccl.conf line 3"``). ``warnings`` name the settings that do not do what they seem to.
    """

    p2p_disable: bool = False
    p2p_level: str | None = None
    shm_disable: bool = False
    ib_disable: bool = False
    net_gdr_level: str | None = None
    net: str | None = None  # NCCL_NET: a network by name (case-insensitive in NCCL)
    ignore_disabled_p2p: int = 0  # NCCL_IGNORE_DISABLED_P2P: 1 = P2P off without the WARN; 2 = skip NVML
    nvb_disable: bool = False  # NCCL_NVB_DISABLE: no routing through an intermediate NVLink GPU
    sources: Mapping[str, str] = field(default_factory=dict, hash=False)
    warnings: tuple[str, ...] = ()
    values: Mapping[str, str] = field(default_factory=dict, hash=False)

    def describe(self, name: str) -> str:
        """``"NCCL_P2P_LEVEL=LOC from /etc/nccl.conf line 3"`` (the raw value as NCCL reads it)."""
        if name not in self.values:
            return f"{name} unset"
        return f"{name}={_show(self.values[name])} from {self.sources.get(name, _ENV)}"

    def level_origin(self) -> str | None:
        """What set ``p2p_level``: the described ``NCCL_P2P_DISABLE`` or ``NCCL_P2P_LEVEL``; None = default."""
        if self.p2p_disable:
            return self.describe("NCCL_P2P_DISABLE")
        if self.p2p_level is not None:
            text = self.describe("NCCL_P2P_LEVEL")
            raw = self.values.get("NCCL_P2P_LEVEL")
            return text if raw == self.p2p_level else f"{text} (read as {self.p2p_level})"
        return None


def conf_file_paths(environ: Mapping[str, str], home_dir: str | None) -> list[str]:
    """The config files NCCL reads, in its order: ``NCCL_CONF_FILE`` when set and non-empty (then
    ``~/.nccl.conf`` is *not* read), else ``<home>/.nccl.conf``; then ``/etc/nccl.conf``.
    ``home_dir`` must be the passwd entry's home (NCCL uses ``getpwuid(getuid())``, not ``$HOME``);
    None when there is none. Missing files are simply skipped by NCCL."""
    paths = []
    user_file = environ.get("NCCL_CONF_FILE")
    if user_file:
        paths.append(user_file)
    elif home_dir is not None:
        paths.append(f"{home_dir}/.nccl.conf")
    paths.append("/etc/nccl.conf")
    return paths


def _conf_lines(text: str):
    """``setEnvFile``: getline, skip a line whose *first* character is ``#``, drop one trailing
    ``\\n`` (a ``\\r`` stays), name = up to the first ``=`` (not trimmed), value = the rest; a line
    without ``=`` is skipped; C strings end at a NUL; both parts are cut at 1023 characters."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the text ended with a newline: no further line
    for number, line in enumerate(lines, 1):
        if line.startswith("#"):
            continue
        line = line.split("\0", 1)[0]
        name, eq, value = line.partition("=")
        if not eq:
            continue
        yield number, name[:1023], value[:1023]


def _level(name: str, raw: str, origin: str, warnings: list) -> str | None:
    """``ncclGetLevel`` for one variable: a path type string, else a legacy number, else default."""
    if raw in PATH_TYPES:
        return raw
    if raw[:1] in tuple("0123456789"):
        old = _int32(_strtol(raw)[0])
        if old < 0:
            warnings.append(
                f"{name}={_show(raw)} from {origin} overflows NCCL's integer: NCCL's behaviour "
                f"is undefined (it indexes its legacy level table with {old})"
            )
            return None
        return _LEGACY_LEVELS[min(old, len(_LEGACY_LEVELS) - 1)]
    hint = ""
    fixed = raw.strip().upper()
    if fixed in PATH_TYPES:
        hint = f" (did you mean {fixed}?)"
    elif raw.strip() in ("NET", "DIS"):
        hint = " (NET and DIS are path types, not levels)"
    warnings.append(
        f"{name}={raw!r} from {origin} is not a level NCCL accepts (case-sensitive: "
        f"{' '.join(PATH_TYPES)}, or a legacy number): NCCL uses its default{hint}"
    )
    return None


def _param(name: str, values: Mapping[str, str], sources: Mapping[str, str], default: int, warnings: list) -> int:
    """``NCCL_PARAM``: unset or empty -> default; ``strtoll(s, NULL, 0)``; out of range -> default."""
    raw = values.get(name)
    if not raw:
        return default
    value, overflow = _strtol(raw)
    if overflow:
        warnings.append(
            f"{name}={_show(raw)} from {sources[name]} is out of range: NCCL logs "
            f"'Invalid value' and uses its default {default}"
        )
        return default
    return value


def _not_a_number(raw: str) -> bool:
    """strtol read no digit at all (``"true"``, ``"yes"``): the value silently reads as 0."""
    body = raw.lstrip(_C_SPACE).lstrip("+-")
    return bool(raw.strip()) and not body[:1].isdigit()


def read_settings(environ: Mapping[str, str], conf_files: Sequence[tuple[str, str]] = ()) -> NcclSettings:
    """The settings NCCL will use. ``conf_files``: ``[(path for messages, text)]`` of the files that
    exist, in NCCL's order (see :func:`conf_file_paths`). NCCL loads them once with
    ``setenv(name, value, 0)``: a variable already set — by the real environment, by an earlier file
    or by an earlier line of the same file — is never overwritten; the first value wins."""
    warnings: list[str] = []
    values, sources = _values_and_sources(environ, conf_files, warnings)
    p2p_disable, p2p_level = _p2p(values, sources, warnings)
    net_gdr_level = None
    if "NCCL_NET_GDR_LEVEL" in values:
        net_gdr_level = _level(
            "NCCL_NET_GDR_LEVEL", values["NCCL_NET_GDR_LEVEL"], sources["NCCL_NET_GDR_LEVEL"], warnings
        )
    shm = _param("NCCL_SHM_DISABLE", values, sources, 0, warnings)
    if "NCCL_SHM_DISABLE" in values and shm != 1 and (shm != 0 or _not_a_number(values["NCCL_SHM_DISABLE"])):
        warnings.append(
            f"{_describe(values, sources, 'NCCL_SHM_DISABLE')} does not disable SHM: "
            f"NCCL disables it only for a value that reads as the number 1"
        )
    ib = _param("NCCL_IB_DISABLE", values, sources, 0, warnings)
    if "NCCL_IB_DISABLE" in values and _not_a_number(values["NCCL_IB_DISABLE"]):
        warnings.append(f"{_describe(values, sources, 'NCCL_IB_DISABLE')} reads as 0: InfiniBand stays on")
    return NcclSettings(
        p2p_disable=p2p_disable,
        p2p_level=p2p_level,
        shm_disable=shm == 1,
        ib_disable=ib != 0,
        net_gdr_level=net_gdr_level,
        net=values.get("NCCL_NET"),
        ignore_disabled_p2p=_param("NCCL_IGNORE_DISABLED_P2P", values, sources, 0, warnings),
        nvb_disable=_param("NCCL_NVB_DISABLE", values, sources, 0, warnings) != 0,
        sources=sources,
        warnings=tuple(warnings),
        values=values,
    )


def _values_and_sources(
    environ: Mapping[str, str], conf_files: Sequence[tuple[str, str]], warnings: list[str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Every ``NCCL_*`` variable's raw value and where it came from, after NCCL's
    ``setenv(name, value, 0)`` of each config file line over the environment (the first value wins);
    a line that does not do what it seems to is a warning."""
    values: dict[str, str] = {k: v for k, v in environ.items() if k.startswith("NCCL_")}
    sources: dict[str, str] = {k: _ENV for k in values}
    for path, text in conf_files:
        for number, name, value in _conf_lines(text):
            where = f"{path} line {number}"
            if value.endswith("\r"):
                warnings.append(f"{where} ends with a carriage return: NCCL keeps it in the value of {name}")
            if not name:
                warnings.append(f"{where} has no variable name before '=': NCCL cannot set it")
                continue
            if name != name.strip():
                warnings.append(
                    f"{where}: {name!r} has blanks around it: NCCL sets a variable of that exact "
                    f"name, not {name.strip()}"
                )
            if name in environ:
                if environ[name] != value:
                    warnings.append(
                        f"{name}={_show(value)} from {where} is ignored: the environment sets "
                        f"{name}={_show(environ[name])}"
                    )
                continue
            if name in values:
                if values[name] != value:
                    warnings.append(
                        f"{name}={_show(value)} from {where} is ignored: {sources[name]} set "
                        f"{name}={_show(values[name])} first"
                    )
                continue
            values[name], sources[name] = value, where
    return values, sources


def _p2p(values: Mapping[str, str], sources: Mapping[str, str], warnings: list[str]) -> tuple[bool, str | None]:
    """``p2p_disable`` and ``p2p_level`` as ``ncclGetLevel(&l, "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL")``
    reads them: a disable that reads as the number 1 wins, and the level is then not read."""
    p2p_disable, p2p_level = False, None
    raw_disable = values.get("NCCL_P2P_DISABLE")
    if raw_disable is not None:
        disable = _int32(_strtol(raw_disable)[0])
        p2p_disable = disable == 1
        if not p2p_disable and (disable != 0 or _not_a_number(raw_disable)):
            warnings.append(
                f"NCCL_P2P_DISABLE={_show(raw_disable)} from {sources['NCCL_P2P_DISABLE']} does "
                f"not disable P2P: NCCL disables it only for a value that reads as the number 1"
            )
    if p2p_disable:
        p2p_level = "LOC"
        if "NCCL_P2P_LEVEL" in values:
            warnings.append(
                f"{_describe(values, sources, 'NCCL_P2P_LEVEL')} is not read: "
                f"{_describe(values, sources, 'NCCL_P2P_DISABLE')} turns P2P off first"
            )
    elif "NCCL_P2P_LEVEL" in values:
        p2p_level = _level("NCCL_P2P_LEVEL", values["NCCL_P2P_LEVEL"], sources["NCCL_P2P_LEVEL"], warnings)
    return p2p_disable, p2p_level


def _describe(values: Mapping[str, str], sources: Mapping[str, str], name: str) -> str:
    return f"{name}={_show(values[name])} from {sources[name]}"
