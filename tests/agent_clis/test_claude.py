"""Claude Code 2.1.332 end to end, on a SQLite file and on a PostgreSQL store: the real
listener, the real launchers/claude_headless.sh, the real pinned binary and the real worker
server.py, driven by the scripted model on 127.0.0.1 (tests/models/anthropic.py). A kimi
session over MCP stdio sends the tasks.

One listener and one model server per module; the three runs (succeed, block, silent) go
back to back in one module fixture, and each test asserts one part of what they left."""

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_harness import claude_worker_env, without_cli_settings
from dispatch_harness import attempt, cli, end_listeners, notices_for, query, start_listener, status, wait_until
from harness import PROJECT, McpAgent, write_config
from models import script
from models.anthropic import AnthropicModel, offered_tools

pytestmark = [pytest.mark.cli, pytest.mark.both_backends]

PROVEN_ON_POSTGRES = pytest.mark.postgres_proven_by(
    "test_a_task_comes_back_as_the_scripted_result_and_succeeds_everywhere",
    "a real Claude worker's result, usage and cost through a PostgreSQL store; the caps are the CLI's stream and the supervisor's rule, the same on either store",
)

LAUNCHER = PROJECT / "launchers" / "claude_headless.sh"
WORKER_TOOLS = script.WORKER_TOOLS
RUN_DEADLINE = 150.0
CANARY = "canary-" + os.urandom(12).hex()


@dataclass
class Run:
    task: int
    attempt: dict  # the dispatch_attempts row
    status: dict  # `listener status` right after this attempt
    progress: str  # `listener progress --once`
    message: dict  # get_message(task) as the sender sees it
    request_seen: bool  # the request file held the canary while the worker ran


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # Outside the bridge root: it records the prompts, so the canary is expected in it.
    with AnthropicModel(tmp_path_factory.mktemp("anthropic") / "requests.jsonl") as server:
        yield server


@pytest.fixture(scope="module")
def claude_env(env, bridge_root, model, claude_bin) -> dict[str, str]:
    """The bridge env plus Claude's: the scripted endpoint, fail-fast retries, and a private
    HOME, config dir and TMPDIR inside the bridge root (all scanned for the canary)."""
    write_config(
        Path(env["AGENT_BRIDGE_CONFIG"]),
        agents={
            "claude": {"auto": True, "launcher": str(LAUNCHER), "worker_timeout_seconds": 120},
            "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
        },
    )
    return claude_worker_env(env, bridge_root, model.base_url, claude_bin)


@pytest.fixture(scope="module")
def listener(claude_env):
    # The user's own Claude settings (a login, a base URL) must not leak into the test's CLI.
    proc = start_listener(claude_env, inherited=without_cli_settings(dict(os.environ)))
    try:
        wait_until(lambda: status(claude_env)["stage"] == "idle", what="listener idle")
        yield proc
    finally:
        end_listeners([proc])


@pytest.fixture(scope="module")
def runs(claude_env, db_path, listener) -> dict[str, Run]:
    """The three scripted modes, one task each, back to back through the one listener."""
    sender = McpAgent("kimi", claude_env)
    done: dict[str, Run] = {}
    try:
        sender.wait_ready()
        for mode in ("succeed", "block", "silent"):
            text = f"Please handle {CANARY} for me.\nMODE={mode}\n"
            task = sender.ok("send_message", recipient="claude", text=text, kind="task")["id"]
            row, seen = _finished_peeking(claude_env, db_path, task)
            after = wait_until(
                lambda t=task: (s := status(claude_env))["last"] and s["last"]["message_id"] == t and s,
                what=f"listener status of #{task}",
            )
            progress = cli(claude_env, "listener", "progress", "--agent", "claude", "--once")
            assert progress.returncode == 0, progress.stderr
            done[mode] = Run(task, row, after, progress.stdout, sender.ok("get_message", message_id=task), seen)
    finally:
        sender.close()
    return done


def _finished_peeking(claude_env: dict, db_path: Path, task: int) -> tuple[dict, bool]:
    """The finished attempt row, and whether the private request file was seen holding the
    canary meanwhile. On a timeout, the worker's own log and result say why."""
    attempt_dir = Path(claude_env["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts" / str(task)
    seen = []

    def finished():
        with contextlib.suppress(OSError):
            seen.append(CANARY in (attempt_dir / "request.md").read_text())
        row = attempt(db_path, task)
        return row if row and row["state"] == "finished" else None

    try:
        return wait_until(finished, RUN_DEADLINE, what=f"attempt on #{task} to finish"), any(seen)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_worker_files(attempt_dir)}") from None


def _worker_files(attempt_dir: Path) -> str:
    parts = []
    for name in ("worker.log", "claude-result.json"):
        try:
            parts.append(f"--- {name}\n{(attempt_dir / name).read_text()[-4000:]}")
        except OSError as exc:
            parts.append(f"--- {name}: {exc}")
    return "\n".join(parts)


def diagnostics(run: Run) -> dict:
    return json.loads(run.attempt["diagnostics"] or "{}")


def test_a_task_comes_back_as_the_scripted_result_and_succeeds_everywhere(runs, db_path):
    run = runs["succeed"]
    results = [r for r in _replies(db_path, run.task) if r["kind"] == "result"]
    assert [(r["sender"], r["origin"], r["text"]) for r in results] == [
        ("claude", "agent", f"done: handled message {run.task}")
    ]
    assert (run.attempt["outcome"], run.attempt["error_kind"], run.attempt["exit_code"]) == ("succeeded", None, 0)
    assert run.message["dispatch"]["outcome"] == "succeeded"
    assert run.message["acknowledged_at"] is not None
    assert run.status["last"]["result"] == "succeeded"
    diag = diagnostics(run)
    # The named allowlist really let the worker tools through (no denial), and Claude priced the run.
    assert diag["result_json"] == "ok" and diag["is_error"] is False and diag["subtype"] == "success"
    assert diag["terminal_reason"] == "completed" and diag["permission_denials_count"] == 0
    assert diag["num_turns"] >= 4 and diag["total_cost_usd"] > 0


def test_a_block_task_ends_blocked(runs, db_path):
    run = runs["block"]
    results = [r for r in _replies(db_path, run.task) if r["kind"] == "result"]
    assert [r["text"] for r in results] == ["blocked: the scripted model was told to stop here"]
    assert run.attempt["outcome"] == "blocked" and run.message["dispatch"]["outcome"] == "blocked"
    assert run.status["last"]["result"] == "blocked"
    assert run.message["acknowledged_at"] is None  # released, not marked read
    assert diagnostics(run)["permission_denials_count"] == 0


def test_a_silent_run_fails_without_evidence_and_one_payload_free_notice(runs, db_path):
    run = runs["silent"]
    assert (run.attempt["outcome"], run.attempt["error_kind"]) == ("failed", "no_evidence")
    assert run.message["dispatch"]["outcome"] == "failed" and run.status["last"]["result"] == "failed"
    assert diagnostics(run)["is_error"] is False  # Claude itself saw nothing wrong
    replies = _replies(db_path, run.task)
    assert [(r["kind"], r["origin"], r["recipient"]) for r in replies] == [("notice", "system", "kimi")]
    assert len(notices_for(db_path, run.task)) == 1
    assert CANARY not in replies[0]["text"] and "MODE" not in replies[0]["text"]


def test_the_model_was_offered_only_the_bridge_worker_tools(runs, model):
    allowed = {f"mcp__agent_bridge__{tool}" for tool in WORKER_TOOLS} | {"ToolSearch"}
    bodies = model.messages_requests()
    task_bodies = [b for b in bodies if CANARY in json.dumps(b.get("messages"))]
    assert len(task_bodies) >= 4 + 3 + 1  # every scripted step was one model request
    offered = {name for body in bodies for name in offered_tools(body)}
    assert offered <= allowed, f"offered beyond the worker tools: {sorted(offered - allowed)}"
    assert {
        f"mcp__agent_bridge__{t}" for t in ("claim_message", "send_message", "mark_read", "release_message")
    } <= offered
    assert model.errors == []
    assert "dummy" not in model.record_path.read_text()  # the API key header is not recorded


def test_the_canary_is_left_in_no_file_log_status_or_diagnostics_outside_the_attempt_dir(
    runs, bridge_root, claude_env, db_path, model
):
    assert CANARY in model.record_path.read_text()  # it really went through Claude to the model
    assert any(run.request_seen for run in runs.values())  # ... from the private request file
    runtime = Path(claude_env["AGENT_BRIDGE_RUNTIME_DIR"])
    for run in runs.values():
        attempt_dir = runtime / "attempts" / str(run.task)
        assert attempt_dir.is_dir() and not (attempt_dir / "request.md").exists()
        assert (attempt_dir / "claude-result.json").is_file()
        row = attempt(db_path, run.task)
        assert CANARY not in json.dumps(row) and CANARY not in json.dumps(run.status)
        assert CANARY not in run.progress
    state = Path(claude_env["AGENT_BRIDGE_DB"]).parent
    scanned, found = 0, []
    for path in bridge_root.rglob("*"):
        if path.is_symlink() or not path.is_file() or path.parent == state:  # the store holds the task
            continue
        scanned += 1
        if CANARY.encode() in path.read_bytes():
            found.append(str(path.relative_to(bridge_root)))
    # The one copy outside the store: Claude's raw stream-json (it echoes tool results) in the
    # private attempt directory, which retention removes; never a log, status or config file.
    assert all(re.fullmatch(r"runtime/attempts/\d+/claude-result\.json", name) for name in found), found
    assert scanned > 0 and (runtime / "dispatcher.log").is_file()
    assert any(Path(claude_env["CLAUDE_CONFIG_DIR"]).iterdir())  # Claude did write its own files there
    assert CANARY not in json.dumps(status(claude_env))


def _replies(db_path: Path, task: int) -> list[dict]:
    return [dict(r) for r in query(db_path, "SELECT * FROM messages WHERE reply_to = ? ORDER BY id", (task,))]


@PROVEN_ON_POSTGRES
def test_a_per_task_cost_cap_stops_claude_and_is_its_own_outcome(runs, claude_env, db_path):
    """max_cost_usd_per_task reaches --max-budget-usd; Claude stops between turns (past the cap:
    the overshoot is recorded) and the attempt ends budget_exceeded, with one system notice."""
    config = Path(claude_env["AGENT_BRIDGE_CONFIG"])
    original = config.read_text()
    capped = json.loads(original)
    capped["agents"]["claude"]["max_cost_usd_per_task"] = 0.01  # one scripted turn costs about that
    staged = config.with_suffix(".staged")
    staged.write_text(json.dumps(capped))
    os.replace(staged, config)  # atomically: the listener never reads half a file
    sender = McpAgent("kimi", claude_env)
    try:
        sender.wait_ready()
        # The listener picks the new config up before it looks at the store again.
        wait_until(lambda: status(claude_env)["stage"] == "idle", what="listener idle")
        task = sender.ok("send_message", recipient="claude", text="A costly task.\nMODE=succeed\n", kind="task")["id"]
        row, _ = _finished_peeking(claude_env, db_path, task)
        dispatch = sender.ok("get_message", message_id=task)["dispatch"]
    finally:
        sender.close()
        staged.write_text(original)
        os.replace(staged, config)
    assert (row["outcome"], row["cli_status"], row["max_cost_usd"]) == ("budget_exceeded", "budget_exceeded", 0.01)
    assert row["cost_usd"] > 0.01 and row["cost_overshoot_usd"] == pytest.approx(row["cost_usd"] - 0.01)
    assert dispatch["outcome"] == "budget_exceeded" and dispatch["cost_usd"] == row["cost_usd"]
    notices = notices_for(db_path, task)
    assert len(notices) == 1 and "budget_exceeded" in notices[0]["text"] and "costly" not in notices[0]["text"]


@PROVEN_ON_POSTGRES
def test_a_runaway_worker_past_its_token_cap_is_ended_as_budget_exceeded_with_one_notice(runs, claude_env, db_path):
    """Claude's stream-json reports each API message's usage as it goes: the supervisor follows
    it and ends the worker once it passes max_tokens_per_task, long before its loop would end."""
    cap = 5_000_000
    config = Path(claude_env["AGENT_BRIDGE_CONFIG"])
    original = config.read_text()
    capped = json.loads(original)
    capped["agents"]["claude"]["max_tokens_per_task"] = cap
    staged = config.with_suffix(".staged")
    staged.write_text(json.dumps(capped))
    os.replace(staged, config)
    sender = McpAgent("kimi", claude_env)
    try:
        sender.wait_ready()
        wait_until(lambda: status(claude_env)["stage"] == "idle", what="listener idle")
        text = f"A runaway task.\nMODE=spend\nUSAGE={2 * cap}\n"
        task = sender.ok("send_message", recipient="claude", text=text, kind="task")["id"]
        row, _ = _finished_peeking(claude_env, db_path, task)
    finally:
        sender.close()
        staged.write_text(original)
        os.replace(staged, config)
    assert (row["outcome"], row["error_kind"], row["cli_status"]) == (
        "budget_exceeded",
        "max_tokens_per_task",
        "budget_exceeded",
    ), dict(row)
    assert row["max_tokens"] == cap and row["token_overshoot"] > 0
    notices = notices_for(db_path, task)
    assert len(notices) == 1 and f"max_tokens_per_task {cap}" in notices[0]["text"]
