"""The listener's settings and config.json, validated in a forked child (dispatch/checked.py), say
exactly what ``BridgeSettings`` and ``load_config`` say, and its views agree with ``BridgeConfig``
on everything the listener and a supervisor read."""

import json
import os
import signal
from pathlib import Path

import pytest

from dispatcher.core.config import load_config
from dispatcher.core.config_view import ConfigView
from dispatcher.core.errors import BridgeError, ConfigError
from dispatcher.core.launchers import cli_word
from dispatcher.core.locations import PROJECT_DIR
from dispatcher.core.settings import BridgeSettings
from dispatcher.core.spend import cap_passed, priced
from dispatcher.dispatch.checked import CheckFailed, _in_child, checked_config, checked_settings

AGENTS = {
    "claude": {
        "launcher": "launchers/claude_headless.sh",
        "auto": True,
        "max_cost_usd_per_day": 1.5,
        "max_tokens_per_task": 5000,
        "interactive_grace_seconds": 30,
        "permissions": {"level": "shell", "allow_commands": ["git status", "uv run pytest*"], "extra_dirs": ["~/d"]},
    },
    "kimi": {
        "launcher": "/opt/kimi.sh",
        "workspace": "~/work",
        "max_cost_usd_per_task": 0.25,
        "prices": {"input": 0.6, "output": 2.5, "cache_read": 0.15},
    },
    "codex": {"launcher": "/opt/codex.sh", "permissions": {"level": "read"}},
    "gemini": {"cli": "gemini"},  # the generic launcher runs it
    "mine": {"cli": {"argv": ["mine", "{request_file}"], "prompt": "file"}},  # a CLI of the user's own
}


def _write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize(
    "doc",
    [
        "{not json",
        {"agents": {}},
        {"agents": {"claude": {"launcher": "x", "auto": "yes"}}},
        {"agents": {"claude": {"launcher": "x", "permissions": {"level": "edit", "allow_commands": ["ls"]}}}},
    ],
)
def test_an_invalid_config_is_refused_with_load_configs_own_words(tmp_path, doc):
    path = _write(tmp_path / "config.json", doc)
    with pytest.raises(ConfigError) as direct:
        load_config(path)
    with pytest.raises(ConfigError) as forked:
        checked_config(path)
    assert (forked.value.reason, str(forked.value)) == (direct.value.reason, str(direct.value))


def test_a_cli_the_registry_does_not_list_is_refused_naming_the_registered_ones(tmp_path):
    """The core checks the name's shape; the listener's check also asks the registry."""
    from dispatcher.clis import registry

    path = _write(tmp_path / "config.json", {"agents": {"a": {"cli": "nosuchcli"}}})
    load_config(path)  # the shape is right
    with pytest.raises(ConfigError) as refused:
        checked_config(path)
    assert "agents.a.cli: 'nosuchcli' is not a CLI the bridge has" in refused.value.reason
    assert f"(registered: {', '.join(registry.NAMES)})" in refused.value.reason


def test_a_missing_config_is_refused_as_load_config_refuses_it(tmp_path):
    with pytest.raises(ConfigError) as forked:
        checked_config(tmp_path / "absent.json")
    assert "file not found" in forked.value.reason


def test_the_view_agrees_with_bridge_config(tmp_path):
    path = _write(tmp_path / "config.json", {"agents": AGENTS, "attempt_retention_days": 3, "budget_time_zone": "UTC"})
    config, view = load_config(path), checked_config(path)
    assert isinstance(view, ConfigView)
    assert (view.dispatch_max_age_seconds, view.attempt_retention_days) == (86400, 3)
    for agent, entry in config.agents.items():
        seen = view.agents[agent]
        for field in ("launcher", "auto", "worker_timeout_seconds", "interactive_grace_seconds", "workspace"):
            assert getattr(seen, field) == getattr(entry, field), field
        for field in ("max_cost_usd_per_task", "max_tokens_per_task", "max_cost_usd_per_day", "max_tokens_per_day"):
            assert getattr(seen, field) == getattr(entry, field), field
        assert seen.cli == cli_word(entry.cli)  # what the supervisor tells the generic launcher
        assert view.permission_level(agent) == config.permission_level(agent)
        assert view.launcher_path(agent, PROJECT_DIR) == config.launcher_path(agent, PROJECT_DIR)
        assert view.workspace(agent, tmp_path) == config.workspace(agent, tmp_path)
        # What a supervisor launches its worker with, without validating the file again.
        seen_profile, profile = view.permissions(agent), config.permissions(agent)
        assert (seen_profile.level, seen_profile.allow_commands, seen_profile.extra_dirs) == (
            profile.level,
            profile.allow_commands,
            profile.extra_dirs,
        )
        assert (seen_profile.to_env(), seen_profile.writes, seen_profile.command_prefixes()) == (
            profile.to_env(),
            profile.writes,
            profile.command_prefixes(),
        )
        if entry.prices is None:
            assert seen.prices is None
        else:
            assert seen.prices is not None and vars(seen.prices) == entry.prices.model_dump()
        usage = {"input_tokens": 1000, "output_tokens": 200, "cache_read_tokens": 5000, "cache_write_tokens": 10}
        assert priced(usage, seen.prices) == priced(usage, entry.prices)
        assert cap_passed({**usage, "cost_usd": 0.5}, seen) == cap_passed({**usage, "cost_usd": 0.5}, entry)


def test_the_settings_view_holds_what_bridge_settings_read(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_BRIDGE_DB", str(tmp_path / "state" / "bridge.db"))
    monkeypatch.setenv("AGENT_BRIDGE_RUNTIME_DIR", str(tmp_path / "rt"))
    monkeypatch.setenv("AGENT_BRIDGE_LOG_LEVEL", "info")
    monkeypatch.setenv("AGENT_BRIDGE_MAX_BODY_BYTES", "1000")
    settings, view = BridgeSettings(), checked_settings()
    assert (view.db, view.config_path(), view.private_dir()) == (
        settings.db,
        settings.config_path(),
        settings.private_dir(),
    )
    assert (view.workspace, view.log_level, view.max_body_bytes) == (settings.workspace, "INFO", 1000)


def test_a_bad_setting_is_refused_with_bridge_settings_own_words(monkeypatch):
    monkeypatch.setenv("AGENT_BRIDGE_LOG_LEVEL", "LOUD")
    with pytest.raises(BridgeError) as direct:
        BridgeSettings()
    with pytest.raises(BridgeError) as forked:
        checked_settings()
    assert (forked.value.code, forked.value.message) == (direct.value.code, direct.value.message)


def test_a_child_that_dies_without_an_answer_is_a_check_failed():
    with pytest.raises(CheckFailed, match="exited -9 without an answer"):
        _in_child(lambda: os.kill(os.getpid(), signal.SIGKILL))


def test_the_listener_takes_a_check_without_an_answer_as_a_transient_failure(tmp_path, monkeypatch):
    """Its config stays as it was, the failure is backed off from, and the file is checked again."""
    from dispatcher.dispatch import listener as listener_module

    config = _write(tmp_path / "config.json", {"agents": AGENTS, "budget_time_zone": "UTC"})
    settings = BridgeSettings(db=tmp_path / "bridge.db", runtime_dir=tmp_path / "runtime", config=config)
    listener = listener_module.Listener(settings, "claude")

    class Store:
        def close(self) -> None:
            pass

    def killed(path):
        raise CheckFailed("the process checking it exited -9 without an answer")

    monkeypatch.setattr(listener_module, "checked_config", killed)
    listener._reload_config(Store())
    assert (listener.config, listener.config_error, listener._config_key) == (None, None, ())
    assert (
        listener._fresh_failure
        == "config.json could not be checked: the process checking it exited -9 without an answer"
    )
    monkeypatch.setattr(listener_module, "checked_config", checked_config)
    listener._reload_config(Store())
    assert listener.config is not None and listener.config_error is None and listener._config_key != ()


def test_a_child_killed_once_is_forked_again_and_answers(tmp_path):
    """A kill from outside (it shares the listener's command line) is no answer about the file."""
    first = tmp_path / "killed-once"

    def work():
        if not first.exists():
            first.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return "answered"

    assert _in_child(work) == "answered"


def test_a_listener_whose_start_check_never_answers_says_so_in_one_line(monkeypatch):
    """Every try killed: one ``check_failed`` line that says what to do, never an internal error."""
    monkeypatch.setattr(os, "fork", lambda: (_ for _ in ()).throw(OSError(11, "Resource temporarily unavailable")))
    descriptors = len(os.listdir("/proc/self/fd"))
    with pytest.raises(CheckFailed) as failed:
        checked_settings()
    assert len(os.listdir("/proc/self/fd")) == descriptors  # no try left a pipe open
    assert failed.value.code == "check_failed"
    assert "cannot fork (Resource temporarily unavailable)" in failed.value.message
    assert "start the listener again" in failed.value.message
