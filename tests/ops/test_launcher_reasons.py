"""Issue 30, items 2 and 3: a worker command missing from the listener's environment is said where
the user looks (`listener enable`, doctor, `send --wait`, `show`), the quick start's scripted worker
needs no exported variable, and a failure leads with its cause (the CLI's own status)."""

import os
from pathlib import Path

import pytest
from dispatch_harness import cli, start_listener, stop_listener
from harness import PROJECT, bridge_env, write_config

from dispatcher.core.locations import Locations
from dispatcher.dispatch.control import enable_warnings
from dispatcher.ops.show import attempt_headline

WITHOUT = {k: v for k, v in os.environ.items() if k != "AGENT_BRIDGE_WORKER_COMMAND"}


def setup(tmp_path: Path, launcher: str, auto: bool = True) -> dict[str, str]:
    agents = {
        "claude": {"auto": auto, "launcher": launcher, "worker_timeout_seconds": 120},
        "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
    }
    return bridge_env(tmp_path, write_config(tmp_path / "config.json", agents))


def run_task(env: dict[str, str]) -> tuple:
    listener = start_listener(env, inherited={**WITHOUT, "PYTHONPATH": str(PROJECT)})
    try:
        done = cli(env, "send", "--from", "kimi", "--to", "claude", "--task", "count these words", "--wait")
    finally:
        stop_listener(listener)
    return done, cli(env, "show", "1")


def test_without_the_worker_command_send_wait_and_show_print_the_launchers_own_reason(tmp_path):
    env = setup(tmp_path, "launchers/command_headless.sh")
    done, shown = run_task(env)
    assert done.returncode == 4, done.stderr
    said = "the launcher said: command_headless.sh: AGENT_BRIDGE_WORKER_COMMAND is not set: set it to the shell command"
    lines = done.stdout.splitlines()
    assert lines[1] == "task #1: failed (launcher_usage)", lines
    assert lines[3].startswith(f"  {said}"), lines
    assert f"  {said}" in shown.stdout, shown.stdout


def test_the_scripted_launcher_needs_no_exported_variable(tmp_path):
    env = setup(tmp_path, "launchers/scripted_headless.sh")
    done, _ = run_task(env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[1].startswith("task #1: succeeded")


@pytest.mark.parametrize(
    ("launcher", "auto", "exported", "codes"),
    [
        ("launchers/command_headless.sh", True, False, ["launcher_variable_unset"]),
        ("launchers/command_headless.sh", True, True, []),
        ("launchers/scripted_headless.sh", True, False, []),
        ("launchers/scripted_headless.sh", False, False, ["auto_off"]),
    ],
)
def test_enable_warns_of_a_variable_the_launcher_needs_and_of_auto_off(
    tmp_path, monkeypatch, launcher, auto, exported, codes
):
    env = setup(tmp_path, launcher, auto)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if exported:
        monkeypatch.setenv("AGENT_BRIDGE_WORKER_COMMAND", "true")
    else:
        monkeypatch.delenv("AGENT_BRIDGE_WORKER_COMMAND", raising=False)
    warnings = enable_warnings(Locations.from_env(), "claude")
    assert [w.split(":", 1)[0] for w in warnings] == codes, warnings
    if "launcher_variable_unset" in codes:
        assert "needs AGENT_BRIDGE_WORKER_COMMAND, which this shell has not" in warnings[0]
        assert "agent-bridge listener restart --agent claude" in warnings[0]


def attempt(**fields):
    return {"outcome": "failed", "state": "finished", "error_kind": None, "cli_status": None, **fields}


@pytest.mark.parametrize(
    ("fields", "head"),
    [
        ({"error_kind": "no_evidence", "cli_status": "auth_error"}, "failed (auth_error); error_kind no_evidence"),
        ({"error_kind": "launcher_usage"}, "failed (launcher_usage)"),
        ({"error_kind": "no_evidence"}, "failed (no_evidence)"),
        ({"outcome": "succeeded"}, "succeeded, cli_status unknown"),
        ({"outcome": "timeout", "cli_status": "success"}, "timeout (timeout); cli_status success"),
    ],
)
def test_a_failure_leads_with_its_cause(fields, head):
    assert attempt_headline(attempt(**fields)) == head
