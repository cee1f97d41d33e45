"""`agent-bridge hook <cli> <event>` as the CLIs run it: a real subprocess, JSON on stdin, a real store.

What it prints for each event, that it never prints a message's text, that it is quiet on a
repeat, and that nothing (no store, a bad setting, malformed stdin, a planted link, a
corrupt store) ever makes it fail: exit 0, no output."""

import json
import os
import subprocess
import sys
import time

import pytest
from harness import PROJECT, wakes_counted

from dispatcher.bridge.messages import send_message
from dispatcher.store import open_store
from dispatcher.wake.hooks import session_key

AGENTS = frozenset({"claude", "kimi", "codex"})
SECRET = "SECRET-" + os.urandom(6).hex()


def hook(env: dict, *args: str, stdin: bytes | str = b'{"session_id": "s-1"}') -> subprocess.CompletedProcess:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_BRIDGE_", "AGENT_ID"))}
    return subprocess.run(
        [sys.executable, "-m", "dispatcher", "hook", *args],
        cwd=PROJECT,
        input=data,
        capture_output=True,
        env={**inherited, **env},
        timeout=60,
    )


def quiet(done: subprocess.CompletedProcess) -> bool:
    return done.returncode == 0 and done.stdout == b"" and done.stderr == b""


@pytest.fixture
def store(tmp_path) -> dict:
    db = tmp_path / "state" / "bridge.db"
    conn = open_store(db)
    ids = [
        send_message(
            conn, sender=s, recipient="claude", text=f"{SECRET} from {s}", agents=AGENTS, max_body_bytes=65536, kind=k
        )["id"]
        for s, k in (("kimi", "task"), ("codex", "notice"))
    ]
    conn.close()
    env = {"AGENT_BRIDGE_DB": str(db), "AGENT_BRIDGE_RUNTIME_DIR": str(tmp_path / "runtime")}
    return {"env": env, "ids": ids, "db": db, "runtime": tmp_path / "runtime"}


def send(store: dict, sender: str = "kimi", recipient: str = "claude") -> int:
    conn = open_store(store["db"])
    try:
        return send_message(
            conn,
            sender=sender,
            recipient=recipient,
            text=f"{SECRET} later",
            agents=AGENTS,
            max_body_bytes=65536,
            kind="task",
        )["id"]
    finally:
        conn.close()


def context_of(done: subprocess.CompletedProcess, event: str) -> str:
    assert done.returncode == 0 and done.stderr == b"", done
    doc = json.loads(done.stdout)
    assert list(doc) == ["hookSpecificOutput"]
    assert doc["hookSpecificOutput"]["hookEventName"] == event
    assert set(doc["hookSpecificOutput"]) == {"hookEventName", "additionalContext"}
    return doc["hookSpecificOutput"]["additionalContext"]


def hook_wakes(store: dict) -> int:
    return wakes_counted(store["db"], "claude", "hook")


def test_user_prompt_submit_names_count_ids_and_senders_never_the_text(store):
    a, b = store["ids"]
    done = hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude")
    line = context_of(done, "UserPromptSubmit")
    assert f"2 unread for claude: #{a} from kimi (task), #{b} from codex (notice)" in line
    assert "receive_messages" in line and SECRET not in line
    log = (store["runtime"] / "hooks.log").read_text()
    assert "hook claude UserPromptSubmit agent=claude new" in log and SECRET not in log


def test_the_agent_comes_from_agent_id_when_no_option(store):
    done = hook({**store["env"], "AGENT_ID": "claude"}, "claude", "PostToolUse")
    assert "2 unread for claude" in context_of(done, "PostToolUse")


def test_a_repeat_in_the_same_session_is_quiet_another_session_is_told(store):
    first = hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude")
    assert first.stdout
    assert hook_wakes(store) == 1  # a hook that tells counts one wake (docs/metrics.md)
    assert quiet(hook(store["env"], "claude", "PostToolUse", "--agent", "claude"))
    assert quiet(hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude"))
    assert hook_wakes(store) == 1  # a quiet one none
    other = hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude", stdin='{"session_id": "s-2"}')
    assert "2 unread" in context_of(other, "UserPromptSubmit")
    newer = send(store)
    again = hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude")
    assert f"#{newer} from kimi" in context_of(again, "UserPromptSubmit")
    assert hook_wakes(store) == 3


def test_stop_blocks_once_per_new_id_with_the_notice_on_stderr(store):
    env = store["env"]
    done = hook(env, "claude", "Stop", "--agent", "claude", stdin='{"session_id": "s-9", "stop_hook_active": false}')
    assert done.returncode == 2 and done.stdout == b""
    assert b"2 unread for claude" in done.stderr and SECRET.encode() not in done.stderr
    assert quiet(hook(env, "claude", "Stop", "--agent", "claude", stdin='{"session_id": "s-9"}'))
    send(store)
    active = '{"session_id": "s-9", "stop_hook_active": true}'
    assert quiet(hook(env, "claude", "Stop", "--agent", "claude", stdin=active))
    blocked = hook(env, "claude", "Stop", "--agent", "claude", stdin='{"session_id": "s-9"}')
    assert blocked.returncode == 2 and b"3 unread" in blocked.stderr


def test_kimi_user_prompt_submit_answers_with_a_message(store):
    done = hook(store["env"], "kimi", "UserPromptSubmit", "--agent", "claude", stdin='{"sessionId": "k-1"}')
    assert done.returncode == 0 and done.stderr == b""
    doc = json.loads(done.stdout)
    assert list(doc) == ["message"] and "2 unread for claude" in doc["message"] and SECRET not in doc["message"]


def test_an_empty_inbox_is_quiet_and_writes_nothing(store):
    assert quiet(hook(store["env"], "claude", "UserPromptSubmit", "--agent", "codex"))
    assert not (store["runtime"] / "hooks").exists()


def test_the_hook_leaves_an_idle_store_untouched(store):
    before = sorted(p.name for p in store["db"].parent.iterdir())
    hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude")
    assert sorted(p.name for p in store["db"].parent.iterdir()) == before


def test_session_state_is_private_and_named_by_a_hash(store):
    hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude", stdin='{"session_id": "../../etc/x"}')
    state = store["runtime"] / "hooks" / "claude" / f"{session_key('../../etc/x')}.json"
    assert oct(state.stat().st_mode & 0o777) == "0o600"
    assert oct(state.parent.stat().st_mode & 0o777) == "0o700"
    assert sorted(json.loads(state.read_text())["announced"]) == sorted(str(i) for i in store["ids"])


BAD_STDIN = [b"", b"not json", b"[1, 2]", b"\xff\xfe{", b'"session"', b"{" * 100000]


@pytest.mark.parametrize("stdin", BAD_STDIN, ids=["empty", "text", "array", "bad-utf8", "string", "deep"])
def test_malformed_stdin_is_quiet(store, stdin):
    assert quiet(hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude", stdin=stdin))
    assert "stdin_invalid" in (store["runtime"] / "hooks.log").read_text()


@pytest.mark.parametrize(
    "args",
    [
        ("claude", "UserPromptSubmit"),  # no --agent, no AGENT_ID
        ("claude", "UserPromptSubmit", "--agent", "true"),  # an id nobody declared: nothing waits
        ("claude", "UserPromptSubmit", "--agent", "../x"),
        ("claude", "UserPromptSubmit", "--agent", "CLAUDE"),
        ("claude", "Bogus", "--agent", "claude"),
        ("claude", "--agent", "claude"),  # no event
        ("kimi", "Stop", "--agent", "claude"),  # Kimi's Stop cannot inject context
        ("claude", "UserPromptSubmit", "--agent", "claude", "--future-flag", "x"),
    ],
    ids=["no-agent", "agent-true", "agent-path", "agent-upper", "bad-event", "no-event", "kimi-stop", "extra-flag"],
)
def test_bad_arguments_are_quiet(store, args):
    done = hook(store["env"], *args)
    if args[-2:] == ("--future-flag", "x"):  # unknown options are ignored: the notice still comes
        assert done.returncode == 0 and b"2 unread" in done.stdout
        return
    assert quiet(done)


def test_a_missing_store_is_quiet_and_creates_nothing(tmp_path):
    env = {"AGENT_BRIDGE_DB": str(tmp_path / "none" / "bridge.db"), "AGENT_BRIDGE_RUNTIME_DIR": str(tmp_path / "rt")}
    assert quiet(hook(env, "claude", "UserPromptSubmit", "--agent", "claude"))
    assert not (tmp_path / "none").exists() and not (tmp_path / "rt").exists()


def test_an_invalid_setting_is_quiet(store):
    assert quiet(hook({**store["env"], "AGENT_BRIDGE_DB": "relative/bridge.db"}, "claude", "Stop", "--agent", "claude"))


def test_a_corrupt_store_is_quiet_and_logged(tmp_path):
    db = tmp_path / "bridge.db"
    db.write_bytes(b"this is not a database" * 100)
    env = {"AGENT_BRIDGE_DB": str(db), "AGENT_BRIDGE_RUNTIME_DIR": str(tmp_path / "rt")}
    assert quiet(hook(env, "claude", "UserPromptSubmit", "--agent", "claude"))
    assert "error DatabaseError" in (tmp_path / "rt" / "hooks.log").read_text()


def test_a_planted_link_for_the_state_file_is_refused_quietly(store, tmp_path):
    directory = store["runtime"] / "hooks" / "claude"
    directory.mkdir(parents=True, mode=0o700)
    os.chmod(store["runtime"], 0o700)
    os.chmod(store["runtime"] / "hooks", 0o700)
    target = tmp_path / "victim"
    target.write_text("keep me")
    (directory / f"{session_key('s-1')}.json").symlink_to(target)
    assert quiet(hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude"))
    assert target.read_text() == "keep me"
    assert "error UnsafePath" in (store["runtime"] / "hooks.log").read_text()


def test_an_unusable_runtime_dir_is_quiet(store):
    store["runtime"].write_text("a file where the runtime directory should be")
    assert quiet(hook(store["env"], "claude", "Stop", "--agent", "claude"))


def test_a_closed_stdout_does_not_fail(store):
    proc = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "hook", "claude", "UserPromptSubmit", "--agent", "claude"],
        cwd=PROJECT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **store["env"]},
    )
    proc.stdout.close()
    _, err = proc.communicate(b'{"session_id": "s-1"}', timeout=60)
    assert proc.returncode == 0 and err == b""


def test_a_state_file_with_garbage_counts_as_nothing_announced(store):
    directory = store["runtime"] / "hooks" / "claude"
    hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude")
    (directory / f"{session_key('s-1')}.json").write_bytes(b"\x00garbage{")
    assert b"2 unread" in hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude").stdout


def test_old_session_files_are_removed_when_a_new_session_starts(store):
    directory = store["runtime"] / "hooks" / "claude"
    hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude")
    old = directory / f"{session_key('s-1')}.json"
    os.utime(old, (1, 1))
    hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude", stdin='{"session_id": "s-new"}')
    assert not old.exists() and (directory / f"{session_key('s-new')}.json").exists()


def test_runs_from_any_directory(store, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "hook", "claude", "UserPromptSubmit", "--agent", "claude"],
        cwd=tmp_path,
        input=b"{}",
        capture_output=True,
        timeout=60,
        env={**os.environ, **store["env"], "PYTHONPATH": str(PROJECT)},
    )
    assert done.returncode == 0 and b"2 unread" in done.stdout


def test_codex_answers_like_claude(store):
    line = context_of(hook(store["env"], "codex", "UserPromptSubmit", "--agent", "claude"), "UserPromptSubmit")
    assert "2 unread for claude" in line and SECRET not in line
    stop = hook(store["env"], "codex", "Stop", "--agent", "claude", stdin='{"session_id": "c-2"}')
    assert stop.returncode == 2 and b"2 unread for claude" in stop.stderr and stop.stdout == b""


def test_gemini_before_agent_and_after_agent_shapes(store):
    before = hook(store["env"], "gemini", "BeforeAgent", "--agent", "claude")
    assert "2 unread for claude" in context_of(before, "BeforeAgent")
    after = hook(
        store["env"],
        "gemini",
        "AfterAgent",
        "--agent",
        "claude",
        stdin='{"session_id": "g-2", "stop_hook_active": false}',
    )
    assert after.returncode == 0 and after.stderr == b""
    doc = json.loads(after.stdout)
    assert doc["decision"] == "block" and "2 unread for claude" in doc["reason"] and SECRET not in doc["reason"]
    active = '{"session_id": "g-3", "stop_hook_active": true}'
    assert quiet(hook(store["env"], "gemini", "AfterAgent", "--agent", "claude", stdin=active))
    assert quiet(hook(store["env"], "gemini", "AfterAgent", "--agent", "claude", stdin='{"session_id": "g-2"}'))


def test_the_first_hook_of_a_cli_session_marks_its_mcp_session_wakeable_by_hook(store):
    from dispatcher.bridge import presence
    from dispatcher.core.processes import start_time

    me = os.getpid()  # the hook's parent plays the CLI that started both the MCP server and the hook
    conn = open_store(store["db"])
    try:
        session = presence.register_session(
            conn, "claude", "interactive", pid=me, start_time=start_time(me), client_pid=me, now=time.time()
        )
        assert not presence.has_wakeable_session(conn, "claude")
    finally:
        conn.close()
    assert context_of(hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude"), "UserPromptSubmit")
    conn = open_store(store["db"])
    try:
        assert conn.execute("SELECT wake_paths FROM sessions WHERE id = ?", (session,)).fetchone()[0] == '["hook"]'
        assert presence.has_wakeable_session(conn, "claude")
    finally:
        conn.close()


def test_a_new_mcp_session_of_the_same_cli_session_is_marked_at_its_next_hook(store):
    """An ``/mcp`` reconnect gives the same CLI session (same session_id in the hook's input) a new
    MCP server and so a new session row: the next hook marks that one too (marking is decided per
    MCP session, not once per CLI session)."""
    from dispatcher.bridge import presence
    from dispatcher.core.processes import start_time

    me = os.getpid()  # the hook's parent plays the CLI
    stdin = '{"session_id": "one-cli-session", "prompt": "hi"}'

    def new_mcp_session() -> int:
        conn = open_store(store["db"])
        try:
            return presence.register_session(
                conn, "claude", "interactive", pid=me, start_time=start_time(me), client_pid=me, now=time.time()
            )
        finally:
            conn.close()

    def paths(session: int) -> str | None:
        conn = open_store(store["db"])
        try:
            row = conn.execute("SELECT wake_paths FROM sessions WHERE id = ?", (session,)).fetchone()
            return None if row is None else row[0]
        finally:
            conn.close()

    first = new_mcp_session()
    assert context_of(
        hook(store["env"], "claude", "UserPromptSubmit", "--agent", "claude", stdin=stdin), "UserPromptSubmit"
    )
    assert paths(first) == '["hook"]'
    conn = open_store(store["db"])
    try:
        presence.end_session(conn, first)  # the old server exits on the reconnect
    finally:
        conn.close()
    second = new_mcp_session()
    assert paths(second) == "[]"
    hook(store["env"], "claude", "PostToolUse", "--agent", "claude", stdin=stdin)
    assert paths(second) == '["hook"]'


def test_a_hook_for_an_undeclared_agent_is_quiet_and_logs_its_one_line(store, tmp_path):
    """A hook left in a CLI's settings after its agent left config.json (or a typo in `--agent`):
    it used to find no mail for that id and say nothing, not even in hooks.log."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"agents": {"claude": {"launcher": "x.sh"}, "kimi": {"launcher": "y.sh"}}}))
    env = {**store["env"], "AGENT_BRIDGE_CONFIG": str(config)}
    assert quiet(hook(env, "claude", "UserPromptSubmit", "--agent", "nobody"))
    (line,) = (store["runtime"] / "hooks.log").read_text().splitlines()
    assert line.endswith(" hook claude UserPromptSubmit agent=nobody unknown_agent"), line
    config.write_text("{not json")  # unreadable as JSON: the store decides, as before
    assert b"2 unread" in hook(env, "claude", "UserPromptSubmit", "--agent", "claude").stdout


def test_a_hook_on_a_sqlite_store_loads_neither_psycopg_nor_the_mcp_sdk(store):
    """Hooks run on every turn of every session: they load what a SQLite store needs, nothing of
    the PostgreSQL connector and nothing of the SDK."""
    probe = (  # the command's own code (the command ends with os._exit, before any atexit)
        "import sys; from dispatcher.wake.hooks import main; main('claude', 'UserPromptSubmit', 'claude'); "
        "print(sorted(m for m in ('psycopg', 'mcp', 'pydantic') if m in sys.modules), file=sys.stderr)"
    )
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_BRIDGE_", "AGENT_ID"))}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=PROJECT,
        input=b'{"session_id": "s-1"}',
        capture_output=True,
        env={**inherited, **store["env"]},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert b"2 unread" in done.stdout  # it did its work (the notice names the waiting mail)
    assert done.stderr.decode().splitlines()[-1] == "[]", done.stderr
