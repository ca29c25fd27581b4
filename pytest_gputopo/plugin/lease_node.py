"""What a leased test's process is told of its run: a worker's input, made as xdist's controller makes one.

A leased test's process poses as an xdist worker of the run (``config.workerinput``): that is the
convention by which report writers (pytest's JUnit, pytest-html, pytest-reportlog, gputopo's JSON)
leave the writing to the run, and by which plugins find their controller's settings in a worker. So it
must be a worker some controller configured, never one no plugin saw (issue 40: pytest-rerunfailures
failed every leased test on ``KeyError: 'sock_port'``, pytest-cov on ``'cov_master_host'``):

- under ``-n`` the run's own process is a worker xdist's controller configured: the lease's process is
  given that input whole (each plugin's keys, xdist's ``testrunuid``);
- in a run without workers this process is the controller: it asks the plugins for a worker's input
  through their own ``pytest_configure_node(node)`` hooks, once per run, as xdist's ``NodeManager``
  does for each worker it starts (pytest-rerunfailures adds its status server, pytest-randomly its seed).

One plugin has no controller without xdist: pytest-cov's ``Central`` (a run without workers) configures
no node (``pytest_cov/engine.py``: ``configure_node`` is ``DistMaster``'s). Its worker side needs only
where the run measures (``DistWorker.start``: the host and top folder, to know it shares the run's
files); it then saves a parallel data file beside the run's, and ``Central.finish`` combines every
parallel file of its data file with its own (``Coverage.combine()``): the leased tests' lines count.
And pytest-cov starts measuring where its plugin loads, from the arguments (``pytest_load_initial_conftests``),
erasing every parallel data file there unless ``--cov-append`` (``Central.start``, ``DistMaster.start``:
``Coverage(data_suffix=True)`` erases in parallel): an xdist worker does it before any worker has saved
one, a lease's process starts later in the run and would erase those saved before it: it is given
``--cov-append`` (``child_options``).
"""

from __future__ import annotations

import socket
import uuid

import pytest

WORKER_INPUT = pytest.StashKey[dict]()


class LeaseNode:
    """The node a plugin's ``pytest_configure_node`` is handed: the fields of xdist's
    ``WorkerController`` such hooks read (``config``, ``workerinput``; pytest-cov's master reads
    ``nodemanager.roots``, the folders xdist would rsync: none)."""

    class _NoRsync:
        roots: tuple = ()

    def __init__(self, config: pytest.Config, workerinput: dict):
        self.config = config
        self.workerinput = workerinput
        self.nodemanager = self._NoRsync()


def worker_input(config: pytest.Config) -> dict:
    """The worker input of this run's leased tests' processes (made once per run)."""
    if WORKER_INPUT not in config.stash:
        given = getattr(config, "workerinput", None)
        config.stash[WORKER_INPUT] = dict(given) if given is not None else _as_controller(config)
    return config.stash[WORKER_INPUT]


def _as_controller(config: pytest.Config) -> dict:
    """A worker's input as the plugins give one, this process their controller: xdist's own keys
    (its ``worker_id`` and ``testrun_uid`` fixtures read them; one run id for the whole run, as
    xdist's), then each plugin's ``pytest_configure_node`` (gputopo's own keys are then the lease's:
    ``LeaseProcess``)."""
    workerinput = {"workerid": "master", "workercount": 1, "testrunuid": uuid.uuid4().hex}
    manager = config.pluginmanager
    if hasattr(manager.hook, "pytest_configure_node"):  # a plugin implements it (xdist's spec or not)
        node = LeaseNode(config, workerinput)
        coverage = _coverage_without_controller(manager)
        manager.subset_hook_caller("pytest_configure_node", [coverage] if coverage is not None else [])(node=node)
        if coverage is not None:
            workerinput.update(_coverage_input(coverage))
    return workerinput


def _coverage_without_controller(manager: pytest.PytestPluginManager) -> object | None:
    """pytest-cov's plugin where it measures this run without a controller of workers, else None."""
    plugin = manager.get_plugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    return plugin if controller is not None and not hasattr(controller, "configure_node") else None


def _coverage_input(plugin) -> dict:
    """What pytest-cov's ``DistMaster.configure_node`` gives a worker, from the run's ``Central``."""
    return {
        "cov_master_host": socket.gethostname(),
        "cov_master_topdir": plugin.cov_controller.topdir,
        "cov_master_rsync_roots": [],
    }


def child_options(config: pytest.Config) -> list[str]:
    """Options a leased test's process needs beyond the run's own (pytest-cov's ``--cov-append``: above)."""
    plugin = config.pluginmanager.get_plugin("_cov")
    return ["--cov-append"] if getattr(plugin, "cov_controller", None) is not None else []
