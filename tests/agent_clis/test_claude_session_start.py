"""What Claude Code 2.1.332 does with an ``asyncRewake`` ``SessionStart`` hook, on the real CLI in
a pseudo-terminal (the interactive TUI) with a scripted model on 127.0.0.1: the behaviour the
waiter for a new session (one that has had no turn yet, so no Stop hook has run) relies on, and
then that waiter itself, as ``register claude --hooks`` writes it.

In the first test the hook is a stand-in: it notes when it started, waits a few seconds, then
exits 2 with a line on stderr. Nothing is typed into either session.
"""

import json
import os
import sqlite3
import time

import pytest
from cli_harness import Terminal, claude_with_hooks, require_cli, with_model
from models import script
from models.anthropic import AnthropicModel

from dispatcher.bridge.messages import send_message
from dispatcher.store import open_store

pytestmark = pytest.mark.cli

HOOK_SECONDS = 15  # far longer than the TUI takes to start on a loaded machine
PROMPT = "\u276f".encode()  # the input box's prompt: the TUI is up and takes input


class IdleModel(AnthropicModel):
    def step_for(self, body: dict) -> script.Step:
        return script.Final("noted")


def test_a_session_start_async_rewake_hook_runs_in_the_background_and_wakes_a_session_with_no_turn(tmp_path):
    """Claude Code starts the SessionStart hook in the background (the TUI is up and drawn while
    the hook still runs), and the hook's exit 2 starts a turn by itself in a session nobody typed
    into: the model's first request carries the hook's stderr line."""
    made = claude_with_hooks(tmp_path, require_cli("claude"))
    marks = tmp_path / "marks"
    marks.mkdir()
    token = "SESSIONSTART-" + os.urandom(4).hex()
    hook = tmp_path / "session_start_hook.sh"
    hook.write_text(
        "#!/bin/sh\n"
        f"date +%s.%N > {marks}/started\n"
        f"sleep {HOOK_SECONDS}\n"
        f"date +%s.%N > {marks}/ended\n"
        f"echo '{token} new mail' >&2\n"
        "exit 2\n"
    )
    hook.chmod(0o755)
    settings_path = made["config_dir"] / "settings.json"
    settings = json.loads(settings_path.read_text()) if settings_path.exists() else {}
    settings.setdefault("hooks", {})["SessionStart"] = [
        {"hooks": [{"type": "command", "command": str(hook), "asyncRewake": True, "timeout": 60}]}
    ]
    settings_path.write_text(json.dumps(settings))
    with IdleModel(tmp_path / "requests.jsonl") as model:
        env = with_model(made["env"], model.base_url)
        drawn_at: float | None = None

        def on_draw(screen: bytearray) -> None:
            nonlocal drawn_at
            if drawn_at is None and PROMPT in screen:
                drawn_at = time.time()

        def woken() -> list[str]:
            return [json.dumps(b.get("messages")) for b in model.messages_requests() if b.get("tools")]

        tui = Terminal([str(require_cli("claude"))], cwd=made["workspace"], env=env, on_draw=on_draw)
        try:
            tui.drain_until(lambda: (marks / "started").exists(), 120, "the SessionStart hook to start")
            tui.drain_until(
                lambda: drawn_at is not None or (marks / "ended").exists(), 60, "the prompt or the hook's end"
            )
            tui.drain_until(lambda: any(token in w for w in woken()), 120, "a model request made with no input")
        finally:
            tui.close()
    ended = float((marks / "ended").read_text())
    started = float((marks / "started").read_text())
    print(
        f"prompt drawn {drawn_at - started:.2f} s after the hook started; the hook ended {ended - started:.2f} s after"
    )
    assert drawn_at is not None and drawn_at < ended, "the TUI waited for the SessionStart hook"
    assert any(token in w for w in woken())  # the hook's line reached the model, nothing typed


def _wake_paths(db) -> list[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute("SELECT wake_paths FROM sessions WHERE agent = 'claude'")]
    finally:
        conn.close()


def _hook_waiting(runtime) -> bool:
    directory = runtime / "hooks" / "claude"
    return directory.exists() and any(json.loads(p.read_text() or "{}").get("waiter") for p in directory.glob("*.json"))


def test_a_new_session_that_has_had_no_turn_is_woken_by_mail(tmp_path):
    """The SessionStart hook that `register claude --hooks` writes: in a TUI nobody typed into, it
    marks the session wakeable (wake path `hook`) and waits; a message sent then makes Claude start
    a turn by itself, and the model's request names the message (id, sender) but never its text."""
    made = claude_with_hooks(tmp_path, require_cli("claude"), AGENT_BRIDGE_HOOK_WAIT_SECONDS="120")
    settings = json.loads((made["config_dir"] / "settings.json").read_text())
    [entry] = settings["hooks"]["SessionStart"][0]["hooks"]
    assert entry["asyncRewake"] is True and entry["command"].endswith(
        "hook claude SessionStart --agent claude --wait 120"
    )
    secret = "canary-" + os.urandom(8).hex()
    with IdleModel(tmp_path / "requests.jsonl") as model:
        env = with_model(made["env"], model.base_url)

        def woken() -> list[str]:
            return [json.dumps(b.get("messages")) for b in model.messages_requests() if b.get("tools")]

        tui = Terminal([str(require_cli("claude"))], cwd=made["workspace"], env=env)
        try:
            tui.drain_until(lambda: _hook_waiting(made["runtime"]), 120, "the SessionStart waiter")
            tui.drain_until(lambda: any('"hook"' in p for p in _wake_paths(made["db"])), 120, "the session marked")
            assert woken() == []  # no turn yet
            conn = open_store(made["db"])
            try:
                arrived = send_message(
                    conn,
                    sender="kimi",
                    recipient="claude",
                    text=f"{secret} for a new session",
                    agents=frozenset({"claude", "kimi", "codex"}),
                    max_body_bytes=65536,
                    kind="task",
                )["id"]
            finally:
                conn.close()
            tui.drain_until(lambda: woken() != [], 120, "a model request made with no input")
        finally:
            tui.close()
    [request] = woken()[:1]
    assert f"1 unread for claude: #{arrived} from kimi (task)" in request and secret not in request
