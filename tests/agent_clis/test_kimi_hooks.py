"""The hook rung against the real Kimi Code 2.1.0 (Node 22) in `-p` mode: the UserPromptSubmit
hook written by `agent-bridge register kimi --hooks` into a private KIMI_CODE_HOME, a scripted
Anthropic-style model on 127.0.0.1 (``KIMI_MODEL_PROVIDER_TYPE=anthropic``), a real store.
The first model request carries the notice (count, ids, senders) and never a message's text."""

import json
import os
import subprocess
import sys

import pytest
from cli_harness import require_cli
from harness import PROJECT, write_config
from models.anthropic import AnthropicModel

from dispatcher.bridge.messages import send_message
from dispatcher.store import open_store
from dispatcher.wake.hooks import session_key

pytestmark = pytest.mark.cli

SECRET = "canary-" + os.urandom(8).hex()


def test_user_prompt_submit_puts_the_notice_in_front_of_kimis_model(tmp_path):
    kimi_bin, node = require_cli("kimi"), require_cli("node22")
    db = tmp_path / "state" / "bridge.db"
    conn = open_store(db)
    try:
        waiting = send_message(
            conn,
            sender="claude",
            recipient="kimi",
            text=SECRET,
            agents=frozenset({"claude", "kimi"}),
            max_body_bytes=65536,
            kind="task",
        )["id"]
    finally:
        conn.close()
    home = tmp_path / "home"
    (home / ".kimi-code").mkdir(parents=True)
    (tmp_path / "ws").mkdir()
    config = write_config(tmp_path / "config.json")
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "AGENT_"))}
    env = {
        **inherited,
        "HOME": str(home),
        "KIMI_CODE_HOME": str(home / ".kimi-code"),
        "TMPDIR": str(tmp_path),
        "AGENT_BRIDGE_DB": str(db),
        "AGENT_BRIDGE_CONFIG": str(config),
        "AGENT_BRIDGE_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "register", "kimi", "--agent", "kimi", "--hooks"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    with AnthropicModel(tmp_path / "requests.jsonl") as model:
        run = subprocess.run(
            [str(node), os.path.realpath(kimi_bin), "-p", "hello there", "--output-format", "stream-json"],
            cwd=tmp_path / "ws",
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
            env={
                **env,
                "KIMI_MODEL_PROVIDER_TYPE": "anthropic",
                "KIMI_MODEL_BASE_URL": model.base_url,
                "KIMI_MODEL_NAME": "scripted-model",
                "KIMI_MODEL_API_KEY": "scripted-key",
                "KIMI_DISABLE_TELEMETRY": "1",
                "KIMI_CODE_NO_AUTO_UPDATE": "1",
                "KIMI_LOOP_MAX_ATTEMPTS_PER_STEP": "1",
            },
        )
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-2000:])
        first = json.dumps(model.messages_requests()[0]["messages"])
    assert '<hook_result hook_event=\\"UserPromptSubmit\\">' in first
    assert f"1 unread for kimi: #{waiting} from claude (task)" in first and "receive_messages" in first
    assert SECRET not in first and SECRET not in run.stdout
    # Kimi hands the hook its session id: the state is kept under that session's name.
    session = next(
        json.loads(line)["session_id"] for line in run.stdout.splitlines() if '"session.resume_hint"' in line
    )
    assert (tmp_path / "runtime" / "hooks" / "kimi" / f"{session_key(session)}.json").is_file()
