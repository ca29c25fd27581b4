"""The ``pytest11`` entry point: what every pytest run pays for pytest-gputopo -- its options, its
markers' registration, its hookspecs and its fixtures' names -- and nothing more until the run asks
something of it. The plugin itself (``hooks``) is registered the moment one of these asks:

- a gputopo setting: an option, an ini key, a ``PYTEST_GPUTOPO_*`` environment variable (a leased
  test's own process is told so there too), seen before the conftests load;
- an xdist run (the controller hands its workers the machine and a shared folder) or an xdist worker;
- a selected test with a gputopo marker or fixture, seen at collection (``ranks([2, 4])`` when pytest
  parametrizes it).

A run that asks nothing imports nothing of the package beyond this module's three (``option_table``,
``marker_table``, ``hookspecs``: docs/performance.md).
Where the plugin wakes in the middle of a hook's call, the plugin's own hook for that call is called
here: pluggy calls the plugins registered when the call began, and ``pytest_configure`` (historic) is
called on registration.
"""

from __future__ import annotations

import os

import pytest

from . import hookspecs, marker_table, option_table

AWAKE = pytest.StashKey[bool]()
_MARKS = frozenset((*marker_table.MARKERS, marker_table.LEASE_MEMORY))
_FIXTURES = frozenset(("gputopo", "gputopo_ranks", "gputopo_rank", "gputopo_gpus", "gputopo_bench"))


def pytest_addoption(parser: pytest.Parser) -> None:
    option_table.addoption(parser)


def pytest_addhooks(pluginmanager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def _wake(config: pytest.Config):
    """The plugin's hooks, registered in ``config``'s run once (its ``pytest_configure`` called then)."""
    from . import hooks

    if not config.stash.get(AWAKE, False):
        config.stash[AWAKE] = True
        config.pluginmanager.register(hooks, "gputopo-hooks")
    return hooks


def _set(config: pytest.Config) -> bool:
    """Whether any gputopo setting is given: an option on the command line, an ini key (or ``-o``), an
    environment variable. Nothing given is nothing to read, and nothing that can be wrong."""
    if any(name.startswith(option_table.ENV_PREFIX) for name in os.environ):
        return True
    # The command line as parsed so far: before the conftests load, the known arguments; from
    # pytest_cmdline_main on, all of them (a conftest that loads the plugin adds its options late).
    known = config.known_args_namespace
    given = {**(vars(known) if known is not None else {}), **vars(config.option)}
    if any(value is not None for name, value in given.items() if name.startswith("gputopo_")):
        return True
    return any(config.getini(opt.ini) not in (None, "") for opt in option_table.OPTIONS.values())


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    if not early_config.stash.get(AWAKE, False) and _set(early_config):
        _wake(early_config).pytest_load_initial_conftests(early_config)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Where the plugin was loaded by a conftest (``pytest_plugins``): the settings, seen here."""
    if not config.stash.get(AWAKE, False) and _set(config):
        _wake(config).pytest_cmdline_main(config)


def pytest_configure(config: pytest.Config) -> None:
    for line in marker_table.registration_lines():
        config.addinivalue_line("markers", line)
    xdist = hasattr(config, "workerinput") or (
        config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))
    )
    if xdist or _set(config):
        _wake(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``ranks([2, 4])`` is parametrized as the test is collected: the plugin wakes for it."""
    if not metafunc.config.stash.get(AWAKE, False) and metafunc.definition.get_closest_marker("ranks"):
        _wake(metafunc.config).pytest_generate_tests(metafunc)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    if config.stash.get(AWAKE, False):
        return
    for item in items:
        if _MARKS.intersection(mark.name for mark in item.iter_markers()) or _FIXTURES.intersection(
            getattr(item, "fixturenames", ())
        ):
            _wake(config).pytest_collection_modifyitems(session, config, items)
            return


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    if config.stash.get(AWAKE, False) or config.get_verbosity() <= 0:
        return []
    return ["gputopo: no selected test or option asks about the machine: nothing probed"]


# The plugin's fixtures, by name from the start (pytest finds a test's fixtures as it collects it); each
# wakes the plugin where a test asked for it by ``request.getfixturevalue`` alone.


def _fixtures(config: pytest.Config):
    hooks = _wake(config)
    hooks.fixture_used(config)
    from . import fixtures

    return fixtures


@pytest.fixture(scope="session")
def gputopo(pytestconfig: pytest.Config):
    """The machine as this process sees it (``pytest_gputopo.core.model.Topology``): ``gpus``,
    ``link(a, b)``, ``p2p(a, b)``, ``pairs(gpus=None)``, ``pairs_worse_than("PXB")``, ``source``."""
    return _fixtures(pytestconfig).machine(pytestconfig)


@pytest.fixture
def gputopo_ranks(request: pytest.FixtureRequest):
    """Every rank's machine (``views``, ``nodes``) and ``require(predicate, reason)``: a custom
    condition decided on every rank's topology, so every rank takes the same decision."""
    return _fixtures(request.config).rank_facts(request)


@pytest.fixture
def gputopo_rank(request: pytest.FixtureRequest):
    """A ``ranks(n)`` test's own rank: ``rank``, ``world_size``, ``device``, ``backend``."""
    return _fixtures(request.config).own_rank(request)


@pytest.fixture
def gputopo_gpus(request: pytest.FixtureRequest) -> tuple:
    """The GPUs this test holds under ``--gputopo-lease``, as the machine's ``Gpu`` objects (``index``:
    ``cuda:<index>`` inside the test, ``uuid``, ``pci_bus_id``, ``name``); without a lease, every GPU
    the test sees."""
    return _fixtures(request.config).leased_gpus(request)


@pytest.fixture
def gputopo_bench(request: pytest.FixtureRequest):
    """The measurement harness (``.measure(name, run, size_bytes=...)``) and the run's shared
    benchmarks (``.allreduce()``, ``.p2p(a, b)``, ``.h2d(gpu)``), as ``BenchResult``s."""
    return _fixtures(request.config).bench(request)
