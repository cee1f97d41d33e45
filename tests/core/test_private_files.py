"""Runtime and store files refuse planted links, foreign owners and loose modes.

Real files, links, FIFOs and ownership in tmp dirs; the functions are the ones the
supervisor, the listener, the log setup and the store call.
"""

import itertools
import logging
import os
import stat
from pathlib import Path

import pytest

from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import Locations
from dispatcher.core.logs import configure_logging
from dispatcher.core.private_files import (
    create_private_file,
    ensure_private_dir,
    open_private_append,
    open_private_lock,
    read_untrusted,
    write_atomically,
)
from dispatcher.dispatch.paths import AgentPaths
from dispatcher.dispatch.progress import read_progress, write_progress
from dispatcher.store.connection import open_store

VICTIM_TEXT = "victim: must stay exactly like this\n"
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM_TEXT)
    path.chmod(0o644)
    return path


@pytest.fixture
def loose_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def assert_unsafe(exc_info, path: Path) -> None:
    assert exc_info.value.code == "unsafe_path"
    assert str(path) in exc_info.value.message
    assert "nothing was written" in exc_info.value.message


def assert_untouched(victim: Path) -> None:
    assert victim.read_text() == VICTIM_TEXT
    assert mode(victim) == 0o644


# ------------------------------------------------------------------------ directories


def test_every_created_directory_in_the_chain_is_0700(tmp_path, loose_umask):
    leaf = tmp_path / "a" / "b" / "c"
    ensure_private_dir(leaf)
    for path in (tmp_path / "a", tmp_path / "a" / "b", leaf):
        assert mode(path) == 0o700, path


def test_the_store_directory_is_0700_even_when_the_runtime_directory_comes_first(tmp_path, loose_umask):
    db = tmp_path / "state" / "agent-bridge" / "bridge.db"
    paths = AgentPaths.of(Locations(db=db), "claude").ensure()  # a listener starting before any server
    open_store(db).close()
    assert paths.root == db.parent / "runtime"
    for path in (tmp_path / "state", db.parent, paths.root, paths.root / "attempts"):
        assert mode(path) == 0o700, path


def test_an_existing_store_directory_is_checked_but_not_narrowed(tmp_path):
    shared = tmp_path / "project"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    open_store(shared / "bridge.db").close()
    assert mode(shared) == 0o755
    assert mode(shared / "bridge.db") == 0o600


@pytest.mark.parametrize("which", ["runtime", "attempts", "attempt"])
def test_a_directory_planted_as_a_link_is_refused(tmp_path, which):
    db = tmp_path / "bridge.db"
    paths = AgentPaths.of(Locations(db=db), "claude")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    elsewhere.chmod(0o755)
    if which == "runtime":
        paths.root.symlink_to(elsewhere)
        planted = paths.root
    else:
        ensure_private_dir(paths.root)
        if which == "attempts":
            planted = paths.root / "attempts"
        else:
            ensure_private_dir(paths.root / "attempts")
            planted = paths.attempt_dir(7)
        planted.symlink_to(elsewhere)
    with pytest.raises(BridgeError) as exc_info:
        paths.ensure()
        ensure_private_dir(paths.attempt_dir(7))
    assert_unsafe(exc_info, planted)
    assert "symbolic link" in exc_info.value.message
    assert list(elsewhere.iterdir()) == []
    assert mode(elsewhere) == 0o755  # never chmod-ed through the link


@needs_root
@pytest.mark.parametrize("which", ["runtime", "store"])
def test_another_users_directory_is_refused_and_never_chmod_ed(tmp_path, which):
    db = tmp_path / "state" / "bridge.db"
    foreign = db.parent if which == "store" else db.parent / "runtime"
    foreign.mkdir(parents=True)
    foreign.chmod(0o777)
    os.chown(foreign, NOBODY, NOBODY)
    with pytest.raises(BridgeError) as exc_info:
        if which == "store":
            open_store(db)
        else:
            AgentPaths.of(Locations(db=db), "claude").ensure()
    assert_unsafe(exc_info, foreign)
    assert f"uid {NOBODY}" in exc_info.value.message
    assert ("store directory" if which == "store" else "runtime directory") in exc_info.value.message
    assert mode(foreign) == 0o777
    assert list(foreign.iterdir()) == []


def test_a_file_where_a_directory_belongs_is_refused(tmp_path):
    (tmp_path / "runtime").write_text("x")
    with pytest.raises(BridgeError) as exc_info:
        ensure_private_dir(tmp_path / "runtime", "runtime directory")
    assert_unsafe(exc_info, tmp_path / "runtime")


# -------------------------------------------------------------------------- new files


@pytest.mark.parametrize("name", ["request.md", "diagnostics.json"])
@pytest.mark.parametrize("planted", ["symlink", "dangling-symlink", "file", "hardlink"])
def test_a_new_private_file_never_uses_a_planted_name(tmp_path, victim, name, planted):
    attempt = ensure_private_dir(tmp_path / "attempts" / "7")
    path = attempt / name
    if planted == "symlink":
        path.symlink_to(victim)
    elif planted == "dangling-symlink":
        path.symlink_to(tmp_path / "would-be-created")
    elif planted == "file":
        path.write_text(VICTIM_TEXT)
    else:
        os.link(victim, path)
    with pytest.raises(BridgeError) as exc_info:
        create_private_file(path, "TASK TEXT")
    assert_unsafe(exc_info, path)
    assert_untouched(victim)
    assert not (tmp_path / "would-be-created").exists()


def test_a_new_private_file_is_0600_with_its_text(tmp_path, loose_umask):
    path = create_private_file(tmp_path / "request.md", "TASK TEXT")
    assert path.read_text() == "TASK TEXT"
    assert mode(path) == 0o600


# ------------------------------------------------------------------ reopened files


def planted(kind: str, path: Path, victim: Path) -> None:
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "hardlink":
        os.link(victim, path)
    elif kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "directory":
        path.mkdir()
    elif kind == "foreign":
        path.write_text(VICTIM_TEXT)
        os.chown(path, NOBODY, NOBODY)


REOPEN_KINDS = ["symlink", "hardlink", "fifo", "directory", pytest.param("foreign", marks=needs_root)]


@pytest.mark.parametrize("opener", [open_private_append, open_private_lock])
@pytest.mark.parametrize("kind", REOPEN_KINDS)
def test_a_reopened_file_must_be_our_own_regular_file(tmp_path, victim, opener, kind):
    path = tmp_path / "worker.log"
    planted(kind, path, victim)
    with pytest.raises(BridgeError) as exc_info:
        os.close(opener(path))  # a FIFO must be refused, not block
    assert_unsafe(exc_info, path)
    assert_untouched(victim)


# ------------------------------------------------------------------ files a worker could touch


UNTRUSTED_KINDS = [*REOPEN_KINDS, "socket", "linked_directory"]


@pytest.mark.parametrize("kind", UNTRUSTED_KINDS)
def test_a_worker_touchable_file_is_read_only_when_it_is_our_own_regular_file(tmp_path, victim, kind):
    """A worker that replaces a file the supervisor reads (diagnostics.json, a CLI's result file) by a
    FIFO, a link (of the file or of a directory on the way), a hard link or a socket gets None, at once:
    the read never blocks, never follows a link and never reads the victim."""
    relative = "sub/diagnostics.json" if kind == "linked_directory" else "diagnostics.json"
    if kind == "socket":
        import socket

        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(tmp_path / relative))
    elif kind == "linked_directory":
        (tmp_path / "sub").symlink_to(victim.parent)
        os.link(victim, victim.parent / "diagnostics.json")  # (a regular file, through the link only)
    else:
        planted(kind, tmp_path / relative, victim)
    assert read_untrusted(tmp_path, relative, 1 << 20) is None
    assert_untouched(victim)


def test_a_worker_touchable_file_is_read_up_to_its_cap(tmp_path):
    (tmp_path / "claude-result.json").write_bytes(b"x" * 100 + b"\xff")
    assert read_untrusted(tmp_path, "claude-result.json", 10) == "x" * 10
    assert read_untrusted(tmp_path, "claude-result.json", 1000) == "x" * 100 + "\ufffd"
    assert read_untrusted(tmp_path, "missing.json", 10) is None
    (tmp_path / "attempt").symlink_to(tmp_path)
    assert read_untrusted(tmp_path / "attempt", "claude-result.json", 10) is None  # the directory itself


def test_an_append_file_is_created_0600_and_appended_to(tmp_path, loose_umask):
    path = tmp_path / "worker.log"
    for line in (b"one\n", b"two\n"):
        fd = open_private_append(path)
        os.write(fd, line)
        os.close(fd)
    assert path.read_bytes() == b"one\ntwo\n"
    assert mode(path) == 0o600
    path.chmod(0o644)
    os.close(open_private_lock(path))
    assert mode(path) == 0o600


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    configure_logging()
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize("name", ["dispatcher.log", "errors.log"])
def test_the_log_files_refuse_a_planted_link(tmp_path, victim, restore_logging, name):
    runtime = ensure_private_dir(tmp_path / "runtime")
    (runtime / name).symlink_to(victim)
    with pytest.raises(BridgeError) as exc_info:
        configure_logging(log_file=runtime / name)
    assert_unsafe(exc_info, runtime / name)
    logging.getLogger("t").warning("after the refusal")
    assert_untouched(victim)


def test_the_log_file_refuses_a_runtime_directory_planted_as_a_link(tmp_path, restore_logging):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "runtime").symlink_to(elsewhere)
    with pytest.raises(BridgeError) as exc_info:
        configure_logging(log_file=tmp_path / "runtime" / "dispatcher.log")
    assert_unsafe(exc_info, tmp_path / "runtime")
    assert list(elsewhere.iterdir()) == []


def test_the_log_file_is_private_and_written(tmp_path, restore_logging, loose_umask):
    log_file = tmp_path / "runtime" / "dispatcher.log"
    configure_logging(log_file=log_file)
    logging.getLogger("t").warning("hello")
    assert '"hello"' in log_file.read_text()
    assert mode(log_file) == 0o600 and mode(log_file.parent) == 0o700


# ------------------------------------------------------------------------- progress


def test_progress_is_written_atomically_into_our_directory(tmp_path, victim):
    runtime = ensure_private_dir(tmp_path / "runtime")
    progress = runtime / "claude.progress.json"
    progress.symlink_to(victim)  # a link at the name is replaced, never written through
    write_progress(progress, agent="claude", stage="idle")
    assert read_progress(progress)[0]["stage"] == "idle"
    assert not progress.is_symlink()
    assert_untouched(victim)
    assert sorted(p.name for p in runtime.iterdir()) == ["claude.progress.json"]  # no temp file left
    assert mode(progress) == 0o600


def test_a_link_planted_at_the_next_temp_name_is_passed_over_never_written_through(tmp_path, victim, monkeypatch):
    runtime = ensure_private_dir(tmp_path / "runtime")
    progress = runtime / "claude.progress.json"
    monkeypatch.setattr("dispatcher.core.private_files._TEMP_NAMES", itertools.count(7))
    planted = runtime / f".claude.progress.json.{os.getpid()}.7.tmp"
    planted.symlink_to(victim)
    write_progress(progress, agent="claude", stage="idle")  # O_EXCL refuses the planted name: the next one
    assert read_progress(progress)[0]["stage"] == "idle"
    assert planted.is_symlink()
    assert_untouched(victim)


# ------------------------------------------------------------------------- the one atomic writer


@pytest.mark.parametrize("wanted", [0o600, 0o644])
def test_an_atomic_write_gives_exactly_the_mode_asked_whatever_the_umask(tmp_path, loose_umask, wanted):
    target = tmp_path / "settings.json"
    write_atomically(target, "{}\n", wanted)
    assert target.read_text() == "{}\n" and mode(target) == wanted
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]


def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / "config.json"
    target.write_text("old\n")
    with pytest.raises(UnicodeEncodeError):
        write_atomically(target, "new \ud800 text\n")  # fails half-way through writing
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_an_atomic_write_replaces_a_link_at_the_name_and_never_writes_through_it(tmp_path, victim):
    target = tmp_path / "config.json"
    target.symlink_to(victim)
    write_atomically(target, "ours\n")
    assert not target.is_symlink() and target.read_text() == "ours\n"
    assert_untouched(victim)


def test_progress_refuses_a_runtime_directory_planted_as_a_link(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "runtime").symlink_to(elsewhere)
    with pytest.raises(BridgeError) as exc_info:
        write_progress(tmp_path / "runtime" / "claude.progress.json", agent="claude", stage="idle")
    assert_unsafe(exc_info, tmp_path / "runtime")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("blocker", ["file", "dangling-link"])
def test_a_directory_that_cannot_be_created_is_a_clear_error(tmp_path, blocker):
    if blocker == "file":
        (tmp_path / "state").write_text("not a directory")
    else:
        (tmp_path / "state").symlink_to(tmp_path / "gone")
    with pytest.raises(BridgeError) as exc_info:
        AgentPaths.of(Locations(db=tmp_path / "state" / "store" / "bridge.db"), "claude").ensure()
    assert exc_info.value.code == "path_unusable"
    assert str(tmp_path / "state" / "store") in exc_info.value.message
    assert not (tmp_path / "gone").exists()
