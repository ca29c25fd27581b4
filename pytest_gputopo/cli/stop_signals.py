"""SIGINT and SIGTERM end a ``gputopo`` command through every ``finally`` on the way out, with one
line and the status a shell reports (130, 143); installed by ``main`` only, in the main thread."""

from __future__ import annotations

import os
import signal
import sys
import threading

from ..bench.allreduce import remove_workdirs_of


class Stopped(BaseException):
    """SIGINT or SIGTERM reached the command: a BaseException, so that no ``except Exception`` takes
    it, and every ``finally`` on the way out runs (``runtime.procs.Children`` ends every worker's group,
    ``run_allreduce`` removes its folder)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _on_stop_signal(signum, frame) -> None:
    for sig in _STOP_SIGNALS:  # the first one ends the command; the cleanup it starts runs to its end
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


def catch_stop_signals() -> dict | None:
    """Install ``_on_stop_signal`` for SIGINT and SIGTERM (SIGTERM's default would end the process
    without a ``finally``); the handlers they replace, for ``main`` to put back. Only the CLI's own
    ``main`` does this, in the main thread; the pytest plugin never touches a user's handlers."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    for sig in _STOP_SIGNALS:
        signal.signal(sig, _on_stop_signal)
    return previous


def stopped(signum: int, bench: bool) -> int:
    """One line and the status of a command ended by ``signum`` (128 + its number, as a shell
    reports it): 130 for SIGINT, 143 for SIGTERM."""
    if threading.current_thread() is threading.main_thread():  # main's finally puts the caller's back
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
    said = ""
    if bench:
        remove_workdirs_of(os.getpid())  # a signal inside run_allreduce's own cleanup cut it short
        said = "; the sweep's workers were ended and its temporary folder removed"
    print(f"gputopo: interrupted by {signal.Signals(signum).name}{said}", file=sys.stderr)
    return 128 + signum
