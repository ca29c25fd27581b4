"""Leased tests run in a process that sees only the lease's GPUs, their reports relayed to this one.

CUDA fixes the devices a process sees when it starts (cuInit reads ``CUDA_VISIBLE_DEVICES``), and a
conftest or test module may start it at import: the child takes its lease (the variable, the
machine it sees, the GPUs' lock descriptors) before any conftest loads, and refuses it where CUDA's
driver is loaded already (``take_lease``). So it may be started ahead of its lease, seeing no GPU
until then, and pay its interpreter's and plugins' start while the test before runs or while the
lease is waited for. The child is pytest again, with the run's own arguments (its options, ini, plugins)
and the leased test's module, marked as a worker of this run (``workerinput``, as xdist marks its
workers) so that report writers (JUnit, gputopo's JSON) leave the writing to this process. It
collects the module, then runs the tests it is sent one at a time, as an xdist worker does: the
tests of one module that fit one lease run in one process, paying its start once. Each report comes
back through ``pytest_report_to_serializable``/``from_serializable`` as it is made, and this process
logs it as its own: terminal, JUnit, JSON and an xdist controller see the test as if it ran here.

It is told it is a lease's process by its environment, not by an option: ``runtime.environ.LEASE_SPEC``
names its spec's file (``lease_messages``: every message between the two, typed), and it forgets the
variable once its plugin is in place, so that nothing it starts takes itself for one.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest
from _pytest.outcomes import OutcomeException

from ..core.schema import to_dict
from ..runtime import environ as runtime, procs as supervisor, run_folder
from ..runtime.messages import MessageError
from ..runtime.procs import tail
from .lease_messages import (
    COMMANDS,
    HANDED,
    REPORTS,
    SPEC,
    Done,
    Handed,
    LeaseSpec,
    Missing,
    RecordedWarning,
    Refused,
    Report,
    RunTest,
    Took,
)
from .lease_node import child_options, worker_input
from .run import WORKER_SHARED_DIR, GputopoRun, run_of

OUTPUT = "output.txt"
SPEC_FILE = "spec.json"
LEASE_FILE = "lease.json"  # the lease's machine and CUDA_VISIBLE_DEVICES; its locks come over a socket
MAX_LOCKS = 1024
# pytest's options that select or order tests by what its cache says of earlier runs (dest names)
CACHE_SELECTION = ("lf", "failedfirst", "newfirst", "stepwise", "stepwise_skip", "stepwise_reset")
STOP_S = 10.0  # a child told to stop gets this long to tear down before it is terminated
NO_CALL = "no call"  # among a test's phases seen: its setup did not pass


def child_args(config: pytest.Config, module: str, folder: str) -> list[str]:
    """The run's own arguments without the tests it named, then the leased test's module by its full
    path (the child starts where the run started), its cache and temporary folders its own (it must
    neither rotate the run's ``pytest-of-<user>`` folders nor write its ``--lf`` record; its temporary
    folders lie inside the run's own base temporary folder)."""
    args = [str(a) for a in config.invocation_params.args]
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        for named in config.args:
            if named in args:
                args.remove(named)
    extra = ["-n", "0"] if config.pluginmanager.hasplugin("xdist") else []  # the last -n wins: no workers
    extra += child_options(config)
    if config.pluginmanager.hasplugin("cacheprovider"):
        extra += ["-o", f"cache_dir={os.path.join(folder, 'cache')}"]
    # One argument each: pytest finds the rootdir from the arguments that are paths, option values too.
    return [
        *args,
        *extra,
        f"--rootdir={config.rootpath}",
        f"--basetemp={_basetemp(config, folder)}",
        module,
    ]


def _basetemp(config: pytest.Config, folder: str) -> str:
    """The leased tests' temporary folders: inside the run's own base (``--basetemp``, else pytest's
    numbered ``pytest-of-<user>/pytest-<n>``), kept after the run as the run's own are, and by the same
    retention policy (the lease's process applies the run's ini to its tests); in the lease's folder,
    removed with it, only where pytest's tmp_path plugin is off."""
    # The run's base made first: pytest empties a given basetemp when it first makes it
    # (TempPathFactory.getbasetemp), which must not be after a leased test's process has begun in it.
    factory = getattr(config, "_tmp_path_factory", None)  # what pytest's tmp_path_factory fixture returns
    if factory is None:
        return os.path.join(folder, "tmp")
    return os.path.join(str(factory.getbasetemp()), os.path.basename(folder))  # pytest-gputopo-lease-*


def keeper(lease_fd: int, folder: str) -> list[str]:
    """The command that runs a leased test's process under its keeper (``runtime.reaper``): the leader
    of the lease's processes, which dies with the run, holds the GPUs' locks until the last process
    below it has gone (a crashed test's helper included), and ends what is left when the test's
    process ends."""
    return [
        *(sys.executable, "-m", "pytest_gputopo.runtime.reaper"),
        *("--parent", str(os.getpid()), "--hold", str(lease_fd), "--folder", folder, "--"),
    ]


def figures_folder(run: GputopoRun) -> str:
    """Where the leased tests' processes of a run that shares no folder (no xdist) leave the figures
    they measure, for the run's record (``GputopoRun.shared_folders``): made for the first."""
    if run.state.lease_figures is None:
        run.state.lease_figures = run_folder.make()
    return run.state.lease_figures


class LeaseProcess:
    """A pytest process for a leased test of ``item``'s module, started with ``environ`` (its
    environment: seeing its lease's GPUs alone, or none until it is handed a lease, ``hand``), that
    runs the tests of that module it is sent. It runs under its keeper (``keeper``: ``process`` is the
    keeper's), which holds the lease's lock descriptors too, so that the GPUs stay locked while
    anything of the lease runs, even if this process is killed, and no longer."""

    def __init__(self, item: pytest.Item, environ: dict):
        config = item.config
        self.module = str(item.path)
        self.handed = False
        self.told_to_end: float | None = None  # time.monotonic() when told
        # -s and --pdb reach the test: its output (and pdb's prompt) on this process's terminal, live,
        # the child's own report lines in its output file; pdb reads this process's input.
        debugging = bool(config.getoption("usepdb", False))
        live = debugging or config.getoption("capture", None) == "no"
        self.folder = run_folder.make(run_folder.LEASE)  # one a killed run left: removed by a later run
        commands_in, self._commands_out = os.pipe()
        self._reports_in, reports_out = os.pipe()
        self._lease_out, lease_in = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            spec = os.path.join(self.folder, SPEC_FILE)
            workerinput = dict(worker_input(config))  # as a controller configures a worker (lease_node)
            workerinput[WORKER_SHARED_DIR] = workerinput.get(WORKER_SHARED_DIR) or figures_folder(run_of(config))
            terminal = os.path.join(self.folder, OUTPUT) if live else None
            plain = {k: v for k, v in workerinput.items() if _plain(v)}
            SPEC.write_file(spec, LeaseSpec(lease_in.fileno(), commands_in, reports_out, plain, terminal))
            argv = [
                *keeper(lease_in.fileno(), self.folder),
                *(sys.executable, "-m", "pytest", *child_args(config, self.module, self.folder)),
            ]
            stdin = None if live else subprocess.DEVNULL  # -s, --pdb: breakpoint() reads the run's input
            with open(os.path.join(self.folder, OUTPUT), "wb") as output, _own_input(config, live):
                self.process = supervisor.start(
                    argv,
                    cwd=config.invocation_params.dir,
                    env={**environ, runtime.LEASE_SPEC: spec},
                    stdin=stdin,
                    output=None if live else output,
                    pass_fds=[lease_in.fileno(), commands_in, reports_out],
                    session=not live,  # live: it shares the run's terminal, and reads it
                )
        except BaseException:
            os.close(self._commands_out)
            os.close(self._reports_in)
            self._lease_out.close()
            run_folder.remove(self.folder)
            raise
        finally:
            os.close(commands_in)
            os.close(reports_out)
            lease_in.close()
        self.commands = os.fdopen(self._commands_out, "w", encoding="utf-8")
        self.reports = os.fdopen(self._reports_in, encoding="utf-8")

    def hand(self, lease, visible: str) -> str | None:
        """Hand it ``lease`` (``visible``: the lease's ``CUDA_VISIBLE_DEVICES``) and wait until it took
        it: None then, else why not (it refused it, or it ended)."""
        HANDED.write_file(os.path.join(self.folder, LEASE_FILE), Handed(to_dict(lease.view), visible))
        try:
            socket.send_fds(self._lease_out, [b"L"], list(lease.fds))
        except OSError:
            pass  # it has ended: it says nothing more, below
        finally:
            self._lease_out.close()
        line = self.reports.readline()
        if not line:
            return "it ended before it took its lease"
        try:
            answer = REPORTS.decode(line, f"pid {self.process.pid}")
        except MessageError as exc:
            return str(exc)
        self.handed = isinstance(answer, Took)
        return None if self.handed else answer.why if isinstance(answer, Refused) else f"it said {answer!r}"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None and not self.commands.closed

    def run(self, item: pytest.Item, nextitem: pytest.Item | None, begun: Callable[[], None] | None = None) -> None:
        """Run ``item`` there (``nextitem``: the test it runs next, for its fixtures' teardown, or
        None), logging its reports here as they come (``begun`` called at its setup's); a child that
        ends before the test finished fails it, with its exit status and last output."""
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        seen: set[str] = set()
        try:
            try:
                self.commands.write(COMMANDS.encode(RunTest(item.nodeid, nextitem.nodeid if nextitem else None)) + "\n")
                self.commands.flush()
            except BrokenPipeError:  # it has ended: the reports below are none, and the failure says why
                pass
            refused = self._relay_until_done(item, seen, begun)
            if refused is not None:  # its reports ended (so did it), or it sent what is not one: it ends
                self._end()
                what = refused or f"ended with status {self.process.returncode} before the test finished"
                self._finish_unfinished(item, seen, f"{what}; its last output:\n{self.output_tail()}")
                self._close()
        except OutcomeException as outcome:  # raised here by a plugin's alarm (pytest-timeout's SIGALRM)
            supervisor.end([self.process], STOP_S)  # as in place, the test ends there; its process with it, now
            self._close()
            self._finish_unfinished(item, seen, f"{type(outcome).__name__}: {outcome}", said_whole=True)
        except BaseException:  # Ctrl-C here: the child got it too; it does not outlive the test
            self.kill()
            raise
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def _relay_until_done(self, item: pytest.Item, seen: set[str], begun: Callable[[], None] | None) -> str | None:
        """Relay its reports of ``item`` until it is done: None then, "" where they ended before, or
        why what it sent is not one."""
        for line in self.reports:
            try:
                message = REPORTS.decode(line, f"pid {self.process.pid}, running {item.nodeid}")
            except MessageError as exc:
                return f"sent what is not a report ({exc})"
            if isinstance(message, Done) and message.test == item.nodeid:
                return None
            self._relay(item, message, seen)
            if begun is not None and seen:  # once
                call, begun = begun, None
                call()
        return ""

    def _relay(self, item: pytest.Item, message: object, seen: set[str]) -> None:
        config = item.config
        if isinstance(message, RecordedWarning):
            config.hook.pytest_warning_recorded.call_historic(kwargs=_warning_from(message, item))
        elif isinstance(message, Missing):  # its collection differs from the run's (ids made of random values, say)
            self._finish_unfinished(item, seen, f"did not collect it; its last output:\n{self.output_tail()}")
        elif isinstance(message, Report):
            report = config.hook.pytest_report_from_serializable(config=config, data=message.data)
            if isinstance(getattr(report, "longrepr", None), list):
                # A skip's (path, line, reason): JSON has no tuple, and pytest's summary asserts one
                # (_pytest/terminal.py _folded_skips; xdist's execnet keeps tuples, our JSON lines do not).
                report.longrepr = tuple(report.longrepr)
            if report is not None and getattr(report, "nodeid", None) == item.nodeid:
                seen.add(report.when)
                if report.when == "setup" and not report.passed:
                    seen.add(NO_CALL)  # a failed or skipped setup: the test has no call
                item.ihook.pytest_runtest_logreport(report=report)

    def _finish_unfinished(self, item: pytest.Item, seen: set[str], what: str, said_whole: bool = False) -> None:
        """Fail the phases the child never reported (a teardown after a failed call passes; a failed
        setup has no call, as in place), saying what the child did (or, ``said_whole``, what ended
        the test, as it would be said in place)."""
        if "teardown" in seen:
            return
        why = what if said_whole else f"the test's own process (CUDA_VISIBLE_DEVICES set to its leased GPUs) {what}"
        no_call = NO_CALL in seen or "setup" not in seen
        for when in ("setup", "call", "teardown"):
            if when in seen or (when == "call" and no_call):
                continue
            seen.add(when)
            item.ihook.pytest_runtest_logreport(
                report=pytest.TestReport(
                    item.nodeid,
                    item.location,
                    {k: 1 for k in item.keywords},
                    "passed" if when == "teardown" else "failed",
                    None if when == "teardown" else why,
                    when,
                    user_properties=list(item.user_properties),
                )
            )

    def output_tail(self) -> str:
        try:
            with open(os.path.join(self.folder, OUTPUT), encoding="utf-8", errors="replace") as handle:
                return tail(handle.read(), 30)
        except OSError as exc:  # its keeper removed it, finding this process gone (it is not)
            return f"(its output is lost: {exc.strerror})"

    def end(self) -> None:
        """Tell it to end, not waiting: its session finishes, tearing down what is left (one never
        handed a lease ends where it would have taken one). Its locks go when it has ended."""
        self._lease_out.close()
        if self.told_to_end is None:
            self.told_to_end = time.monotonic()
        if not self.commands.closed:
            try:
                self.commands.close()  # end of commands: its loop ends
            except BrokenPipeError:
                pass

    def ended(self) -> bool:
        """Whether it has ended since told (its folder removed then); one still there ``STOP_S``
        after it was told is terminated, and killed ``STOP_S`` later."""
        if self.process.poll() is None:
            late = time.monotonic() - (self.told_to_end or time.monotonic())
            if late > STOP_S:
                supervisor.signal_group(self.process, signal.SIGKILL if late > 2 * STOP_S else signal.SIGTERM)
            return False
        self._close()
        return True

    def stop(self) -> None:
        """Tell it to end, and wait for it; one that does not end in ``STOP_S`` is terminated, then
        killed."""
        self.end()
        self.kill()

    def kill(self) -> None:
        """End it (``_end``) and remove what it left."""
        self._end()
        self._close()

    def _end(self) -> None:
        """Wait briefly for it to end, then end it (``supervisor.end``)."""
        supervisor.end([self.process], STOP_S, patience_s=STOP_S)

    def _close(self) -> None:
        for stream in (self.commands, self.reports):
            try:
                stream.close()
            except OSError:  # a write the child never read: it is gone
                pass
        run_folder.remove(self.folder)


@contextlib.contextmanager
def _own_input(config: pytest.Config, live: bool) -> Iterator[None]:
    """The run's own standard input while a child that may debug (``-s``, ``--pdb``) starts: between
    tests pytest keeps it captured (``/dev/null``) whatever the output's state, as its debugger's own
    entry undoes."""
    capture = config.pluginmanager.getplugin("capturemanager") if live else None
    if capture is None:
        yield
        return
    capture.suspend_global_capture(in_=True)
    try:
        yield
    finally:
        capture.resume_global_capture()
        capture.suspend_global_capture()  # as between tests: output and input captured again when a test runs


def _plain(value) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _warning_from(data: RecordedWarning, item: pytest.Item) -> dict:
    """``pytest_warning_recorded``'s arguments for a warning the child recorded, for the run's
    warnings summary (as xdist relays its workers' warnings). Its category is rebuilt only where it
    needs no import (a builtin, or a class of a module this process already has): the child's record
    names modules, and importing one here would run code the test never ran in this process."""
    module, name = data.module, data.category
    found = getattr(builtins if module == "builtins" else sys.modules.get(module), name, None)
    category = found if isinstance(found, type) and issubclass(found, Warning) else UserWarning
    text = data.message
    if category is UserWarning and name != "UserWarning":
        text = f"{module}.{name}: {text}" if name else text
    message = warnings.WarningMessage(category(text), category, data.filename, data.lineno or 0)
    return {"warning_message": message, "when": "runtest", "nodeid": item.nodeid, "location": None}


# ---------------------------------------------------------------------------------------------
# In the child


def read_spec(path: str) -> LeaseSpec:
    """This process's spec (the run's own: one that cannot be read is a bug, said as it is)."""
    return SPEC.read_file(path)


class Taken(NamedTuple):
    """The lease this process took: its machine, its locks' descriptors and ``CUDA_VISIBLE_DEVICES``."""

    topology: dict[str, Any]
    locks: list[int]
    visible: str


TAKEN = pytest.StashKey[Taken]()


def take_lease(config: pytest.Config, spec_path: str, before_conftests: bool) -> None:
    """Wait for the lease the run hands this process and take it: its GPUs' lock descriptors kept,
    ``CUDA_VISIBLE_DEVICES`` set to name them. It is refused (this process then ends, and the run
    starts another, seeing the lease from its start) unless CUDA cannot have started seeing other
    devices: this process was started seeing the lease's, or it takes it before any conftest has
    loaded (``before_conftests``: the plugin's ``pytest_load_initial_conftests``) and CUDA's
    driver is not loaded yet: only installed plugins ran before then, and one that started CUDA
    has loaded its driver library, ``libcuda.so``, to do it."""
    if TAKEN in config.stash:
        return
    spec = read_spec(spec_path)
    with socket.socket(fileno=spec.lease) as channel:
        # close-on-exec: a helper the test starts (``os.system("... &")``) must not keep its GPUs
        # locked after it; the keeper holds them while anything the test started runs.
        message, fds, _, _ = socket.recv_fds(channel, 1, MAX_LOCKS, socket.MSG_CMSG_CLOEXEC)
    if not message:  # the run ended, or stopped this process before it had a lease
        os._exit(0)
    lease = HANDED.read_file(os.path.join(os.path.dirname(spec_path), LEASE_FILE))
    why = _why_not(lease.visible, before_conftests)
    os.write(spec.reports, (REPORTS.encode(Refused(why) if why else Took()) + "\n").encode())
    if why:
        os._exit(0)
    os.environ["CUDA_VISIBLE_DEVICES"] = lease.visible
    config.stash[TAKEN] = Taken(lease.topology, fds, lease.visible)


def _why_not(visible: str, before_conftests: bool) -> str | None:
    """Why a lease naming ``visible`` cannot be taken now, or None."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") == visible:
        return None  # started seeing them: CUDA, whenever it starts, sees them alone
    if not before_conftests:
        return "the lease came after conftests loaded (the plugin was not loaded before them)"
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as handle:
            maps = handle.read()
    except OSError as exc:
        return f"whether CUDA's driver is loaded is unknown ({exc.strerror}: /proc/self/maps)"
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[5:]
        if path and os.path.basename(path[0]).startswith("libcuda.so"):
            return f"CUDA's driver ({path[0]}) was loaded before the lease came, by a plugin"
    return None


def _spec_path() -> str:
    spec = runtime.lease_spec()
    if spec is None:  # the plugin asks only where the environment names one (hooks)
        raise RuntimeError(f"{runtime.LEASE_SPEC} is not set: this is no leased test's process")
    return spec


def enter_child(config: pytest.Config, topology_key: str) -> None:
    """Make this process a worker of the run that started it, holding the leased GPUs' machine
    (never probed again: NVML would list every GPU, and this process sees the lease's alone)."""
    spec_path = _spec_path()
    take_lease(config, spec_path, before_conftests=False)  # where the plugin loaded too late to wait before
    spec = read_spec(spec_path)
    # xdist's own attributes, set as its workers have them (pytest's Config does not declare them)
    config.workerinput = {**spec.workerinput, topology_key: config.stash[TAKEN].topology}  # type: ignore[attr-defined]
    config.workeroutput = {}  # type: ignore[attr-defined]
    # The run chose its tests by its cache (--lf, --ff, --nf, --sw; this process's cache is its own):
    # this one runs those it is sent. Turned off before pytest_configure, where cacheprovider's LFPlugin
    # and NFPlugin and stepwise's plugin read them (_pytest/cacheprovider.py, _pytest/stepwise.py).
    for selection in CACHE_SELECTION:
        if getattr(config.option, selection, False):
            setattr(config.option, selection, False)


class Child:
    """The child's plugin: runs the tests it is sent, one per command line, and writes each of their
    reports for the parent (one JSON line each, flushed: a child killed mid-test keeps what it said),
    then ``done``. Its commands ending (the parent closed them, or died) end its session."""

    def __init__(self, config: pytest.Config):
        spec = read_spec(_spec_path())
        runtime.forget_lease_spec()  # what this process starts (a test's own pytest, say) is no lease's
        self.config = config
        self.running: str | None = None
        self.commands = os.fdopen(spec.commands, encoding="utf-8")
        self.out = os.fdopen(spec.reports, "w", encoding="utf-8")
        # Where the test's output goes to the run's terminal (-s, --pdb), this process's own report
        # lines go to its output file, by a terminal reporter of its own there: the run reports the test.
        self.terminal = None if spec.terminal is None else open(spec.terminal, "a", encoding="utf-8")  # noqa: SIM115
        self.reporter: pytest.TerminalReporter | None = None

    def pytest_plugin_registered(self, plugin: object, plugin_name: str, manager: pytest.PytestPluginManager) -> None:
        """pytest's terminal reporter, replaced as soon as it is registered (before it writes) by one
        writing to the output file, the way plugins such as pytest-sugar replace it."""
        if self.terminal is None or plugin_name != "terminalreporter" or plugin is self.reporter:
            return
        manager.unregister(plugin)
        self.reporter = pytest.TerminalReporter(self.config, self.terminal)
        manager.register(self.reporter, "terminalreporter")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        items = {item.nodeid: item for item in session.items}
        for line in self.commands:
            command = COMMANDS.decode(line, "the run")  # the run's own: one that cannot be read is a bug, said
            item = items.get(command.test)
            if item is None:
                self._write(Missing(command.test))
            else:
                self.running = item.nodeid
                item.config.hook.pytest_runtest_protocol(item=item, nextitem=items.get(command.next or ""))
                self.running = None
            self._write(Done(command.test))
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self._lease_seen(item, "a conftest or the test's module")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        self._lease_seen(item, "a fixture")

    def _lease_seen(self, item: pytest.Item, who: str) -> None:
        """Fail the test where ``CUDA_VISIBLE_DEVICES`` no longer names its lease's GPUs: a conftest
        that still rotates it (a round robin of workers over GPUs) would run the test on GPUs another
        test holds, and CUDA reads it once, so it cannot be put back after CUDA started."""
        visible = item.config.stash[TAKEN].visible
        found = os.environ.get("CUDA_VISIBLE_DEVICES")
        if found != visible:
            pytest.fail(
                f"CUDA_VISIBLE_DEVICES is {found!r} in this leased test's process, not its lease's "
                f"{visible!r}: {who} set it after the lease was taken, so CUDA would use GPUs this test "
                "does not hold. Leave CUDA_VISIBLE_DEVICES to the lease (docs/parallel.md: replacing a "
                "conftest that rotates CUDA_VISIBLE_DEVICES).",
                pytrace=False,
            )

    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage, when: str, nodeid: str) -> None:
        """The tests' own warnings, for the run's summary (collection's were the run's own already)."""
        if when != "runtest" or nodeid != self.running:
            return
        category = warning_message.category or UserWarning
        message, filename = str(warning_message.message), str(warning_message.filename)
        self._write(RecordedWarning(category.__module__, category.__name__, message, filename, warning_message.lineno))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._write(Report(self.config.hook.pytest_report_to_serializable(config=self.config, report=report)))

    def _write(self, message: Report | RecordedWarning | Missing | Done) -> None:
        self.out.write(REPORTS.encode(message) + "\n")
        self.out.flush()

    def pytest_unconfigure(self) -> None:
        self.out.close()
        self.commands.close()
        if self.terminal is not None:
            self.terminal.close()
