"""``agent-bridge inbox watch``: real processes, real signals, a real store written by another
process; output polled with deadlines."""

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from harness import PROJECT, bridge_env, inotify_descriptors, on_backend, write_config

from dispatcher.bridge import messages
from dispatcher.core.file_events import MODE_VARIABLE
from dispatcher.store import open_handle, open_store
from dispatcher.store.metrics import counter_totals
from dispatcher.wake.inbox_watch import expiry_line, rearm_command

pytestmark = pytest.mark.both_backends

TIMEOUT = 30.0
SECRET = "never-print-this-text"
AGENTS = {"claude", "kimi"}
CLI = [sys.executable, "-m", "dispatcher"]


class Watch:
    """One ``inbox watch`` process; its stdout lines arrive on a queue as they are flushed."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [*CLI, "inbox", "watch", *args],
            cwd=PROJECT,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._settle()

    def _settle(self) -> None:
        """Return once the process is in its poll loop: its start (imports, first look at the store)
        takes CPU, the loop sleeps. A message sent before that first look would be announced as
        already unread rather than new, however long the test had waited (a loaded machine)."""
        process = psutil.Process(self.proc.pid)
        deadline = time.monotonic() + TIMEOUT
        used = sum(process.cpu_times()[:2])
        while time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.3)
            now = sum(process.cpu_times()[:2])
            if now - used < 0.02:
                return
            used = now

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def next_line(self, timeout: float = TIMEOUT) -> str:
        line = self.lines.get(timeout=timeout)
        self.seen.append(line)
        return line

    def quiet_for(self, seconds: float) -> bool:
        try:
            self.seen.append(self.lines.get(timeout=seconds))
            return False
        except queue.Empty:
            return True

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(TIMEOUT)
        self._reader.join(TIMEOUT)
        _, err = self.proc.communicate(timeout=TIMEOUT)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return self.proc.returncode, err


@pytest.fixture
def env(tmp_path, backend, request):
    config = write_config(tmp_path / "config.json")
    return {**os.environ, **on_backend(bridge_env(tmp_path, config), backend, request)}


def send(env, recipient="claude", sender="kimi", kind="task") -> int:
    store = open_handle(env["AGENT_BRIDGE_DB"])
    try:
        return messages.send_message(
            store.connection(), sender=sender, recipient=recipient, text=SECRET, agents=AGENTS, kind=kind
        )["id"]
    finally:
        store.close()


def ack(env, ids, agent="claude") -> None:
    store = open_handle(env["AGENT_BRIDGE_DB"])
    try:
        messages.mark_read(store.connection(), agent=agent, worker_id="t", message_ids=ids)
    finally:
        store.close()


# --- pure parts -------------------------------------------------------------------------


def test_rearm_command_names_what_runs(tmp_path):
    script = tmp_path / "bin" / "agent-bridge"
    script.parent.mkdir()
    script.write_text("")
    assert (
        rearm_command("claude", 1740, str(script), str(script), "/py")
        == "agent-bridge inbox watch --agent claude --max-seconds 1740"
    )
    assert rearm_command("claude", None, str(script), None, "/py") == f"{script} inbox watch --agent claude"
    assert (
        rearm_command("claude", 1.5, "/x/dispatcher/__main__.py", None, "/my py")
        == "'/my py' -m dispatcher inbox watch --agent claude --max-seconds 1.5"
    )


def test_expiry_line_says_nothing_is_lost_and_gives_the_command():
    line = expiry_line("claude", 1740, "agent-bridge inbox watch --agent claude --max-seconds 1740")
    assert "1740 s" in line and "nothing is lost" in line
    assert line.endswith("Re-arm it now to keep being told: agent-bridge inbox watch --agent claude --max-seconds 1740")


# --- real processes ---------------------------------------------------------------------


@pytest.mark.sqlite_only("it starts the watch before the SQLite file exists")
def test_before_the_store_exists_then_one_line_per_new_message_payload_free(env):
    db = Path(env["AGENT_BRIDGE_DB"])
    watch = Watch(env, "--agent", "claude")
    try:
        assert watch.quiet_for(1.0)  # no store, nothing unread: nothing said
        assert not db.exists()  # it only reads, never creates the store
        first = send(env)
        assert watch.next_line() == f"1 new for claude: #{first} from kimi (task) — call receive_messages"
        send(env, recipient="kimi", sender="claude")  # someone else's mail
        second = send(env, sender="kimi", kind="notice")
        assert watch.next_line() == f"1 new for claude: #{second} from kimi (notice) — call receive_messages"
        ack(env, [first, second])  # acknowledging is not news
        assert watch.quiet_for(1.0)
    finally:
        status, err = watch.stop()
    assert (status, err) == (0, "")
    assert not [line for line in watch.seen if SECRET in line]


def test_start_announces_what_is_already_unread_so_a_rearmed_watch_loses_nothing(env):
    ids = [send(env), send(env, kind="notice")]
    watch = Watch(env, "--agent", "claude")
    try:
        line = watch.next_line()
        assert line == (
            f"2 unread for claude: #{ids[0]} from kimi (task), #{ids[1]} from kimi (notice) — call receive_messages"
        )
        assert watch.quiet_for(0.8)  # said once, not again
        third = send(env)
        assert watch.next_line().startswith(f"1 new for claude: #{third} ")  # only what is new
    finally:
        status, _ = watch.stop()
    assert status == 0
    # Each line that named mail counted one wake by the path "monitor" (docs/metrics.md).
    conn = open_store(env["AGENT_BRIDGE_DB"])
    try:
        assert counter_totals(conn, "wakes", None) == {("claude", "monitor", ""): 2}
    finally:
        conn.close()


@pytest.mark.parametrize("mode", ["inotify", "poll"])
def test_it_sleeps_on_inotify_and_with_the_poll_forced_still_names_new_mail(env, mode):
    send(env)  # the store's directory exists: inotify can watch it
    watch = Watch({**env, MODE_VARIABLE: mode}, "--agent", "claude")
    try:
        watch.next_line()
        assert inotify_descriptors(watch.proc.pid) == (1 if mode == "inotify" else 0)
        new = send(env)
        assert watch.next_line().startswith(f"1 new for claude: #{new} ")
    finally:
        status, err = watch.stop()
    assert (status, err) == (0, "")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_it_cleanly(env, sig):
    send(env)
    watch = Watch(env, "--agent", "claude")
    watch.next_line()
    status, err = watch.stop(sig)
    assert (status, err) == (0, "")


def test_max_seconds_ends_it_with_the_rearm_command(env):
    watch = Watch(env, "--agent", "claude", "--max-seconds", "2")
    line = watch.next_line(timeout=TIMEOUT)
    status, err = watch.stop()
    assert (status, err) == (0, "")
    assert line.startswith("inbox watch for claude ended after 2 s")
    assert line.endswith(f"{sys.executable} -m dispatcher inbox watch --agent claude --max-seconds 2")


@pytest.mark.sqlite_only("it deletes and replaces the SQLite file under the watch")
def test_a_store_replaced_under_it_is_followed(env):
    db = Path(env["AGENT_BRIDGE_DB"])
    send(env)
    watch = Watch(env, "--agent", "claude")
    try:
        watch.next_line()
        shutil.rmtree(db.parent)  # the whole store goes (the watch keeps only a read-only handle)
        fresh = send(env)  # a new store: ids start again
        line = watch.next_line()
        assert f"#{fresh} from kimi" in line
    finally:
        status, _ = watch.stop()
    assert status == 0


@pytest.mark.parametrize(
    "args, code",
    [
        (["--agent", "nobody"], "unknown_agent"),
        (["--agent", "Bad Id"], "usage_error"),
        (["--agent", "claude", "--max-seconds", "0"], "usage_error"),
        (["--agent", "claude", "--max-seconds", "nan"], "usage_error"),
        (["--agent", "claude", "--max-seconds", "true"], "usage_error"),
    ],
)
def test_refusals_say_what_to_do(env, args, code):
    done = subprocess.run(
        [*CLI, "inbox", "watch", *args], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"agent-bridge: {code}: ") and done.stderr.count("\n") == 1, done.stderr


def test_an_unreadable_config_is_refused(env, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text("{nope")
    done = subprocess.run(
        [*CLI, "inbox", "watch", "--agent", "claude"],
        cwd=PROJECT,
        capture_output=True,
        env={**env, "AGENT_BRIDGE_CONFIG": str(broken)},
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2 and "config_invalid" in done.stderr and "doctor" in done.stderr


def test_the_watch_path_loads_neither_pydantic_nor_the_sdk(env):
    # (psutil is loaded once, to find the session whose CLI started the watch.)
    send(env)
    probe = (
        "import atexit, sys; atexit.register(lambda: print(sorted(m for m in ('pydantic', 'mcp') "
        "if m in sys.modules), file=sys.stderr)); from dispatcher.ops.cli import main; "
        "main(['inbox', 'watch', '--agent', 'claude', '--max-seconds', '1'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0 and done.stdout.startswith("1 unread for claude: ")
    assert done.stderr == "[]\n"


@pytest.mark.sqlite_only("a damaged SQLite file")
def test_a_store_that_is_not_a_database_ends_it_with_the_one_line(env):
    db = Path(env["AGENT_BRIDGE_DB"])
    db.parent.mkdir(parents=True)
    db.write_bytes(b"not a database" * 500)
    done = subprocess.run(
        [*CLI, "inbox", "watch", "--agent", "claude"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("agent-bridge: store_corrupt: ") and done.stderr.count("\n") == 1


class WatchedSession:
    """An interactive session whose CLI is this test process (it starts the watches, as Claude
    starts a Monitor command), and what presence says of its wake paths."""

    def __init__(self, env: dict[str, str]) -> None:
        from dispatcher.bridge import presence
        from dispatcher.core.processes import start_time

        self.presence = presence
        self.store = open_handle(env["AGENT_BRIDGE_DB"])
        me = os.getpid()
        self.id = presence.register_session(
            self.store.connection(), "claude", "interactive", pid=me, start_time=start_time(me), client_pid=me, now=0.0
        )

    def paths(self) -> list[str]:
        (found,) = [s for s in self.presence.sessions(self.store.connection(), "claude") if s.id == self.id]
        return list(found.wake_paths)

    def wakeable(self) -> bool:
        return self.presence.has_wakeable_session(self.store.connection(), "claude")

    def watches(self) -> int:
        return self.store.connection().execute("SELECT count(*) FROM session_watches").fetchone()[0]

    def until(self, predicate) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not predicate():
            assert time.monotonic() < deadline, "condition not reached in time"
            time.sleep(0.05)


def test_while_it_runs_the_session_whose_cli_started_it_counts_as_wakeable(env):
    session = WatchedSession(env)
    try:
        assert not session.wakeable()
        watch = Watch(env, "--agent", "claude")
        session.until(lambda: session.paths() == ["monitor"])
        assert session.wakeable()
        assert watch.stop() == (0, "")
        assert session.paths() == [] and not session.wakeable() and session.watches() == 0
    finally:
        session.store.close()


def test_a_watch_killed_with_sigkill_stops_counting_at_once(env):
    """A watch killed with -9 never removes its mark: the wake path counts only while the watch's
    own process (pid and start time) is alive, so the session is not wakeable the moment it is
    gone, and a new task does not wait out the interactive grace for a session nothing can wake."""
    session = WatchedSession(env)
    try:
        watch = Watch(env, "--agent", "claude")
        session.until(session.wakeable)
        watch.stop(signal.SIGKILL)  # reaped: the pid is gone
        assert watch.proc.returncode == -signal.SIGKILL
        assert session.paths() == [] and not session.wakeable()
        assert session.watches() == 1  # the row stays until the next prune of dead rows
        from dispatcher.store import write_transaction

        with write_transaction(conn := session.store.connection()):
            session.presence.prune_dead(conn)
        assert session.watches() == 0 and session.paths() == []
    finally:
        session.store.close()


def test_overlapping_watches_of_one_session_count_apart(env):
    """Two watches of one session: the first to end leaves the second's wake path in place; the
    session stops counting only when the last one ends."""
    session = WatchedSession(env)
    try:
        first = Watch(env, "--agent", "claude")
        session.until(lambda: session.watches() == 1)
        second = Watch(env, "--agent", "claude")
        session.until(lambda: session.watches() == 2)
        assert first.stop() == (0, "")
        assert session.watches() == 1 and session.paths() == ["monitor"] and session.wakeable()
        assert second.stop() == (0, "")
        assert session.watches() == 0 and session.paths() == [] and not session.wakeable()
    finally:
        session.store.close()


def test_a_store_recreated_at_a_recycled_inode_number_is_still_a_new_store(tmp_path, monkeypatch):
    """Once the reader closed its connection to a deleted store, the kernel may give the
    new store file the old inode number: ids start again all the same."""
    from dispatcher.wake.inbox_watch import InboxReader

    db = tmp_path / "state" / "bridge.db"
    open_store(db).close()
    monkeypatch.setattr(InboxReader, "_file_id", lambda self: (1, 42) if self.db.exists() else None)
    reader = InboxReader(db, "claude")
    assert reader.changed() and reader.generation == 1
    shutil.rmtree(db.parent)
    reader.changed()
    open_store(db).close()
    assert reader.changed() and reader.generation == 2
    reader.close()
