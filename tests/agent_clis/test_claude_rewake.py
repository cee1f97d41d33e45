"""The idle re-wake against the real Claude Code 2.1.332: hooks written by
`agent-bridge register claude --hooks` into a private config dir, a scripted model on 127.0.0.1,
a real store, and a session kept open by streaming input
(`claude -p --input-format stream-json --output-format stream-json --verbose`) or the interactive
TUI on a pseudo-terminal: Claude runs the asyncRewake Stop hook in the background in both.

One user message; the scripted model answers and the turn ends (the session sits idle, the
waiting Stop hook watches the store). THEN a bridge message is sent (a real store write), and
Claude must make a new model request by itself, with no further input, carrying the notice
(id, sender) and never the message's text.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_harness import Terminal, claude_with_hooks, require_cli, with_model
from harness import PROJECT, acknowledge_all
from models import script
from models.anthropic import AnthropicModel

from dispatcher.bridge.messages import send_message
from dispatcher.store import open_store

pytestmark = pytest.mark.cli

AGENTS = frozenset({"claude", "kimi", "codex"})
SECRET = "canary-" + os.urandom(8).hex()


class IdleModel(AnthropicModel):
    """Answers every main request with a short final text (the turn ends at once)."""

    def step_for(self, body: dict) -> script.Step:
        answers = sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")
        return script.Final(f"answer {answers + 1}")


def main_requests(model: AnthropicModel, scenario: str) -> list[str]:
    """The session's main requests (they offer tools), as JSON text of their messages."""
    return [
        json.dumps(body.get("messages"))
        for body in model.messages_requests()
        if body.get("tools") and f"SCENARIO={scenario}" in json.dumps(body.get("messages"))
    ]


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class Session:
    """One streaming-input Claude session; stdout (stream-json events) is read on a thread."""

    def __init__(self, setup: dict, scenario: str) -> None:
        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            [
                str(require_cli("claude")),
                "-p",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--verbose",
                "--max-turns",
                "6",
                "--no-session-persistence",
                "--allowedTools",
                "Read",
            ],
            cwd=setup["workspace"],
            env=setup["env"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.say(f"Hello. SCENARIO={scenario}")

    def _read(self) -> None:
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.events.append(json.loads(line))

    def say(self, text: str) -> None:
        self.proc.stdin.write(json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n")
        self.proc.stdin.flush()

    def results(self) -> list[dict]:
        return [e for e in self.events if e.get("type") == "result"]

    def close(self) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        self.reader.join(timeout=10)
        return self.proc.returncode, err


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    made = claude_with_hooks(
        tmp_path_factory.mktemp("claude-rewake"), require_cli("claude"), AGENT_BRIDGE_HOOK_WAIT_SECONDS="60"
    )
    with IdleModel(made["root"] / "requests.jsonl") as model:
        yield {**made, "env": with_model(made["env"], model.base_url), "model": model}


def hooks_log(setup) -> str:
    path = setup["runtime"] / "hooks.log"
    return path.read_text() if path.exists() else ""


def waiter_started(setup, claude_pid: int) -> bool:
    """A waiting Stop hook under this Claude process holds the slot (its token starts with its pid)."""
    directory = setup["runtime"] / "hooks" / "claude"
    if not directory.exists():
        return False
    mine = {str(p) for p in _children(claude_pid)}
    for path in directory.glob("*.json"):
        try:
            token = json.loads(path.read_text()).get("waiter") or ""
        except ValueError:
            continue
        if token.split("-")[0] in mine:
            return True
    return False


def send(setup, sender: str, kind: str, text: str) -> int:
    conn = open_store(setup["db"])
    try:
        return send_message(
            conn, sender=sender, recipient="claude", text=text, agents=AGENTS, max_body_bytes=65536, kind=kind
        )["id"]
    finally:
        conn.close()


def test_register_writes_the_waiting_stop_hook_with_a_timeout_past_its_wait(setup):
    settings = json.loads((setup["config_dir"] / "settings.json").read_text())
    [group] = settings["hooks"]["Stop"]
    [entry] = group["hooks"]
    assert entry["command"].endswith("hook claude Stop --agent claude --wait 60")
    assert entry["asyncRewake"] is True and entry["timeout"] == 90


def test_an_idle_streaming_session_is_woken_by_new_mail_with_no_further_input(setup):
    acknowledge_all(setup["db"])
    session = Session(setup, "idle")
    try:
        wait_for(lambda: len(session.results()) >= 1, 120, "the first turn to end")
        assert len(main_requests(setup["model"], "idle")) == 1
        wait_for(lambda: waiter_started(setup, session.proc.pid), 60, "the waiting Stop hook to start")
        time.sleep(1.0)  # idle: the turn is over, nothing is typed from here on
        assert len(main_requests(setup["model"], "idle")) == 1
        arrived = send(setup, "kimi", "task", f"{SECRET} please review")
        wait_for(lambda: len(main_requests(setup["model"], "idle")) >= 2, 60, "Claude's own new request")
        requests = main_requests(setup["model"], "idle")
        assert f"1 unread for claude: #{arrived} from kimi (task)" in requests[1]
        assert "receive_messages" in requests[1] and SECRET not in requests[1]
        assert f"#{arrived}" not in requests[0]
        wait_for(lambda: len(session.results()) >= 2, 60, "the woken turn to end")
        assert "agent=claude wake" in hooks_log(setup) and SECRET not in hooks_log(setup)
    finally:
        code, err = session.close()
    assert SECRET not in err


def register_with_wait(setup, seconds: int) -> str:
    env = {**setup["env"], "AGENT_BRIDGE_HOOK_WAIT_SECONDS": str(seconds)}
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "register", "claude", "--agent", "claude", "--hooks"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def log_lines_since(setup, mark: int) -> str:
    return hooks_log(setup)[mark:]


def test_with_no_mail_the_hook_ends_by_itself_at_its_bound_and_later_mail_waits_for_the_next_event(setup):
    assert "upgraded" in register_with_wait(setup, 3)
    mark = len(hooks_log(setup))
    acknowledge_all(setup["db"])
    session = Session(setup, "bound")
    try:
        wait_for(lambda: len(session.results()) >= 1, 120, "the first turn to end")
        # The Stop waiter's own bound (the SessionStart waiter, bound alike, may end at its bound first).
        wait_for(lambda: " Stop agent=claude wait_bound" in log_lines_since(setup, mark), 60, "the hook's bound")
        assert "wait_signal" not in log_lines_since(setup, mark)  # it ended first, Claude did not kill it
        arrived = send(setup, "codex", "notice", f"{SECRET} late")
        time.sleep(3.0)
        assert len(main_requests(setup["model"], "bound")) == 1  # nobody waits any more: no wake
        session.say("And now? SCENARIO=bound")  # the next event announces it (queue-first: nothing lost)
        wait_for(lambda: len(main_requests(setup["model"], "bound")) >= 2, 60, "the next request")
        assert f"#{arrived} from codex (notice)" in main_requests(setup["model"], "bound")[1]
    finally:
        session.close()
        register_with_wait(setup, 60)


def test_claude_kills_the_hook_at_its_timeout_with_sigterm_and_the_hook_ends_silently(setup):
    """What `register` avoids (timeout = wait + 30 s): a timeout shorter than the wait. Claude's
    kill timer applies to background asyncRewake hooks too: SIGTERM, and the hook exits 0."""
    path = setup["config_dir"] / "settings.json"
    original = path.read_text()
    doc = json.loads(original)
    entry = doc["hooks"]["Stop"][0]["hooks"][0]
    entry.update(command=entry["command"].replace("--wait 60", "--wait 40"), timeout=2)
    path.write_text(json.dumps(doc))
    mark = len(hooks_log(setup))
    acknowledge_all(setup["db"])
    session = Session(setup, "timeout")
    try:
        wait_for(lambda: len(session.results()) >= 1, 120, "the first turn to end")
        wait_for(lambda: "wait_signal" in log_lines_since(setup, mark), 30, "Claude's kill at the timeout")
        assert len(main_requests(setup["model"], "timeout")) == 1
    finally:
        session.close()
        path.write_text(original)


def test_ending_the_session_with_sigterm_ends_the_waiting_hook_silently(setup):
    """SIGTERM to Claude (how an SDK or a terminal ends it): Claude ends the hook's process group,
    the hook exits 0 with nothing on stderr, and nothing is left running."""
    mark = len(hooks_log(setup))
    acknowledge_all(setup["db"])
    session = Session(setup, "end")
    try:
        wait_for(lambda: len(session.results()) >= 1, 120, "the first turn to end")
        wait_for(lambda: waiter_started(setup, session.proc.pid), 60, "the waiting Stop hook to start")
        waiter = [p for p in _children(session.proc.pid) if b"--wait" in _cmdline(p)]
        assert waiter, "the waiting hook runs under Claude"
        started = time.monotonic()
        session.proc.send_signal(signal.SIGTERM)
        session.proc.wait(timeout=60)
        took = time.monotonic() - started
    finally:
        session.close()
    wait_for(
        lambda: "wait_signal" in log_lines_since(setup, mark) or "wait_claude_gone" in log_lines_since(setup, mark),
        30,
        "the hook to end",
    )
    assert "wake" not in log_lines_since(setup, mark)
    wait_for(
        lambda: not any(os.path.exists(f"/proc/{p}") and b"--wait" in _cmdline(p) for p in waiter),
        30,
        "no waiting hook left",
    )
    assert took < 30, took


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc/*/stat)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            parents[int(entry)] = int(raw[raw.rfind(b")") + 2 :].split()[1])
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == current]
        found += kids
        frontier += kids
    return found


def test_an_idle_interactive_session_in_a_terminal_is_woken_by_new_mail(setup):
    """The same in the interactive TUI (`claude "<prompt>"` on a pseudo-terminal): nothing is
    typed after the first prompt; the mail starts the next request by itself."""
    acknowledge_all(setup["db"])
    tui = Terminal([str(require_cli("claude")), "Hello. SCENARIO=tui"], cwd=setup["workspace"], env=setup["env"])
    try:
        tui.drain_until(lambda: len(main_requests(setup["model"], "tui")) >= 1, 120, "the first request")
        tui.drain_until(lambda: waiter_started(setup, tui.proc.pid), 60, "the waiting Stop hook")
        arrived = send(setup, "kimi", "task", f"{SECRET} from the tui test")
        tui.drain_until(lambda: len(main_requests(setup["model"], "tui")) >= 2, 60, "Claude's own new request")
        woken = main_requests(setup["model"], "tui")[1]
        assert f"1 unread for claude: #{arrived} from kimi (task)" in woken and SECRET not in woken
    finally:
        tui.close()
