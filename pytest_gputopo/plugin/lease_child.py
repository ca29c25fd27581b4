"""A leased test run in a fresh process that sees only its GPUs, its reports relayed to this one.

CUDA fixes the devices a process sees when it starts (cuInit reads ``CUDA_VISIBLE_DEVICES``), and a
conftest or test module may start it at import: only a process started with the variable set sees
just the lease. The child is pytest again, with the run's own arguments (its options, ini, plugins)
and the one test, marked as a worker of this run (``workerinput``, as xdist marks its workers) so
that report writers (JUnit, gputopo's JSON) leave the writing to this process, which receives every
report through ``pytest_report_to_serializable``/``from_serializable`` and logs it as its own:
terminal, JUnit, JSON and an xdist controller see the test as if it had run here.
"""

from __future__ import annotations

import builtins
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import pytest

CHILD_OPTION = "--gputopo-lease-child"  # the child's spec file; not a user setting (no ini or env)
REPORTS = "reports.jsonl"
OUTPUT = "output.txt"
SPEC = "spec.json"


def child_args(config: pytest.Config, item: pytest.Item, spec: str, folder: str) -> list[str]:
    """The run's own arguments without the tests it named, then this test alone, by its file's full
    path (the child starts where the run started), its cache and temporary folders its own (it must
    neither rotate the run's ``pytest-of-<user>`` folders nor write its ``--lf`` record)."""
    args = [str(a) for a in config.invocation_params.args]
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        for named in config.args:
            if named in args:
                args.remove(named)
    test = str(item.path) + ("::" + item.nodeid.split("::", 1)[1] if "::" in item.nodeid else "")
    extra = ["-n", "0"] if config.pluginmanager.hasplugin("xdist") else []  # the last -n wins: no workers
    if config.pluginmanager.hasplugin("cacheprovider"):
        extra += ["-o", f"cache_dir={os.path.join(folder, 'cache')}"]
    # One argument each: pytest finds the rootdir from the arguments that are paths, option values too.
    return [*args, *extra, f"--rootdir={config.rootpath}", f"--basetemp={os.path.join(folder, 'tmp')}",
            f"{CHILD_OPTION}={spec}", test]


def run_in_child(item: pytest.Item, lease, environ_for) -> None:
    """Run ``item`` in a child that sees the ``lease``'s GPUs alone (``environ_for(gpus)``: the child's
    environment), logging its reports here; a child that ends without them fails the test, with its
    exit status and output."""
    from ..core.schema import to_dict

    config = item.config
    folder = tempfile.mkdtemp(prefix="pytest-gputopo-lease-")
    try:
        spec = os.path.join(folder, SPEC)
        workerinput = dict(getattr(config, "workerinput", None) or {"workerid": "master"})
        with open(spec, "w", encoding="utf-8") as handle:
            json.dump({"nodeid": item.nodeid, "topology": to_dict(lease.view), "reports": os.path.join(folder, REPORTS),
                       "workerinput": {k: v for k, v in workerinput.items() if _plain(v)}}, handle)
        argv = [sys.executable, "-m", "pytest", *child_args(config, item, spec, folder)]
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        with open(os.path.join(folder, OUTPUT), "wb") as output:
            child = subprocess.Popen(argv, cwd=config.invocation_params.dir, env=environ_for(lease.gpus),
                                     stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                     pass_fds=[lock.fd for lock in lease.locks])  # the child holds the GPUs too
            try:
                status = child.wait()
            finally:
                if child.poll() is None:  # Ctrl-C here: the child got it too; it does not outlive the test
                    child.terminate()
                    try:
                        child.wait(10)
                    except subprocess.TimeoutExpired:
                        child.kill()
                        child.wait()
        _relay(item, os.path.join(folder, REPORTS), status, os.path.join(folder, OUTPUT))
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _plain(value) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _relay(item: pytest.Item, path: str, status: int, output: str) -> None:
    config = item.config
    seen = set()
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        data = json.loads(line)
        if "warning" in data:
            config.hook.pytest_warning_recorded.call_historic(kwargs=_warning_from(data["warning"], item))
            continue
        report = config.hook.pytest_report_from_serializable(config=config, data=data)
        if report is None or getattr(report, "nodeid", None) != item.nodeid:
            continue
        seen.add(report.when)
        item.ihook.pytest_runtest_logreport(report=report)
    if "teardown" in seen:
        return
    from ..runtime.procs import tail

    with open(output, encoding="utf-8", errors="replace") as handle:
        said = tail(handle.read(), 30)
    why = (f"the test's own process (CUDA_VISIBLE_DEVICES set to its leased GPUs) ended with status {status} "
           f"before the test finished; its last output:\n{said}")
    for when in ("setup", "call", "teardown"):
        if when in seen or (when == "call" and "setup" not in seen):
            continue
        outcome = "passed" if when == "teardown" else "failed"
        item.ihook.pytest_runtest_logreport(report=pytest.TestReport(
            item.nodeid, item.location, {k: 1 for k in item.keywords}, outcome, why if outcome == "failed" else None,
            when, user_properties=list(item.user_properties)))


def _warning_from(data: dict, item: pytest.Item) -> dict:
    """``pytest_warning_recorded``'s arguments for a warning the child recorded, for the run's
    warnings summary (as xdist relays its workers' warnings). Its category is rebuilt only where it
    needs no import (a builtin, or a class of a module this process already has): the child's record
    names modules, and importing one here would run code the test never ran in this process."""
    module, name = data.get("module") or "", data.get("category") or ""
    found = getattr(builtins if module == "builtins" else sys.modules.get(module), name, None)
    category = found if isinstance(found, type) and issubclass(found, Warning) else UserWarning
    text = str(data.get("message", ""))
    if category is UserWarning and name != "UserWarning":
        text = f"{module}.{name}: {text}" if name else text
    message = warnings.WarningMessage(category(text), category, str(data.get("filename", "")),
                                      int(data.get("lineno") or 0))
    return {"warning_message": message, "when": "runtest", "nodeid": item.nodeid, "location": None}


# ---------------------------------------------------------------------------------------------
# In the child


def read_spec(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def enter_child(config: pytest.Config, topology_key: str) -> None:
    """Make this process a worker of the run that started it, holding the leased GPUs' machine
    (never probed again: NVML would list every GPU, and this process sees the lease's alone)."""
    spec = read_spec(config.getoption("gputopo_lease_child"))
    config.workerinput = {**spec["workerinput"], topology_key: spec["topology"]}
    config.workeroutput = {}


class Child:
    """The child's plugin: runs the one test it was given, and writes each of its reports for the
    parent (one JSON line each, flushed: a child killed mid-test keeps what it said)."""

    def __init__(self, config: pytest.Config):
        spec = read_spec(config.getoption("gputopo_lease_child"))
        self.config, self.nodeid = config, spec["nodeid"]
        self.out = open(spec["reports"], "a", encoding="utf-8")  # noqa: SIM115 (open for the session)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list) -> None:
        keep = [i for i in items if i.nodeid == self.nodeid]  # not the run's check items, say
        config.hook.pytest_deselected(items=[i for i in items if i.nodeid != self.nodeid])
        items[:] = keep

    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage, when: str, nodeid: str) -> None:
        """The test's own warnings, for the run's summary (collection's were the run's own already)."""
        if when != "runtest" or nodeid != self.nodeid:
            return
        category = warning_message.category or UserWarning
        self._write({"warning": {"module": category.__module__, "category": category.__name__,
                                 "message": str(warning_message.message), "filename": str(warning_message.filename),
                                 "lineno": warning_message.lineno}})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._write(self.config.hook.pytest_report_to_serializable(config=self.config, report=report))

    def _write(self, data: dict) -> None:
        self.out.write(json.dumps(data) + "\n")
        self.out.flush()

    def pytest_unconfigure(self) -> None:
        self.out.close()
