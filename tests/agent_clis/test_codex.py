"""Codex CLI 0.171.0 end to end: the real listener, the generic launcher (config.json names
`"cli": "codex"`; launchers/codex_headless.sh, as older configs name it, in the contract cases), the pinned
`codex` binary and the real server.py, driven by a scripted Responses API server on 127.0.0.1.

One listener for the agent `codex` and one model server serve the whole module; a kimi
McpAgent sends the tasks over MCP stdio. The cases run back to back: succeed, block,
silent, a failing model endpoint, what Codex offered the model (also under a ChatGPT
login), the generated config, the privacy canary over every file the runs left (the
test's HOME and Codex homes included), and the launcher's contract with a fake codex. A result
and a failure's notice also go through a PostgreSQL store; the other cases are Codex's own
behaviour, which reaches the store the same way.
"""

import base64
import json
import os
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import pytest
from dispatch_harness import end_listeners, notices_for, query, start_listener, status, wait_finished, wait_until
from harness import PROJECT, McpAgent, bridge_env, on_backend
from models import script
from models.openai_responses import ResponsesServer, to_turn
from models.script import RESULT_PREFIX, bridge_name

pytestmark = [pytest.mark.cli, pytest.mark.both_backends]
CODEX_ONLY = "Codex's own behaviour; the store is reached as in the result and notice cases, which run on both"

LAUNCHER = PROJECT / "launchers" / "codex_headless.sh"
WORKER_TOOLS = set(script.WORKER_TOOLS)
# Codex adds these generic MCP-resource readers whenever an MCP server is configured, and
# 0.171.0 has no setting that drops them; they only reach the configured servers (the
# bridge alone, which serves no resources).
CODEX_MCP_RESOURCE_TOOLS = {"list_mcp_resources", "list_mcp_resource_templates", "read_mcp_resource"}
CANARY = f"codex-canary-{uuid.uuid4().hex}"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "cli_results" / "codex"
DEADLINE = 120.0
# Far above what a scripted task uses; the runaway's USAGE= line passes it within its loop. Kept
# below the context window: Codex compacts its history past it, and the runaway never ends.
TOKEN_CAP = 200_000


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The model vendor's side: its recording holds task text and lives outside the bridge's files."""
    with ResponsesServer(tmp_path_factory.mktemp("codex-model") / "requests.jsonl") as server:
        yield server


@pytest.fixture(scope="module")
def root(tmp_path_factory, backend) -> Path:
    return tmp_path_factory.mktemp(f"codex-bridge-{backend}")


@pytest.fixture(scope="module")
def user_codex_home(root) -> Path:
    """The test user's own Codex home, with a `codex login` file the launcher links (never copies)."""
    home = root / "home" / ".codex"
    home.mkdir(parents=True)
    (home / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-not-a-real-key"}))
    return home


@pytest.fixture(scope="module")
def codex_env(root, codex_bin, model, user_codex_home, backend, request) -> dict[str, str]:
    config = root / "config.json"
    config.write_text(
        json.dumps(
            {
                "agents": {
                    "codex": {  # named as init writes it: the generic launcher runs it
                        "cli": "codex",
                        "auto": True,
                        "worker_timeout_seconds": 90,
                        "max_tokens_per_task": TOKEN_CAP,
                    },
                    "kimi": {"auto": False, "cli": "kimi"},
                }
            }
        )
    )
    return {
        **on_backend(bridge_env(root, config), backend, request),
        "HOME": str(root / "home"),
        "CODEX_HOME": str(user_codex_home),
        "CODEX_BIN": str(codex_bin),
        "AGENT_BRIDGE_CODEX_BASE_URL": model.base_url,
        "AGENT_BRIDGE_CODEX_MODEL": "scripted-model",
        "AGENT_BRIDGE_CODEX_MAX_RETRIES": "0",
    }


@pytest.fixture(scope="module")
def db(codex_env, backend) -> Path | str:
    return Path(codex_env["AGENT_BRIDGE_DB"]) if backend == "sqlite" else codex_env["AGENT_BRIDGE_DB"]


@pytest.fixture(scope="module")
def kimi(codex_env):
    agent = McpAgent("kimi", codex_env).wait_ready()
    yield agent
    agent.close()


@pytest.fixture(scope="module")
def listener(codex_env, kimi):
    proc = start_listener(codex_env, agent="codex")
    yield proc
    end_listeners([proc])


def send_task(kimi: McpAgent, text: str) -> int:
    return kimi.ok("send_message", recipient="codex", kind="task", text=f"{text}\n{CANARY}\n")["id"]


def attempt_dir(env: dict, message_id: int) -> Path:
    return Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts" / str(message_id)


def events(env: dict, message_id: int) -> list[dict]:
    path = attempt_dir(env, message_id) / "codex-events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def save_fixture(env: dict, message_id: int, name: str) -> None:
    """With AGENT_BRIDGE_SAVE_CLI_FIXTURES=1: the real raw event stream, canary replaced, for
    the ledger's fixture tests (off by default, so a test run leaves the tree clean)."""
    if os.environ.get("AGENT_BRIDGE_SAVE_CLI_FIXTURES") != "1":
        return
    text = (attempt_dir(env, message_id) / "codex-events.jsonl").read_text()
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / name).write_text(text.replace(CANARY, "<canary>"))


def finished(db: Path | str, message_id: int) -> dict:
    return wait_finished(db, message_id, deadline=DEADLINE)


def test_a_task_comes_back_as_the_right_result(codex_env, db, kimi, listener):
    task = send_task(kimi, "Say hello to kimi.")
    done = finished(db, task)
    assert (done["outcome"], done["error_kind"]) == ("succeeded", None), done

    replies = query(
        db, "SELECT sender, recipient, kind, text FROM messages WHERE reply_to = ? AND kind = 'result'", (task,)
    )
    assert [tuple(r) for r in replies] == [("codex", "kimi", "result", f"{RESULT_PREFIX}handled message {task}")]
    message = kimi.ok("get_message", message_id=task)
    assert (message["dispatch"]["state"], message["dispatch"]["outcome"]) == ("finished", "succeeded"), message
    shown = wait_until(
        lambda: (s := status(codex_env, "codex"))["last"] and s["last"]["message_id"] == task and s,
        DEADLINE,
        interval=0.5,
        what="listener status to show the attempt",
    )
    assert (shown["last"]["result"], shown["last"]["exit_code"]) == ("succeeded", 0), shown

    stream = events(codex_env, task)
    kinds = [e["type"] for e in stream]
    assert kinds[0] == "thread.started" and kinds[-1] == "turn.completed", kinds
    calls = [e["item"] for e in stream if e["type"] == "item.completed" and e["item"]["type"] == "mcp_tool_call"]
    assert [(c["server"], c["tool"], c["status"]) for c in calls] == [
        ("agent_bridge", tool, "completed")
        for tool in ("receive_messages", "claim_message", "send_message", "mark_read")
    ]
    save_fixture(codex_env, task, "succeeded.jsonl")


@pytest.mark.sqlite_only(CODEX_ONLY)
def test_a_block_task_ends_blocked(codex_env, db, kimi, listener):
    task = send_task(kimi, "Try, then stop.\nMODE=block")
    done = finished(db, task)
    assert done["outcome"] == "blocked", done
    reply = query(db, "SELECT text FROM messages WHERE reply_to = ? AND kind = 'result'", (task,))
    assert [r["text"] for r in reply] == ["blocked: the scripted model was told to stop here"]
    message = kimi.ok("get_message", message_id=task)
    assert (message["claim_owner"], message["dispatch"]["outcome"]) == (None, "blocked"), message  # released
    save_fixture(codex_env, task, "blocked.jsonl")


def test_a_silent_run_fails_no_evidence_with_one_payload_free_notice(codex_env, db, kimi, listener):
    task = send_task(kimi, "Do nothing at all.\nMODE=silent")
    done = finished(db, task)
    assert (done["outcome"], done["error_kind"]) == ("failed", "no_evidence"), done
    notices = notices_for(db, task)
    assert len(notices) == 1, [dict(n) for n in notices]
    assert CANARY not in notices[0]["text"] and "MODE=silent" not in notices[0]["text"]
    assert [e["type"] for e in events(codex_env, task)][-1] == "turn.completed"
    save_fixture(codex_env, task, "silent_turn_completed.jsonl")


@pytest.mark.sqlite_only(CODEX_ONLY)
def test_a_failing_model_endpoint_ends_the_turn_failed_within_seconds(codex_env, db, kimi, listener, model):
    model.fail_status = 500
    try:
        task = send_task(kimi, "The model endpoint answers 500.")
        done = finished(db, task)
    finally:
        model.fail_status = None
    assert (done["outcome"], done["error_kind"]) == ("failed", "no_evidence"), done
    assert done["exit_code"] == 1, done
    kinds = [e["type"] for e in events(codex_env, task)]
    assert kinds[-2:] == ["error", "turn.failed"], kinds
    save_fixture(codex_env, task, "turn_failed_http500.jsonl")


@pytest.mark.sqlite_only(CODEX_ONLY)
def test_the_model_was_offered_only_the_bridge_worker_tools(model, listener):
    posts = [r for r in model.requests() if r["method"] == "POST"]
    assert posts, "codex sent no model request"
    for request in posts:
        tools = request["body"]["tools"]
        namespaces = {t["name"]: {inner["name"] for inner in t["tools"]} for t in tools if t["type"] == "namespace"}
        assert namespaces == {"mcp__agent_bridge": WORKER_TOOLS}, namespaces
        others = {t.get("name") or t["type"] for t in tools if t["type"] != "namespace"}
        assert others <= CODEX_MCP_RESOURCE_TOOLS, others
    # The adapter's view of the first request: the script sees the bridge tools by Codex's names.
    turn, offered = to_turn(posts[0]["body"])
    assert {bridge_name(name) for name in turn.tools if offered[name][0] == "mcp__agent_bridge"} == WORKER_TOOLS
    assert not [r for r in model.requests() if r["headers"].get("upgrade")], "codex tried a WebSocket"


def _chatgpt_login(home: Path) -> dict:
    """A `codex login` (ChatGPT) file with unexpired, unsigned tokens: nothing to refresh."""

    def jwt(claims: dict) -> str:
        part = lambda doc: base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()  # noqa: E731
        return f"{part({'alg': 'none'})}.{part(claims)}.sig"

    claims = {
        "exp": int(time.time()) + 86400,
        "email": "worker@example.invalid",
        "https://api.openai.com/auth": {"chatgpt_account_id": "acc", "chatgpt_plan_type": "plus"},
    }
    doc = {
        "OPENAI_API_KEY": None,
        "last_refresh": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tokens": {"id_token": jwt(claims), "access_token": jwt(claims), "refresh_token": "r", "account_id": "acc"},
    }
    home.mkdir(parents=True)
    (home / "auth.json").write_text(json.dumps(doc))
    return doc


@pytest.mark.sqlite_only(CODEX_ONLY)
def test_under_a_chatgpt_login_the_model_still_sees_only_the_bridge_tools(codex_env, tmp_path_factory, listener):
    """A ChatGPT login switches on Codex's apps, plugins and image generation (more tools, more
    traffic); the launcher switches them off. The launcher runs directly here (its own user
    home and attempt dir), on the built-in OpenAI provider with its endpoints overridden to
    loopback, and the login linked in."""
    side = tmp_path_factory.mktemp("codex-chatgpt")
    user_home = side / "home" / ".codex"
    login = _chatgpt_login(user_home)
    attempt = side / "attempt"
    attempt.mkdir(mode=0o700)
    request = attempt / "request.md"
    request.write_text(f"Message #999 from kimi is a task for you.\nMODE=silent\n{CANARY}\n")
    with ResponsesServer(side / "model-requests.jsonl") as server:
        base = server.base_url.removesuffix("/v1")
        env = {
            **os.environ,
            **codex_env,
            "HOME": str(side / "home"),
            "CODEX_HOME": str(user_home),
            "AGENT_ID": "codex",
            "AGENT_BRIDGE_MESSAGE_ID": "999",
            "AGENT_BRIDGE_PROJECT": str(PROJECT),
            "AGENT_BRIDGE_PYTHON": sys.executable,
            "AGENT_BRIDGE_ATTEMPT_DIR": str(attempt),
            "AGENT_BRIDGE_CODEX_OVERRIDES": "\n".join(
                [
                    f'chatgpt_base_url="{base}/backend-api/"',
                    f'openai_base_url="{server.base_url}"',
                    "features.enable_request_compression=false",
                ]
            ),
        }
        for name in ("AGENT_BRIDGE_CODEX_BASE_URL", "AGENT_BRIDGE_CODEX_MAX_RETRIES"):
            env.pop(name)
        done = subprocess.run(
            [str(LAUNCHER), str(request)],
            cwd=side,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        requests = server.requests()
    assert done.returncode == 0, done.stderr
    posts = [r for r in requests if r["method"] == "POST" and r["path"].endswith("/responses")]
    assert posts and all(r["headers"].get("authorization") == "Bearer <redacted>" for r in posts)
    for request_doc in posts:
        tools = request_doc["body"]["tools"]
        assert {t["name"]: {i["name"] for i in t["tools"]} for t in tools if t["type"] == "namespace"} == {
            "mcp__agent_bridge": WORKER_TOOLS
        }
        assert {t.get("name") or t["type"] for t in tools if t["type"] != "namespace"} <= CODEX_MCP_RESOURCE_TOOLS
    assert not [
        r for r in requests if "/plugins/" in r["path"] or r["path"].endswith("/ps/mcp") or "analytics" in r["path"]
    ], [r["path"] for r in requests]
    assert json.loads((user_home / "auth.json").read_text()) == login
    assert (attempt / "codex-home" / "auth.json").is_symlink()
    assert sorted(p.name for p in user_home.iterdir()) == ["auth.json"]
    leaks = [
        p
        for p in side.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and CANARY.encode() in p.read_bytes()
        and not p.is_relative_to(attempt)
        and p.name != "model-requests.jsonl"
    ]
    assert not leaks, leaks


@pytest.mark.sqlite_only(CODEX_ONLY)
def test_the_worker_home_config_requires_the_bridge_and_spells_out_its_environment(codex_env, listener):
    """Codex 0.171.0 does not wait for an MCP server unless it is required, and hands it a
    filtered environment: the generated config must say both (a fast server hides the race)."""
    configs = sorted((Path(codex_env["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts").glob("*/codex-home/config.toml"))
    assert configs
    for path in configs:
        config = tomllib.loads(path.read_text())
        server = config["mcp_servers"]["agent_bridge"]
        assert server["required"] is True
        assert server["default_tools_approval_mode"] == "approve"
        assert set(server["enabled_tools"]) == WORKER_TOOLS
        assert server["env"]["AGENT_BRIDGE_ROLE"] == "worker" and server["env"]["AGENT_ID"] == "codex"
        for name in ("AGENT_BRIDGE_DB", "AGENT_BRIDGE_CONFIG", "AGENT_BRIDGE_RUNTIME_DIR"):
            assert Path(server["env"][name]) == Path(codex_env[name]).resolve(), name
        assert server["env"]["AGENT_BRIDGE_MAX_BODY_BYTES"].isdigit() and server["env"]["AGENT_BRIDGE_LOG_LEVEL"]
        assert len(server["env"]["AGENT_BRIDGE_WORKER_TOKEN"]) >= 16
        assert config["features"]["shell_tool"] is False and config["web_search"] == "disabled"
        provider = config["model_providers"][config["model_provider"]]
        assert (provider["base_url"], provider["request_max_retries"]) == (codex_env["AGENT_BRIDGE_CODEX_BASE_URL"], 0)


@pytest.mark.sqlite_only(CODEX_ONLY)
def test_the_canary_stays_in_the_store_and_the_private_attempt_dirs(codex_env, root, user_codex_home, listener):
    store = Path(codex_env["AGENT_BRIDGE_DB"]).parent
    attempts = Path(codex_env["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts"
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
    # Inside an attempt dir only the raw event stream has it (tool results carry the message
    # text): not the private home's sqlite files, config or skills, not worker.log.
    assert private and {p.name for p in private} == {"codex-events.jsonl"}, private
    assert CANARY not in json.dumps(status(codex_env, "codex"))
    for path in private:
        assert path.name != "diagnostics.json", path
        attempt = attempts / path.relative_to(attempts).parts[0]
        assert attempt.stat().st_mode & 0o077 == 0, attempt
    # The user's Codex home holds only what the test planted; the worker's home links it.
    assert sorted(p.name for p in user_codex_home.iterdir()) == ["auth.json"]
    linked = [p for p in attempts.glob("*/codex-home/auth.json")]
    assert linked and all(p.is_symlink() and p.resolve() == user_codex_home / "auth.json" for p in linked)
    # Codex kept no session transcript (exec --ephemeral).
    assert not list(attempts.glob("*/codex-home/sessions/**/*.jsonl"))


FAKE_CODEX = """#!{python}
import json, os, sys
home = os.environ["CODEX_HOME"]
record = {{"argv": sys.argv[1:], "stdin": sys.stdin.read(), "codex_home": home, "cwd": os.getcwd(),
          "home_files": sorted(os.listdir(home)), "env": dict(os.environ)}}
open(os.environ["FAKE_CODEX_RECORD"], "w").write(json.dumps(record))
print(json.dumps({{"type": "thread.started", "thread_id": "t"}}))
sys.exit(int(os.environ.get("FAKE_CODEX_EXIT", "0")))
"""


@pytest.mark.sqlite_only(CODEX_ONLY)
def test_launcher_contract_with_a_recording_cli(tmp_path, codex_env):
    """The launcher's own promises, with a fake `codex` that records what it was given: the
    prompt on stdin only, fixed argv, a private home, the exit code passed on, and refusals."""
    fake = tmp_path / "codex"
    fake.write_text(FAKE_CODEX.format(python=sys.executable))
    fake.chmod(0o755)
    secret = f"Message #5 from kimi is a task for you.\n{CANARY}\n"

    def run(name: str, **extra: str) -> tuple[subprocess.CompletedProcess, Path]:
        attempt = tmp_path / name
        attempt.mkdir(mode=0o700)
        request = attempt / "request.md"
        request.write_text(secret)
        env = {
            **os.environ,
            **codex_env,
            "CODEX_BIN": str(fake),
            "AGENT_ID": "codex",
            "AGENT_BRIDGE_MESSAGE_ID": "5",
            "AGENT_BRIDGE_PROJECT": str(PROJECT),
            "AGENT_BRIDGE_PYTHON": sys.executable,
            "AGENT_BRIDGE_ATTEMPT_DIR": str(attempt),
            "FAKE_CODEX_RECORD": str(attempt / "record.json"),
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

    done, attempt = run("plain", FAKE_CODEX_EXIT="3", AGENT_BRIDGE_CODEX_OVERRIDES='model_reasoning_effort="low"\n')
    assert done.returncode == 3, done.stderr
    record = json.loads((attempt / "record.json").read_text())
    assert record["argv"] == [
        "exec",
        "--json",
        "--ephemeral",
        "--skip-git-repo-check",
        "--ignore-rules",
        "-c",
        'model_reasoning_effort="low"',
        "-m",
        "scripted-model",
        "-",
    ]
    assert record["stdin"] == secret
    assert CANARY not in json.dumps(record["argv"]) and CANARY not in json.dumps(record["env"])
    assert record["codex_home"] == str(attempt / "codex-home")
    assert record["home_files"] == ["auth.json", "config.toml"]
    assert (attempt / "codex-home").stat().st_mode & 0o777 == 0o700
    assert (attempt / "codex-home" / "config.toml").stat().st_mode & 0o777 == 0o600
    assert json.loads((attempt / "codex-events.jsonl").read_text())["type"] == "thread.started"

    # No user login: no link; a fixed error for each bad setting; a missing CLI is 127.
    done, attempt = run("no-login", CODEX_HOME=str(tmp_path / "nowhere"))
    assert done.returncode == 0 and json.loads((attempt / "record.json").read_text())["home_files"] == ["config.toml"]
    for name, extra in {
        "retries": {"AGENT_BRIDGE_CODEX_MAX_RETRIES": "-1"},
        "envkey": {"AGENT_BRIDGE_CODEX_ENV_KEY": "A B"},
        "override": {"AGENT_BRIDGE_CODEX_OVERRIDES": "not an override"},
    }.items():
        done, attempt = run(name, **extra)
        assert done.returncode == 2 and not (attempt / "record.json").exists(), (name, done.stderr)
    done, _ = run("missing", CODEX_BIN=str(tmp_path / "no-such-codex"))
    assert done.returncode == 127, done.stderr

    # A planted name stops the launch, and nothing is written through it.
    for planted in ("codex-home", "codex-events.jsonl"):
        target = tmp_path / f"target-{planted}"
        target.mkdir() if planted == "codex-home" else target.write_text("")
        attempt = tmp_path / f"planted-{planted}"
        attempt.mkdir(mode=0o700)
        (attempt / planted).symlink_to(target)
        request = attempt / "request.md"
        request.write_text(secret)
        env = {
            **os.environ,
            **codex_env,
            "CODEX_BIN": str(fake),
            "AGENT_ID": "codex",
            "AGENT_BRIDGE_MESSAGE_ID": "5",
            "AGENT_BRIDGE_PROJECT": str(PROJECT),
            "AGENT_BRIDGE_PYTHON": sys.executable,
            "AGENT_BRIDGE_ATTEMPT_DIR": str(attempt),
            "FAKE_CODEX_RECORD": str(attempt / "record.json"),
        }
        done = subprocess.run(
            [str(LAUNCHER), str(request)],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
        assert done.returncode != 0, planted
        assert not (attempt / "record.json").exists(), planted  # the CLI never ran
        assert (list(target.iterdir()) == []) if target.is_dir() else target.read_text() == "", planted


@pytest.mark.sqlite_only(CODEX_ONLY)
def test_a_runaway_worker_past_its_token_cap_ends_budget_exceeded_with_one_notice(codex_env, db, kimi, listener):
    """Codex 0.171.0's --json stream reports usage only in turn.completed, at the end of its
    turn: the cap is enforced at that report, with the overshoot recorded."""
    task = send_task(kimi, f"Loop.\nMODE=spend\nUSAGE={TOKEN_CAP // 10}")
    done = finished(db, task)
    assert (done["outcome"], done["cli_status"]) == ("budget_exceeded", "budget_exceeded"), done
    assert done["max_tokens"] == TOKEN_CAP and done["token_overshoot"] > 0
    notices = notices_for(db, task)
    assert len(notices) == 1 and f"max_tokens_per_task {TOKEN_CAP}" in notices[0]["text"], [dict(n) for n in notices]
