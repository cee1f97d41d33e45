"""The hook rung against the real Codex 0.171.0 (`codex exec`): hooks.json and
`[features] hooks = true` written by `agent-bridge register codex --hooks` into a private
CODEX_HOME, a scripted Responses model on 127.0.0.1, a real store. Codex runs hooks only once
they are trusted (reviewed in its TUI); `exec --dangerously-bypass-hook-trust` stands in for that.

- UserPromptSubmit: a message waits; the first request carries the notice (a developer message).
- Stop: the message arrives while the model answers; the Stop hook blocks once (exit 2), Codex
  sends one more request carrying the notice as a `<hook_prompt>`, and the run ends. Codex has no
  cap on Stop blocks of its own: without the once-per-id rule this would loop for ever.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import require_cli
from harness import PROJECT, acknowledge_all, write_config
from models.openai_responses import ResponsesServer

from dispatcher.bridge.messages import send_message
from dispatcher.store import open_store

pytestmark = pytest.mark.cli

AGENTS = frozenset({"claude", "kimi", "codex"})
SECRET = "canary-" + os.urandom(8).hex()
TASK = "Message #1 from kimi is a task for you.\nMODE=silent\nSCENARIO={}"


class HookResponses(ResponsesServer):
    def __init__(self, recording: Path, db: Path) -> None:
        self.db, self.sent = db, {}
        super().__init__(recording)

    def respond(self, body: dict) -> list[dict]:
        text = json.dumps(body.get("input"))
        if "SCENARIO=stop" in text and "stop" not in self.sent:
            conn = open_store(self.db)
            try:
                self.sent["stop"] = send_message(
                    conn,
                    sender="claude",
                    recipient="codex",
                    text=f"{SECRET} stop",
                    agents=AGENTS,
                    max_body_bytes=65536,
                    kind="notice",
                )["id"]
            finally:
                conn.close()
        return super().respond(body)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    codex = require_cli("codex")
    root = tmp_path_factory.mktemp("codex-hooks")
    db = root / "state" / "bridge.db"
    open_store(db).close()
    (root / "ws").mkdir()
    config = write_config(
        root / "config.json",
        agents={name: {"auto": False, "launcher": f"launchers/{name}_headless.sh"} for name in AGENTS},
    )
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("CODEX_", "OPENAI_", "AGENT_"))}
    env = {
        **inherited,
        "HOME": str(root / "home"),
        "CODEX_HOME": str(root / "home" / ".codex"),
        "TMPDIR": str(root),
        "AGENT_BRIDGE_DB": str(db),
        "AGENT_BRIDGE_CONFIG": str(config),
        "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
        "FAKE_KEY": "scripted",
    }
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "register", "codex", "--agent", "codex", "--hooks"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with HookResponses(root / "requests.jsonl", db) as model:
        yield {"env": env, "model": model, "db": db, "root": root, "codex": codex}


def run_codex(setup, scenario: str) -> subprocess.CompletedProcess:
    base = setup["model"].base_url
    overrides = [
        'model_provider="fake"',
        'model_providers.fake.name="fake"',
        f'model_providers.fake.base_url="{base}"',
        'model_providers.fake.wire_api="responses"',
        "model_providers.fake.supports_websockets=false",
        "model_providers.fake.request_max_retries=0",
        "model_providers.fake.stream_max_retries=0",
        'model_providers.fake.env_key="FAKE_KEY"',
        "mcp_servers.agent_bridge.enabled=false",
    ]  # the hook is under test here, not the server
    args = [
        str(setup["codex"]),
        "exec",
        "--dangerously-bypass-hook-trust",
        "--skip-git-repo-check",
        "--ephemeral",
        "-m",
        "scripted-model",
    ]
    for item in overrides:
        args += ["-c", item]
    done = subprocess.run(
        [*args, TASK.format(scenario)],
        cwd=setup["root"] / "ws",
        env=setup["env"],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    return done


def scenario_inputs(setup, scenario: str) -> list[str]:
    return [
        json.dumps(r["body"].get("input"))
        for r in setup["model"].requests()
        if r["method"] == "POST" and f"SCENARIO={scenario}" in json.dumps(r["body"].get("input"))
    ]


def test_user_prompt_submit_puts_the_notice_in_the_first_request(setup):
    conn = open_store(setup["db"])
    try:
        waiting = send_message(
            conn,
            sender="kimi",
            recipient="codex",
            text=f"{SECRET} ups",
            agents=AGENTS,
            max_body_bytes=65536,
            kind="task",
        )["id"]
    finally:
        conn.close()
    run_codex(setup, "ups")
    first = scenario_inputs(setup, "ups")[0]
    assert f"1 unread for codex: #{waiting} from kimi (task)" in first and SECRET not in first
    assert '"role": "developer"' in first


def test_stop_blocks_once_and_codex_sends_one_more_request_with_the_notice(setup):
    acknowledge_all(setup["db"])
    run_codex(setup, "stop")
    arrived = setup["model"].sent["stop"]
    requests = scenario_inputs(setup, "stop")
    assert len(requests) == 2, len(requests)
    assert f"#{arrived}" not in requests[0]
    assert "<hook_prompt" in requests[1] and f"1 unread for codex: #{arrived} from claude (notice)" in requests[1]
    assert SECRET not in requests[1]
