"""`agent-bridge register CLI --agent ID` on real files under a temporary HOME and per-CLI homes: the
real command (`python -m dispatcher register ...`) for the first write of each CLI, a refusal and the
status line, the command line's entry point in this process for the other cases. The pinned real
binaries reading what it wrote are in tests/agent_clis/test_register_mcp_list.py."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from register_harness import backups, entry, mode, parse, register, register_env, register_here, target

CLIS = ("claude", "kimi", "codex", "gemini")
AGENTS = ("claude", "kimi", "codex", "gemini")


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return register_env(tmp_path)


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

    again = register_here(env, cli, "--agent", cli)
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

    done = register_here(env, cli, "--agent", "kimi")
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
    done = register_here(env, cli, "--agent", cli, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "--- /dev/null" in done.stdout and f"+++ {path}" in done.stdout and "agent_bridge" in done.stdout
    assert not path.exists() and not path.parent.exists()

    path.parent.mkdir(parents=True)
    path.write_text(user_file(cli))
    done = register_here(env, cli, "--agent", cli, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert f"--- {path}" in done.stdout and "\n+" in done.stdout and "dry run" in done.stdout
    assert path.read_text() == user_file(cli)
    assert backups(path) == []


@pytest.mark.parametrize("cli", CLIS)
def test_an_entry_pointing_elsewhere_is_refused_until_force_replaces_it(env, cli):
    assert register_here(env, cli, "--agent", "claude").returncode == 0
    path = target(env, cli)
    before = path.read_bytes()

    for extra in ((), ("--dry-run",)):
        refused = register_here(env, cli, "--agent", "gemini", *extra)
        assert refused.returncode == 1
        assert refused.stderr.startswith("agent-bridge: registration_conflict: ")
        assert '"AGENT_ID": "claude"' in refused.stderr and "--force" in refused.stderr
        assert path.read_bytes() == before and backups(path) == []

    forced = register_here(env, cli, "--agent", "gemini", "--force")
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
    assert register_here(env, "codex", "--agent", "codex").returncode == 1

    done = register_here(env, "codex", "--agent", "codex", "--force")
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
        done = register_here(env, cli, "--agent", cli)
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
    done = register_here(env, "claude", "--agent", "claude", "--statusline")
    assert done.returncode == 0, done.stderr
    doc = json.loads(settings.read_text())
    line = doc.pop("statusLine")
    assert doc == {"permissions": {"allow": ["Bash"]}}
    assert line["type"] == "command" and line["refreshInterval"] == 2
    *settings_words, program = shlex.split(line["command"])
    command = Path(program)
    assert command.is_absolute() and command.name == "agent-bridge-statusline" and os.access(command, os.X_OK)
    assert settings_words == [f"{k}={env[k]}" for k in ("AGENT_BRIDGE_DB", "AGENT_BRIDGE_CONFIG")]
    assert len(backups(settings)) == 1

    again = register_here(env, "claude", "--agent", "claude", "--statusline")
    assert again.returncode == 0 and again.stdout.count("nothing changed") == 2
    assert len(backups(settings)) == 1

    wrong = register_here(env, "kimi", "--agent", "kimi", "--statusline")
    assert wrong.returncode == 2 and "usage_error" in wrong.stderr


def test_the_status_line_reads_the_store_and_config_given_to_register(env, tmp_path):
    """The registered status line command carries the store, config and runtime directory that
    ``register`` was given: run by a shell with none of them set (as Claude runs it), it shows the
    agents and unread count of that store, not of the default one."""
    from dispatch_harness import post_task

    env = {**env, "AGENT_BRIDGE_RUNTIME_DIR": str(tmp_path / "runtime")}
    assert register(env, "claude", "--agent", "claude", "--statusline").returncode == 0
    post_task(env["AGENT_BRIDGE_DB"], "CANARY for the status line")
    command = json.loads((Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json").read_text())["statusLine"]["command"]
    claude_env = {k: v for k, v in env.items() if not k.startswith("AGENT_BRIDGE_")}
    shown = subprocess.run(
        ["/bin/sh", "-c", command], env=claude_env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert shown.returncode == 0, shown.stderr
    assert "[claude] stopped · 1 unread" in shown.stdout and "[gemini]" in shown.stdout, shown.stdout


# --- the real CLIs' own listings ------------------------------------------------------------


def test_the_server_is_the_package_when_importable_and_the_checkouts_server_py_otherwise(tmp_path, monkeypatch):
    from dispatcher.core.locations import PROJECT_DIR
    from dispatcher.ops import register as reg

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
        done = register_here(env, "codex", "--agent", "codex", "--force")
        assert done.returncode == 1 and "registration_file_invalid" in done.stderr, done.stderr
        assert "[mcp_servers.agent_bridge]" in done.stderr  # the table to add by hand
        assert path.read_text() == text and backups(path) == []


@pytest.mark.parametrize(
    ("command", "ours"),
    [
        ("/venv/bin/agent-bridge-statusline", True),
        ("AGENT_BRIDGE_DB=/s/bridge.db AGENT_BRIDGE_CONFIG='/c d/config.json' /venv/bin/agent-bridge-statusline", True),
        ("agent-bridge-statusline", True),
        ("my-statusline --fancy", False),
        ("echo agent-bridge-statusline", False),
        ("AGENT_BRIDGE_DB=/s/bridge.db", False),
        ("'unbalanced", False),
        (None, False),
    ],
)
def test_our_status_line_is_recognised_after_its_settings(command, ours):
    """Unregister and doctor take a statusLine for ours by this one rule: the program after any
    ``NAME=value`` words ``register`` put before it."""
    from dispatcher.clis.config_files import is_our_statusline

    assert is_our_statusline(command) is ours
