"""`agent-bridge register CLI --agent ID`: the real command (`python -m dispatcher register ...`) on real
files under a temporary HOME and per-CLI homes, and, for the CLIs that list their MCP servers, the
pinned real binaries reading what it wrote (`claude mcp list` and `gemini mcp list` start the server
and report it connected; `codex mcp list` reads the config only)."""

import json
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from cli_harness import require_cli
from harness import PROJECT, register_env

CLIS = ("claude", "kimi", "codex", "gemini")
AGENTS = ("claude", "kimi", "codex", "gemini")


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return register_env(tmp_path)


def register(env: dict, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher", "register", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd or PROJECT,
    )


def target(env: dict, cli: str) -> Path:
    return {
        "claude": Path(env["CLAUDE_CONFIG_DIR"]) / ".claude.json",
        "kimi": Path(env["KIMI_CODE_HOME"]) / "mcp.json",
        "codex": Path(env["CODEX_HOME"]) / "config.toml",
        "gemini": Path(env["GEMINI_CLI_HOME"]) / ".gemini" / "settings.json",
    }[cli]


def parse(cli: str, path: Path) -> dict:
    return tomllib.loads(path.read_text()) if cli == "codex" else json.loads(path.read_text())


def entry(cli: str, path: Path) -> dict:
    doc = parse(cli, path)
    return (doc["mcp_servers"] if cli == "codex" else doc["mcpServers"])["agent_bridge"]


USER_FILES = {
    "json": json.dumps(
        {
            "theme": "dark",
            "mcpServers": {"other": {"command": "/bin/other", "args": ["x"]}},
            "nested": {"keep": [1, 2, 3]},
        },
        indent=4,
    )
    + "\n",
    "codex": (
        '# my codex settings\nmodel = "gpt-x"  # keep this comment\n\n[mcp_servers.other]\n'
        'command = "/bin/other"\nargs = ["x"]\n\n[profiles.fast]\nmodel_reasoning_effort = "low"\n'
    ),
}


def user_file(cli: str) -> str:
    return USER_FILES["codex" if cli == "codex" else "json"]


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".bak-*"))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("cli", CLIS)
def test_it_writes_the_entry_in_a_new_private_file_and_a_rerun_changes_nothing(env, cli):
    done = register(env, cli, "--agent", cli)
    assert done.returncode == 0, done.stderr
    path = target(env, cli)
    assert "created" in done.stdout and str(path) in done.stdout
    got = entry(cli, path)
    assert got["command"] == sys.executable
    assert got["args"] == ["-m", "dispatcher", "serve"]
    assert got["env"] == {
        "AGENT_ID": cli,
        "AGENT_BRIDGE_DB": env["AGENT_BRIDGE_DB"],
        "AGENT_BRIDGE_CONFIG": env["AGENT_BRIDGE_CONFIG"],
    }
    extra = {
        "claude": ("type", "stdio"),
        "kimi": ("startupTimeoutMs", 30000),
        "codex": ("required", True),
        "gemini": ("trust", True),
    }[cli]
    assert got[extra[0]] == extra[1]
    assert mode(path) == 0o600 and mode(path.parent) == 0o700
    before = (path.read_bytes(), path.stat().st_mtime_ns)

    again = register(env, cli, "--agent", cli)
    assert again.returncode == 0, again.stderr
    assert "nothing changed" in again.stdout
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert backups(path) == []


@pytest.mark.parametrize("cli", CLIS)
def test_an_edit_keeps_the_users_other_settings_and_backs_the_file_up_first(env, cli):
    path = target(env, cli)
    path.parent.mkdir(parents=True)
    path.write_text(user_file(cli))
    path.chmod(0o640)
    original = parse(cli, path)

    done = register(env, cli, "--agent", "kimi")
    assert done.returncode == 0, done.stderr
    [backup] = backups(path)
    assert str(backup) in done.stdout
    assert backup.read_text() == user_file(cli) and mode(backup) == 0o600
    assert mode(path) == 0o640  # an edited file keeps its mode
    doc = parse(cli, path)
    servers = "mcp_servers" if cli == "codex" else "mcpServers"
    assert doc[servers].pop("agent_bridge")["env"]["AGENT_ID"] == "kimi"
    assert doc == original
    if cli == "codex":  # the text is kept byte for byte, the table appended
        assert path.read_text().startswith(user_file(cli))


@pytest.mark.parametrize("cli", CLIS)
def test_a_dry_run_prints_the_diff_and_writes_nothing(env, cli):
    path = target(env, cli)
    done = register(env, cli, "--agent", cli, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "--- /dev/null" in done.stdout and f"+++ {path}" in done.stdout and "agent_bridge" in done.stdout
    assert not path.exists() and not path.parent.exists()

    path.parent.mkdir(parents=True)
    path.write_text(user_file(cli))
    done = register(env, cli, "--agent", cli, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert f"--- {path}" in done.stdout and "\n+" in done.stdout and "dry run" in done.stdout
    assert path.read_text() == user_file(cli)
    assert backups(path) == []


@pytest.mark.parametrize("cli", CLIS)
def test_an_entry_pointing_elsewhere_is_refused_until_force_replaces_it(env, cli):
    assert register(env, cli, "--agent", "claude").returncode == 0
    path = target(env, cli)
    before = path.read_bytes()

    for extra in ((), ("--dry-run",)):
        refused = register(env, cli, "--agent", "gemini", *extra)
        assert refused.returncode == 1
        assert refused.stderr.startswith("agent-bridge: registration_conflict: ")
        assert '"AGENT_ID": "claude"' in refused.stderr and "--force" in refused.stderr
        assert path.read_bytes() == before and backups(path) == []

    forced = register(env, cli, "--agent", "gemini", "--force")
    assert forced.returncode == 0, forced.stderr
    assert entry(cli, path)["env"]["AGENT_ID"] == "gemini"
    [backup] = backups(path)
    assert backup.read_bytes() == before


def test_force_on_codex_cuts_only_the_old_table_and_keeps_every_other_byte(env):
    path = target(env, "codex")
    path.parent.mkdir(parents=True)
    head = '# mine\nmodel = "gpt-x"\n\n'
    tail = '[mcp_servers.other]\ncommand = "/bin/other"  # after ours\n'
    old = (
        '[mcp_servers.agent_bridge]\ncommand = "/old/python"\nargs = ["/old/server.py"]\n\n'
        '[mcp_servers.agent_bridge.env]\nAGENT_ID = "claude"\n\n'
    )
    path.write_text(head + old + tail)
    assert register(env, "codex", "--agent", "codex").returncode == 1

    done = register(env, "codex", "--agent", "codex", "--force")
    assert done.returncode == 0, done.stderr
    text = path.read_text()
    assert text.startswith(head + tail) and "/old/" not in text
    assert entry("codex", path)["command"] == sys.executable
    assert parse("codex", path)["mcp_servers"]["other"] == {"command": "/bin/other"}


def test_a_file_that_does_not_parse_is_left_alone(env):
    for cli, junk in (("gemini", "{not json"), ("codex", "model = \n")):
        path = target(env, cli)
        path.parent.mkdir(parents=True)
        path.write_text(junk)
        done = register(env, cli, "--agent", cli)
        assert done.returncode == 1 and "registration_file_invalid" in done.stderr
        assert path.read_text() == junk and backups(path) == []


def test_an_undeclared_agent_is_refused_and_nothing_is_written(env):
    done = register(env, "kimi", "--agent", "nobody")
    assert done.returncode == 2
    assert done.stderr.startswith("agent-bridge: unknown_agent: ")
    assert not Path(env["KIMI_CODE_HOME"]).exists()


def test_statusline_sets_claudes_status_line_keeping_its_other_settings(env):
    settings = Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"permissions": {"allow": ["Bash"]}}))
    done = register(env, "claude", "--agent", "claude", "--statusline")
    assert done.returncode == 0, done.stderr
    doc = json.loads(settings.read_text())
    line = doc.pop("statusLine")
    assert doc == {"permissions": {"allow": ["Bash"]}}
    assert line["type"] == "command" and line["refreshInterval"] == 2
    command = Path(line["command"])
    assert command.is_absolute() and command.name == "agent-bridge-statusline" and os.access(command, os.X_OK)
    assert len(backups(settings)) == 1

    again = register(env, "claude", "--agent", "claude", "--statusline")
    assert again.returncode == 0 and again.stdout.count("nothing changed") == 2
    assert len(backups(settings)) == 1

    wrong = register(env, "kimi", "--agent", "kimi", "--statusline")
    assert wrong.returncode == 2 and "usage_error" in wrong.stderr


# --- the real CLIs' own listings ------------------------------------------------------------


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
    listed = run_cli(gemini, ["mcp", "list"], {**env, "GEMINI_CLI_TRUST_WORKSPACE": "true"}, tmp_path)
    assert listed.returncode == 0, listed.stderr
    said = listed.stdout + listed.stderr  # 0.61.0 prints the list through its logger, on stderr
    assert any("agent_bridge" in line and "- Connected" in line for line in said.splitlines()), said


def test_the_server_is_the_package_when_importable_and_the_checkouts_server_py_otherwise(tmp_path, monkeypatch):
    from dispatcher import register as reg
    from dispatcher.locations import PROJECT_DIR

    assert reg.server_args() == ["-m", "dispatcher", "serve"]
    cannot_import = tmp_path / "python"
    cannot_import.write_text("#!/bin/sh\nexit 1\n")
    cannot_import.chmod(0o700)
    monkeypatch.setattr(sys, "executable", str(cannot_import))
    assert reg.server_args() == [str(PROJECT_DIR / "server.py")]


def test_codex_entries_in_a_form_it_does_not_edit_are_left_for_the_user(env):
    path = target(env, "codex")
    path.parent.mkdir(parents=True)
    for text in (
        '[mcp_servers]\nagent_bridge.command = "/old/python"\n',
        'mcp_servers = { agent_bridge = { command = "/old/python" } }\n',
    ):
        path.write_text(text)
        done = register(env, "codex", "--agent", "codex", "--force")
        assert done.returncode == 1 and "registration_file_invalid" in done.stderr, done.stderr
        assert "[mcp_servers.agent_bridge]" in done.stderr  # the table to add by hand
        assert path.read_text() == text and backups(path) == []
