"""`agent-bridge show`: a message with its dispatch (outcome, the CLI's status, permission level,
denied tools, attempt files) and its replies, read from the store without writing it."""

import json
import subprocess
import sys

import pytest
from harness import PROJECT

from dispatcher.bridge import messages
from dispatcher.bridge.claims import release_message
from dispatcher.bridge.worker_scope import attempt_claim_owner
from dispatcher.core import clock
from dispatcher.core.config import BridgeConfig
from dispatcher.dispatch.attempts import begin_attempt
from dispatcher.dispatch.outcome import settle
from dispatcher.store import open_store

AGENTS = {"claude", "kimi"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A task whose worker ran at read, was denied Edit and said so, and one never dispatched."""
    root = tmp_path_factory.mktemp("show")
    db = root / "bridge.db"
    conn = open_store(db)
    config = BridgeConfig.model_validate(
        {
            "agents": {
                "claude": {"launcher": "x.sh", "auto": True, "permissions": {"level": "read"}},
                "kimi": {"launcher": "y.sh"},
            }
        }
    )
    task = messages.send_message(
        conn, sender="kimi", recipient="claude", text="add a line to notes.txt", agents=AGENTS, kind="task"
    )["id"]
    begin_attempt(
        conn,
        message_id=task,
        config=config,
        now=clock.now(),
        manual=False,
        supervisor_pid=1,
        supervisor_start=None,
        worker_token="t",
    )
    messages.send_message(
        conn,
        sender="claude",
        recipient="kimi",
        text="blocked: denied Edit: needed to add the line",
        agents=AGENTS,
        kind="result",
        reply_to=task,
        attempt=task,  # written by this attempt's worker: the verdict counts only those
    )
    # An honest stop releases the claim the attempt took for its worker.
    release_message(conn, agent="claude", worker_id=attempt_claim_owner("claude", task), message_id=task)
    settle(
        conn,
        task,
        fallback="failed",
        exit_code=0,
        diagnostics={
            "cli": "claude",
            "cli_status": "ok",
            "cost_usd": 0.0123,
            "input_tokens": 50,
            "output_tokens": 9,
            "denied_tools": ["Edit"],
        },
    )
    quiet = messages.send_message(
        conn, sender="kimi", recipient="claude", text="just a note", agents=AGENTS, kind="notice"
    )["id"]
    conn.close()
    (root / "runtime" / "attempts" / str(task)).mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "AGENT_BRIDGE_DB": str(db), "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime")}
    return {"env": env, "task": task, "quiet": quiet, "db": db, "root": root}


def _show(store, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher", "show", *args],
        cwd=PROJECT,
        env=store["env"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_blocked_task_shows_its_level_the_denied_tool_and_where_its_files_are(store):
    done = _show(store, str(store["task"]))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"message #{store['task']} task kimi -> claude, sent ")
    assert lines[1] == "dispatch: blocked, cli_status ok, permission level read"
    assert lines[2] == "  denied by the CLI: Edit"
    assert "cost $0.0123, tokens 50 in / 9 out" in lines[3]
    assert lines[4] == f"  attempt files: {store['root'] / 'runtime' / 'attempts' / str(store['task'])}"
    assert "add a line to notes.txt" in done.stdout
    assert lines[-1].startswith(f"reply #{store['task'] + 1} result from claude: blocked: denied Edit")


def test_json_carries_the_same_report(store):
    report = json.loads(_show(store, str(store["task"]), "--json").stdout)
    assert report["dispatch"]["outcome"] == "blocked" and report["dispatch"]["denied_tools"] == "Edit"
    assert report["dispatch"]["permission_level"] == "read" and report["replies"][0]["kind"] == "result"


def test_a_message_never_dispatched_says_so(store):
    done = _show(store, str(store["quiet"]))
    assert done.returncode == 0 and "dispatch: none (no headless worker was started for it)" in done.stdout


def test_an_unknown_id_is_one_line_and_exit_2_and_the_store_is_not_written(store):
    before = store["db"].stat().st_mtime_ns
    done = _show(store, "999")
    assert (done.returncode, done.stdout) == (2, "")
    assert (
        done.stderr.strip()
        == f"agent-bridge: message_not_found: there is no message #999 in {store['db']}; check the id."
    )
    assert store["db"].stat().st_mtime_ns == before
    assert _show(store, "0").returncode == 2 and _show(store, "x").stderr.startswith("agent-bridge: usage_error: ")


def test_no_store_yet_is_not_created(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "AGENT_BRIDGE_DB": str(tmp_path / "none.db")}
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "show", "1"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "no store at" in done.stderr and not (tmp_path / "none.db").exists()
