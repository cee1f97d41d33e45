"""`agent-bridge register claude|kimi --hooks` on real files under a temporary HOME: the real command
in the first test, the command line's entry point in this process in the others. Same safety as the MCP entry and --statusline: idempotent, backup first, --dry-run diff,
the user's other hooks kept, an agent-bridge hook pointing elsewhere refused until --force."""

import json
import tomllib
from pathlib import Path

import pytest
from register_harness import register, register_env, register_here

AGENTS = ("claude", "kimi", "codex", "gemini")
EVENTS = ("UserPromptSubmit", "PostToolUse", "Stop", "SessionStart")
WAITING = ("Stop", "SessionStart")  # the waiting hooks: asyncRewake, --wait, a timeout past the wait


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return register_env(tmp_path)


def settings(env: dict) -> Path:
    return Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json"


def kimi_config(env: dict) -> Path:
    return Path(env["KIMI_CODE_HOME"]) / "config.toml"


def our_hooks(doc: dict, event: str) -> list[dict]:
    return [h for g in doc["hooks"][event] for h in g["hooks"] if "agent-bridge hook claude" in h["command"]]


def test_claude_hooks_are_written_once_with_the_store_and_a_rerun_changes_nothing(env):
    done = register(env, "claude", "--agent", "claude", "--hooks")
    assert done.returncode == 0, done.stderr
    assert "wrote hooks UserPromptSubmit, PostToolUse, Stop, SessionStart (agent claude)" in done.stdout
    doc = json.loads(settings(env).read_text())
    for event in EVENTS:
        [entry] = our_hooks(doc, event)
        assert entry["command"].startswith(f"AGENT_BRIDGE_DB={env['AGENT_BRIDGE_DB']} ")
        wait = " --wait 3600" if event in WAITING else ""
        assert entry["command"].endswith(f"/agent-bridge hook claude {event} --agent claude{wait}")
        # Claude kills a hook at its timeout: a waiting hook's is its wait plus a margin
        assert entry["type"] == "command" and entry["timeout"] == (3630 if event in WAITING else 10)
        assert entry.get("asyncRewake") is (True if event in WAITING else None)
    assert oct(settings(env).stat().st_mode & 0o777) == "0o600"
    again = register_here(env, "claude", "--agent", "claude", "--hooks")
    assert (
        again.returncode == 0
        and "hooks UserPromptSubmit, PostToolUse, Stop, SessionStart (agent claude) already in" in again.stdout
    )
    assert json.loads(settings(env).read_text()) == doc


def test_the_users_own_hooks_and_settings_are_kept_and_the_file_backed_up(env):
    settings(env).parent.mkdir(parents=True)
    mine = {
        "theme": "dark",
        "statusLine": {"type": "command", "command": "mine"},
        "hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}],
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "check"}]}],
        },
    }
    settings(env).write_text(json.dumps(mine))
    done = register_here(env, "claude", "--agent", "claude", "--hooks")
    assert done.returncode == 0, done.stderr
    doc = json.loads(settings(env).read_text())
    assert doc["theme"] == "dark" and doc["statusLine"] == mine["statusLine"]
    assert doc["hooks"]["PreToolUse"] == mine["hooks"]["PreToolUse"]
    assert doc["hooks"]["Stop"][0] == mine["hooks"]["Stop"][0] and len(our_hooks(doc, "Stop")) == 1
    [backup] = settings(env).parent.glob("settings.json.bak-*")
    assert json.loads(backup.read_text()) == mine


def test_a_dry_run_prints_the_diff_and_writes_nothing(env):
    done = register_here(env, "claude", "--agent", "claude", "--hooks", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "dry run, nothing written" in done.stdout and '+        "hooks": [' in done.stdout
    assert "hook claude Stop --agent claude" in done.stdout
    assert not settings(env).exists()


def test_a_hook_for_another_agent_is_refused_until_force_replaces_it(env):
    assert register_here(env, "claude", "--agent", "claude", "--hooks").returncode == 0
    refused = register_here(env, "claude", "--agent", "kimi", "--hooks")
    assert refused.returncode != 0 and "registration_conflict" in refused.stderr and "--force" in refused.stderr
    assert all("--agent claude" in our_hooks(json.loads(settings(env).read_text()), e)[0]["command"] for e in EVENTS)
    forced = register_here(env, "claude", "--agent", "kimi", "--hooks", "--force")
    assert forced.returncode == 0, forced.stderr
    doc = json.loads(settings(env).read_text())
    for event in EVENTS:
        [entry] = our_hooks(doc, event)
        assert f"hook claude {event} --agent kimi" in entry["command"]
        assert all(g["hooks"] for g in doc["hooks"][event])  # no empty group left behind


@pytest.mark.parametrize("text", ['{"hooks": []}', '{"hooks": {"Stop": {"x": 1}}}', "{not json"])
def test_hook_settings_of_the_wrong_shape_are_left_alone(env, text):
    settings(env).parent.mkdir(parents=True)
    settings(env).write_text(text)
    done = register_here(env, "claude", "--agent", "claude", "--hooks")
    assert done.returncode != 0 and "registration_file_invalid" in done.stderr
    assert settings(env).read_text() == text


def test_gemini_hooks_go_to_its_settings_with_a_timeout_in_milliseconds(env, tmp_path):
    env = {**env, "GEMINI_CLI_HOME": str(tmp_path / "gemini")}
    done = register_here(env, "gemini", "--agent", "gemini", "--hooks")
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "gemini" / ".gemini" / "settings.json").read_text())
    assert doc["mcpServers"]["agent_bridge"]["trust"] is True
    for event in ("BeforeAgent", "AfterAgent"):
        [group] = doc["hooks"][event]
        [entry] = group["hooks"]
        assert entry["command"].endswith(f"/agent-bridge hook gemini {event} --agent gemini")
        assert entry["timeout"] == 10000


def test_kimi_hook_is_appended_to_config_toml_keeping_every_other_byte(env):
    kimi_config(env).parent.mkdir(parents=True)
    original = '# my kimi settings\ndefault_model = "k2"\n\n[[hooks]]\nevent = "Stop"\ncommand = "say done"\n'
    kimi_config(env).write_text(original)
    done = register_here(env, "kimi", "--agent", "kimi", "--hooks")
    assert done.returncode == 0, done.stderr
    text = kimi_config(env).read_text()
    assert text.startswith(original)
    doc = tomllib.loads(text)
    assert doc["hooks"][0] == {"event": "Stop", "command": "say done"}
    ours = doc["hooks"][1]
    assert ours["event"] == "UserPromptSubmit" and ours["timeout"] == 10
    assert ours["command"].endswith("/agent-bridge hook kimi UserPromptSubmit --agent kimi")
    assert register_here(env, "kimi", "--agent", "kimi", "--hooks").stdout.count("already in") == 2
    assert kimi_config(env).read_text() == text


def test_a_different_kimi_hook_of_ours_is_refused_until_force_cuts_it_out_of_config_toml(env):
    """tomlkit takes our own [[hooks]] table out of config.toml: --force replaces it, the user's
    comments and hooks around it stay byte for byte."""
    kimi_config(env).parent.mkdir(parents=True)
    mine = '# my kimi settings\ndefault_model = "k2"\n\n[[hooks]]\nevent = "Stop"\ncommand = "say done"  # mine\n'
    kimi_config(env).write_text(mine)
    assert register_here(env, "kimi", "--agent", "kimi", "--hooks").returncode == 0
    before = kimi_config(env).read_text(), (Path(env["KIMI_CODE_HOME"]) / "mcp.json").read_text()
    done = register_here(env, "kimi", "--agent", "claude", "--hooks")
    assert done.returncode != 0 and "registration_conflict" in done.stderr and "--force" in done.stderr
    # refused before anything was written: the MCP entry is untouched too
    assert (kimi_config(env).read_text(), (Path(env["KIMI_CODE_HOME"]) / "mcp.json").read_text()) == before

    forced = register_here(env, "kimi", "--agent", "claude", "--hooks", "--force")
    assert forced.returncode == 0, forced.stderr
    text = kimi_config(env).read_text()
    assert text.startswith(mine) and text.count("[[hooks]]") == 2
    hooks = tomllib.loads(text)["hooks"]
    assert hooks[0] == {"event": "Stop", "command": "say done"}
    assert hooks[1]["command"].endswith("/agent-bridge hook kimi UserPromptSubmit --agent claude")


def test_kimi_hooks_in_a_form_it_does_not_edit_are_left_for_the_user(env):
    kimi_config(env).parent.mkdir(parents=True)
    text = 'hooks = [{event = "Stop", command = "x"}]\n'
    kimi_config(env).write_text(text)
    done = register_here(env, "kimi", "--agent", "kimi", "--hooks")
    assert done.returncode != 0 and "registration_file_invalid" in done.stderr and "[[hooks]]" in done.stderr
    assert kimi_config(env).read_text() == text


def codex_paths(env: dict) -> tuple[Path, Path]:
    home = Path(env["CODEX_HOME"])
    return home / "hooks.json", home / "config.toml"


@pytest.fixture
def codex_env(env, tmp_path) -> dict:
    return {**env, "CODEX_HOME": str(tmp_path / "codex")}


def test_codex_hooks_go_to_hooks_json_and_features_hooks_is_turned_on(codex_env):
    hooks_json, config = codex_paths(codex_env)
    config.parent.mkdir(parents=True)
    config.write_text('# mine\nmodel = "x"\n\n[features]\n# keep this comment\nother = true\n')
    done = register_here(codex_env, "codex", "--agent", "codex", "--hooks")
    assert done.returncode == 0, done.stderr
    assert "--dangerously-bypass-hook-trust" in done.stdout and "(/hooks)" in done.stdout
    doc = json.loads(hooks_json.read_text())
    assert sorted(doc["hooks"]) == ["Stop", "UserPromptSubmit"]
    for event in ("UserPromptSubmit", "Stop"):
        [group] = doc["hooks"][event]
        [entry] = group["hooks"]
        assert (
            entry["command"].endswith(f"/agent-bridge hook codex {event} --agent codex") and "asyncRewake" not in entry
        )
    text = config.read_text()
    assert "[features]\n# keep this comment\nother = true\nhooks = true\n" in text  # tomlkit: added last
    parsed = tomllib.loads(text)
    assert parsed["features"] == {"hooks": True, "other": True} and parsed["mcp_servers"]["agent_bridge"]
    again = register_here(codex_env, "codex", "--agent", "codex", "--hooks")
    assert again.returncode == 0 and again.stdout.count("already in") == 3
    assert config.read_text() == text


def test_codex_features_table_is_added_when_missing(codex_env):
    _, config = codex_paths(codex_env)
    assert register_here(codex_env, "codex", "--agent", "codex", "--hooks").returncode == 0
    assert tomllib.loads(config.read_text())["features"] == {"hooks": True}


def test_codex_hooks_turned_off_by_the_user_are_refused_before_any_write(codex_env):
    hooks_json, config = codex_paths(codex_env)
    config.parent.mkdir(parents=True)
    config.write_text("[features]\nhooks = false\n")
    done = register_here(codex_env, "codex", "--agent", "codex", "--hooks")
    assert done.returncode != 0 and "registration_conflict" in done.stderr and "hooks = true" in done.stderr
    assert config.read_text() == "[features]\nhooks = false\n" and not hooks_json.exists()


def _plain_stop(env: dict, agent: str = "claude", **extra) -> dict:
    from dispatcher.clis.config_files import hook_command

    """The Stop hook as `register --hooks` wrote it before --wait (this venv's agent-bridge, env's store)."""
    return {
        "type": "command",
        "command": hook_command("claude", "Stop", agent, env),
        "timeout": 10,
        "asyncRewake": True,
        **extra,
    }


def _with_stop(env: dict, entry: dict) -> None:
    assert register_here(env, "claude", "--agent", "claude", "--hooks").returncode == 0
    doc = json.loads(settings(env).read_text())
    [group] = [g for g in doc["hooks"]["Stop"] if "agent-bridge" in g["hooks"][0]["command"]]
    group["hooks"] = [entry]
    settings(env).write_text(json.dumps(doc))


def test_the_earlier_plain_stop_hook_is_upgraded_to_the_waiting_one_without_force(env):
    _with_stop(env, _plain_stop(env))
    done = register_here(env, "claude", "--agent", "claude", "--hooks")
    assert done.returncode == 0, done.stderr
    assert "upgraded this installation's earlier Stop hook to the waiting one (--wait 3600" in done.stdout
    [entry] = our_hooks(json.loads(settings(env).read_text()), "Stop")
    assert entry["command"].endswith("--agent claude --wait 3600") and entry["timeout"] == 3630
    again = register_here(env, "claude", "--agent", "claude", "--hooks")
    assert again.returncode == 0 and "upgraded" not in again.stdout and "already in" in again.stdout


def test_the_wait_setting_is_written_and_a_changed_one_upgrades_our_own_hook(env):
    assert register_here(env, "claude", "--agent", "claude", "--hooks").returncode == 0
    done = register_here({**env, "AGENT_BRIDGE_HOOK_WAIT_SECONDS": "120"}, "claude", "--agent", "claude", "--hooks")
    assert done.returncode == 0, done.stderr
    assert "upgraded this installation's earlier Stop and SessionStart hook to the waiting one" in done.stdout
    for event in WAITING:
        [entry] = our_hooks(json.loads(settings(env).read_text()), event)
        assert entry["command"].endswith("--wait 120") and entry["timeout"] == 150


@pytest.mark.parametrize("value", ["0", "86401", "soon"])
def test_a_bad_wait_setting_is_refused_naming_the_variable(env, value):
    done = register_here({**env, "AGENT_BRIDGE_HOOK_WAIT_SECONDS": value}, "claude", "--agent", "claude", "--hooks")
    assert done.returncode != 0 and "AGENT_BRIDGE_HOOK_WAIT_SECONDS" in done.stderr
    assert not settings(env).exists()


@pytest.mark.parametrize(
    "change",
    [
        {"asyncRewake": False},  # the user turned the background off: their choice
        {"once": True},  # a key we never write
    ],
)
def test_an_earlier_stop_hook_the_user_changed_is_refused_until_force(env, change):
    _with_stop(env, _plain_stop(env, **change))
    before = settings(env).read_text()
    refused = register_here(env, "claude", "--agent", "claude", "--hooks")
    assert refused.returncode != 0 and "registration_conflict" in refused.stderr and "--force" in refused.stderr
    assert settings(env).read_text() == before


def test_an_earlier_stop_hook_of_another_agent_is_not_upgraded(env):
    _with_stop(env, _plain_stop(env, agent="kimi"))
    refused = register_here(env, "claude", "--agent", "claude", "--hooks")
    assert refused.returncode != 0 and "registration_conflict" in refused.stderr
