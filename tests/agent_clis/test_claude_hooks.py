"""The hook rung against the real Claude Code 2.1.332 in `-p` mode: hooks written by
`agent-bridge register claude --hooks` into a private config dir, a scripted model on
127.0.0.1, a real store. The model's next request must carry the notice (count, ids,
senders) and never a message's text.

- UserPromptSubmit: a message waits before the prompt; the first request carries the notice.
- Stop: the message arrives while the model answers; the Stop hook blocks once (exit 2),
  the model gets one more request carrying the notice, and the run ends (no loop).
- PostToolUse: the message arrives while the model calls a tool; the request with the
  tool's result carries the notice.
"""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from cli_harness import claude_with_hooks, require_cli, with_model
from harness import acknowledge_all
from models import script
from models.anthropic import AnthropicModel

from dispatcher.bridge.messages import send_message
from dispatcher.store import open_store

pytestmark = pytest.mark.cli

AGENTS = frozenset({"claude", "kimi", "codex"})
SECRET = "canary-" + os.urandom(8).hex()
_SCENARIO = re.compile(r"SCENARIO=(\w+)")


class HookModel(AnthropicModel):
    """Answers by scenario; on its first request of a scenario it may put a message in the store
    (as if kimi sent one while the model was working)."""

    def __init__(self, record: Path, db: Path, read_me: Path) -> None:
        self.db, self.read_me, self.sent = db, read_me, {}
        super().__init__(record)

    def _deliver(self, scenario: str) -> None:
        if scenario in self.sent:
            return
        conn = open_store(self.db)
        try:
            self.sent[scenario] = send_message(
                conn,
                sender="codex",
                recipient="claude",
                text=f"{SECRET} {scenario}",
                agents=AGENTS,
                max_body_bytes=65536,
                kind="notice",
            )["id"]
        finally:
            conn.close()

    def step_for(self, body: dict) -> script.Step:
        turn_text = json.dumps(body.get("messages"))
        found = _SCENARIO.search(turn_text)
        if found is None or not body.get("tools"):
            return script.Final("ok")
        scenario = found.group(1)
        answers = sum(1 for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "assistant")
        if scenario == "stop":
            if answers == 0:
                self._deliver(scenario)
                return script.Final("first answer")
            return script.Final(f"second answer after {answers}")
        if scenario == "post":
            if answers == 0:
                self._deliver(scenario)
                return script.ToolCall("Read", {"file_path": str(self.read_me)})
            return script.Final("done after the tool")
        return script.Final("answered")


@pytest.fixture(scope="module")
def setup(tmp_path_factory, claude_bin):
    made = claude_with_hooks(tmp_path_factory.mktemp("claude-hooks"), claude_bin)
    read_me = made["workspace"] / "notes.txt"
    read_me.write_text("nothing here\n")
    with HookModel(made["root"] / "requests.jsonl", made["db"], read_me) as model:
        yield {**made, "env": with_model(made["env"], model.base_url), "model": model}


def run_claude(setup, scenario: str) -> dict:
    done = subprocess.run(
        [
            str(require_cli("claude")),
            "-p",
            f"Please carry on. SCENARIO={scenario}",
            "--output-format",
            "json",
            "--max-turns",
            "6",
            "--no-session-persistence",
            "--allowedTools",
            "Read",
        ],
        cwd=setup["workspace"],
        env=setup["env"],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    try:
        result = json.loads(done.stdout)
    except ValueError:
        result = {"stdout": done.stdout[-2000:]}
    shown = {k: result.get(k) for k in ("subtype", "is_error", "terminal_reason", "result", "errors", "stdout")}
    assert done.returncode == 0, (shown, done.stderr[-2000:], setup["model"].errors)
    return result


def scenario_requests(model: AnthropicModel, scenario: str) -> list[str]:
    """The main requests of one scenario (the ones that offer tools), as JSON text of their messages."""
    return [
        json.dumps(body.get("messages"))
        for body in model.messages_requests()
        if body.get("tools") and f"SCENARIO={scenario}" in json.dumps(body.get("messages"))
    ]


def test_register_writes_the_four_hooks(setup):
    settings = json.loads((setup["config_dir"] / "settings.json").read_text())
    for event in ("UserPromptSubmit", "PostToolUse", "Stop", "SessionStart"):
        [group] = settings["hooks"][event]
        [entry] = group["hooks"]
        assert f"hook claude {event} --agent claude" in entry["command"]
        assert entry["timeout"] == (3630 if event in ("Stop", "SessionStart") else 10)
    stop = settings["hooks"]["Stop"][0]["hooks"][0]
    # the waiting Stop hook: in `claude -p` Claude runs it in the foreground, where it never waits
    assert stop["asyncRewake"] is True and stop["command"].endswith("--wait 3600")


def test_user_prompt_submit_puts_the_notice_in_the_first_request(setup):
    acknowledge_all(setup["db"])
    conn = open_store(setup["db"])
    try:
        waiting = send_message(
            conn,
            sender="kimi",
            recipient="claude",
            text=f"{SECRET} ups",
            agents=AGENTS,
            max_body_bytes=65536,
            kind="task",
        )["id"]
    finally:
        conn.close()
    result = run_claude(setup, "ups")
    assert result["is_error"] is False
    [first] = scenario_requests(setup["model"], "ups")
    assert f"1 unread for claude: #{waiting} from kimi (task)" in first
    assert "receive_messages" in first and SECRET not in first


def test_stop_blocks_once_and_the_model_gets_one_more_request_with_the_notice(setup):
    acknowledge_all(setup["db"])
    result = run_claude(setup, "stop")
    arrived = setup["model"].sent["stop"]
    requests = scenario_requests(setup["model"], "stop")
    assert len(requests) == 2, [r[-300:] for r in requests]
    assert f"#{arrived}" not in requests[0]
    assert f"1 unread for claude: #{arrived} from codex (notice)" in requests[1]
    assert SECRET not in requests[1]
    assert result["is_error"] is False and result["result"].startswith("second answer")


def test_post_tool_use_puts_the_notice_next_to_the_tool_result(setup):
    acknowledge_all(setup["db"])
    result = run_claude(setup, "post")
    arrived = setup["model"].sent["post"]
    requests = scenario_requests(setup["model"], "post")
    assert len(requests) >= 2
    assert f"#{arrived}" not in requests[0]
    assert f"1 unread for claude: #{arrived} from codex (notice)" in requests[1]
    assert SECRET not in requests[1]
    assert result["is_error"] is False
