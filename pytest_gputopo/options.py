"""One setting, three surfaces: ``--gputopo-<name>``, ini ``gputopo_<name>``, env ``PYTEST_GPUTOPO_<NAME>``.

Precedence: ini < env < command line (< a marker's own argument, applied by the plugin). Every
value is returned with where it came from, so that an error names its source.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from . import runtime


@dataclass(frozen=True)
class Option:
    name: str
    metavar: str | None  # None: a flag
    help: str

    @property
    def flag(self) -> str:
        return "--gputopo-" + self.name

    @property
    def ini(self) -> str:
        return "gputopo_" + self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return runtime.env_name(self.name.replace("-", "_"))


OPTIONS = {o.name: o for o in (
    Option("machine", "NAME|PATH",
           "gate against a recorded machine instead of this host: a bundled name (see `gputopo machines`), "
           "a profile written by `gputopo record`, or `nvidia-smi topo -m` text (.txt)"),
    Option("strict", None, "an unmet requirement fails the test instead of skipping it"),
    Option("require", "EXPR",
           "stop the run before collection unless the machine meets EXPR, e.g. 'gpus>=8,p2p,link>=NV18'"),
    Option("expect", "NAME|PATH",
           "stop the run before collection if this node is worse than a reference profile "
           "(a healthy node recorded once): links, NVLinks, PCIe generation/width, P2P, GPU count"),
)}

TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off", "")


def addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gputopo", "GPU topology gating (pytest-gputopo)")
    for opt in OPTIONS.values():
        where = f"(ini: {opt.ini}, env: {opt.env})"
        if opt.metavar is None:
            group.addoption(opt.flag, action="store_true", default=None, dest=opt.ini, help=f"{opt.help} {where}")
            group.addoption(f"--gputopo-no-{opt.name}", action="store_true", default=None,
                            dest=f"gputopo_no_{opt.name}", help=f"turn {opt.flag} off (overrides ini and env)")
        else:
            group.addoption(opt.flag, metavar=opt.metavar, default=None, dest=opt.ini, help=f"{opt.help} {where}")
        parser.addini(opt.ini, f"{opt.help} (same as {opt.flag})", default=None)


def value(config: pytest.Config, name: str) -> tuple[str | None, str]:
    """The setting's raw value (None when unset) and a description of where it came from."""
    opt = OPTIONS[name]
    cli = config.getoption(opt.ini)
    if cli is not None:
        return (str(cli) if opt.metavar else "true"), opt.flag
    env = runtime.env_option(name.replace("-", "_"))
    if env is not None:
        return env, f"environment variable {opt.env}"
    ini = config.getini(opt.ini)
    if ini not in (None, ""):
        return str(ini).strip(), f"ini option {opt.ini} in {config.inipath}"
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
    raise pytest.UsageError(f"{where}: {raw!r} is not a boolean (use one of {', '.join(TRUE)} / "
                            f"{', '.join(f for f in FALSE if f)})")
