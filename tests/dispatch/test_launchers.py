"""Tests for the worker launch scripts in launchers/.

No real agent CLI is needed: each test puts a small fake CLI (a Python script) in
tmp_path that records its argv, environment, stdin, cwd and process ids, and prints
canned output. Each run gets a fresh attempt directory, as each dispatch does. The
diagnostics are derived afterwards by ``cli_results.cli_diagnostics``, as the
supervisor does once the worker is gone (the launchers exec the CLI).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from harness import PROJECT as ROOT
from models import script

from dispatcher.dispatch.cli_results import cli_diagnostics

LAUNCHERS = ROOT / "launchers"
AGENT = LAUNCHERS / "agent_headless.sh"  # the CLI the config names, told in AGENT_BRIDGE_CLI
CLAUDE = LAUNCHERS / "claude_headless.sh"
KIMI = LAUNCHERS / "kimi_headless.sh"
CODEX = LAUNCHERS / "codex_headless.sh"
GEMINI = LAUNCHERS / "gemini_headless.sh"
COMMAND = LAUNCHERS / "command_headless.sh"
OPENCODE = LAUNCHERS / "opencode_headless.sh"

TASK_TEXT = "TOP-SECRET-TASK-7f3a: please rename the widget"
MODEL_TEXT = "MODEL-TEXT-SECRET-91c2"
TOOL_INPUT = "TOOL-INPUT-SECRET-55d0"
WORKER_TOOLS = list(script.WORKER_TOOLS)

CLAUDE_DIAG_KEYS = {
    "result_json",
    "is_error",
    "subtype",
    "terminal_reason",
    "num_turns",
    "total_cost_usd",
    "duration_ms",
    "api_error_status",
    "permission_denials_count",
    "denied_tools",
    # the ledger's common keys (cli_results.LEDGER_KEYS)
    "cli",
    "cli_status",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
}

FAKE_CLI = r'''#!{python}
"""Fake agent CLI: records what it was given, prints canned output."""
import json, os, sys
stdin = sys.stdin.read()
record = {{"argv": sys.argv[1:], "env": dict(os.environ), "stdin": stdin, "cwd": os.getcwd(),
          "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0)}}
home = os.environ.get("KIMI_CODE_HOME")
if home:
    files = {{}}
    for name in sorted(os.listdir(home)):
        p = os.path.join(home, name)
        files[name] = {{"link": os.readlink(p) if os.path.islink(p) else None}}
    record["kimi_home"] = files
    with open(os.path.join(home, "mcp.json")) as fh:
        record["kimi_mcp"] = json.load(fh)
    wire = os.environ.get("FAKE_WIRE")
    if wire:
        d = os.path.join(home, "sessions", "wd_x", "session_1", "agents", "main")
        os.makedirs(d)
        with open(os.path.join(d, "wire.jsonl"), "w") as fh:
            fh.write(wire)
with open(os.environ["FAKE_RECORD"], "w") as fh:
    json.dump(record, fh)
out = os.environ.get("FAKE_OUTPUT_FILE")
if out:
    with open(out) as fh:
        sys.stdout.write(fh.read())
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
'''


def make_fake(path: Path) -> Path:
    path.write_text(FAKE_CLI.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def ctx(tmp_path: Path):
    """A workspace, a private request file and attempt dir, and the supervisor env."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    request = tmp_path / "request.txt"
    request.write_text(TASK_TEXT + "\n")
    request.chmod(0o600)
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "AGENT_ID": "claude",
        "AGENT_BRIDGE_MESSAGE_ID": "4711",
        "AGENT_BRIDGE_DB": str(tmp_path / "bridge.sqlite"),
        "AGENT_BRIDGE_CONFIG": str(tmp_path / "config.json"),
        "AGENT_BRIDGE_PROJECT": str(ROOT),
        "AGENT_BRIDGE_PYTHON": sys.executable,
        "AGENT_BRIDGE_DIAGNOSTICS_FILE": str(tmp_path / "diagnostics.json"),
        "AGENT_BRIDGE_RUNTIME_DIR": str(tmp_path / "runtime"),
        "AGENT_BRIDGE_MAX_BODY_BYTES": "65536",
        "AGENT_BRIDGE_LOG_LEVEL": "INFO",
        "AGENT_BRIDGE_WORKER_TOKEN": "tok-4711",
        "FAKE_RECORD": str(tmp_path / "record.json"),
    }
    s = {
        "tmp": tmp_path,
        "ws": workspace,
        "runs": 0,
        "request": request,
        "home": home,
        "env": env,
        "fake": make_fake(tmp_path / "fake-cli"),
    }
    new_attempt(s)
    return s


def new_attempt(s: dict) -> Path:
    """A fresh private attempt directory, as the supervisor makes for each dispatch."""
    s["runs"] += 1
    s["attempt"] = s["tmp"] / f"attempt-{s['runs']}"
    s["attempt"].mkdir(mode=0o700)
    s["env"]["AGENT_BRIDGE_ATTEMPT_DIR"] = str(s["attempt"])
    return s["attempt"]


def run(script: Path, s: dict, *, fresh: bool = True, **extra: str) -> subprocess.CompletedProcess:
    """Run the launcher in its own session, as the supervisor does."""
    if fresh:
        new_attempt(s)
    env = dict(s["env"])
    env.update(extra)
    proc = subprocess.run(
        [str(script), str(s["request"])],
        cwd=s["ws"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    s["rc"] = proc.returncode
    return proc


def record(s: dict) -> dict:
    return json.loads(Path(s["env"]["FAKE_RECORD"]).read_text())


def diagnostics(s: dict) -> dict:
    """What the supervisor records once the worker of the last run is gone."""
    return cli_diagnostics(s["attempt"], s["rc"])


def assert_task_not_exposed(rec: dict) -> None:
    assert not any(TASK_TEXT in a for a in rec["argv"]), "task text leaked into argv"
    assert not any(TASK_TEXT in v for v in rec["env"].values()), "task text leaked into env"


def write_output(s: dict, text: str) -> str:
    path = s["tmp"] / "fake-output"
    path.write_text(text)
    return str(path)


# --------------------------------------------------------------------------- claude


def claude_result(**overrides) -> str:
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "num_turns": 3,
        "result": MODEL_TEXT,
        "session_id": "0f2ed0b9-aaaa",
        "terminal_reason": "completed",
        "duration_ms": 1234,
        "total_cost_usd": 0.0042,
        "api_error_status": None,
        "permission_denials": [
            {"tool_name": "Bash", "tool_use_id": "t1", "tool_input": {"command": TOOL_INPUT}},
            {"tool_name": "Write", "tool_use_id": "t2", "tool_input": {"content": TOOL_INPUT}},
        ],
    }
    result.update(overrides)
    return json.dumps(result) + "\n"


def test_claude_prompt_only_on_stdin_and_policy_flags(ctx):
    s = ctx
    proc = run(CLAUDE, s, CLAUDE_BIN=str(s["fake"]), FAKE_OUTPUT_FILE=write_output(s, claude_result()))
    assert proc.returncode == 0, proc.stderr
    rec = record(s)
    assert rec["stdin"] == TASK_TEXT + "\n"
    assert_task_not_exposed(rec)
    assert rec["cwd"] == str(s["ws"])

    argv = rec["argv"]
    assert argv[0] == "-p"
    assert argv[argv.index("--output-format") + 1] == "stream-json" and "--verbose" in argv
    assert "--strict-mcp-config" in argv
    assert argv[argv.index("--tools") + 1] == ""
    allowed = argv[argv.index("--allowedTools") + 1].split(",")
    assert allowed == [f"mcp__agent_bridge__{name}" for name in WORKER_TOOLS]
    assert not any("*" in name or name.endswith(("__listener", "__start_conversation")) for name in allowed)
    assert argv[argv.index("--permission-mode") + 1] == "dontAsk"
    assert argv[argv.index("--permission-prompts") + 1] == "none"
    assert "--max-turns" not in argv
    for forbidden in ("bypassPermissions", "--dangerously-skip-permissions", "--allow-dangerously-skip-permissions"):
        assert forbidden not in argv
    # Every variadic flag is followed by another option: nothing for it to swallow.
    for flag in ("--mcp-config", "--tools", "--allowedTools"):
        nxt = argv.index(flag) + 2
        assert nxt < len(argv) and argv[nxt].startswith("-"), flag

    assert rec["env"]["ENABLE_TOOL_SEARCH"] == "false"
    assert rec["env"]["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert "IS_SANDBOX" not in rec["env"]


def test_claude_mcp_config_has_only_the_bridge(ctx):
    s = ctx
    proc = run(CLAUDE, s, CLAUDE_BIN=str(s["fake"]), FAKE_OUTPUT_FILE=write_output(s, claude_result()))
    assert proc.returncode == 0, proc.stderr
    argv = record(s)["argv"]
    config_path = Path(argv[argv.index("--mcp-config") + 1])
    assert config_path.parent == s["attempt"]
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600
    config = json.loads(config_path.read_text())
    assert list(config["mcpServers"]) == ["agent_bridge"]
    server = config["mcpServers"]["agent_bridge"]
    assert server["command"] == sys.executable
    assert server["args"] == [str(ROOT / "server.py")]
    assert server["type"] == "stdio"
    assert server["env"] == worker_server_env(s)


def worker_server_env(s: dict, agent: str = "claude") -> dict:
    """The worker's bridge server runs as a worker, on exactly the supervisor's resolved settings."""
    passed = (
        "AGENT_BRIDGE_DB",
        "AGENT_BRIDGE_CONFIG",
        "AGENT_BRIDGE_RUNTIME_DIR",
        "AGENT_BRIDGE_MAX_BODY_BYTES",
        "AGENT_BRIDGE_LOG_LEVEL",
        "AGENT_BRIDGE_WORKER_TOKEN",
        "AGENT_BRIDGE_MESSAGE_ID",
    )
    return {"AGENT_ID": agent, "AGENT_BRIDGE_ROLE": "worker", **{name: s["env"][name] for name in passed}}


def test_the_launchers_exec_the_cli_so_it_leads_the_process_group(ctx):
    """Containment: nothing of the launcher stays between the supervisor and the CLI."""
    s = ctx
    for launcher, extra in (
        (CLAUDE, {"CLAUDE_BIN": str(s["fake"])}),
        (KIMI, {"KIMI_BIN": str(s["fake"])}),
        (CODEX, {"CODEX_BIN": str(s["fake"])}),
        (GEMINI, {"GEMINI_BIN": str(s["fake"])}),
        (OPENCODE, {"OPENCODE_BIN": str(s["fake"])}),
        (COMMAND, {"AGENT_BRIDGE_WORKER_COMMAND": str(s["fake"])}),
    ):
        proc = run(launcher, s, **extra)
        assert proc.returncode == 0, proc.stderr
        rec = record(s)
        assert rec["pid"] == rec["pgid"], launcher.name  # the session's leader is the CLI itself
        assert rec["ppid"] == os.getpid(), launcher.name  # ... started directly, with no shell left above it


def test_optional_worker_settings_are_left_out_when_unset(ctx):
    s = ctx
    for name in (
        "AGENT_BRIDGE_RUNTIME_DIR",
        "AGENT_BRIDGE_MAX_BODY_BYTES",
        "AGENT_BRIDGE_LOG_LEVEL",
        "AGENT_BRIDGE_WORKER_TOKEN",
    ):
        del s["env"][name]
    run(CLAUDE, s, CLAUDE_BIN=str(s["fake"]))
    config = json.loads((s["attempt"] / "claude-mcp-config.json").read_text())
    assert config["mcpServers"]["agent_bridge"]["env"] == {
        "AGENT_ID": "claude",
        "AGENT_BRIDGE_ROLE": "worker",
        "AGENT_BRIDGE_DB": s["env"]["AGENT_BRIDGE_DB"],
        "AGENT_BRIDGE_CONFIG": s["env"]["AGENT_BRIDGE_CONFIG"],
        "AGENT_BRIDGE_MESSAGE_ID": s["env"]["AGENT_BRIDGE_MESSAGE_ID"],  # required: the launcher refuses without it
    }


@pytest.mark.parametrize(
    ("script", "name"),
    [
        (CLAUDE, "claude-mcp-config.json"),
        (CLAUDE, "claude-result.json"),
        (KIMI, "kimi-code-home"),
        (KIMI, "kimi-agent-bridge-worker.md"),
        (KIMI, "kimi-stream.jsonl"),
        (CODEX, "codex-home"),
        (CODEX, "codex-events.jsonl"),
        (GEMINI, "gemini-home"),
        (GEMINI, "gemini-mcp-config.json"),
        (GEMINI, "gemini-result.json"),
        (GEMINI, "tmp"),
        (OPENCODE, "opencode-home"),
        (OPENCODE, "opencode-events.jsonl"),
        (OPENCODE, "tmp"),
    ],
)
def test_a_planted_name_in_the_attempt_dir_stops_the_launch(ctx, script, name):
    s = ctx
    victim_dir = s["tmp"] / "victim-dir"
    victim_dir.mkdir()
    victim = victim_dir / "victim.txt"
    victim.write_text("victim\n")
    attempt = new_attempt(s)
    is_dir = name in ("kimi-code-home", "codex-home", "gemini-home", "opencode-home", "tmp")
    (attempt / name).symlink_to(victim_dir if is_dir else victim)
    proc = run(
        script,
        s,
        fresh=False,
        CLAUDE_BIN=str(s["fake"]),
        KIMI_BIN=str(s["fake"]),
        CODEX_BIN=str(s["fake"]),
        GEMINI_BIN=str(s["fake"]),
        OPENCODE_BIN=str(s["fake"]),
    )
    assert proc.returncode != 0
    assert victim.read_text() == "victim\n"
    assert [p.name for p in victim_dir.iterdir()] == ["victim.txt"]
    assert not Path(s["env"]["FAKE_RECORD"]).exists()  # the CLI never ran


def test_claude_diagnostics_are_payload_free(ctx):
    s = ctx
    proc = run(CLAUDE, s, CLAUDE_BIN=str(s["fake"]), FAKE_OUTPUT_FILE=write_output(s, claude_result()))
    assert proc.returncode == 0, proc.stderr
    diag = diagnostics(s)
    assert set(diag) == CLAUDE_DIAG_KEYS
    assert diag == {
        "result_json": "ok",
        "is_error": False,
        "subtype": "success",
        "terminal_reason": "completed",
        "num_turns": 3,
        "total_cost_usd": 0.0042,
        "duration_ms": 1234,
        "api_error_status": None,
        "permission_denials_count": 2,
        "denied_tools": ["Bash", "Write"],
        "cli": "claude",
        "cli_status": "ok",
        "cost_usd": 0.0042,
        "input_tokens": None,
        "output_tokens": None,
        "cache_read_tokens": None,
        "cache_write_tokens": None,
    }
    raw = json.dumps(diag)
    for secret in (MODEL_TEXT, TOOL_INPUT, TASK_TEXT):
        assert secret not in raw
        assert secret not in proc.stdout and secret not in proc.stderr
    assert proc.stdout == ""
    raw_result = s["attempt"] / "claude-result.json"
    assert MODEL_TEXT in raw_result.read_text()
    assert stat.S_IMODE(raw_result.stat().st_mode) == 0o600


def test_claude_exit_code_and_error_result_pass_through(ctx):
    s = ctx
    out = claude_result(
        is_error=True,
        terminal_reason="api_error",
        api_error_status=500,
        result="API Error: 500 " + MODEL_TEXT,
        permission_denials=[],
    )
    proc = run(CLAUDE, s, CLAUDE_BIN=str(s["fake"]), FAKE_EXIT="1", FAKE_OUTPUT_FILE=write_output(s, out))
    assert proc.returncode == 1
    diag = diagnostics(s)
    assert diag["is_error"] is True
    assert diag["terminal_reason"] == "api_error"
    assert diag["api_error_status"] == 500
    assert diag["permission_denials_count"] == 0


def test_claude_non_enum_strings_are_dropped(ctx):
    s = ctx
    out = claude_result(subtype="free text " + MODEL_TEXT, terminal_reason=["x"], num_turns="3")
    run(CLAUDE, s, CLAUDE_BIN=str(s["fake"]), FAKE_OUTPUT_FILE=write_output(s, out))
    diag = diagnostics(s)
    assert diag["subtype"] is None and diag["terminal_reason"] is None and diag["num_turns"] is None


def test_claude_unparseable_or_missing_output(ctx):
    s = ctx
    run(CLAUDE, s, CLAUDE_BIN=str(s["fake"]), FAKE_OUTPUT_FILE=write_output(s, "not json " + MODEL_TEXT))
    diag = diagnostics(s)
    assert set(diag) == CLAUDE_DIAG_KEYS
    assert diag["result_json"] == "invalid"
    assert MODEL_TEXT not in json.dumps(diag)

    proc = run(CLAUDE, s, CLAUDE_BIN=str(s["fake"]), FAKE_EXIT="3")
    assert proc.returncode == 3
    assert diagnostics(s)["result_json"] == "missing"


def test_claude_max_turns(ctx):
    s = ctx
    run(CLAUDE, s, CLAUDE_BIN=str(s["fake"]), AGENT_BRIDGE_MAX_TURNS="7")
    argv = record(s)["argv"]
    assert argv[argv.index("--max-turns") + 1] == "7"

    proc = run(CLAUDE, s, CLAUDE_BIN=str(s["fake"]), AGENT_BRIDGE_MAX_TURNS="lots")
    assert proc.returncode == 2
    assert "AGENT_BRIDGE_MAX_TURNS" in proc.stderr


def test_claude_missing_binary_exits_127(ctx):
    s = ctx
    proc = run(CLAUDE, s, CLAUDE_BIN=str(s["tmp"] / "no-such-claude"))
    assert proc.returncode == 127
    assert "not found" in proc.stderr


def test_claude_default_binary_is_claude_on_path(ctx):
    s = ctx
    bindir = s["tmp"] / "bin"
    bindir.mkdir()
    make_fake(bindir / "claude")
    env_path = f"{bindir}{os.pathsep}{s['env']['PATH']}"
    proc = run(CLAUDE, s, PATH=env_path, FAKE_OUTPUT_FILE=write_output(s, claude_result()))
    assert proc.returncode == 0, proc.stderr
    assert record(s)["argv"][0] == "-p"


def test_the_generic_launcher_runs_the_cli_the_supervisor_names_as_its_own_launcher_does(ctx):
    """launchers/agent_headless.sh with AGENT_BRIDGE_CLI=claude is claude_headless.sh's run."""
    s = ctx
    output = write_output(s, claude_result())
    runs = []
    for launcher, extra in ((CLAUDE, {}), (AGENT, {"AGENT_BRIDGE_CLI": "claude"})):
        proc = run(launcher, s, CLAUDE_BIN=str(s["fake"]), FAKE_OUTPUT_FILE=output, **extra)
        assert proc.returncode == 0, proc.stderr
        rec = record(s)
        runs.append([a.replace(str(s["attempt"]), "<attempt>") for a in rec["argv"]])
        assert rec["stdin"] == TASK_TEXT + "\n" and diagnostics(s)["cli"] == "claude"
    assert runs[0] == runs[1]


@pytest.mark.parametrize(
    ("word", "said"),
    [
        (None, 'agent_headless.sh: AGENT_BRIDGE_CLI is not set: the supervisor sets it from the agent\'s "cli"'),
        ("nosuchcli", "agent_headless.sh: 'nosuchcli' is not a CLI the bridge has (registered: claude, "),
        ("declared", "agent_headless.sh: agent claude declares no cli in config.json"),
    ],
)
def test_the_generic_launcher_without_a_cli_it_can_run_is_a_bad_invocation(ctx, word, said):
    s = ctx
    (s["tmp"] / "config.json").write_text(json.dumps({"agents": {"claude": {"cli": "claude"}}}))
    (s["tmp"] / "config.json").chmod(0o600)
    proc = run(AGENT, s, CLAUDE_BIN=str(s["fake"]), **({"AGENT_BRIDGE_CLI": word} if word else {}))
    assert proc.returncode == 2 and proc.stderr.startswith(said), proc.stderr
    assert not Path(s["env"]["FAKE_RECORD"]).exists()  # no CLI ran


@pytest.mark.parametrize("script", [AGENT, CLAUDE, KIMI])
def test_missing_supervisor_env_exits_2(ctx, script):
    s = ctx
    env = dict(s["env"], AGENT_BRIDGE_CLI="kimi")
    del env["AGENT_BRIDGE_ATTEMPT_DIR"]
    proc = subprocess.run(
        [str(script), str(s["request"])],
        cwd=s["ws"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "AGENT_BRIDGE_ATTEMPT_DIR" in proc.stderr


# ----------------------------------------------------------------------------- kimi


def kimi_stream() -> str:
    lines = [
        {"role": "meta", "type": "system.version", "version": "2.1.0"},
        {
            "role": "meta",
            "type": "turn.step.retrying",
            "failed_attempt": 1,
            "next_attempt": 2,
            "max_attempts": 10,
            "delay_ms": 10,
            "error_name": "APIStatusError",
            "error_message": MODEL_TEXT,
            "status_code": 500,
        },
        {
            "role": "assistant",
            "content": MODEL_TEXT,
            "tool_calls": [
                {
                    "type": "function",
                    "id": "t1",
                    "function": {"name": "mcp__agent_bridge__send_message", "arguments": json.dumps({"x": TOOL_INPUT})},
                },
                {"type": "function", "id": "t2", "function": {"name": "Read", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": TOOL_INPUT},
        {"role": "tool", "tool_call_id": "t2", "content": TASK_TEXT},
        {"role": "assistant", "content": "FINAL " + MODEL_TEXT},
        {
            "role": "meta",
            "type": "session.resume_hint",
            "session_id": "session_1",
            "command": "kimi -r session_1",
            "content": "To resume this session: kimi -r session_1",
        },
    ]
    return "".join(json.dumps(line) + "\n" for line in lines)


def kimi_user_home(s: dict) -> Path:
    home = s["home"] / ".kimi-code"
    (home / "credentials").mkdir(parents=True)
    (home / "credentials" / "kimi-code.json").write_text('{"access_token": "tok"}')
    (home / "config.toml").write_text('default_model = "k"\n')
    (home / "region").write_text("global\n")
    (home / "mcp.json").write_text('{"mcpServers": {"users_own": {"command": "/bin/false"}}}')
    return home


def test_kimi_fixed_instruction_and_private_home(ctx):
    s = ctx
    user_home = kimi_user_home(s)
    before = sorted(p.name for p in user_home.iterdir())
    proc = run(KIMI, s, KIMI_BIN=str(s["fake"]), AGENT_ID="kimi", FAKE_OUTPUT_FILE=write_output(s, kimi_stream()))
    assert proc.returncode == 0, proc.stderr
    rec = record(s)
    assert_task_not_exposed(rec)
    assert rec["stdin"] == ""

    argv = rec["argv"]
    assert argv[argv.index("--output-format") + 1] == "stream-json"
    assert argv[-2] == "-p"
    instruction = argv[-1]
    assert "4711" in instruction and str(s["request"]) in instruction
    for forbidden in ("--yolo", "-y", "--auto", "--plan", "--yes", "--auto-approve"):
        assert forbidden not in argv

    worker_home = Path(rec["env"]["KIMI_CODE_HOME"])
    assert worker_home.parent == s["attempt"]
    assert rec["kimi_mcp"]["mcpServers"].keys() == {"agent_bridge"}
    server = rec["kimi_mcp"]["mcpServers"]["agent_bridge"]
    assert server["command"] == sys.executable
    assert server["args"] == [str(ROOT / "server.py")]
    assert server["env"] == worker_server_env(s, "kimi")
    assert rec["kimi_home"]["config.toml"]["link"] == str(user_home / "config.toml")
    assert rec["kimi_home"]["credentials"]["link"] == str(user_home / "credentials")
    assert rec["kimi_home"]["region"]["link"] == str(user_home / "region")
    assert rec["kimi_home"]["mcp.json"]["link"] is None
    assert rec["env"]["KIMI_DISABLE_TELEMETRY"] == "1"
    assert rec["env"]["KIMI_CODE_NO_AUTO_UPDATE"] == "1"
    # The user's own Kimi home is left as it was.
    assert sorted(p.name for p in user_home.iterdir()) == before
    assert "users_own" in (user_home / "mcp.json").read_text()


def test_kimi_agent_file_limits_tools(ctx):
    s = ctx
    run(KIMI, s, KIMI_BIN=str(s["fake"]))
    argv = record(s)["argv"]
    agent_file = Path(argv[argv.index("--agent-file") + 1])
    assert agent_file.parent == s["attempt"]
    text = agent_file.read_text()
    front = text.split("---")[1]
    tools = [line.removeprefix("  - ") for line in front.splitlines() if line.startswith("  - ")]
    assert tools == ["Read"] + [f"mcp__agent_bridge__{name}" for name in WORKER_TOOLS]
    assert "${base_prompt}" in text
    assert TASK_TEXT not in text


def test_kimi_profile_above_bridge_writes_the_tools_and_a_private_config_with_the_hook(ctx):
    s = ctx
    user_home = kimi_user_home(s)
    (user_home / "config.toml").write_text("[loop_control]\nmax_attempts_per_step = 3\n")
    profile = json.dumps({"level": "shell", "allow_commands": ["git status"], "extra_dirs": []})
    proc = run(KIMI, s, KIMI_BIN=str(s["fake"]), AGENT_BRIDGE_PERMISSIONS=profile)
    assert proc.returncode == 0, proc.stderr
    argv = record(s)["argv"]
    front = Path(argv[argv.index("--agent-file") + 1]).read_text().split("---")[1]
    tools = [line.removeprefix("  - ") for line in front.splitlines() if line.startswith("  - ")]
    assert tools == ["Read", "Glob", "Grep", "Write", "Edit", "Bash"] + [
        f"mcp__agent_bridge__{name}" for name in WORKER_TOOLS
    ]
    rec = record(s)["kimi_home"]
    assert rec["config.toml"]["link"] is None  # a private copy, not the user's file
    config = tomllib.loads((s["attempt"] / "kimi-code-home" / "config.toml").read_text())
    assert config["loop_control"] == {"max_attempts_per_step": 3}  # the user's settings kept
    [hook] = config["hooks"]
    assert hook["event"] == "PreToolUse" and "kimi_hook.py" in hook["command"] and hook["timeout"] == 300
    assert (user_home / "config.toml").read_text() == "[loop_control]\nmax_attempts_per_step = 3\n"


def test_kimi_level_project_is_refused_with_78_and_an_invalid_profile_with_2(ctx):
    s = ctx
    proc = run(KIMI, s, KIMI_BIN=str(s["fake"]), AGENT_BRIDGE_PERMISSIONS='{"level":"project"}')
    assert proc.returncode == 78
    assert proc.stderr.count("\n") == 1 and "level project cannot be enforced by Kimi Code 2.1.0" in proc.stderr
    assert not Path(s["env"]["FAKE_RECORD"]).exists()  # Kimi never started
    proc = run(KIMI, s, KIMI_BIN=str(s["fake"]), AGENT_BRIDGE_PERMISSIONS='{"level":"everything"}')
    assert proc.returncode == 2 and proc.stderr.startswith("kimi_headless.sh: AGENT_BRIDGE_PERMISSIONS is not")
    assert not Path(s["env"]["FAKE_RECORD"]).exists()


def test_kimi_diagnostics(ctx):
    s = ctx
    wire = "".join(
        json.dumps(e) + "\n"
        for e in [
            {"type": "turn.prompt", "input": [{"type": "text", "text": MODEL_TEXT}]},
            {
                "type": "turn.ended",
                "reason": "failed",
                "error": {"code": "provider.api_error", "message": MODEL_TEXT, "name": "APIStatusError"},
            },
        ]
    )
    proc = run(
        KIMI, s, KIMI_BIN=str(s["fake"]), FAKE_EXIT="1", FAKE_WIRE=wire, FAKE_OUTPUT_FILE=write_output(s, kimi_stream())
    )
    assert proc.returncode == 1
    diag = diagnostics(s)
    assert diag == {
        "stream_json": "ok",
        "exit_code": 1,
        "cli_version": "2.1.0",
        "assistant_messages": 2,
        "tool_calls": 2,
        "bridge_tool_calls": 1,
        "tool_results": 2,
        "retries": 1,
        "last_retry_error_name": "APIStatusError",
        "last_retry_status_code": 500,
        "completed_with_resume_hint": True,
        "unparsed_lines": 0,
        "turn_reason": "failed",
        "turn_error_code": "provider.api_error",
        "turn_error_name": "APIStatusError",
        "turn_error_retryable": None,
        "cli": "kimi",
        "cli_status": "api_error",
        "cost_usd": None,
        "input_tokens": None,
        "output_tokens": None,
        "cache_read_tokens": None,
        "cache_write_tokens": None,
        "denied_tools": [],
    }
    raw = json.dumps(diag)
    for secret in (MODEL_TEXT, TOOL_INPUT, TASK_TEXT):
        assert secret not in raw
        assert secret not in proc.stdout and secret not in proc.stderr
    for value in diag.values():
        assert value is None or isinstance(value, (bool, int, float)) or len(value) <= 64


def test_kimi_max_turns_maps_to_step_limit(ctx):
    s = ctx
    run(KIMI, s, KIMI_BIN=str(s["fake"]), AGENT_BRIDGE_MAX_TURNS="9")
    assert record(s)["env"]["KIMI_LOOP_MAX_STEPS_PER_TURN"] == "9"
    run(KIMI, s, KIMI_BIN=str(s["fake"]), AGENT_BRIDGE_MAX_TURNS="9", KIMI_LOOP_MAX_STEPS_PER_TURN="4")
    assert record(s)["env"]["KIMI_LOOP_MAX_STEPS_PER_TURN"] == "4"


def test_kimi_missing_binary_exits_127(ctx):
    s = ctx
    proc = run(KIMI, s, KIMI_BIN=str(s["tmp"] / "no-such-kimi"))
    assert proc.returncode == 127
    assert "not found" in proc.stderr


def test_kimi_node_override(ctx):
    s = ctx
    # KIMI_NODE runs KIMI_BIN as a script argument of the given interpreter.
    proc = run(KIMI, s, KIMI_BIN=str(s["fake"]), KIMI_NODE=sys.executable)
    assert proc.returncode == 0, proc.stderr
    assert "--agent-file" in record(s)["argv"]


# -------------------------------------------------------------------------- command


def test_command_requires_worker_command(ctx):
    proc = run(COMMAND, ctx)
    assert proc.returncode == 2
    assert "AGENT_BRIDGE_WORKER_COMMAND" in proc.stderr


def test_command_gets_request_path_as_first_argument(ctx):
    s = ctx
    proc = run(COMMAND, s, AGENT_BRIDGE_WORKER_COMMAND=f"{s['fake']} --flag", FAKE_EXIT="5")
    assert proc.returncode == 5
    rec = record(s)
    assert rec["argv"] == ["--flag", str(s["request"])]
    assert rec["stdin"] == ""
    assert rec["cwd"] == str(s["ws"])
    assert_task_not_exposed(rec)
    for key in (
        "AGENT_ID",
        "AGENT_BRIDGE_MESSAGE_ID",
        "AGENT_BRIDGE_DB",
        "AGENT_BRIDGE_CONFIG",
        "AGENT_BRIDGE_PROJECT",
        "AGENT_BRIDGE_PYTHON",
        "AGENT_BRIDGE_ATTEMPT_DIR",
        "AGENT_BRIDGE_DIAGNOSTICS_FILE",
    ):
        assert rec["env"][key] == s["env"][key]
    assert rec["env"]["AGENT_BRIDGE_REQUEST_FILE"] == str(s["request"])


def test_command_not_found_exits_127(ctx):
    s = ctx
    proc = run(COMMAND, s, AGENT_BRIDGE_WORKER_COMMAND=str(s["tmp"] / "no-such-worker"))
    assert proc.returncode == 127


# ------------------------------------------------------------------------ all three


@pytest.mark.parametrize("script", [AGENT, CLAUDE, KIMI, CODEX, GEMINI, OPENCODE, COMMAND])
def test_scripts_are_executable_strict_bash(script):
    assert os.access(script, os.X_OK)
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    subprocess.run(["bash", "-n", str(script)], check=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_scripts_are_shellcheck_clean():
    proc = subprocess.run(
        ["shellcheck", "-x", *map(str, sorted(LAUNCHERS.glob("*.sh")))],
        cwd=LAUNCHERS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("script", [AGENT, CLAUDE, KIMI, CODEX, GEMINI, OPENCODE, COMMAND])
def test_bad_request_file_exits_2(ctx, script):
    s = ctx
    env = dict(s["env"], AGENT_BRIDGE_WORKER_COMMAND="true", AGENT_BRIDGE_CLI="claude")
    proc = subprocess.run(
        [str(script), str(s["tmp"] / "missing.txt")],
        cwd=s["ws"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2


# -- claude_headless.sh flags added after the real runs: no session transcript, the non-worker
# bridge tools removed from what the model is offered, and the per-task budget ----------------

NON_WORKER = ["mcp__agent_bridge__start_conversation", "mcp__agent_bridge__listener"]


def test_no_session_persistence_and_non_worker_tools_not_offered(ctx):
    proc = run(CLAUDE, ctx, CLAUDE_BIN=str(ctx["fake"]), FAKE_OUTPUT_FILE=write_output(ctx, claude_result()))
    assert proc.returncode == 0, proc.stderr
    argv = record(ctx)["argv"]
    assert "--no-session-persistence" in argv
    assert argv[argv.index("--disallowedTools") + 1].split(",") == NON_WORKER
    # variadic: followed by another option, so it cannot swallow anything
    assert argv[argv.index("--disallowedTools") + 2].startswith("-")
    assert "--max-budget-usd" not in argv
    assert "CLAUDE_CONFIG_DIR" not in record(ctx)["env"]  # the user's own config dir is left alone


def test_the_user_config_dir_is_passed_through_unchanged(ctx):
    run(CLAUDE, ctx, CLAUDE_BIN=str(ctx["fake"]), CLAUDE_CONFIG_DIR="/somewhere/.claude")
    assert record(ctx)["env"]["CLAUDE_CONFIG_DIR"] == "/somewhere/.claude"


@pytest.mark.parametrize("budget", ["0.25", "3", ".5", "10.00"])
def test_max_cost_becomes_max_budget_usd(ctx, budget):
    proc = run(CLAUDE, ctx, CLAUDE_BIN=str(ctx["fake"]), AGENT_BRIDGE_MAX_COST_USD=budget)
    assert proc.returncode == 0, proc.stderr
    argv = record(ctx)["argv"]
    assert argv[argv.index("--max-budget-usd") + 1] == budget


@pytest.mark.parametrize("budget", ["0", "0.0", "-1", "abc", "1e3", "1.", "1 2", "$5"])
def test_a_bad_max_cost_is_a_bad_invocation(ctx, budget):
    proc = run(CLAUDE, ctx, CLAUDE_BIN=str(ctx["fake"]), AGENT_BRIDGE_MAX_COST_USD=budget)
    assert proc.returncode == 2
    assert "AGENT_BRIDGE_MAX_COST_USD" in proc.stderr
