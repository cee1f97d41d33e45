"""Gemini CLI 0.61.0 end to end: the real listener, the real launcher, the real binary, the real
server.py over MCP stdio, and a scripted Gemini API server on 127.0.0.1 (tests/models/gemini.py).

One listener, one model server and one sending agent (kimi, over MCP stdio) serve the whole
module; the cases run back to back. The task texts carry a canary that must show up nowhere
but the store and the private attempt directory (and the model server, which is the model). A
result and a failure's notice also go through a PostgreSQL store; the other cases are Gemini's
own behaviour, which reaches the store the same way.
"""

import json
import os
import uuid
from pathlib import Path

import pytest
from dispatch_harness import (
    DEADLINE,
    STARTED,
    end_listeners,
    notices_for,
    query,
    start_listener,
    status,
    wait_finished,
    wait_until,
)
from harness import PROJECT, McpAgent, bridge_env, on_backend, write_config
from models import script
from models.gemini import GeminiServer, offered_tools

pytestmark = [pytest.mark.cli, pytest.mark.both_backends]

PROVEN_ON_POSTGRES = pytest.mark.postgres_proven_by(
    "test_a_task_comes_back_as_the_right_result",
    "a real Gemini worker's result through a PostgreSQL store; a failure's one notice is the supervisor's rule, tested on both backends in tests/dispatch",
)
GEMINI_ONLY = "Gemini's own behaviour; the store is reached as in the result and notice cases, which run on both"

LAUNCHER = PROJECT / "launchers" / "gemini_headless.sh"
AGENT = "gemini"
TOKEN_CAP = 5_000_000  # far above what a scripted task uses; a USAGE= line passes it
WORKER_TOOLS = set(script.WORKER_TOOLS)
FIXTURES = Path(__file__).parents[1] / "fixtures" / "cli_results" / "gemini"
CANARY_PLACEHOLDER = "CANARY-PLACEHOLDER"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # Outside the bridge root and HOME: the model necessarily sees the task text.
    with GeminiServer(tmp_path_factory.mktemp("gemini-model") / "requests.jsonl") as server:
        yield server


@pytest.fixture(scope="module")
def world(tmp_path_factory, gemini_bin, model, backend, request):
    root = tmp_path_factory.mktemp(f"gemini-bridge-{backend}")
    config = write_config(
        root / "config.json",
        {
            AGENT: {
                "auto": True,
                "launcher": str(LAUNCHER),
                "worker_timeout_seconds": 120,
                "max_tokens_per_task": TOKEN_CAP,
            },
            "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
        },
    )
    home = root / "home"
    home.mkdir()
    (root / "tmp").mkdir()
    # A workspace's own Gemini settings that would offer built-in tools: the worker must not load them.
    (root / ".gemini").mkdir()
    (root / ".gemini" / "settings.json").write_text(json.dumps({"tools": {"core": ["read_file", "glob"]}}))
    env = {
        **on_backend(bridge_env(root, config), backend, request),
        "HOME": str(home),  # the CLI must leave nothing here: it gets a private home per attempt
        "TMPDIR": str(root / "tmp"),  # nor here: the launcher gives it a private TMPDIR
        "GEMINI_BIN": str(gemini_bin),
        "GOOGLE_GEMINI_BASE_URL": model.base_url,
        "GEMINI_API_KEY": "scripted-key",
        "NO_COLOR": "1",
    }
    kimi = McpAgent("kimi", env, stderr_path=root / "kimi-server.log").wait_ready()
    listener = start_listener(env, AGENT)
    STARTED.remove(listener)  # the module's own, ended below (not by the per-test fixture)
    try:
        wait_until(lambda: status(env, AGENT)["stage"] == "idle", what="gemini listener idle")
        yield {
            "root": root,
            "env": env,
            "home": home,
            "kimi": kimi,
            "db": Path(env["AGENT_BRIDGE_DB"]) if backend == "sqlite" else env["AGENT_BRIDGE_DB"],
        }
    finally:
        end_listeners([listener])
        kimi.close()


def send_task(world, mode: str, extra: str = "") -> tuple[int, str]:
    canary = f"canary-{uuid.uuid4().hex}"
    text = f"Please handle this scripted task ({canary}).\nMODE={mode}\n{extra}"
    sent = world["kimi"].ok("send_message", recipient=AGENT, kind="task", text=text)
    return sent["id"], canary


def attempt_dir(world, message_id: int) -> Path:
    return Path(world["env"]["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts" / str(message_id)


def chat_requests(model: GeminiServer, canary: str) -> list[dict]:
    return [r for r in model.requests() if ":streamGenerateContent" in r["path"] and canary in json.dumps(r["body"])]


def assert_canary_private(world, message_id: int, canary: str) -> None:
    """The canary is in no file outside the private attempt dir (logs, progress, status, the CLI's
    files), nowhere under HOME, and not in the attempt's diagnostics or worker log either."""
    private = attempt_dir(world, message_id)
    needle = canary.encode()
    leaks = []
    for path in world["root"].rglob("*"):
        if (
            not path.is_file()
            or path.is_symlink()
            or path.suffix in {".db", ".db-wal", ".db-shm"}
            or "state" in path.relative_to(world["root"]).parts
        ):
            continue  # the store holds the task by design
        inside = private in path.parents
        if inside and path.name not in {"diagnostics.json", "worker.log"}:
            continue
        if needle in path.read_bytes():
            leaks.append(str(path))
    # Gemini's error reports (request contents included) go to os.tmpdir(): never the shared one.
    leaks += [str(p) for p in Path("/tmp").glob("gemini-client-error-*.json") if needle in p.read_bytes()]
    assert leaks == []
    for outside in (world["home"], world["root"] / "tmp"):
        assert not any(outside.iterdir()), sorted(p.name for p in outside.iterdir())


def finished(world, message_id: int) -> dict:
    return wait_finished(world["db"], message_id, deadline=DEADLINE)


def result_json(world, message_id: int) -> dict | None:
    path = attempt_dir(world, message_id) / "gemini-result.json"
    text = path.read_text() if path.exists() else ""
    return json.loads(text) if text.strip() else None


def save_fixture(name: str, doc_text: str, canary: str) -> None:
    """With AGENT_BRIDGE_SAVE_FIXTURES=1: keep a real raw output (canary replaced) for the ledger's
    fixture tests (tests/fixtures/cli_results/gemini/README.md)."""
    if os.environ.get("AGENT_BRIDGE_SAVE_FIXTURES") != "1":
        return
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / name).write_text(doc_text.replace(canary, CANARY_PLACEHOLDER))


@pytest.fixture(scope="module")
def succeeded(world) -> tuple[int, str, dict]:
    """One `succeed` task, run once for the cases that look at it."""
    message_id, canary = send_task(world, "succeed")
    return message_id, canary, finished(world, message_id)


def test_a_task_comes_back_as_the_right_result(world, model, succeeded):
    message_id, canary, row = succeeded
    assert (row["outcome"], row["error_kind"]) == ("succeeded", None), row

    got = world["kimi"].ok("get_message", message_id=message_id)
    assert got["dispatch"]["outcome"] == "succeeded" and got["acknowledged_at"]
    (result,) = [m for m in query(world["db"], "SELECT * FROM messages WHERE reply_to = ?", (message_id,))]
    assert (result["sender"], result["recipient"], result["kind"]) == (AGENT, "kimi", "result")
    assert result["text"] == f"{script.RESULT_PREFIX}handled message {message_id}"
    last = wait_until(
        lambda: (st := status(world["env"], AGENT))["last"] and st["last"]["message_id"] == message_id and st["last"],
        what="listener status shows the attempt",
    )
    assert last["result"] == "succeeded"

    doc = result_json(world, message_id)
    assert doc is not None and doc["response"].startswith("succeed: finished")
    assert doc["stats"]["tools"]["totalSuccess"] == 4 and doc["stats"]["tools"]["totalFail"] == 0
    assert set(doc["stats"]["tools"]["byName"]) == {
        f"mcp_agent_bridge_{t}" for t in ("receive_messages", "claim_message", "send_message", "mark_read")
    }
    save_fixture("success.json", (attempt_dir(world, message_id) / "gemini-result.json").read_text(), canary)
    assert_canary_private(world, message_id, canary)


@pytest.mark.sqlite_only(GEMINI_ONLY)
def test_only_the_bridge_worker_tools_are_offered(world, model, succeeded):
    chats = [r for r in model.requests() if ":streamGenerateContent" in r["path"]]
    assert len(chat_requests(model, succeeded[1])) == 5  # four tool calls, then the final answer
    for request in chats:
        offered = set(offered_tools(request["body"]))
        assert offered == {f"mcp_agent_bridge_{t}" for t in WORKER_TOOLS}, sorted(offered)


@pytest.mark.sqlite_only(GEMINI_ONLY)
def test_a_blocked_task_ends_blocked(world, model):
    message_id, canary = send_task(world, "block")
    row = finished(world, message_id)
    assert row["outcome"] == "blocked", row
    (result,) = query(world["db"], "SELECT * FROM messages WHERE reply_to = ? AND kind = 'result'", (message_id,))
    assert result["text"].startswith("blocked:")
    got = world["kimi"].ok("get_message", message_id=message_id)
    assert got["dispatch"]["outcome"] == "blocked"
    assert_canary_private(world, message_id, canary)


@PROVEN_ON_POSTGRES
def test_a_silent_run_fails_no_evidence_with_one_payload_free_notice(world, model):
    message_id, canary = send_task(world, "silent")
    row = finished(world, message_id)
    assert (row["outcome"], row["error_kind"]) == ("failed", "no_evidence"), row
    (notice,) = notices_for(world["db"], message_id)
    assert canary not in notice["text"] and "scripted task" not in notice["text"]
    assert len(chat_requests(model, canary)) == 1  # one model call, no tool call
    save_fixture("silent.json", (attempt_dir(world, message_id) / "gemini-result.json").read_text(), canary)
    assert_canary_private(world, message_id, canary)


@pytest.mark.sqlite_only(GEMINI_ONLY)
def test_a_failing_model_api_ends_the_run_in_seconds_with_gemini_error_json(world, model):
    model.fail_with = 500
    try:
        message_id, canary = send_task(world, "succeed")
        row = finished(world, message_id)
    finally:
        model.fail_with = None
    assert (row["outcome"], row["error_kind"]) == ("failed", "no_evidence"), row
    assert result_json(world, message_id) is None  # Gemini writes its error JSON to stderr
    assert row["exit_code"] == 500 % 256  # Gemini exits with the HTTP status mod 256
    # Its error object is the last thing it writes, pretty-printed, on stderr (the worker log).
    log = (attempt_dir(world, message_id) / "worker.log").read_text()
    error_text = log[log.rindex("\n{\n") + 1 :]
    error = json.loads(error_text)["error"]
    assert (error["code"], error["type"]) == (500, "Error") and "500" in error["message"]
    save_fixture("error-http-500.worker.log", log, canary)
    reports = list((attempt_dir(world, message_id) / "tmp").glob("gemini-client-error-*.json"))
    assert reports, "Gemini's error report should be in the private TMPDIR"
    assert_canary_private(world, message_id, canary)


@pytest.mark.sqlite_only(GEMINI_ONLY)
def test_a_runaway_worker_past_its_token_cap_ends_budget_exceeded_with_one_notice(world):
    """Gemini 0.61.0's -o json reports usage once, at the end of the run: the cap is enforced
    at that report, with the overshoot recorded."""
    task, _ = send_task(world, "spend", f"USAGE={2 * TOKEN_CAP}\n")
    done = finished(world, task)
    assert (done["outcome"], done["cli_status"]) == ("budget_exceeded", "budget_exceeded"), done
    assert done["max_tokens"] == TOKEN_CAP and done["token_overshoot"] > TOKEN_CAP
    notices = notices_for(world["db"], task)
    assert len(notices) == 1 and f"max_tokens_per_task {TOKEN_CAP}" in notices[0]["text"], [dict(n) for n in notices]
