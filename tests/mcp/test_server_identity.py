"""Identity and payload-free diagnostics of the MCP server process."""

import os
import re
import subprocess
import sys

import pytest
from harness import PROJECT, McpAgent


def run_server(env, **extra):
    return subprocess.run(
        [sys.executable, str(PROJECT / "server.py")],
        env={**os.environ, **env, **extra},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("agent_id", [None, "", "cclocal", "Claude", "claude\n"])
def test_server_refuses_undeclared_agent_before_handshake(env, agent_id):
    extra = {} if agent_id is None else {"AGENT_ID": agent_id}
    base = {k: v for k, v in env.items()}
    environ = {k: v for k, v in os.environ.items() if k != "AGENT_ID"}
    proc = subprocess.run(
        [sys.executable, str(PROJECT / "server.py")],
        env={**environ, **base, **extra},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""  # nothing on the protocol stream
    assert "claude, kimi" in proc.stderr


def test_malformed_config_stops_the_server_with_the_reason(env, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"agents": {"claude": {"auto": "yes"}}}')
    proc = run_server(env, AGENT_ID="claude", AGENT_BRIDGE_CONFIG=str(bad))
    assert proc.returncode == 2 and "agents.claude.auto" in proc.stderr and str(bad) in proc.stderr


def test_logs_and_error_file_never_carry_message_text(env, bridge_root, tmp_path):
    secret = "SECRET-7f3a9c-do-not-log"
    stderr_file = tmp_path / "server.stderr"
    agent = McpAgent(
        "claude",
        {**env, "AGENT_BRIDGE_MAX_BODY_BYTES": "100", "AGENT_BRIDGE_LOG_LEVEL": "DEBUG"},
        stderr_path=stderr_file,
    )
    try:
        agent.ok("send_message", recipient="kimi", text=f"{secret} ok")
        # Refusals are logged (with codes); the text must not be.
        assert agent.call("send_message", recipient="kimi", text=secret * 10).code == "text_too_large"
        assert agent.call("send_message", recipient="nobody", text=secret).code == "unknown_recipient"
        assert agent.call("start_conversation", recipient="kimi", goal=secret * 10).code == "text_too_large"
    finally:
        agent.close()
    error_log = bridge_root / "runtime" / "errors.log"
    assert error_log.exists() and error_log.stat().st_mode & 0o777 == 0o600
    for path in bridge_root.rglob("*"):
        if path.is_file() and not path.name.startswith("bridge.db"):
            assert secret not in path.read_text(errors="replace"), path
    logged = stderr_file.read_text()
    assert "text_too_large" in logged  # the refusals were logged, by code
    assert secret not in logged


def test_a_python_without_the_dependencies_gets_one_line_with_the_fix(env, tmp_path):
    """`python3 server.py` with a Python that has none of the dependencies (here: no site-packages,
    `-S`) used to end in a ModuleNotFoundError traceback that read like a bug in agent-bridge."""
    proc = subprocess.run(
        [sys.executable, "-S", str(PROJECT / "server.py")],
        env={**os.environ, **env, "AGENT_ID": "claude"},
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("agent-bridge: missing_dependency: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert f"uv run --directory {PROJECT} python server.py" in proc.stderr and "Traceback" not in proc.stderr


def test_the_servers_dependency_list_is_the_projects():
    """server.py looks its dependencies up before it imports anything of ours: the same list as
    pyproject.toml's (click, and tomlkit for registering CLIs, are the command line's alone)."""
    import importlib.util
    import tomllib

    declared = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=\[ ;]", d, maxsplit=1)[0].replace("-", "_") for d in declared} - {"click", "tomlkit"}
    spec = importlib.util.spec_from_file_location("server_module", PROJECT / "server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert set(module.DEPENDENCIES) == names
