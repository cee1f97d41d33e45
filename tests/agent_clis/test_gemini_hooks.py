"""The hook rung against the real Gemini CLI 0.61.0 (`gemini -p`): BeforeAgent/AfterAgent hooks
written by `agent-bridge register gemini --hooks` into a private GEMINI_CLI_HOME, the scripted
Gemini API on 127.0.0.1, a real store.

- BeforeAgent (Gemini's UserPromptSubmit): a message waits; the first main request carries the notice.
- AfterAgent (Gemini's Stop): the message arrives while the model answers; the hook blocks once
  (decision "block"), Gemini sends one more request carrying the notice, and the run ends.
"""

import json
import os
import subprocess
import sys

import pytest
from cli_harness import require_cli
from harness import PROJECT, acknowledge_all, write_config
from models import gemini as gemini_model
from models.gemini import GeminiServer

from dispatcher.bridge.messages import send_message
from dispatcher.store import open_store

pytestmark = pytest.mark.cli

AGENTS = frozenset({"claude", "kimi", "gemini"})
SECRET = "canary-" + os.urandom(8).hex()
TASK = "Message #1 from kimi is a task for you.\nMODE=silent\nSCENARIO={}"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    gemini = require_cli("gemini")
    root = tmp_path_factory.mktemp("gemini-hooks")
    db = root / "state" / "bridge.db"
    open_store(db).close()
    (root / "ws").mkdir()
    home = root / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps(
            {
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "privacy": {"usageStatisticsEnabled": False},
                "telemetry": {"enabled": False},
                "general": {"maxAttempts": 1, "enableAutoUpdate": False},
                "model": {"skipNextSpeakerCheck": True},
            }
        )
    )
    config = write_config(
        root / "config.json",
        agents={name: {"auto": False, "launcher": f"launchers/{name}_headless.sh"} for name in AGENTS},
    )
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI_", "GOOGLE_", "AGENT_"))}
    env = {
        **inherited,
        "HOME": str(home),
        "GEMINI_CLI_HOME": str(home),
        "TMPDIR": str(root),
        "AGENT_BRIDGE_DB": str(db),
        "AGENT_BRIDGE_CONFIG": str(config),
        "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "register", "gemini", "--agent", "gemini", "--hooks"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    sent: dict[str, int] = {}
    original = gemini_model.answer

    def answer(body: dict) -> dict:  # the message arrives while the model works on the Stop scenario
        if "SCENARIO=stop" in json.dumps(body.get("contents")) and "stop" not in sent:
            conn = open_store(db)
            try:
                sent["stop"] = send_message(
                    conn,
                    sender="claude",
                    recipient="gemini",
                    text=f"{SECRET} stop",
                    agents=AGENTS,
                    max_body_bytes=65536,
                    kind="notice",
                )["id"]
            finally:
                conn.close()
        return original(body)

    gemini_model.answer = answer
    try:
        with GeminiServer(root / "requests.jsonl") as model:
            env.update({"GOOGLE_GEMINI_BASE_URL": model.base_url, "GEMINI_API_KEY": "scripted-key"})
            yield {"env": env, "model": model, "db": db, "root": root, "gemini": gemini, "sent": sent}
    finally:
        gemini_model.answer = original


def run_gemini(setup, scenario: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [
            str(setup["gemini"]),
            "--skip-trust",
            "--allowed-mcp-server-names",
            "none",
            "-o",
            "json",
            "-p",
            TASK.format(scenario),
        ],
        cwd=setup["root"] / "ws",
        env=setup["env"],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    return done


def main_requests(setup, scenario: str) -> list[str]:
    return [
        json.dumps(r["body"].get("contents"))
        for r in setup["model"].requests()
        if r.get("method") == "POST"
        and "streamGenerateContent" in r.get("path", "")
        and f"SCENARIO={scenario}" in json.dumps(r["body"].get("contents"))
    ]


def test_before_agent_puts_the_notice_in_the_first_request(setup):
    conn = open_store(setup["db"])
    try:
        waiting = send_message(
            conn,
            sender="kimi",
            recipient="gemini",
            text=f"{SECRET} ups",
            agents=AGENTS,
            max_body_bytes=65536,
            kind="task",
        )["id"]
    finally:
        conn.close()
    run_gemini(setup, "ups")
    first = main_requests(setup, "ups")[0]
    assert f"1 unread for gemini: #{waiting} from kimi (task)" in first and SECRET not in first


def test_after_agent_blocks_once_and_gemini_sends_one_more_request_with_the_notice(setup):
    acknowledge_all(setup["db"])
    run_gemini(setup, "stop")
    arrived = setup["sent"]["stop"]
    requests = main_requests(setup, "stop")
    assert len(requests) == 2, len(requests)
    assert f"#{arrived}" not in requests[0]
    assert f"1 unread for gemini: #{arrived} from claude (notice)" in requests[1] and SECRET not in requests[1]
