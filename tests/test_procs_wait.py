"""``runtime.procs.Children.wait`` wakes when a child exits (its pidfd on Linux) without reaping it: the
exit statuses it gives are the children's, a pid stays reserved for ``close``, and a child still
running at the deadline is None."""

import os
import signal
import subprocess
import sys
import time

from pytest_gputopo.runtime.procs import Children


def test_wait_gives_the_first_failure_and_leaves_the_rest_running_unreaped():
    with Children(grace_s=1) as children:
        sleeper = children.start([sys.executable, "-S", "-c", "import time; time.sleep(60)"], output=subprocess.DEVNULL)
        failing = children.start([sys.executable, "-S", "-c", "raise SystemExit(3)"], output=subprocess.DEVNULL)
        assert children.wait(time.monotonic() + 60) == [None, 3]
        os.waitid(os.P_PID, failing.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)  # not reaped: still ours
    assert sleeper.returncode == -signal.SIGTERM and failing.returncode == 3  # close() ended and reaped both


def test_wait_returns_at_the_deadline_with_none_for_a_child_still_running():
    with Children(grace_s=1) as children:
        children.start([sys.executable, "-S", "-c", "import time; time.sleep(60)"], output=subprocess.DEVNULL)
        assert children.wait(time.monotonic() + 0.2) == [None]


def test_every_child_waited_for_when_none_fails():
    with Children(grace_s=1) as children:
        for delay in (0.05, 0.2):
            children.start([sys.executable, "-S", "-c", f"import time; time.sleep({delay})"], output=subprocess.DEVNULL)
        assert children.wait(time.monotonic() + 60) == [0, 0]
