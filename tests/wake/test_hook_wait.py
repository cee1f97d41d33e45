"""`agent-bridge hook claude Stop --wait N`: the waiting Stop hook, as real processes under a
stand-in Claude process (tests/fake_claude_parent.py, whose argv carries Claude's flags), a real
store and real signals. The pure parts (``claude_backgrounds``, ``parse_wait``) have a case table."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import PROJECT, inotify_descriptors, wakes_counted

from dispatcher.bridge.messages import send_message
from dispatcher.clis.claude import WAIT_TIMEOUT_MARGIN_SECONDS
from dispatcher.clis.claude.wake import claude_backgrounds
from dispatcher.core.file_events import MODE_VARIABLE
from dispatcher.store import open_store
from dispatcher.wake.hook_wait import parse_wait

AGENTS = frozenset({"claude", "kimi", "codex"})
SECRET = "SECRET-" + os.urandom(6).hex()
FAKE = str(Path(__file__).parents[1] / "fake_claude_parent.py")
STREAMING = ("-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose")

BACKGROUND_CASES = [
    # (name, argv after the program, stdout is a tty, background)
    ("interactive in a terminal", [], True, True),
    ("interactive with a prompt", ["fix the bug"], True, True),
    ("no -p but stdout piped: print mode", [], False, False),
    ("no -p, stdout unknown", [], None, False),
    ("-p: foreground", ["-p", "hi"], False, False),
    ("--print in a terminal: foreground", ["--print", "hi"], True, False),
    ("-p with streaming input", list(STREAMING), False, True),
    ("--input-format=stream-json", ["-p", "--input-format=stream-json"], False, True),
    ("stream-json output only", ["-p", "--output-format", "stream-json"], False, False),
    ("--sdk-url", ["--sdk-url=ws://x"], False, True),
    ("--init-only", ["--init-only"], True, False),
    ("flags after -- are not options", ["--", "-p"], True, True),
    ("streaming after -- is not an option", ["-p", "--", "--input-format", "stream-json"], False, False),
]


@pytest.mark.parametrize(("name", "args", "tty", "background"), BACKGROUND_CASES, ids=[c[0] for c in BACKGROUND_CASES])
def test_claude_backgrounds(name, args, tty, background):
    assert claude_backgrounds(["claude", *args], tty) is background


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("5", 5),
        ("86400", 86400),
        ("0", None),
        ("86401", None),
        ("-5", None),
        ("true", None),
        ("1e3", None),
        ("", None),
        (None, None),
        ("9" * 40, None),
    ],
)
def test_parse_wait(value, seconds):
    assert parse_wait(value) == seconds


@pytest.fixture
def store(tmp_path) -> dict:
    db = tmp_path / "state" / "bridge.db"
    open_store(db).close()
    env = {"AGENT_BRIDGE_DB": str(db), "AGENT_BRIDGE_RUNTIME_DIR": str(tmp_path / "runtime")}
    return {"env": env, "db": db, "runtime": tmp_path / "runtime"}


def send(store: dict, sender: str = "kimi") -> int:
    conn = open_store(store["db"])
    try:
        return send_message(
            conn,
            sender=sender,
            recipient="claude",
            text=f"{SECRET} hello",
            agents=AGENTS,
            max_body_bytes=65536,
            kind="task",
        )["id"]
    finally:
        conn.close()


class Hook:
    """The stand-in Claude process running one hook; ``pid`` is the hook's (its group's leader)."""

    def __init__(
        self,
        store: dict,
        claude_flags: tuple[str, ...],
        *hook_args: str,
        session: str = "s-1",
        stdin: str | None = None,
        extra_env: dict | None = None,
    ) -> None:
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_BRIDGE_", "AGENT_ID", "CLAUDE"))}
        env = {
            **inherited,
            **store["env"],
            "FAKE_HOOK_STDIN": stdin
            if stdin is not None
            else json.dumps(
                {
                    "session_id": session,
                    "hook_event_name": "Stop",
                    "stop_hook_active": False,
                    "last_assistant_message": SECRET,
                }
            ),
            **(extra_env or {}),
        }
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, FAKE, *claude_flags, "++", *hook_args],
            cwd=PROJECT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.pid = int(self.proc.stdout.readline())

    def result(self, timeout: float = 60) -> dict:
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, err
        doc = json.loads(out.strip().splitlines()[-1])
        doc["seconds"] = time.monotonic() - self.started
        return doc

    def running(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.running():
            self.proc.kill()
            self.proc.communicate()


def wait_for(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def log(store: dict) -> str:
    path = store["runtime"] / "hooks.log"
    return path.read_text() if path.exists() else ""


def hook_wakes(store: dict) -> int:
    return wakes_counted(store["db"], "claude", "hook")


WAIT = ("claude", "Stop", "--agent", "claude", "--wait")
NEW_SESSION = json.dumps({"session_id": "s-1", "hook_event_name": "SessionStart", "source": "startup"})


def waiting(store: dict) -> bool:
    """A waiter holds the session's slot (it has started waiting)."""
    files = (
        list((store["runtime"] / "hooks" / "claude").glob("*.json")) if (store["runtime"] / "hooks").exists() else []
    )
    return any(json.loads(f.read_text() or "{}").get("waiter") for f in files)


@pytest.mark.parametrize(
    ("event", "mode", "backend"),
    [
        ("Stop", "inotify", "sqlite"),
        ("Stop", "poll", "sqlite"),
        ("SessionStart", "inotify", "sqlite"),
        ("Stop", "inotify", "postgres"),
        ("SessionStart", "inotify", "postgres"),
    ],
)
def test_in_the_background_it_waits_and_wakes_with_the_notice_when_mail_arrives(store, event, mode, backend, request):
    """At the end of a turn (Stop), and in a session that has had no turn yet (SessionStart: no
    Stop hook has run, so nothing else waits): it waits, asleep on inotify or (forced, as on a
    file system without it) polling, and wakes the session when mail arrives. On a PostgreSQL
    store it sleeps on the agent's NOTIFY channel (inotify then watches its session's file only)."""
    if backend == "postgres":
        url = request.getfixturevalue("new_postgres_store")()
        store = {**store, "env": {**store["env"], "AGENT_BRIDGE_DB": url}, "db": url}
        open_store(url).close()
    start = {"stdin": NEW_SESSION} if event == "SessionStart" else {}
    hook = Hook(
        store, STREAMING, "claude", event, "--agent", "claude", "--wait", "60", extra_env={MODE_VARIABLE: mode}, **start
    )
    try:
        wait_for(lambda: waiting(store))
        assert hook.running()
        assert inotify_descriptors(hook.pid) == (1 if mode == "inotify" else 0)
        arrived = send(store)
        result = hook.result()
    finally:
        hook.kill()
    assert result["rc"] == 2 and result["stdout"] == ""
    assert f"1 unread for claude: #{arrived} from kimi (task)" in result["stderr"]
    assert "receive_messages" in result["stderr"] and SECRET not in result["stderr"]
    assert result["seconds"] < 30
    assert f"hook claude {event} agent=claude wake" in log(store) and SECRET not in log(store)
    assert hook_wakes(store) == 1  # the one wake, counted once it was out (docs/metrics.md)


def test_mail_already_waiting_blocks_at_once_like_the_plain_stop_hook(store):
    first = send(store)
    result = Hook(store, STREAMING, *WAIT, "60").result()
    assert result["rc"] == 2 and f"#{first} from kimi" in result["stderr"]
    assert hook_wakes(store) == 1
    assert result["seconds"] < 20


def test_it_ends_by_itself_at_the_bound_silently(store):
    result = Hook(store, STREAMING, *WAIT, "2").result()
    assert (result["rc"], result["stdout"], result["stderr"]) == (0, "", "")
    assert 2 <= result["seconds"] < 30
    assert "agent=claude wait_bound" in log(store)
    assert not waiting(store)  # it freed the session's slot


def test_sigterm_to_its_group_ends_it_silently(store):
    hook = Hook(store, STREAMING, *WAIT, "60")
    try:
        wait_for(lambda: waiting(store))
        os.killpg(hook.pid, signal.SIGTERM)
        result = hook.result()
    finally:
        hook.kill()
    assert (result["rc"], result["stdout"], result["stderr"]) == (0, "", "")
    assert result["seconds"] < 30
    assert "agent=claude wait_signal" in log(store)
    assert not waiting(store)


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGINT])
def test_sighup_and_sigint_end_it_silently(store, signum):
    hook = Hook(store, STREAMING, *WAIT, "60")
    try:
        wait_for(lambda: waiting(store))
        os.kill(hook.pid, signum)
        result = hook.result()
    finally:
        hook.kill()
    assert (result["rc"], result["stdout"], result["stderr"]) == (0, "", "")


def test_in_the_foreground_it_never_waits(store):
    result = Hook(store, ("-p", "--output-format", "json"), *WAIT, "60").result()
    assert (result["rc"], result["stdout"], result["stderr"]) == (0, "", "")
    assert result["seconds"] < 20


def test_a_claude_pid_that_is_not_an_ancestor_is_not_trusted(store):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *STREAMING])
    try:
        result = Hook(store, STREAMING, *WAIT, "60", extra_env={"FAKE_CLAUDE_PID": str(other.pid)}).result()
    finally:
        other.kill()
        other.wait()
    assert (result["rc"], result["stderr"]) == (0, "") and result["seconds"] < 20


@pytest.mark.parametrize("value", ["true", "-5", "0", "999999999", "1e3"])
def test_a_bad_wait_value_means_no_waiting_and_no_output(store, value):
    result = Hook(store, STREAMING, *WAIT, value).result()
    assert (result["rc"], result["stdout"], result["stderr"]) == (0, "", "") and result["seconds"] < 20


@pytest.mark.parametrize("stdin", ["", "not json", "[1]", '{"session_id": 5}'])
def test_malformed_stdin_never_breaks_it(store, stdin):
    result = Hook(store, STREAMING, *WAIT, "2", stdin=stdin).result()
    assert (result["rc"], result["stdout"]) == (0, "") and result["stderr"] == ""


def test_no_store_means_no_waiting(tmp_path):
    store = {
        "env": {
            "AGENT_BRIDGE_DB": str(tmp_path / "none" / "bridge.db"),
            "AGENT_BRIDGE_RUNTIME_DIR": str(tmp_path / "runtime"),
        },
        "runtime": tmp_path / "runtime",
    }
    result = Hook(store, STREAMING, *WAIT, "60").result()
    assert (result["rc"], result["stderr"]) == (0, "") and result["seconds"] < 20
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize("older", ["Stop", "SessionStart"])
def test_a_newer_waiter_supersedes_the_older_one_and_only_it_wakes(store, older):
    """One waiter per session: a later Stop hook's waiter takes the slot (so the first turn's Stop
    hook supersedes the SessionStart waiter of a new session)."""
    start = {"stdin": NEW_SESSION} if older == "SessionStart" else {}
    old = Hook(store, STREAMING, "claude", older, "--agent", "claude", "--wait", "60", **start)
    new = None
    try:
        wait_for(lambda: waiting(store))
        new = Hook(store, STREAMING, *WAIT, "60")
        old_result = old.result()
        assert (old_result["rc"], old_result["stderr"]) == (0, "")
        assert f"hook claude {older} agent=claude wait_superseded" in log(store)
        arrived = send(store)
        new_result = new.result()
    finally:
        old.kill()
        if new is not None:
            new.kill()
    assert new_result["rc"] == 2 and f"#{arrived} from kimi" in new_result["stderr"]


def test_an_id_announced_by_another_hook_does_not_wake_it(store):
    """The mail arrives and the prompt hook announces it while the waiter is stopped (SIGSTOP, taken
    while the test holds the session's lock, so the waiter is never stopped inside it); resumed, the
    waiter sees the commit, finds the id already announced and does not wake: it ends at its bound.
    A waiter that woke for an announced id would exit 2 here."""
    import fcntl

    from dispatcher.core.private_files import ensure_private_dir, open_private_lock
    from dispatcher.wake.hooks import session_key

    bound = 30  # long enough to resume it with time left on a loaded machine (the run takes this long)
    hook = Hook(store, STREAMING, *WAIT, str(bound))
    try:
        wait_for(lambda: waiting(store))
        state = ensure_private_dir(store["runtime"] / "hooks" / "claude", "test") / f"{session_key('s-1')}.json"
        fd = open_private_lock(state)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # the waiter is outside the lock now, or waits for it
            os.kill(hook.pid, signal.SIGSTOP)
        finally:
            os.close(fd)
        try:
            arrived = send(store)
            inherited = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_BRIDGE_", "AGENT_ID"))}
            prompt = subprocess.run(
                [sys.executable, "-m", "dispatcher", "hook", "claude", "UserPromptSubmit", "--agent", "claude"],
                cwd=PROJECT,
                input=b'{"session_id": "s-1"}',
                capture_output=True,
                env={**inherited, **store["env"]},
                timeout=60,
            )
        finally:
            resumed_at = time.monotonic()
            os.kill(hook.pid, signal.SIGCONT)
        result = hook.result()
    finally:
        hook.kill()
    assert f"#{arrived} from kimi" in json.loads(prompt.stdout)["hookSpecificOutput"]["additionalContext"]
    # It was resumed with time left to look before its bound (else this run proves nothing).
    assert resumed_at - hook.started < bound - 3
    assert (result["rc"], result["stderr"]) == (0, "")
    assert "agent=claude wait_bound" in log(store)


def test_it_ends_when_the_claude_process_is_gone(store):
    hook = Hook(store, STREAMING, *WAIT, "60")
    try:
        wait_for(lambda: waiting(store))
        hook.proc.kill()  # the stand-in Claude dies; the hook (own group) is left behind
        hook.proc.communicate()
        wait_for(lambda: "wait_claude_gone" in log(store))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(hook.pid, signal.SIGKILL)


def test_it_ends_when_the_claude_process_has_exited_but_is_not_reaped(store):
    """A zombie Claude is gone too (the one rule of ``processes.liveness``), not alive until reaped."""
    hook = Hook(store, STREAMING, *WAIT, "60")
    try:
        wait_for(lambda: waiting(store))
        hook.proc.kill()  # not reaped yet: the stand-in Claude stays a zombie under this test
        wait_for(lambda: "wait_claude_gone" in log(store))
    finally:
        hook.proc.communicate()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(hook.pid, signal.SIGKILL)


def test_the_margin_leaves_time_to_end_before_claude_kills_it():
    assert WAIT_TIMEOUT_MARGIN_SECONDS >= 10


@pytest.mark.parametrize(
    "args",
    [
        ("claude", "UserPromptSubmit"),
        ("claude", "PostToolUse"),
        ("codex", "Stop"),
        ("gemini", "AfterAgent"),
        ("kimi", "UserPromptSubmit"),
    ],
)
def test_wait_is_only_for_claudes_stop_elsewhere_the_plain_hook_answers(store, args):
    result = Hook(store, STREAMING, *args, "--agent", "claude", "--wait", "60").result()
    assert (result["rc"], result["stdout"], result["stderr"]) == (0, "", "") and result["seconds"] < 20


def test_an_unreadable_claude_process_means_no_waiting(store, monkeypatch):
    """In-process: a failure while looking at the Claude process is exit 0, silent, one log line."""
    from dispatcher.clis import registry
    from dispatcher.wake import hook_wait

    monkeypatch.setenv("AGENT_BRIDGE_DB", str(store["db"]))
    monkeypatch.setenv("AGENT_BRIDGE_RUNTIME_DIR", str(store["runtime"]))

    def broken(environ):
        raise RuntimeError("boom")

    monkeypatch.setattr(registry.get("claude"), "background_process", broken)
    monkeypatch.setattr("sys.stdin", open(os.devnull))  # noqa: SIM115 - closed by the test's end
    try:
        assert hook_wait.main_wait("claude", "claude", "60") == 0
    finally:
        sys.stdin.close()
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
    assert "agent=claude wait_error RuntimeError" in log(store)


def test_mail_committed_between_its_first_look_and_its_wait_still_wakes_it(store, monkeypatch, capsys):
    """The waiter reads the store's version before its first look: a message committed right after
    that look (before the wait begins) wakes it at the next poll, not at the next commit or the
    bound. Run in this process, with the commit made exactly in that gap."""
    from dispatcher.core import processes
    from dispatcher.core.locations import Locations
    from dispatcher.wake import hook_wait, hooks

    for name, value in store["env"].items():
        monkeypatch.setenv(name, value)
    real_update = hooks.update_state
    sent: list[int] = []

    def update_then_commit(*args, **kwargs):
        answer = real_update(*args, **kwargs)
        if not sent:  # the first look has read the inbox: now a message lands
            sent.append(send(store))
        return answer

    monkeypatch.setattr(hooks, "update_state", update_then_commit)
    locations = Locations.from_env()
    me = (os.getpid(), processes.start_time(os.getpid()))
    raw = json.dumps({"session_id": "s-gap", "hook_event_name": "Stop"}).encode()
    code, why = hook_wait._watch(locations, locations.private_dir(), "claude", raw, 20, me, "Stop", "claude")
    assert (code, why) == (2, "wake") and sent
    assert f"#{sent[0]} from kimi" in capsys.readouterr().err


SESSION_START = ("claude", "SessionStart", "--agent", "claude", "--wait")


def test_mail_waiting_when_a_session_starts_wakes_it_at_once(store):
    """No SessionStart answer of its own: in the background the first look wakes for an id never
    announced, so the new session's first turn starts by itself."""
    first = send(store)
    result = Hook(store, STREAMING, *SESSION_START, "60", stdin=NEW_SESSION).result()
    assert result["rc"] == 2 and f"#{first} from kimi" in result["stderr"] and result["seconds"] < 20


def test_in_the_foreground_the_session_start_hook_says_nothing_and_leaves(store):
    """``claude -p`` runs it in the foreground: it neither waits nor announces (the first prompt's
    UserPromptSubmit hook names the mail), so the ids stay never announced."""
    send(store)
    result = Hook(store, ("-p", "hi"), *SESSION_START, "60", stdin=NEW_SESSION).result()
    assert (result["rc"], result["stdout"], result["stderr"]) == (0, "", "") and result["seconds"] < 20
    assert not (store["runtime"] / "hooks").exists()  # nothing recorded as announced
