"""Kimi Code 2.1.0 end to end: the real listener, the real launcher (launchers/kimi_headless.sh),
the real pinned binary on Node 22, the real server.py over stdio, and a scripted Anthropic
Messages server on 127.0.0.1 (``KIMI_MODEL_PROVIDER_TYPE=anthropic``).

Kimi takes its prompt only from argv, so the launcher's argv names the request file and the
model first reads it with Kimi's ``Read`` tool; ``KimiModel`` (tests/models/kimi.py) adds that
step in front of the API-neutral script. One listener, one model server and one sender serve
the module's cases. A result and a failure's notice also go through a PostgreSQL store; the
other cases are Kimi's own behaviour, which reaches the store the same way.
"""

import json
import os
import re
from pathlib import Path

import pytest
from cli_harness import require_cli
from dispatch_harness import notices_for, start_listener, status, wait_finished, wait_until
from harness import PROJECT, McpAgent, bridge_env, on_backend, write_config
from models import script
from models.anthropic import offered_tools, to_turn
from models.kimi import KimiModel

pytestmark = [pytest.mark.cli, pytest.mark.both_backends]
KIMI_ONLY = "Kimi's own behaviour; the store is reached as in the result and notice cases, which run on both"

LAUNCHER = PROJECT / "launchers" / "kimi_headless.sh"
WORKER_TOOLS = script.WORKER_TOOLS
# Read is the one non-bridge tool: Kimi can only be told where the task is (argv), not given it.
OFFERED = {"Read", *(f"mcp__agent_bridge__{tool}" for tool in WORKER_TOOLS)}
DEADLINE = 180.0
TOKEN_CAP = 5_000_000  # far above what a scripted task uses; a USAGE= line passes it
ATTEMPTS = 2  # Kimi's attempts per model request (default 10, about 140 s of backoff)
# The user's config.toml (linked into each worker's private home): a failing model ends the
# run after ATTEMPTS attempts, in seconds.
USER_CONFIG = f"[loop_control]\nmax_attempts_per_step = {ATTEMPTS}\n"
_WIRE = re.compile(r"kimi-code-home/sessions/[^/]+/session_[^/]+/agents/main/wire\.jsonl")


def canary(label: str) -> str:
    return f"KIMI-CANARY-{label}-{os.urandom(6).hex()}"


@pytest.fixture(scope="module")
def kimi_run(tmp_path_factory, backend, request):
    """The whole set-up: store, config, a user HOME and TMPDIR of its own, the model server,
    the kimi listener and a claude sender over MCP stdio."""
    kimi_bin, node = require_cli("kimi"), require_cli("node22")
    root = tmp_path_factory.mktemp(f"kimi-e2e-{backend}")
    config = write_config(
        root / "config.json",
        {
            "claude": {"auto": False, "launcher": "launchers/claude_headless.sh"},
            "kimi": {
                "auto": True,
                "launcher": str(LAUNCHER),
                "worker_timeout_seconds": 150,
                "max_tokens_per_task": TOKEN_CAP,
            },
        },
    )
    # The workspace (the worker's cwd) is not where the request file is: Read must reach outside it.
    env = on_backend(bridge_env(root, config), backend, request)  # (its workspace: root / "workspace", made)
    home, tmp = root / "user-home", root / "tmp"
    user_kimi = home / ".kimi-code"  # the user's own Kimi home: the launcher links into it
    (user_kimi / "credentials").mkdir(parents=True)
    (user_kimi / "config.toml").write_text(USER_CONFIG)
    (user_kimi / "device_id").write_text("00000000-0000-4000-8000-000000000000")
    tmp.mkdir()
    model_dir = tmp_path_factory.mktemp("kimi-model")  # the model's own recording (holds prompts)
    with KimiModel(model_dir / "requests.jsonl") as model:
        listener_env = {
            **env,
            "HOME": str(home),
            "TMPDIR": str(tmp),
            "KIMI_BIN": str(kimi_bin),
            "KIMI_NODE": str(node),
            "KIMI_MODEL_PROVIDER_TYPE": "anthropic",
            "KIMI_MODEL_BASE_URL": model.base_url,
            "KIMI_MODEL_NAME": "scripted-model",
            "KIMI_MODEL_API_KEY": "scripted-key",
        }
        listener = start_listener(listener_env, agent="kimi")
        sender = McpAgent("claude", env)
        try:
            sender.wait_ready()
            run = {
                "root": root,
                "env": env,
                "home": home,
                "home_before": tree(home),
                "tmp": tmp,
                "model": model,
                "sender": sender,
                "runtime": Path(env["AGENT_BRIDGE_RUNTIME_DIR"]),
                "db": Path(env["AGENT_BRIDGE_DB"]) if backend == "sqlite" else env["AGENT_BRIDGE_DB"],
                "canaries": [],
            }
            yield run
        finally:
            sender.close()
            if listener.poll() is None:
                listener.terminate()
            out, err = listener.communicate(timeout=60)
        assert model.errors == []
        assert not [text for text in run["canaries"] if text in out or text in err]  # the listener's own output


def send_task(run: dict, text: str) -> int:
    return run["sender"].ok("send_message", recipient="kimi", kind="task", text=text)["id"]


def attempt_dir(run: dict, message_id: int) -> Path:
    return run["runtime"] / "attempts" / str(message_id)


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under root: link target or bytes, and mtime (to see that nothing changed)."""
    return {
        p.relative_to(root).as_posix(): (
            os.readlink(p) if p.is_symlink() else p.is_dir() or p.read_bytes(),
            p.lstat().st_mtime_ns,
        )
        for p in sorted(root.rglob("*"))
    }


def files_containing(root: Path, needle: str) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and needle.encode() in path.read_bytes():
            found.append(path)
    return found


def requests_for(run: dict, message_id: int) -> list[dict]:
    """The Messages requests of the run on this message (its instruction names the id)."""
    marker = f"working on message {message_id}."
    return [body for body in run["model"].messages_requests() if marker in to_turn(body).prompt]


def check_private(run: dict, message_id: int, text: str) -> None:
    """Outside the store, the task text is only in the private attempt directory, and there
    only in Kimi's raw stream and its session's wire.jsonl: in no log, progress,
    status or diagnostics file; the user's HOME (with its Kimi home) is left as it was and
    TMPDIR and the workspace stay empty."""
    run["canaries"].append(text)
    attempt = attempt_dir(run, message_id)
    store = run["db"].parent if isinstance(run["db"], Path) else None  # a PostgreSQL store has no files here
    outside = [p for p in files_containing(run["root"], text) if attempt not in p.parents and store not in p.parents]
    assert outside == []
    assert not (attempt / "request.md").exists()
    inside = sorted(p.relative_to(attempt).as_posix() for p in files_containing(attempt, text))
    assert "kimi-stream.jsonl" in inside  # the Read result: the stream does hold it, privately
    for name in inside:
        assert name == "kimi-stream.jsonl" or _WIRE.fullmatch(name), name
    assert tree(run["home"]) == run["home_before"]  # the user's HOME and Kimi home: untouched
    assert list(run["tmp"].iterdir()) == [] and list((run["root"] / "workspace").iterdir()) == []
    assert text not in json.dumps(status(run["env"], "kimi"))


def offered_only_worker_tools(run: dict, message_id: int) -> list[dict]:
    bodies = requests_for(run, message_id)
    assert bodies
    for body in bodies:
        assert set(offered_tools(body)) == OFFERED
    return bodies


def finish(run: dict, mode: str, extra: str = "") -> tuple[int, str, dict]:
    """Send a task with a fresh canary in its text and wait for its attempt's verdict."""
    text = canary(mode)
    task = send_task(run, f"Summarise {text}.\nMODE={mode}\n{extra}")
    return task, text, wait_finished(run["db"], task, DEADLINE)


def diagnostics(done: dict) -> dict:
    return json.loads(done["diagnostics"])


def last_status(run: dict, task: int) -> dict:
    return wait_until(
        lambda: (last := status(run["env"], "kimi")["last"]) and last["message_id"] == task and last,
        DEADLINE,
        what=f"listener status to show message #{task}",
    )


def test_a_task_comes_back_as_its_result_and_the_attempt_succeeded(kimi_run):
    task, text, done = finish(kimi_run, "succeed")
    assert (done["outcome"], done["error_kind"], done["exit_code"]) == ("succeeded", None, 0), done
    message = kimi_run["sender"].ok("get_message", message_id=task)
    assert message["dispatch"]["outcome"] == "succeeded" and message["acknowledged_at"]
    [reply] = message["reply_ids"]
    result = kimi_run["sender"].ok("get_message", message_id=reply)
    assert (result["sender"], result["kind"], result["reply_to"]) == ("kimi", "result", task)
    assert result["text"] == f"{script.RESULT_PREFIX}handled message {task}"
    assert (last_status(kimi_run, task)["result"], last_status(kimi_run, task)["exit_code"]) == ("succeeded", 0)
    diag = diagnostics(done)
    assert (diag["stream_json"], diag["cli_version"], diag["turn_reason"]) == ("ok", "2.1.0", "completed")
    # Read, then receive -> claim -> result -> mark_read through the real bridge server.
    assert (diag["tool_calls"], diag["bridge_tool_calls"], diag["tool_results"]) == (5, 4, 5)
    offered_only_worker_tools(kimi_run, task)
    check_private(kimi_run, task, text)


@pytest.mark.sqlite_only(KIMI_ONLY)
def test_a_block_task_ends_blocked_and_its_claim_is_released(kimi_run):
    task, text, done = finish(kimi_run, "block")
    assert (done["outcome"], done["error_kind"], done["exit_code"]) == ("blocked", None, 0), done
    message = kimi_run["sender"].ok("get_message", message_id=task)
    assert message["dispatch"]["outcome"] == "blocked"
    assert message["claim_owner"] is None and message["acknowledged_at"] is None
    [reply] = message["reply_ids"]
    assert kimi_run["sender"].ok("get_message", message_id=reply)["text"].startswith("blocked: ")
    assert last_status(kimi_run, task)["result"] == "blocked"
    assert diagnostics(done)["bridge_tool_calls"] == 3  # claim, blocked result, release
    offered_only_worker_tools(kimi_run, task)
    check_private(kimi_run, task, text)


def test_a_silent_run_fails_no_evidence_with_one_payload_free_notice(kimi_run):
    task, text, done = finish(kimi_run, "silent")
    assert (done["outcome"], done["error_kind"], done["exit_code"]) == ("failed", "no_evidence", 0), done
    assert kimi_run["sender"].ok("get_message", message_id=task)["dispatch"]["outcome"] == "failed"
    [notice] = notices_for(kimi_run["db"], task)
    assert (notice["sender"], notice["recipient"]) == ("kimi", "claude")
    assert text not in notice["text"] and "Summarise" not in notice["text"]
    assert last_status(kimi_run, task)["error_kind"] == "no_evidence"
    diag = diagnostics(done)
    assert (diag["tool_calls"], diag["bridge_tool_calls"], diag["turn_reason"]) == (1, 0, "completed")  # Read only
    offered_only_worker_tools(kimi_run, task)
    check_private(kimi_run, task, text)


@pytest.mark.sqlite_only(KIMI_ONLY)
def test_a_failing_model_ends_the_run_after_the_configured_attempts(kimi_run):
    task, text, done = finish(kimi_run, "succeed", "MODEL_STATUS=500\n")
    assert (done["outcome"], done["error_kind"], done["exit_code"]) == ("failed", "no_evidence", 1), done
    diag = diagnostics(done)
    assert (diag["turn_reason"], diag["turn_error_code"]) == ("failed", "provider.api_error"), diag
    # max_attempts_per_step = 2 in the user's (linked) config.toml: one retry, then the run ends.
    assert (diag["retries"], diag["last_retry_status_code"]) == (ATTEMPTS - 1, 500), diag
    assert len(notices_for(kimi_run["db"], task)) == 1
    check_private(kimi_run, task, text)


@pytest.mark.sqlite_only(KIMI_ONLY)
def test_a_runaway_worker_past_its_token_cap_is_ended_as_budget_exceeded_with_one_notice(kimi_run):
    """Kimi reports usage in its wire (``usage.record``) as it goes: the supervisor follows it
    and ends the worker once it passes max_tokens_per_task, long before its loop would end."""
    task, _, done = finish(kimi_run, "spend", f"USAGE={2 * TOKEN_CAP}")
    assert (done["outcome"], done["error_kind"], done["cli_status"]) == (
        "budget_exceeded",
        "max_tokens_per_task",
        "budget_exceeded",
    ), done
    assert done["max_tokens"] == TOKEN_CAP and done["token_overshoot"] > 0
    assert done["cost_usd"] is None  # no prices for this agent: unknown, never guessed
    # Ended mid-loop: fewer model requests than the runaway's script would have made.
    assert len(requests_for(kimi_run, task)) < script.SPEND_CALLS
    [notice] = notices_for(kimi_run["db"], task)
    assert "budget_exceeded" in notice["text"] and f"max_tokens_per_task {TOKEN_CAP}" in notice["text"]
