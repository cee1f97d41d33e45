"""`agent-bridge register CLI --agent ID` read back by the pinned real binaries: `claude mcp list`
and `gemini mcp list` start the registered server and report it connected; `codex mcp list` reads
the config only."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import require_cli
from register_harness import backups, entry, mode, register, register_env, target


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return register_env(tmp_path)


def run_cli(binary: Path, args: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    return subprocess.run(
        [str(binary), *args],
        env={**env, "PATH": path},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.cli
def test_claude_registers_through_its_own_binary_and_mcp_list_connects(env, tmp_path):
    claude = require_cli("claude")
    env = {**env, "CLAUDE_BIN": str(claude)}
    done = register(env, "claude", "--agent", "claude")
    assert done.returncode == 0, done.stderr
    assert f"via {claude}" in done.stdout
    listed = run_cli(claude, ["mcp", "list"], env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert any(line.startswith("agent_bridge:") and "✔ Connected" in line for line in listed.stdout.splitlines()), (
        listed.stdout
    )
    path = target(env, "claude")
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    assert "nothing changed" in register(env, "claude", "--agent", "claude").stdout

    assert register(env, "claude", "--agent", "kimi").returncode == 1
    forced = register(env, "claude", "--agent", "kimi", "--force")
    assert forced.returncode == 0, forced.stderr
    assert entry("claude", path)["env"]["AGENT_ID"] == "kimi"
    assert len(backups(path)) == 1


@pytest.mark.cli
def test_codex_mcp_list_shows_the_registered_server(env, tmp_path):
    codex = require_cli("codex")
    assert register(env, "codex", "--agent", "codex").returncode == 0
    listed = run_cli(codex, ["mcp", "list", "--json"], env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    [server] = [s for s in json.loads(listed.stdout) if s["name"] == "agent_bridge"]
    assert server["enabled"] is True
    assert server["transport"]["command"] == sys.executable
    assert server["transport"]["args"] == ["-m", "dispatcher", "serve"]
    assert server["transport"]["env"]["AGENT_ID"] == "codex"


@pytest.mark.cli
def test_gemini_mcp_list_connects_the_registered_server(env, tmp_path):
    gemini = require_cli("gemini")
    assert register(env, "gemini", "--agent", "gemini").returncode == 0
    # `gemini mcp list` gives a server 5 s to start and answer (MCP_LIST_DEFAULT_TIMEOUT_MSEC in
    # 0.61.0; a session gives it 10 minutes), and the MCP SDK's import alone takes 1-2 s of CPU: on a
    # loaded machine the first listing can say Disconnected, so it is asked up to three times.
    for _ in range(3):
        listed = run_cli(gemini, ["mcp", "list"], {**env, "GEMINI_CLI_TRUST_WORKSPACE": "true"}, tmp_path)
        assert listed.returncode == 0, listed.stderr
        said = listed.stdout + listed.stderr  # 0.61.0 prints the list through its logger, on stderr
        if any("agent_bridge" in line and "- Connected" in line for line in said.splitlines()):
            break
    else:
        raise AssertionError(said)
