"""Fault injection, parts 3-5: the store's file system fails, the file goes away, the schema is old.

- a full disk (a 4 MiB tmpfs) and a file system that turns read-only under a running
  server (ext4 on a loop device, mounted errors=remount-ro, then an injected fs error):
  callers get ``store_unavailable:`` tool errors, nothing is corrupted, and service is
  normal once space returns / the disk is repaired;
- a server started on a store it cannot write gets a clear refusal, not a traceback;
- the store file deleted or replaced under a running server and listener: ``store_missing:``
  or a clean reopen of the new file, never writes into the deleted one;
- a schema-1 store is migrated by a running server and listener with every message kept.

Mounting needs root (or CAP_SYS_ADMIN); those tests skip, saying so, where it is missing.
"""

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dispatch_harness import integrity, wait_until
from faultkit import (
    scripted_launcher,
    start_listener,
    stop,
)
from harness import PROJECT, McpAgent, bridge_env, db_snapshot, sql, store_from_fixture, write_config

from dispatcher.core.errors import BridgeError
from dispatcher.store import SCHEMA_VERSION


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _umount(path: Path) -> None:
    if _run("umount", str(path)).returncode != 0:
        _run("umount", "-l", str(path))


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    if not shutil.which("mount"):
        pytest.skip("no mount command: cannot build a size-limited file system")
    done = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield path
    finally:
        _umount(path)


@contextlib.contextmanager
def loop_ext4(image: Path, path: Path, size_mb: int = 16) -> Iterator[Path]:
    """An ext4 file system on a loop device, mounted errors=remount-ro."""
    if not (shutil.which("mkfs.ext4") and shutil.which("mount") and shutil.which("e2fsck")):
        pytest.skip("mkfs.ext4/e2fsck/mount not installed: cannot build an ext4 file system to break")
    with open(image, "wb") as fh:
        fh.truncate(size_mb * 1024 * 1024)
    made = _run("mkfs.ext4", "-q", "-F", str(image))
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {made.stderr.strip()}")
    path.mkdir(parents=True, exist_ok=True)
    done = _run("mount", "-o", "loop,errors=remount-ro", str(image), str(path))
    if done.returncode != 0:
        pytest.skip(f"cannot loop-mount an ext4 image here (needs root and loop devices): {done.stderr.strip()}")
    try:
        yield path
    finally:
        _umount(path)


def _block_device(mountpoint: Path) -> str:
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if fields[1] == str(mountpoint):
            return os.path.basename(os.path.realpath(fields[0]))
    raise AssertionError(f"{mountpoint} is not mounted")


def _mount_options(mountpoint: Path) -> list[str]:
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if fields[1] == str(mountpoint):
            return fields[3].split(",")
    raise AssertionError(f"{mountpoint} is not mounted")


def _fill(directory: Path) -> Path:
    """Write a file until the file system has no space left."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(chunk)
        except OSError as exc:
            assert exc.errno == 28, exc  # ENOSPC
    with open(filler, "ab", buffering=0) as fh:  # and the last partial block
        for size in (4096, 512, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                pass
    return filler


def _env(root: Path, db: Path, agents: dict | None = None) -> dict[str, str]:
    env = bridge_env(root, write_config(root / "config.json", agents))
    env["AGENT_BRIDGE_DB"] = str(db)
    return env


def _messages(db: Path) -> list[tuple]:
    return sql(db, "SELECT id, sender, recipient, text FROM messages ORDER BY id")


BIG = "z" * 250_000  # bigger than anything already in the WAL, so it needs new space


# -- 3. full disk, read-only file system ------------------------------------------------------


@pytest.mark.slow
def test_full_disk_is_a_clear_error_and_service_returns_with_space(tmp_path):
    with tmpfs(tmp_path / "small", "4m") as small:
        db = small / "bridge.db"
        env = _env(tmp_path, db)
        kimi = McpAgent("kimi", env, tmp_path / "servers.stderr")
        claude = McpAgent("claude", env, tmp_path / "servers.stderr")
        try:
            kimi.wait_ready(), claude.wait_ready()
            first = kimi.ok("send_message", recipient="claude", text="before the disk filled up")["id"]
            before = _messages(db)
            filler = _fill(small)

            refused = kimi.call("send_message", recipient="claude", text=BIG)
            assert refused.is_error and refused.text.startswith("store_unavailable: "), refused.text
            assert "full" in refused.text
            # A second write from another process is refused the same way: no lock was left behind.
            second = claude.call("send_message", recipient="kimi", text=BIG)
            assert second.is_error and second.text.startswith("store_unavailable: "), second.text
            assert _messages(db) == before
            assert integrity(db) == "ok"

            filler.unlink()  # space returns
            after = kimi.ok("send_message", recipient="claude", text=BIG)["id"]
            got = claude.ok("receive_messages", limit=10)["messages"]
            assert [m["id"] for m in got] == [first, after]
            assert claude.ok("mark_read", message_ids=[first, after])["acknowledged"] == [first, after]
            assert integrity(db) == "ok"
        finally:
            kimi.close()
            claude.close()


@pytest.mark.slow
def test_full_disk_refuses_every_transactional_send_cleanly(tmp_path):
    """The BEGIN IMMEDIATE paths: a deduplicated task, a result, a conversation turn, a new conversation."""
    with tmpfs(tmp_path / "small", "4m") as small:
        db = small / "bridge.db"
        env = _env(tmp_path, db)
        kimi = McpAgent("kimi", env, tmp_path / "servers.stderr")
        claude = McpAgent("claude", env, tmp_path / "servers.stderr")
        try:
            kimi.wait_ready(), claude.wait_ready()
            task = kimi.ok("send_message", recipient="claude", text="a task to answer", kind="task")["id"]
            started = kimi.ok("start_conversation", recipient="claude", goal="a goal to answer")
            sends = {
                "task with dedup_key": (
                    kimi,
                    "send_message",
                    {"recipient": "claude", "text": BIG, "kind": "task", "dedup_key": "full-1"},
                ),
                "result": (
                    claude,
                    "send_message",
                    {"recipient": "kimi", "text": BIG, "kind": "result", "reply_to": task},
                ),
                "conversation turn": (
                    claude,
                    "send_message",
                    {"recipient": "kimi", "text": BIG, "kind": "result", "reply_to": started["message_id"]},
                ),
                "start_conversation": (kimi, "start_conversation", {"recipient": "claude", "goal": BIG}),
            }
            before = db_snapshot(db)
            filler = _fill(small)
            for what, (agent, tool, args) in sends.items():
                refused = agent.call(tool, **args)
                assert refused.is_error and refused.text.startswith("store_unavailable: "), (what, refused.text)
                assert "full" in refused.text, (what, refused.text)
            assert db_snapshot(db) == before  # nothing half-done: no message, no turn, no conversation
            assert integrity(db) == "ok"

            filler.unlink()  # space returns: each works, once
            for what, (agent, tool, args) in sends.items():
                assert not agent.call(tool, **args).is_error, what
            repeat = kimi.ok("send_message", **sends["task with dedup_key"][2])
            assert repeat["duplicate"] is True
            conv = kimi.ok("conversation", action="status", conversation_id=started["conversation_id"])
            assert conv["turn_count"] == 2
            assert len(_messages(db)) == len(before[[t for t, _ in before].index("messages")][1]) + 4
            assert integrity(db) == "ok"
        finally:
            kimi.close()
            claude.close()


@pytest.mark.slow
def test_file_system_turning_read_only_is_a_clear_error_then_repaired(tmp_path):
    with loop_ext4(tmp_path / "disk.img", tmp_path / "disk") as disk:
        db = disk / "bridge.db"
        env = _env(tmp_path, db)
        kimi = McpAgent("kimi", env, tmp_path / "servers.stderr")
        claude = McpAgent("claude", env, tmp_path / "servers.stderr")
        try:
            kimi.wait_ready(), claude.wait_ready()
            first = kimi.ok("send_message", recipient="claude", text="before the disk broke")["id"]
            before = _messages(db)
            # Written out first: WAL mode with synchronous=NORMAL does not fsync each commit, and
            # an aborted ext4 journal drops what is still in the page cache, like a power cut.
            os.sync()
            # What the kernel does on a metadata error: remount read-only (emergency_ro).
            trigger = Path(f"/sys/fs/ext4/{_block_device(disk)}/trigger_fs_error")
            if not trigger.exists():
                pytest.skip(f"this kernel has no {trigger}: cannot inject an ext4 error")
            trigger.write_text("agent-bridge fault test")
            wait_until(
                lambda: "ro" in _mount_options(disk) or "emergency_ro" in _mount_options(disk),
                30,
                "the file system to turn read-only",
            )

            refused = kimi.call("send_message", recipient="claude", text="after the disk broke")
            assert refused.is_error and refused.text.startswith("store_unavailable: "), refused.text
            refused = claude.call("mark_read", message_ids=[first])
            assert refused.is_error and refused.text.startswith("store_unavailable: "), refused.text
            assert _messages(db) == before
        finally:
            kimi.close()
            claude.close()
    # Repair, remount, and serve again.
    fsck = _run("e2fsck", "-fy", str(tmp_path / "disk.img"))
    assert fsck.returncode in (0, 1), fsck.stdout + fsck.stderr
    assert _run("mount", "-o", "loop", str(tmp_path / "disk.img"), str(tmp_path / "disk")).returncode == 0
    try:
        assert integrity(db) == "ok"
        assert _messages(db) == before
        kimi = McpAgent("kimi", env, tmp_path / "servers.stderr")
        try:
            kimi.ok("send_message", recipient="claude", text="after the repair")
        finally:
            kimi.close()
        assert [m[3] for m in _messages(db)] == ["before the disk broke", "after the repair"]
        assert integrity(db) == "ok"
    finally:
        _umount(tmp_path / "disk")


def test_server_started_on_a_read_only_store_refuses_clearly(tmp_path):
    with tmpfs(tmp_path / "ro", "4m") as ro:
        db = ro / "bridge.db"
        from dispatcher.store import open_store

        open_store(db).close()
        assert _run("mount", "-o", "remount,ro", str(ro)).returncode == 0
        env = {**os.environ, **_env(tmp_path, db), "AGENT_ID": "claude"}
        done = subprocess.run(
            [sys.executable, str(PROJECT / "server.py")],
            env=env,
            cwd=PROJECT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert done.stdout == ""
        assert "Traceback" not in done.stderr
        assert done.stderr.startswith("agent-bridge: store_unavailable: "), done.stderr


# -- 4. the store file deleted or replaced under a running server and listener ---------------


class Running:
    """A claude listener dispatching the scripted worker, plus kimi and claude MCP servers."""

    def __init__(self, root: Path) -> None:
        launcher = scripted_launcher(root)
        agents = {
            "claude": {"auto": True, "launcher": str(launcher), "worker_timeout_seconds": 10},
            "kimi": {"auto": False, "launcher": str(launcher)},
        }
        self.root = root
        self.env = {
            **bridge_env(root, write_config(root / "config.json", agents)),
            "SCRIPTED_WORKER_LAUNCHES": str(root / "launches.txt"),
        }
        self.db = Path(self.env["AGENT_BRIDGE_DB"])
        self.kimi = McpAgent("kimi", self.env, root / "servers.stderr")
        self.claude = McpAgent("claude", self.env, root / "servers.stderr")
        self.kimi.wait_ready(), self.claude.wait_ready()
        self.listener = start_listener(self.env, "claude", root / "listener.log")

    def dispatched(self, task_id: int) -> str:
        """Wait for the listener to settle the attempt at ``task_id``; its outcome."""

        def outcome():
            rows = sql(
                self.db, "SELECT outcome FROM dispatch_attempts WHERE message_id = ? AND state = 'finished'", (task_id,)
            )
            return rows[0][0] if rows else None

        return wait_until(outcome, 120, f"the listener to dispatch task #{task_id}")

    def progress(self) -> dict:
        import json

        try:
            return json.loads((self.root / "runtime" / "claude.progress.json").read_text())
        except (OSError, ValueError):
            return {}

    def close(self) -> None:
        stop(self.listener)
        self.kimi.close()
        self.claude.close()


def _sidecars(db: Path) -> list[Path]:
    return [p for p in (Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()]


@pytest.mark.slow
def test_deleted_store_is_store_missing_never_a_silent_write(tmp_path):
    run = Running(tmp_path)
    try:
        task = run.kimi.ok("send_message", recipient="claude", text="first task", kind="task")["id"]
        assert run.dispatched(task) == "succeeded"
        snapshot = tmp_path / "snapshot.db"
        with contextlib.closing(sqlite3.connect(run.db)) as live, contextlib.closing(sqlite3.connect(snapshot)) as copy:
            live.backup(copy)
        before = _messages(run.db)

        run.db.unlink()  # as `rm bridge.db` would: the -wal and -shm files stay
        for agent, tool, args in (
            (run.kimi, "send_message", {"recipient": "claude", "text": "lost?", "kind": "task"}),
            (run.claude, "receive_messages", {}),
            (run.claude, "mark_read", {"message_ids": [task]}),
            (run.kimi, "get_message", {"message_id": task}),
        ):
            result = agent.call(tool, **args)
            assert result.is_error and result.text.startswith("store_missing: "), (tool, result.text)
        # The listener notices too, and says so (and waits) instead of exiting, dispatching or
        # creating a new store.
        wait_until(
            lambda: "store_missing" in str(run.progress().get("error")), 60, "the listener to report the deleted store"
        )
        assert run.progress()["stage"] == "error" and run.listener.poll() is None
        assert not run.db.exists(), "a new store file was created behind the callers' backs"

        # Restored from the snapshot: a clean reopen everywhere, and dispatching resumes.
        os.replace(snapshot, run.db)
        after = run.kimi.ok("send_message", recipient="claude", text="after the restore", kind="task")["id"]
        assert run.dispatched(after) == "succeeded"
        wait_until(lambda: run.progress().get("error") is None, 60, "the listener to clear its store error")
        assert run.listener.poll() is None
        texts = [m[3] for m in _messages(run.db)]
        assert texts[: len(before)] == [m[3] for m in before] and "after the restore" in texts
        assert "lost?" not in texts
        assert integrity(run.db) == "ok"
    finally:
        run.close()


HOLD_OLD_FILE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("INSERT INTO messages (sender, recipient, text, created_at) VALUES ('kimi', 'claude', 'old, in the WAL', 0)")
print("holding", flush=True)
sys.stdin.readline()
conn.close()  # a clean close; SQLite still leaves the -wal/-shm of a moved file behind
"""


def test_store_handle_reopens_a_replaced_file_only_once_the_old_one_is_let_go(tmp_path):
    """The handle alone: what SQLite does with -wal/-shm files that outlive a replaced file."""
    from dispatcher.store import SqliteStore, open_store

    db = tmp_path / "bridge.db"
    store = SqliteStore(db)
    store.connection()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_OLD_FILE, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        new = open_store(tmp_path / "new.db")
        new.execute("INSERT INTO messages (sender, recipient, text, created_at) VALUES ('kimi', 'claude', 'new', 0)")
        new.close()
        os.replace(tmp_path / "new.db", db)
        with pytest.raises(BridgeError) as refused:  # the old file is still open elsewhere
            store.connection()
        assert refused.value.code == "store_missing" and "replaced" in refused.value.message
        holder.communicate("\n", timeout=60)
        assert holder.returncode == 0
        assert _sidecars(db), "SQLite cleaned up after all: this test no longer shows the hazard"
        # Nobody holds the old -wal/-shm now: the handle removes them and opens the new file.
        texts = [r[0] for r in store.connection().execute("SELECT text FROM messages")]
        assert texts == ["new"]
        assert integrity(db) == "ok"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
        store.close()


@pytest.mark.slow
def test_replaced_store_is_reopened_cleanly_or_refused(tmp_path):
    from dispatcher.store import open_store

    run = Running(tmp_path)
    try:
        old_task = run.kimi.ok("send_message", recipient="claude", text="old store task", kind="task")["id"]
        assert run.dispatched(old_task) == "succeeded"
        replacement = tmp_path / "state" / "replacement.db"
        conn = open_store(replacement)
        conn.execute(
            "INSERT INTO messages (sender, recipient, text, created_at) VALUES"
            " ('kimi', 'claude', 'from the replacement', strftime('%s','now'))"
        )
        conn.close()
        assert not _sidecars(replacement)
        os.replace(replacement, run.db)

        # Each call either refuses (store_missing: the old file is still open elsewhere) or
        # works on the new file; none may land in the old one.
        written: list[int] = []

        def both_serve() -> bool:
            sent = run.kimi.call("send_message", recipient="claude", text="after the replace", dedup_key="after")
            got = run.claude.call("receive_messages", limit=50)
            for result in (sent, got):
                assert not result.is_error or result.text.startswith("store_missing: "), result.text
            if not sent.is_error:
                written.append(sent.data["id"])
            return not sent.is_error and not got.is_error

        wait_until(both_serve, 60, "both servers to reopen the replaced store")
        texts = {m[0]: m[3] for m in _messages(run.db)}
        assert "from the replacement" in texts.values(), "the replacement's own content was lost"
        assert "old store task" not in texts.values(), "the old store's content shows through the new file"
        assert all(texts.get(i) == "after the replace" for i in written)
        new_task = run.kimi.ok("send_message", recipient="claude", text="new store task", kind="task")["id"]
        assert run.dispatched(new_task) == "succeeded"
        assert integrity(run.db) == "ok"
    finally:
        run.close()


class Senders:
    """Servers sending numbered messages; every id a server reported is kept with its text."""

    def __init__(self) -> None:
        self.sent: dict[int, str] = {}
        self.refusals = 0

    def send(self, agent: McpAgent, recipient: str) -> bool:
        text = f"from {agent.agent} #{len(self.sent) + self.refusals}"
        result = agent.call("send_message", recipient=recipient, text=text)
        if result.is_error:
            assert result.text.startswith("store_missing: ") and "-shm" in result.text, result.text
            self.refusals += 1
            return False
        message_id = result.data["id"]
        assert message_id not in self.sent, f"#{message_id} handed out twice: {self.sent[message_id]!r}, {text!r}"
        self.sent[message_id] = text
        return True


def _start_server(env: dict[str, str], agent: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(PROJECT / "server.py")],
        env={**os.environ, **env, "AGENT_ID": agent},
        cwd=PROJECT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.parametrize("deleted", [("-shm",), ("-wal", "-shm")], ids=["shm", "wal+shm"])
def test_deleted_sidecars_never_split_the_store(tmp_path, deleted):
    db = tmp_path / "state" / "bridge.db"
    env = _env(tmp_path, db)
    kimi = McpAgent("kimi", env, tmp_path / "servers.stderr")
    claude = McpAgent("claude", env, tmp_path / "servers.stderr")
    third = None
    senders = Senders()
    try:
        kimi.wait_ready(), claude.wait_ready()
        for _ in range(3):  # committed to the WAL, not yet checkpointed into the file
            assert senders.send(kimi, "claude") and senders.send(claude, "kimi")
        for suffix in deleted:
            os.unlink(f"{db}{suffix}")

        # A server started now would make a second -shm (and -wal): it refuses, saying why.
        started = _start_server(env, "kimi")
        assert started.returncode == 2 and started.stdout == "", started.stderr
        assert started.stderr.startswith("agent-bridge: store_missing: ") and "-shm" in started.stderr, started.stderr

        # The running servers notice on their next call; once both have let go of the deleted
        # files (the last one checkpoints them into the store), each reopens cleanly.
        wait_until(
            lambda: senders.send(kimi, "claude") & senders.send(claude, "kimi"),
            60,
            "both running servers to reopen the store",
        )
        assert senders.refusals >= 1, "nobody noticed the deleted files"
        third = McpAgent("kimi", env, tmp_path / "servers.stderr")
        third.wait_ready()
        for _ in range(3):
            for agent, recipient in ((third, "claude"), (kimi, "claude"), (claude, "kimi")):
                assert senders.send(agent, recipient)
        seen = {m["id"] for m in claude.ok("receive_messages", limit=100)["messages"]}
        assert seen == {i for i, text in senders.sent.items() if not text.startswith("from claude")}
    finally:
        for agent in (kimi, claude, third):
            if agent is not None:
                agent.close()
    assert dict((m[0], m[3]) for m in _messages(db)) == senders.sent
    assert integrity(db) == "ok"


# -- 5. a store left by an older schema version ------------------------------------------------


@pytest.mark.slow
def test_v1_store_is_migrated_by_a_running_server_and_listener(tmp_path):
    launcher = scripted_launcher(tmp_path)
    agents = {
        "claude": {"auto": True, "launcher": str(launcher), "worker_timeout_seconds": 10},
        "kimi": {"auto": True, "launcher": str(launcher), "worker_timeout_seconds": 10},
    }
    env = {
        **bridge_env(tmp_path, write_config(tmp_path / "config.json", agents)),
        "SCRIPTED_WORKER_LAUNCHES": str(tmp_path / "launches.txt"),
    }
    db = Path(env["AGENT_BRIDGE_DB"])
    store_from_fixture(db, "store_v1", 1)
    v1_columns = (
        "id, sender, recipient, kind, text, reply_to, conversation_id, dedup_key, created_at,"
        " response_deadline, delivered_at, acknowledged_at, claim_owner, claim_expires_at"
    )
    before = sql(db, f"SELECT {v1_columns} FROM messages ORDER BY id")
    conv_columns = (
        "id, initiator, recipient, goal, state, max_turns, turn_count, in_flight_message_id,"
        " created_at, expires_at, updated_at"
    )  # the v1 columns (schema 4 adds max_cost_usd)
    conversations = sql(db, f"SELECT {conv_columns} FROM conversations ORDER BY id")

    # Everyone starts at once on the old store: the first to take the write lock migrates.
    kimi = McpAgent("kimi", env, tmp_path / "servers.stderr")
    claude = McpAgent("claude", env, tmp_path / "servers.stderr")
    listener = start_listener(env, "kimi", tmp_path / "listener.log")
    try:
        kimi.wait_ready(), claude.wait_ready()
        assert sql(db, "PRAGMA user_version")[0][0] == SCHEMA_VERSION
        assert sql(db, f"SELECT {v1_columns} FROM messages ORDER BY id") == before
        assert sql(db, f"SELECT {conv_columns} FROM conversations ORDER BY id") == conversations
        # The old messages read back through the tools, text intact.
        for message_id, text in ((1, "standalone task"), (2, "fixture goal"), (3, "plain reply ✓")):
            assert claude.ok("get_message", message_id=message_id)["text"] == text
        inbox = kimi.ok("receive_messages", limit=10)["messages"]
        assert [m["id"] for m in inbox] == [1, 2]
        # And the listener works on the migrated store: a new task is dispatched and settled.
        task = claude.ok("send_message", recipient="kimi", text="after the migration", kind="task")["id"]

        def settled():
            rows = sql(db, "SELECT outcome FROM dispatch_attempts WHERE message_id = ? AND state = 'finished'", (task,))
            return rows[0][0] if rows else None

        assert wait_until(settled, 120, "the listener to dispatch the new task") == "succeeded"
        assert stop(listener) == 0
        assert integrity(db) == "ok"
    finally:
        stop(listener)
        kimi.close()
        claude.close()
