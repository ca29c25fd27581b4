"""The run's folder for xdist (``runtime.run_folder``): a run killed by SIGTERM leaves it behind, as it
cannot remove it and the plugin installs no signal handler; a later run removes it, and never a
folder whose run still lives, nor another user's (issue 32.5)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from pytest_gputopo.runtime import run_folder

SLOW_TEST = """
import pathlib, time
def test_waits():
    pathlib.Path("started").write_text("")
    time.sleep(120)
"""


def _run_folders(parent):
    return sorted(p for p in parent.iterdir() if p.name.startswith(run_folder.PREFIX))


def _age(folder, seconds):
    old = time.time() - seconds
    os.utime(folder, (old, old))


@pytest.mark.slow
def test_a_folder_left_by_a_run_killed_with_sigterm_is_removed_by_the_next_run(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp_path / "test_slow.py").write_text(SLOW_TEST)
    env = {**os.environ, "TMPDIR": str(tmp)}
    killed = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "test_slow.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists() and time.monotonic() < deadline and killed.poll() is None:
            time.sleep(0.1)
        (left,) = _run_folders(tmp)
        os.kill(killed.pid, signal.SIGTERM)
        killed.wait(timeout=30)
    finally:
        os.killpg(killed.pid, signal.SIGKILL)  # its workers, whatever became of them
        killed.wait()
    assert left.exists()  # SIGTERM ran no clean-up: the folder is there
    _age(left, 2 * run_folder.YOUNG_S)
    (tmp_path / "test_slow.py").write_text("def test_quick():\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert _run_folders(tmp) == []  # the abandoned one removed, the run's own removed at its end


def test_only_this_users_abandoned_folders_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(run_folder.tempfile, "tempdir", str(tmp_path))
    alive = run_folder.make()  # its lock held by this process: its run lives
    abandoned = tmp_path / (run_folder.PREFIX + "abandoned")
    abandoned.mkdir()
    (abandoned / run_folder.OWNER).write_text("")
    (abandoned / "machine.json").write_text("{}")
    young = tmp_path / (run_folder.PREFIX + "young")
    young.mkdir()
    (young / run_folder.OWNER).write_text("")
    unmarked = tmp_path / (run_folder.PREFIX + "unmarked")  # not made this way (an older plugin's): left
    unmarked.mkdir()
    link = tmp_path / (run_folder.PREFIX + "link")
    link.symlink_to(abandoned)
    for folder in (alive, abandoned, unmarked):
        _age(folder, 2 * run_folder.YOUNG_S)
    theirs = None
    if os.getuid() == 0:
        theirs = tmp_path / (run_folder.PREFIX + "theirs")
        theirs.mkdir()
        (theirs / run_folder.OWNER).write_text("")
        _age(theirs, 2 * run_folder.YOUNG_S)
        os.chown(theirs, 65534, 65534)
    assert run_folder.remove_abandoned(str(tmp_path)) == [str(abandoned)]
    assert os.path.isdir(alive) and young.exists() and unmarked.exists() and os.path.islink(link)
    assert theirs is None or theirs.exists()
    run_folder.remove(alive)
    assert not os.path.exists(alive)


def test_a_ranks_tests_folder_left_by_a_killed_run_is_removed_by_a_later_run(tmp_path, monkeypatch):
    """Issue 41: a ``ranks(n)`` test's ``pytest-gputopo-ranks-*`` folder stayed after its run was
    killed (SIGTERM, SIGKILL). It is made as the run's own folder is, and swept the same way."""
    monkeypatch.setattr(run_folder.tempfile, "tempdir", str(tmp_path))
    made = subprocess.run(
        [sys.executable, "-c", "from pytest_gputopo.runtime import run_folder as r; print(r.make(r.RANKS))"],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    left = made.stdout.strip()  # its process has ended without removing it, as a killed run's
    assert os.path.basename(left).startswith(run_folder.RANKS)
    _age(left, 2 * run_folder.YOUNG_S)
    mine = run_folder.make(run_folder.RANKS)
    try:
        assert not os.path.exists(left) and os.path.isdir(mine)
    finally:
        run_folder.remove(mine)
