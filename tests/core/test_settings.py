"""Settings errors are one ``invalid_setting`` naming the variable; path settings must be absolute."""

import socket
from pathlib import Path

import pytest

from dispatcher.core.locations import InvalidSetting, Locations
from dispatcher.core.processes import this_host
from dispatcher.core.settings import BridgeSettings

PATH_VARIABLES = ("AGENT_BRIDGE_DB", "AGENT_BRIDGE_CONFIG", "AGENT_BRIDGE_RUNTIME_DIR", "AGENT_BRIDGE_WORKSPACE")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in (
        *PATH_VARIABLES,
        "AGENT_BRIDGE_LOG_LEVEL",
        "AGENT_BRIDGE_MAX_BODY_BYTES",
        "AGENT_BRIDGE_ROLE",
        "AGENT_BRIDGE_HOST_ID",
        "AGENT_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)


def test_an_unknown_log_level_names_the_variable_and_the_allowed_values(monkeypatch):
    monkeypatch.setenv("AGENT_BRIDGE_LOG_LEVEL", "LOUD")
    with pytest.raises(InvalidSetting) as caught:
        BridgeSettings()
    err = caught.value
    assert (err.code, err.variable) == ("invalid_setting", "AGENT_BRIDGE_LOG_LEVEL")
    assert "'LOUD'" in err.message and "'DEBUG', 'INFO', 'WARNING' or 'ERROR'" in err.message


def test_log_level_is_case_insensitive(monkeypatch):
    monkeypatch.setenv("AGENT_BRIDGE_LOG_LEVEL", "debug")
    assert BridgeSettings().log_level == "DEBUG"


def test_every_bad_variable_is_named_in_the_one_error(monkeypatch):
    monkeypatch.setenv("AGENT_BRIDGE_MAX_BODY_BYTES", "lots")
    monkeypatch.setenv("AGENT_BRIDGE_ROLE", "boss")
    with pytest.raises(InvalidSetting) as caught:
        BridgeSettings()
    assert "AGENT_BRIDGE_MAX_BODY_BYTES='lots'" in caught.value.message
    assert "AGENT_BRIDGE_ROLE='boss'" in caught.value.message


@pytest.mark.parametrize("value", ["two words", "-leading-dash", "x" * 65, "ünicode"])
def test_a_host_id_that_is_not_a_short_word_is_refused_at_start_and_where_it_is_read(monkeypatch, value):
    monkeypatch.setenv("AGENT_BRIDGE_HOST_ID", value)
    with pytest.raises(InvalidSetting) as caught:
        BridgeSettings()
    assert caught.value.variable == "AGENT_BRIDGE_HOST_ID" and "1 to 64 letters" in caught.value.message
    with pytest.raises(InvalidSetting):
        this_host()


def test_the_host_id_is_the_setting_else_the_machine_id(monkeypatch):
    machine_id = Path("/etc/machine-id").read_text().strip() if Path("/etc/machine-id").exists() else None
    assert this_host() == (machine_id or socket.gethostname())
    monkeypatch.setenv("AGENT_BRIDGE_HOST_ID", "build-box.lan")
    assert BridgeSettings().host_id == this_host() == "build-box.lan"


@pytest.mark.parametrize("variable", PATH_VARIABLES)
def test_a_relative_path_setting_is_refused(monkeypatch, variable):
    monkeypatch.setenv(variable, "state/bridge.db")
    with pytest.raises(InvalidSetting) as caught:
        BridgeSettings()
    assert caught.value.variable == variable and "absolute path" in caught.value.message


@pytest.mark.parametrize("variable", ("AGENT_BRIDGE_DB", "AGENT_BRIDGE_CONFIG", "AGENT_BRIDGE_RUNTIME_DIR"))
def test_the_fast_path_applies_the_same_rule(monkeypatch, variable):
    monkeypatch.setenv(variable, "relative/x")
    with pytest.raises(InvalidSetting) as caught:
        Locations.from_env()
    assert caught.value.variable == variable


def test_home_is_expanded_in_both_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENT_BRIDGE_DB", "~/bridge.db")
    monkeypatch.setenv("AGENT_BRIDGE_RUNTIME_DIR", "~/rt")
    home = tmp_path / "home"
    settings = BridgeSettings()
    assert (settings.db, settings.private_dir()) == (home / "bridge.db", home / "rt")
    assert Locations.from_env().db == home / "bridge.db" and Locations.from_env().private_dir() == home / "rt"


def test_an_empty_variable_counts_as_unset_in_both_paths(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENT_BRIDGE_DB", "")
    monkeypatch.setenv("AGENT_BRIDGE_RUNTIME_DIR", "")
    default = tmp_path / "home" / ".local/state/agent-bridge/bridge.db"
    assert BridgeSettings().db == default == Locations.from_env().db
    assert BridgeSettings().private_dir() == default.parent / "runtime"


def test_a_relative_xdg_state_home_is_ignored_as_the_spec_says(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", "relative-state")
    assert Locations.from_env().db == tmp_path / "home" / ".local/state/agent-bridge/bridge.db"
    assert BridgeSettings().db.is_absolute()


def test_absolute_paths_pass_unchanged(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENT_BRIDGE_DB", str(tmp_path / "s" / "bridge.db"))
    monkeypatch.setenv("AGENT_BRIDGE_CONFIG", str(tmp_path / "config.json"))
    settings = BridgeSettings()
    assert settings.db == tmp_path / "s" / "bridge.db" and settings.config_path() == Path(tmp_path / "config.json")
