"""opencode's setup: `agent-bridge init` finds the pinned opencode 1.18.33 and declares it,
`doctor` reports its version, credentials and level, and `register opencode` / `unregister
opencode` edit its config on real files under a temporary HOME, read back by the real binary
(`opencode mcp list` starts the registered server and reports it connected)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_harness import require_cli
from harness import PROJECT, command_here
from register_harness import backups, mode, register, register_env

USER_CONFIG = {"$schema": "https://opencode.ai/config.json", "theme": "dark", "mcp": {"other": {"type": "remote"}}}


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {**register_env(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg-config")}


def config_file(env: dict) -> Path:
    return Path(env["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"


def test_register_writes_opencodes_local_server_entry_and_a_rerun_changes_nothing(env):
    done = register(env, "opencode", "--agent", "kimi")
    assert done.returncode == 0, done.stderr
    path = config_file(env)
    assert "created" in done.stdout and str(path) in done.stdout
    server = json.loads(path.read_text())["mcp"]["agent_bridge"]
    assert server == {
        "type": "local",
        "command": [sys.executable, "-m", "dispatcher", "serve"],
        "environment": {
            "AGENT_ID": "kimi",
            "AGENT_BRIDGE_DB": env["AGENT_BRIDGE_DB"],
            "AGENT_BRIDGE_CONFIG": env["AGENT_BRIDGE_CONFIG"],
        },
        "enabled": True,
    }
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    before = path.read_bytes()
    again = command_here(env, "register", "opencode", "--agent", "kimi")
    assert again.returncode == 0 and "nothing changed" in again.stdout, again.stderr
    assert path.read_bytes() == before and backups(path) == []


def test_the_users_config_is_kept_a_conflict_refused_until_force_and_unregister_takes_only_ours(env):
    path = config_file(env)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(USER_CONFIG, indent=2))
    assert command_here(env, "register", "opencode", "--agent", "kimi").returncode == 0
    doc = json.loads(path.read_text())
    assert doc["mcp"].pop("agent_bridge")["environment"]["AGENT_ID"] == "kimi"
    assert doc == USER_CONFIG
    [backup] = backups(path)
    assert json.loads(backup.read_text()) == USER_CONFIG

    refused = command_here(env, "register", "opencode", "--agent", "codex")
    assert refused.returncode == 1 and "registration_conflict" in refused.stderr and "--force" in refused.stderr
    wrong = command_here(env, "unregister", "opencode", "--agent", "codex")
    assert wrong.returncode == 1 and "registers agent_bridge as agent kimi" in wrong.stderr
    forced = command_here(env, "register", "opencode", "--agent", "codex", "--force")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(path.read_text())["mcp"]["agent_bridge"]["environment"]["AGENT_ID"] == "codex"

    gone = command_here(env, "unregister", "opencode", "--agent", "codex")
    assert gone.returncode == 0, gone.stderr
    assert json.loads(path.read_text()) == USER_CONFIG


def test_hooks_and_a_status_line_are_refused_and_nothing_is_written(env):
    for flag in ("--hooks", "--statusline"):
        done = command_here(env, "register", "opencode", "--agent", "kimi", flag)
        assert done.returncode == 2 and "usage_error" in done.stderr and flag in done.stderr, done.stderr
        assert not config_file(env).exists()


def test_a_config_with_comments_is_left_alone_with_the_fix(env):
    path = config_file(env)
    path.parent.mkdir(parents=True)
    path.write_text('{\n  // my settings\n  "theme": "dark"\n}\n')
    done = command_here(env, "register", "opencode", "--agent", "kimi")
    assert done.returncode == 1 and "registration_file_invalid" in done.stderr and "fix or move it" in done.stderr
    assert path.read_text().startswith("{\n  // my settings") and backups(path) == []


@pytest.mark.cli
def test_opencode_mcp_list_connects_the_registered_server(env, tmp_path):
    opencode = require_cli("opencode")
    assert register(env, "opencode", "--agent", "kimi").returncode == 0
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    run_env = {**env, "PATH": path, "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_PROJECT_CONFIG": "1"}
    for name in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        run_env[name] = str(tmp_path / name.lower())
    listed = subprocess.run(
        [str(opencode), "mcp", "list"],
        env=run_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    said = listed.stdout + listed.stderr
    assert listed.returncode == 0, said
    assert any("agent_bridge" in line and "connected" in line for line in said.splitlines()), said


@pytest.mark.cli
def test_init_finds_the_real_opencode_and_doctor_reports_it(tmp_path):
    """The pinned binary on PATH, nothing else: init declares agent `opencode` (launcher, level
    read), says the version is the tested one; doctor then says so too, finds no credentials
    (cli_not_authenticated, with the fix), and what its workers may do."""
    opencode = require_cli("opencode")
    bins, work, home = tmp_path / "bin", tmp_path / "work", tmp_path / "home"
    for directory in (bins, work, home):
        directory.mkdir()
    (bins / "opencode").symlink_to(opencode)
    env = {
        "PATH": f"{bins}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "xdg-config"),
        "XDG_DATA_HOME": str(home / "xdg-data"),
        "PYTHONPATH": str(PROJECT),
    }

    def agent_bridge(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "dispatcher", *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )

    done = agent_bridge("init", "--workspace", str(work))
    assert done.returncode == 0, done.stderr
    assert "opencode: " in done.stdout and "1.18.33 (tested)" in done.stdout, done.stdout
    config = json.loads((home / "xdg-config" / "agent-bridge" / "config.json").read_text())
    agent = config["agents"]["opencode"]
    assert (agent["cli"], agent["permissions"], agent["auto"]) == (
        "opencode",
        {"level": "read"},
        True,
    )

    done = agent_bridge("doctor", "--json")
    findings = [f for f in json.loads(done.stdout)["findings"] if f.get("agent") == "opencode"]
    codes = {f["code"]: f for f in findings}
    assert "1.18.33" in codes["cli_ok"]["message"], findings
    assert "opencode auth login" in codes["cli_not_authenticated"]["fix"], findings
    assert "level read" in codes["permissions_ok"]["message"], findings
    # With saved credentials (`opencode auth login` writes this file), doctor sees them.
    auth = home / "xdg-data" / "opencode" / "auth.json"
    auth.parent.mkdir(parents=True, exist_ok=True)
    auth.write_text("{}")
    findings = [
        f for f in json.loads(agent_bridge("doctor", "--json").stdout)["findings"] if f.get("agent") == "opencode"
    ]
    assert any(f["code"] == "cli_auth_ok" and str(auth) in f["message"] for f in findings), findings
