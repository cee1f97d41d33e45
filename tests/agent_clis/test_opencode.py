"""opencode 1.18.33 end to end: the real listener, launchers/opencode_headless.sh, the pinned
`opencode` binary and the real server.py, driven by a scripted OpenAI Chat Completions server on
127.0.0.1 (opencode's `@ai-sdk/openai-compatible` provider).

One listener for the agent `opencode` and one model server serve the whole module; a kimi
McpAgent sends the tasks over MCP stdio. The cases run back to back: succeed (with usage and
cost from opencode's events), block, silent, an endpoint that refuses the key (auth_error),
what opencode offered the model, the privacy canary over every file the runs left, and the
launcher's contract with a fake opencode. A result and a failure's notice also go through a
PostgreSQL store.
"""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from dispatch_harness import end_listeners, notices_for, query, start_listener, status, wait_finished, wait_until
from harness import PROJECT, McpAgent, bridge_env, on_backend
from models import script
from models.openai_chat import ChatCompletionsServer, to_turn
from models.script import RESULT_PREFIX, bridge_name

pytestmark = [pytest.mark.cli, pytest.mark.both_backends]

PROVEN_ON_POSTGRES = pytest.mark.postgres_proven_by(
    "test_a_task_comes_back_as_the_right_result_with_usage_and_cost",
    "a real opencode worker's result through a PostgreSQL store; a failure's one notice is the supervisor's rule, tested on both backends in tests/dispatch",
)
OPENCODE_ONLY = "opencode's own behaviour; the store is reached as in the result and notice cases, which run on both"

LAUNCHER = PROJECT / "launchers" / "opencode_headless.sh"
WORKER_TOOLS = set(script.WORKER_TOOLS)
CANARY = f"opencode-canary-{uuid.uuid4().hex}"
DEADLINE = 120.0
PRICE = (3.0, 15.0)  # USD per million input / output tokens, given to opencode's model entry
TOKEN_CAP = 200_000  # far above what a scripted task uses; the runaway's USAGE= line passes it


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The model vendor's side: its recording holds task text and lives outside the bridge's files."""
    with ChatCompletionsServer(tmp_path_factory.mktemp("opencode-model") / "requests.jsonl") as server:
        yield server


@pytest.fixture(scope="module")
def root(tmp_path_factory, backend) -> Path:
    return tmp_path_factory.mktemp(f"opencode-bridge-{backend}")


@pytest.fixture(scope="module")
def opencode_env(root, opencode_bin, model, backend, request) -> dict[str, str]:
    config = root / "config.json"
    config.write_text(
        json.dumps(
            {
                "agents": {
                    "opencode": {
                        "auto": True,
                        "launcher": str(LAUNCHER),
                        "worker_timeout_seconds": 90,
                        "max_tokens_per_task": TOKEN_CAP,
                    },
                    "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
                }
            }
        )
    )
    (root / "home").mkdir(exist_ok=True)
    return {
        **on_backend(bridge_env(root, config), backend, request),
        "HOME": str(root / "home"),
        "OPENCODE_BIN": str(opencode_bin),
        "AGENT_BRIDGE_OPENCODE_BASE_URL": model.base_url,
        "AGENT_BRIDGE_OPENCODE_MODEL": "scripted-model",
        "AGENT_BRIDGE_OPENCODE_ENV_KEY": "SCRIPTED_MODEL_KEY",
        "AGENT_BRIDGE_OPENCODE_PRICE": ",".join(str(p) for p in PRICE),
        "SCRIPTED_MODEL_KEY": "sk-scripted-not-a-real-key",
    }


@pytest.fixture(scope="module")
def db(opencode_env, backend) -> Path | str:
    return Path(opencode_env["AGENT_BRIDGE_DB"]) if backend == "sqlite" else opencode_env["AGENT_BRIDGE_DB"]


@pytest.fixture(scope="module")
def kimi(opencode_env):
    agent = McpAgent("kimi", opencode_env).wait_ready()
    yield agent
    agent.close()


@pytest.fixture(scope="module")
def listener(opencode_env, kimi):
    proc = start_listener(opencode_env, agent="opencode")
    yield proc
    end_listeners([proc])


def send_task(kimi: McpAgent, text: str) -> int:
    return kimi.ok("send_message", recipient="opencode", kind="task", text=f"{text}\n{CANARY}\n")["id"]


def attempt_dir(env: dict, message_id: int) -> Path:
    return Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts" / str(message_id)


def events(env: dict, message_id: int) -> list[dict]:
    path = attempt_dir(env, message_id) / "opencode-events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


FIXTURES = Path(__file__).parents[1] / "fixtures" / "cli_results" / "opencode"


def save_fixture(env: dict, message_id: int, name: str) -> None:
    """With AGENT_BRIDGE_SAVE_CLI_FIXTURES=1: the real event stream, canary replaced, for the
    ledger's corpus tests (off by default, so a test run leaves the tree clean)."""
    if os.environ.get("AGENT_BRIDGE_SAVE_CLI_FIXTURES") != "1":
        return
    text = (attempt_dir(env, message_id) / "opencode-events.jsonl").read_text()
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / name).write_text(text.replace(CANARY, "CANARY-7f3e"))


def finished(db: Path | str, message_id: int) -> dict:
    return wait_finished(db, message_id, deadline=DEADLINE)


def test_a_task_comes_back_as_the_right_result_with_usage_and_cost(opencode_env, db, kimi, listener):
    task = send_task(kimi, "Say hello to kimi.")
    done = finished(db, task)
    assert (done["outcome"], done["error_kind"], done["cli_status"]) == ("succeeded", None, "ok"), done

    replies = query(
        db, "SELECT sender, recipient, kind, text FROM messages WHERE reply_to = ? AND kind = 'result'", (task,)
    )
    assert [tuple(r) for r in replies] == [("opencode", "kimi", "result", f"{RESULT_PREFIX}handled message {task}")]
    shown = wait_until(
        lambda: (s := status(opencode_env, "opencode"))["last"] and s["last"]["message_id"] == task and s,
        DEADLINE,
        interval=0.5,
        what="listener status to show the attempt",
    )
    assert (shown["last"]["result"], shown["last"]["exit_code"]) == ("succeeded", 0), shown

    stream = events(opencode_env, task)
    calls = [e["part"] for e in stream if e["type"] == "tool_use"]
    assert [(c["tool"], c["state"]["status"]) for c in calls] == [
        (f"agent_bridge_{tool}", "completed")
        for tool in ("receive_messages", "claim_message", "send_message", "mark_read")
    ]
    # Usage and cost are opencode's own: the sums of its step_finish events (5 model requests).
    steps = [e["part"] for e in stream if e["type"] == "step_finish"]
    assert len(steps) == 5, steps
    assert done["input_tokens"] == sum(s["tokens"]["input"] for s in steps) > 0
    assert done["output_tokens"] == sum(s["tokens"]["output"] for s in steps) > 0
    expected = (done["input_tokens"] * PRICE[0] + done["output_tokens"] * PRICE[1]) / 1e6
    assert done["cost_usd"] == pytest.approx(expected, rel=1e-6), done
    save_fixture(opencode_env, task, "captured-1.18.33-succeeded.jsonl")


@pytest.mark.sqlite_only(OPENCODE_ONLY)
def test_a_block_task_ends_blocked(opencode_env, db, kimi, listener):
    task = send_task(kimi, "Try, then stop.\nMODE=block")
    done = finished(db, task)
    assert done["outcome"] == "blocked", done
    reply = query(db, "SELECT text FROM messages WHERE reply_to = ? AND kind = 'result'", (task,))
    assert [r["text"] for r in reply] == ["blocked: the scripted model was told to stop here"]
    message = kimi.ok("get_message", message_id=task)
    assert (message["claim_owner"], message["dispatch"]["outcome"]) == (None, "blocked"), message  # released
    save_fixture(opencode_env, task, "captured-1.18.33-blocked.jsonl")


@PROVEN_ON_POSTGRES
def test_a_silent_run_fails_no_evidence_with_one_payload_free_notice(opencode_env, db, kimi, listener):
    task = send_task(kimi, "Do nothing at all.\nMODE=silent")
    done = finished(db, task)
    assert (done["outcome"], done["error_kind"], done["cli_status"]) == ("failed", "no_evidence", "ok"), done
    notices = notices_for(db, task)
    assert len(notices) == 1, [dict(n) for n in notices]
    assert CANARY not in notices[0]["text"] and "MODE=silent" not in notices[0]["text"]
    save_fixture(opencode_env, task, "captured-1.18.33-silent.jsonl")


@pytest.mark.sqlite_only(OPENCODE_ONLY)
def test_an_endpoint_that_refuses_the_key_ends_auth_error_within_seconds(opencode_env, db, kimi, listener, model):
    """A 401 is not retried by opencode: exit 1 with an `error` event (APIError, statusCode 401),
    which the ledger names auth_error, and the notice says why."""
    model.fail_status = 401
    try:
        task = send_task(kimi, "The model endpoint refuses the key.")
        done = finished(db, task)
    finally:
        model.fail_status = None
    assert (done["outcome"], done["cli_status"], done["exit_code"]) == ("failed", "auth_error", 1), done
    errors = [e["error"] for e in events(opencode_env, task) if e["type"] == "error"]
    assert [(e["name"], e["data"]["statusCode"]) for e in errors] == [("APIError", 401)], errors
    notices = notices_for(db, task)
    assert len(notices) == 1 and "auth_error" in notices[0]["text"], [dict(n) for n in notices]
    assert CANARY not in notices[0]["text"]
    save_fixture(opencode_env, task, "captured-1.18.33-invalid-api-key-401.jsonl")


@pytest.mark.sqlite_only(OPENCODE_ONLY)
def test_the_model_was_offered_only_the_bridge_worker_tools_and_no_title_request(model, listener):
    bodies = model.chat_requests()
    assert bodies, "opencode sent no model request"
    for body in bodies:
        turn = to_turn(body)
        assert {bridge_name(name) for name in turn.tools} == WORKER_TOOLS, turn.tools
        assert all(name.startswith("agent_bridge_") for name in turn.tools), turn.tools
    # --title: no side request carrying the task to a "title generator" (every request offers the tools).
    assert all(body.get("tools") for body in bodies)
    posts = [r for r in model.requests() if r["method"] == "POST"]
    assert all(r["headers"].get("authorization") == "Bearer <redacted>" for r in posts)


@pytest.mark.sqlite_only(OPENCODE_ONLY)
def test_the_canary_stays_in_the_store_and_the_private_attempt_dirs(opencode_env, root, listener):
    store = Path(opencode_env["AGENT_BRIDGE_DB"]).parent
    attempts = Path(opencode_env["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts"
    needle = CANARY.encode()
    leaks, private = [], []
    for path in root.rglob("*"):
        if path.is_symlink() or not path.is_file():
            continue
        if needle in path.read_bytes():
            if path.is_relative_to(store):
                continue
            (private if path.is_relative_to(attempts) else leaks).append(path)
    assert not leaks, f"task text outside the store and the attempt dirs: {leaks}"
    # Inside an attempt dir only the raw event stream (tool results carry the message text) and
    # the request file have it: the session store is in memory, the private home holds none.
    assert private and {p.name for p in private} <= {"opencode-events.jsonl", "request.md"}, private
    assert not [p for p in private if "opencode-home" in p.parts], private
    assert CANARY not in json.dumps(status(opencode_env, "opencode"))
    for path in private:
        attempt = attempts / path.relative_to(attempts).parts[0]
        assert attempt.stat().st_mode & 0o077 == 0, attempt
    # The user's home got nothing from opencode (it ran on a private HOME and XDG dirs).
    assert not (root / "home" / ".config" / "opencode").exists()
    assert not (root / "home" / ".local" / "share" / "opencode").exists()


FAKE_OPENCODE = """#!{python}
import json, os, sys
record = {{"argv": sys.argv[1:], "stdin": sys.stdin.read(), "cwd": os.getcwd(), "env": dict(os.environ),
          "config": json.load(open(os.path.join(os.environ["XDG_CONFIG_HOME"], "opencode", "opencode.json")))}}
open(os.environ["FAKE_OPENCODE_RECORD"], "w").write(json.dumps(record))
print(json.dumps({{"type": "step_start", "sessionID": "ses_1", "part": {{}}}}))
sys.exit(int(os.environ.get("FAKE_OPENCODE_EXIT", "0")))
"""


@pytest.mark.sqlite_only(OPENCODE_ONLY)
def test_launcher_contract_with_a_recording_cli(tmp_path, opencode_env):
    """The launcher's own promises, with a fake `opencode` that records what it was given: the
    task on stdin only, fixed argv, a private home, the permission rules, the exit code passed
    on, and refusals (78 at shell, 2 on bad settings, 127 without the CLI, a planted name)."""
    fake = tmp_path / "opencode"
    fake.write_text(FAKE_OPENCODE.format(python=sys.executable))
    fake.chmod(0o755)
    secret = f"Message #5 from kimi is a task for you.\n{CANARY}\n"

    def run(name: str, plant: str | None = None, **extra: str) -> tuple[subprocess.CompletedProcess, Path]:
        attempt = tmp_path / name
        attempt.mkdir(mode=0o700)
        request = attempt / "request.md"
        request.write_text(secret)
        if plant:
            (tmp_path / f"target-{name}").mkdir()
            (attempt / plant).symlink_to(tmp_path / f"target-{name}")
        env = {
            **os.environ,
            **opencode_env,
            "OPENCODE_BIN": str(fake),
            "AGENT_ID": "opencode",
            "AGENT_BRIDGE_MESSAGE_ID": "5",
            "AGENT_BRIDGE_PROJECT": str(PROJECT),
            "AGENT_BRIDGE_PYTHON": sys.executable,
            "AGENT_BRIDGE_ATTEMPT_DIR": str(attempt),
            "AGENT_BRIDGE_WORKSPACE": str(tmp_path),
            "FAKE_OPENCODE_RECORD": str(attempt / "record.json"),
            "OPENCODE_CONFIG_CONTENT": '{"permission": "allow"}',  # the caller's: dropped
            **extra,
        }
        return subprocess.run(
            [str(LAUNCHER), str(request)],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        ), attempt

    done, attempt = run("plain", FAKE_OPENCODE_EXIT="3")
    assert done.returncode == 3, done.stderr
    record = json.loads((attempt / "record.json").read_text())
    assert record["argv"][:6] == ["run", "--pure", "--format", "json", "--title", "agent-bridge-worker"]
    assert record["argv"][6:8] == ["--model", "agent_bridge_endpoint/scripted-model"]
    assert "message 5" in record["argv"][8] and len(record["argv"]) == 9
    assert record["stdin"] == secret
    assert CANARY not in json.dumps(record["argv"]) and CANARY not in json.dumps(record["env"])
    env = record["env"]
    assert env["HOME"] == str(attempt / "opencode-home") and env["XDG_CONFIG_HOME"].startswith(env["HOME"])
    assert (env["OPENCODE_DB"], env["OPENCODE_DISABLE_PROJECT_CONFIG"]) == (":memory:", "1")
    assert "OPENCODE_CONFIG_CONTENT" not in env
    rules = json.loads(env["OPENCODE_PERMISSION"])
    assert list(rules)[0] == "*" and rules["*"] == "deny"
    assert {k for k, v in rules.items() if v == "allow"} == {f"agent_bridge_{t}" for t in WORKER_TOOLS}
    server = record["config"]["mcp"]["agent_bridge"]
    assert server["environment"]["AGENT_BRIDGE_ROLE"] == "worker" and server["environment"]["AGENT_ID"] == "opencode"
    assert server["environment"]["HOME"] == opencode_env["HOME"]
    assert record["config"]["provider"]["agent_bridge_endpoint"]["options"]["apiKey"] == "{env:SCRIPTED_MODEL_KEY}"
    assert (attempt / "opencode-home").stat().st_mode & 0o777 == 0o700
    assert json.loads((attempt / "opencode-events.jsonl").read_text())["type"] == "step_start"

    done, attempt = run("shell", AGENT_BRIDGE_PERMISSIONS='{"level": "shell", "allow_commands": ["git status"]}')
    assert done.returncode == 78 and "no OS sandbox" in done.stderr, done.stderr
    assert not (attempt / "record.json").exists()
    for name, extra in {
        "bad-profile": {"AGENT_BRIDGE_PERMISSIONS": '{"level": "root"}'},
        "bad-price": {"AGENT_BRIDGE_OPENCODE_PRICE": "cheap"},
        "no-model": {"AGENT_BRIDGE_OPENCODE_MODEL": ""},
    }.items():
        done, attempt = run(name, **extra)
        assert done.returncode == 2 and not (attempt / "record.json").exists(), (name, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
    done, _ = run("missing", OPENCODE_BIN=str(tmp_path / "no-such-opencode"))
    assert done.returncode == 127 and "opencode not found" in done.stderr, done.stderr
    for planted in ("opencode-home", "opencode-events.jsonl"):
        done, attempt = run(f"planted-{planted}", plant=planted)
        assert done.returncode != 0 and not (attempt / "record.json").exists(), planted
        assert list((tmp_path / f"target-planted-{planted}").iterdir()) == [], planted


@pytest.mark.sqlite_only(OPENCODE_ONLY)
def test_a_runaway_worker_past_its_token_cap_is_stopped_mid_run_with_one_notice(
    opencode_env, db, kimi, listener, model
):
    """opencode writes a step_finish (with its usage) after every model request, and the
    supervisor reads the events file as it grows: the cap stops the run before its loop ends."""
    before = len(model.chat_requests())
    task = send_task(kimi, f"Loop.\nMODE=spend\nUSAGE={TOKEN_CAP // 10}")
    done = finished(db, task)
    assert (done["outcome"], done["cli_status"]) == ("budget_exceeded", "budget_exceeded"), done
    assert done["max_tokens"] == TOKEN_CAP and done["token_overshoot"] > 0
    assert len(model.chat_requests()) - before < script.SPEND_CALLS  # stopped before its loop ended
    notices = notices_for(db, task)
    assert len(notices) == 1 and f"max_tokens_per_task {TOKEN_CAP}" in notices[0]["text"], [dict(n) for n in notices]
