"""Writing a report replaces only what may be replaced.

The rule (``runtime/files.write_text``, checked up front by ``files.unwritable``): a regular file or a
new path is replaced atomically; a symlink is followed and the file it ends at replaced (the link
stays a link); the null device is written through in place; anything else -- a FIFO or pipe, another
device, /dev/stdout, a socket -- is refused with a reason, before any work, and never renamed over.
Every writer goes through it: ``--gputopo-json``, ``--gputopo-html``, ``gputopo report -o``,
``gputopo record -o`` onto every kind; ``gputopo bench --json/--html`` (a real sweep when it writes)
onto the kinds it refuses, before anything runs.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from pytest_gputopo import cli
from pytest_gputopo.runtime import files

TOPO = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPHB\t0-63\t0\nGPU1\tPHB\t X \t0-63\t0\n"
OLD = "old content\n"


def null_clone(path) -> None:
    """A character device with /dev/null's numbers (1, 3) at ``path``, or a skip saying why not."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        os.close(os.open(path, os.O_WRONLY))
    except (PermissionError, OSError) as exc:  # not root, or a nodev mount
        pytest.skip(f"cannot make or open a device node here: {exc}")


def make_target(kind: str, folder) -> tuple[str, dict]:
    """Build a target of ``kind`` in ``folder``: (the path a writer is given, facts to check after)."""
    out = folder / "out"
    if kind == "new path":
        return str(out), {}
    if kind == "regular file":
        out.write_text(OLD)
        return str(out), {}
    if kind == "null device":
        null_clone(out)
        return str(out), {}
    if kind == "FIFO":
        os.mkfifo(out)
        return str(out), {}
    if kind == "symlink to a file":
        (folder / "real").write_text(OLD)
        os.symlink("real", out)
        return str(out), {"target": folder / "real"}
    if kind == "dangling symlink":
        os.symlink("made", out)
        return str(out), {"target": folder / "made"}
    if kind == "symlink to a FIFO":
        os.mkfifo(folder / "pipe")
        os.symlink("pipe", out)
        return str(out), {"target": folder / "pipe"}
    if kind == "symlink to a null device":
        null_clone(folder / "dev")
        os.symlink("dev", out)
        return str(out), {"target": folder / "dev"}
    if kind == "missing folder":
        return str(folder / "nodir" / "out"), {}
    raise AssertionError(kind)


# kind -> what a writer does there: "replace" (a file with the report at the path or link's end),
# "through" (the device takes it and stays), or a reason the writer refuses it with.
TARGETS = {
    "new path": "replace",
    "regular file": "replace",
    "symlink to a file": "replace",
    "dangling symlink": "replace",
    "null device": "through",
    "symlink to a null device": "through",
    "FIFO": "it is a FIFO or pipe",
    "symlink to a FIFO": "it is a FIFO or pipe",
    "missing folder": "no folder",
}


def check_kind_unchanged(kind: str, path: str, facts: dict, written: bool) -> None:
    """What was at the path is what is there now: a device stays a device, a FIFO a FIFO, a link a
    link (its file replaced when written), a missing folder missing."""
    mode = os.lstat(path).st_mode if os.path.lexists(path) else None
    if kind == "null device":
        assert stat.S_ISCHR(mode) and os.lstat(path).st_rdev == os.makedev(1, 3)
    elif kind == "FIFO":
        assert stat.S_ISFIFO(mode)
    elif kind.startswith("symlink") or kind == "dangling symlink":
        assert stat.S_ISLNK(mode), f"the link was replaced: {oct(mode)}"
        end = os.lstat(facts["target"]).st_mode
        assert {
            "symlink to a file": stat.S_ISREG,
            "dangling symlink": stat.S_ISREG,
            "symlink to a FIFO": stat.S_ISFIFO,
            "symlink to a null device": stat.S_ISCHR,
        }[kind](end)
    elif kind == "missing folder":
        assert mode is None and not os.path.exists(os.path.dirname(path))
    else:
        assert stat.S_ISREG(mode)
    if written and TARGETS[kind] == "replace":
        assert open(facts.get("target") or path).read() != OLD
    folder = os.path.dirname(facts.get("target") or path)
    if os.path.isdir(folder):
        assert not [n for n in os.listdir(folder) if n.startswith(".gputopo-")], "a temporary file was left"


# ---------------------------------------------------------------------------------------------
# files.write_text and files.unwritable, each kind


@pytest.mark.parametrize("kind", list(TARGETS))
def test_write_text_follows_the_rule_for_every_kind_of_target(tmp_path, kind):
    path, facts = make_target(kind, tmp_path)
    expected = TARGETS[kind]
    if expected in ("replace", "through"):
        assert files.unwritable(path) is None
        files.write_text(path, '{"new": 1}\n')
    else:
        assert expected in files.unwritable(path)
        with pytest.raises(OSError) as caught:
            files.write_text(path, '{"new": 1}\n')
        assert expected in caught.value.strerror
    check_kind_unchanged(kind, path, facts, written=True)
    if expected == "replace":
        assert json.loads(open(facts.get("target") or path).read()) == {"new": 1}


def test_a_null_device_is_written_through_never_replaced(tmp_path):
    """Before the fix a /dev/null clone became a regular file holding the report."""
    null_clone(tmp_path / "null")
    files.write_text(str(tmp_path / "null"), "x" * 100_000)
    assert stat.S_ISCHR(os.lstat(tmp_path / "null").st_mode)
    assert os.listdir(tmp_path) == ["null"]


def test_a_symlink_stays_a_link_and_its_file_is_replaced(tmp_path):
    """Before the fix the link itself was renamed over, and the file it named kept its old text."""
    (tmp_path / "real.json").write_text(OLD)
    os.symlink("real.json", tmp_path / "link.json")
    files.write_text(str(tmp_path / "link.json"), "new\n")
    assert os.path.islink(tmp_path / "link.json") and (tmp_path / "real.json").read_text() == "new\n"


def test_a_fifo_is_refused_not_replaced_and_never_waited_on(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="it is a FIFO or pipe"):
        files.write_text(str(tmp_path / "fifo"), "new\n")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)


@pytest.mark.parametrize(
    "path, says",
    [
        ("/dev/stdout", "a process's open file"),
        ("/dev/fd/1", "a process's open file"),
        ("/proc/self/fd/2", "a process's open file"),
        ("/proc/gputopo-x.html", "cannot create a file in /proc"),
        ("/dev/zero", "it is a character device"),
    ],
)
def test_what_is_no_file_of_ours_is_refused_up_front(path, says):
    """/dev/stdout is refused whatever it is now: a pipe, a terminal, or the file the shell
    redirected it to (renamed over, the process's own output would go to a deleted file). /proc
    passes root's ``access()``; making a file there is what fails, so that is what is tried."""
    if not os.path.exists(os.path.dirname(path)) and path.startswith("/dev/fd"):
        pytest.skip("no /dev/fd here")
    problem = files.unwritable(path)
    assert problem is not None and says in problem, problem


# ---------------------------------------------------------------------------------------------
# Every writer onto every kind


@pytest.fixture
def saved_document(tmp_path):
    from pytest_gputopo.probe.recorded import load_profile
    from pytest_gputopo.render import report

    path = tmp_path / "run.json"
    path.write_text(json.dumps({**report.machine_document(load_profile("hgx-h100").topology), "complete": True}))
    return str(path)


def run_writer(writer: str, path: str, pytester, capsys, saved: str, topo: str) -> tuple[bool, str]:
    """Run ``writer`` with ``path`` as its output: (whether it succeeded, what it said on stderr)."""
    if writer in ("--gputopo-json", "--gputopo-html"):
        pytester.makepyfile(test_x="def test_a(): pass\n")
        result = pytester.runpytest("--gputopo-machine", "hgx-h100", writer, path)
        if result.ret == pytest.ExitCode.USAGE_ERROR:
            return False, result.stderr.str()
        assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:] + result.stderr.str()
        assert "cannot write" not in result.stdout.str()
        return True, result.stderr.str()
    argv = {"report -o": ["report", saved, "-o", path], "record -o": ["record", "--from-smi", topo, "-o", path]}[writer]
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code in (0, 2), err
    return code == 0, err


@pytest.mark.parametrize("kind", list(TARGETS))
@pytest.mark.parametrize("writer", ["--gputopo-json", "--gputopo-html", "report -o", "record -o"])
def test_every_report_writer_onto_every_kind_of_target(writer, kind, pytester, capsys, saved_document, tmp_path):
    """The kind of thing at the path is unchanged after every writer; what is refused is refused
    with the option and the path named; what is replaced holds the writer's whole output."""
    folder = tmp_path / "targets"
    folder.mkdir()
    (tmp_path / "topo.txt").write_text(TOPO)
    path, facts = make_target(kind, folder)
    ok, said = run_writer(writer, path, pytester, capsys, saved_document, str(tmp_path / "topo.txt"))
    expected = TARGETS[kind]
    if expected in ("replace", "through"):
        assert ok, said
    else:
        assert not ok
        option = writer.split()[-1]
        assert (
            f"{option}: cannot write {path}: {expected}" in said or f"{option} {path}: cannot write: {expected}" in said
        ), said
    check_kind_unchanged(kind, path, facts, written=ok)
    if ok and expected == "replace":
        text = open(facts.get("target") or path).read()
        if writer == "--gputopo-html" or writer == "report -o":
            assert text.lstrip().lower().startswith("<!doctype html") and text.rstrip().endswith("</html>")
        else:
            json.loads(text)


@pytest.mark.parametrize("writer", ["--gputopo-json", "--gputopo-html", "report -o", "record -o"])
def test_an_unwritable_place_is_refused_before_the_work(writer, pytester, capsys, saved_document, tmp_path):
    """/proc/x.html passed the old check as root (``access()`` says yes); the run went on and lost
    its report at the end."""
    if not os.path.isdir("/proc"):
        pytest.skip("no /proc here")
    (tmp_path / "topo.txt").write_text(TOPO)
    ok, said = run_writer(writer, "/proc/gputopo-x.html", pytester, capsys, saved_document, str(tmp_path / "topo.txt"))
    assert not ok and "/proc/gputopo-x.html" in said and "cannot create a file in /proc" in said, said
    assert writer.split()[-1] in said


@pytest.mark.parametrize("kind", [k for k, how in TARGETS.items() if how not in ("replace", "through")])
@pytest.mark.parametrize("flag", ["--json", "--html"])
def test_bench_refuses_what_it_may_not_write_before_measuring(flag, kind, tmp_path, capsys, monkeypatch):
    from pytest_gputopo.bench import allreduce

    def never(*args, **kwargs):
        raise AssertionError("the sweep ran before its output path was checked")

    monkeypatch.setattr(allreduce, "run_allreduce", never)
    path, facts = make_target(kind, tmp_path)
    assert cli.main(["bench", "allreduce", "--backend", "gloo", flag, path]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {path}: cannot write: {TARGETS[kind]}" in err, err
    check_kind_unchanged(kind, path, facts, written=False)
