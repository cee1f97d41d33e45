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
