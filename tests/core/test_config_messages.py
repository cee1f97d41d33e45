"""Issue 30, item 6: an unknown config key got no "did you mean" (`atuo`)."""

import json

import pytest

from dispatcher.core.config import ConfigError, load_config


@pytest.mark.parametrize(
    ("agent", "said"),
    [
        (
            {"launcher": "launchers/x.sh", "atuo": True},
            "agents.claude.atuo: Extra inputs are not permitted (did you mean 'auto'?)",
        ),
        ({"launcher": "launchers/x.sh", "workspce": "/tmp"}, "(did you mean 'workspace'?)"),
        ({"launcher": "launchers/x.sh", "zzzz": 1}, "agents.claude.zzzz: Extra inputs are not permitted"),
    ],
)
def test_an_unknown_key_close_to_a_known_one_is_named(tmp_path, agent, said):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"agents": {"claude": agent}}))
    path.chmod(0o600)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert said in refused.value.reason
    if "zzzz" in said:
        assert "did you mean" not in refused.value.reason


def test_each_permission_description_completes_workers_may():
    """Issue 30, item 6: doctor said "workers may what the workspace's own CLI settings allow"."""
    from dispatcher.core.profile_rules import DESCRIPTIONS

    verbs = {"use", "read", "do"}
    assert {
        level: text.split()[0].rstrip(",")
        for level, text in DESCRIPTIONS.items()
        if text.split()[0].rstrip(",") not in verbs
    } == {}


@pytest.mark.parametrize(
    ("agent", "said"),
    [
        ({}, 'agents.claude: Value error, name the CLI its workers run ("cli": "claude"'),
        ({"launcher": "launchers/agent_headless.sh"}, 'launchers/agent_headless.sh runs the CLI that "cli" names'),
        ({"cli": "Claude"}, "agents.claude.cli.name: Value error, 'Claude' is not a CLI's name"),
        ({"cli": ""}, "is not a CLI's name"),
        ({"cli": 3}, "agents.claude.cli.declared: Input should be a valid dictionary"),
        ({"cli": {"argv": ["x"], "promt": "file"}}, "agents.claude.cli.declared.promt: Extra inputs are not permitted"),
    ],
)
def test_an_agent_names_its_cli_or_its_launcher(tmp_path, agent, said):
    """``cli``: a string names a registered CLI (shape here; which ones exist, the registry says),
    an object declares one; an entry with neither, or the generic launcher without a cli, is refused."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"agents": {"claude": agent}}))
    path.chmod(0o600)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert said in refused.value.reason


@pytest.mark.parametrize(
    ("agent", "launcher", "word"),
    [
        ({"cli": "codex"}, "launchers/agent_headless.sh", "codex"),
        ({"cli": {"argv": ["mine"]}}, "launchers/agent_headless.sh", "declared"),
        ({"launcher": "launchers/codex_headless.sh"}, "launchers/codex_headless.sh", None),  # an older config
        ({"cli": "codex", "launcher": "/opt/my-codex.sh"}, "/opt/my-codex.sh", "codex"),
    ],
)
def test_the_launcher_defaults_to_the_generic_one_when_the_cli_is_named(tmp_path, agent, launcher, word):
    from dispatcher.core.launchers import cli_word

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"agents": {"claude": agent}}))
    path.chmod(0o600)
    config = load_config(path)
    assert str(config.launcher_path("claude", tmp_path)).endswith(launcher)
    assert cli_word(config.agents["claude"].cli) == word
