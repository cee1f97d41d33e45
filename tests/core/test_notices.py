"""Issue 33, item 4: the notice rules (pure): which events give one, what a notice carries."""

import json

import pytest

from dispatcher.core.config import BridgeConfig, ConfigError, load_config
from dispatcher.core.config_view import ConfigView
from dispatcher.core.notices import (
    FIELDS,
    Notice,
    attempt_notice,
    notice_argv,
    notice_environment,
)
from dispatcher.dispatch.notify import command_environment


@pytest.mark.parametrize(
    ("outcome", "event"),
    [
        ("succeeded", None),
        ("blocked", None),
        ("failed", "attempt_failed"),
        ("timeout", "attempt_failed"),
        ("crashed", "attempt_failed"),
        ("budget_exceeded", "budget_reached"),
        (None, None),
    ],
)
def test_which_outcome_gives_a_notice(outcome, event):
    notice = attempt_notice("claude", 42, outcome, "x")
    assert (notice.event if notice else None) == event
    if notice is not None:
        assert (notice.message_id, notice.outcome, notice.error_kind) == (42, outcome, "x")


def test_an_unknown_event_is_refused():
    with pytest.raises(ValueError, match="unknown notice event"):
        Notice("lunch", "claude")


@pytest.mark.parametrize(
    ("notice", "show"),
    [
        (Notice("attempt_failed", "claude", 42, "timeout", "timeout"), "agent-bridge show 42"),
        (Notice("approval_waiting", "claude", 7), "agent-bridge approvals show 7"),
        (Notice("listener_stopped", "claude", error_kind="OSError"), "agent-bridge listener status --agent claude"),
        (Notice("budget_held", "claude"), "agent-bridge listener status --agent claude"),
    ],
)
def test_each_notice_names_the_command_that_shows_more(notice, show):
    assert notice.show == show
    assert notice.summary.endswith(show)
    assert set(notice.fields()) == set(FIELDS)


def test_fields_go_into_arguments_by_placeholder_and_into_the_environment():
    notice = Notice("attempt_failed", "claude", 42, "failed", "no_evidence")
    argv = notice_argv(["{event}", "-t", "{agent} #{message_id}", "{summary}", "{unknown} {0} {"], notice)
    assert argv[0] == "{event}"  # the program is never rewritten
    assert argv[1:3] == ["-t", "claude #42"]
    assert argv[3] == notice.summary and "no_evidence" in argv[3]
    assert argv[4] == "{unknown} {0} {"
    env = notice_environment(notice)
    assert env["AGENT_BRIDGE_NOTICE_EVENT"] == "attempt_failed"
    assert env["AGENT_BRIDGE_NOTICE_MESSAGE_ID"] == "42"
    assert env["AGENT_BRIDGE_NOTICE_SHOW"] == "agent-bridge show 42"


def test_the_command_gets_no_bridge_variables_but_the_notice():
    base = {"PATH": "/bin", "AGENT_BRIDGE_WORKER_TOKEN": "secret", "AGENT_BRIDGE_DB": "/x", "DISPLAY": ":0"}
    env = command_environment(base, Notice("listener_stopped", "claude", error_kind="OSError"))
    assert env["PATH"] == "/bin" and env["DISPLAY"] == ":0"
    assert not {k for k in env if k.startswith("AGENT_BRIDGE_") and not k.startswith("AGENT_BRIDGE_NOTICE_")}
    assert env["AGENT_BRIDGE_NOTICE_ERROR_KIND"] == "OSError"


def test_an_agents_own_command_wins_over_the_global_one_in_both_views():
    config = BridgeConfig.model_validate(
        {
            "agents": {"a": {"launcher": "x", "notify_command": ["own", "{event}"]}, "b": {"launcher": "y"}},
            "notify_command": ["global"],
            "notify_timeout_seconds": 5,
        }
    )
    view = ConfigView.of(config.model_dump(), {a: config.permissions(a).model_dump() for a in config.agents})
    for each in (config, view):
        assert each.notify_command_of("a") == ["own", "{event}"]
        assert each.notify_command_of("b") == ["global"]
    assert view.notify_timeout_seconds == 5
    bare = BridgeConfig.model_validate({"agents": {"a": {"launcher": "x"}}})
    assert bare.notify_command_of("a") is None


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        ({"notify_command": []}, "notify_command"),
        ({"notify_command": "notify-send hi"}, "notify_command"),
        ({"notify_command": [""]}, "notify_command"),
        ({"notify_timeout_seconds": 0}, "notify_timeout_seconds"),
    ],
)
def test_a_bad_notify_command_is_refused_naming_it(tmp_path, doc, said):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"agents": {"claude": {"launcher": "launchers/x.sh"}}, **doc}))
    path.chmod(0o600)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert said in refused.value.reason
