"""The explicit per-agent workspace, launcher resolution and the launcher exit codes as error kinds."""

import json
import os
from pathlib import Path

import pytest
from dispatch_harness import (
    cli,
    log_events,
    make_launcher,
    notices_for,
    post_task,
    start_listener,
    status,
    stop_listener,
    wait_finished,
    wait_until,
)
from pydantic import ValidationError

from dispatcher.core.config import AgentConfig, BridgeConfig
from dispatcher.dispatch.outcome import decide


@pytest.mark.parametrize(
    "exit_code, evidence_kind, cli_status, error_kind, expected",
    [
        (127, "no_evidence", None, None, "cli_not_found"),
        (2, "no_evidence", None, None, "launcher_usage"),
        (1, "no_evidence", None, None, "no_evidence"),
        (None, "no_evidence", None, None, "no_evidence"),
        (127, "ack_without_result", None, None, "ack_without_result"),  # the store's evidence says more
        (127, "no_evidence", None, "timeout", "timeout"),  # the caller's own kind wins
        (2, "no_evidence", "error", None, "no_evidence"),  # the CLI ran: 2 was its own exit code
    ],
)
def test_launcher_exit_codes_name_the_failure(exit_code, evidence_kind, cli_status, error_kind, expected):
    assert decide(None, evidence_kind, "failed", error_kind, cli_status, exit_code) == ("failed", expected)


def test_evidence_outcome_wins_over_the_exit_code():
    assert decide("succeeded", None, "failed", None, None, 127) == ("succeeded", None)


def test_workspace_must_be_absolute():
    assert AgentConfig(launcher="x.sh", workspace="/srv/project").workspace == "/srv/project"
    with pytest.raises(ValidationError, match="absolute"):
        AgentConfig(launcher="x.sh", workspace="project")


def test_workspace_falls_back_to_the_setting():
    config = BridgeConfig(agents={"a": AgentConfig(launcher="x.sh"), "b": AgentConfig(launcher="x.sh", workspace="/w")})
    assert config.workspace("a", Path("/default")) == Path("/default")
    assert config.workspace("b", Path("/default")) == Path("/w")


def test_relative_launcher_checkout_first_then_package(tmp_path, monkeypatch):
    project, package = tmp_path / "project", tmp_path / "package"
    for base in (project, package):
        (base / "launchers").mkdir(parents=True)
    (package / "launchers" / "only_packaged.sh").write_text("")
    (project / "launchers" / "both.sh").write_text("")
    (package / "launchers" / "both.sh").write_text("")
    monkeypatch.setattr("dispatcher.core.launchers.PACKAGE_DATA", package)  # (where launcher_path looks)
    config = BridgeConfig(
        agents={n: AgentConfig(launcher=f"launchers/{n}.sh") for n in ("both", "only_packaged", "nowhere")}
    )
    assert config.launcher_path("both", project) == project / "launchers" / "both.sh"
    assert config.launcher_path("only_packaged", project) == package / "launchers" / "only_packaged.sh"
    assert config.launcher_path("nowhere", project) == project / "launchers" / "nowhere.sh"


def _write_config(path: Path, launcher: Path | str, workspace: Path | None = None) -> None:
    claude = {"auto": True, "launcher": str(launcher), "worker_timeout_seconds": 60}
    if workspace is not None:
        claude["workspace"] = str(workspace)
    doc = {"agents": {"claude": claude, "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"}}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def _exit_launcher(directory: Path, code: int) -> Path:
    path = directory / f"exit_{code}.sh"
    path.write_text(f"#!/bin/sh\necho 'launcher: no CLI here' >&2\nexit {code}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("code, kind", [(127, "cli_not_found"), (2, "launcher_usage")])
def test_launcher_exit_code_reaches_status_and_notice(env, db_path, config_path, launchers, code, kind):
    _write_config(config_path, _exit_launcher(launchers, code))
    listener = start_listener(env)
    try:
        task = post_task(db_path, f"a launcher exiting {code}")
        done = wait_finished(db_path, task)
        assert (done["outcome"], done["error_kind"], done["exit_code"]) == ("failed", kind, code)
        (notice,) = notices_for(db_path, task)
        assert f"failed ({kind})" in notice["text"]
        last = wait_until(
            lambda: (status(env).get("last") or {}).get("message_id") == task and status(env)["last"],
            what="status shows the attempt",
        )
        assert last["error_kind"] == kind
        assert "result=failed in " in cli(env, "listener", "progress", "--once", "--agent", "claude").stdout
        assert f"rc={code} error_kind={kind}" in cli(env, "listener", "progress", "--once", "--agent", "claude").stdout
    finally:
        stop_listener(listener)


def test_missing_launcher_is_named_in_the_log(env, db_path, config_path, launchers):
    missing = launchers / "not_there.sh"
    _write_config(config_path, missing)
    listener = start_listener(env)
    try:
        task = post_task(db_path, "a launcher that does not exist")
        done = wait_finished(db_path, task)
        assert done["error_kind"] == "spawn:FileNotFoundError"
        events = [e for e in log_events(env, "spawn_failed") if e.get("message_id") == task]
        assert events and events[0]["path"] == str(missing) and events[0]["reason"] == "launcher not found"
        last = wait_until(
            lambda: (status(env).get("last") or {}).get("message_id") == task and status(env)["last"],
            what="status shows the attempt",
        )
        assert (last["error_kind"], last["path"]) == ("spawn:FileNotFoundError", str(missing))
    finally:
        stop_listener(listener)


def test_listener_refuses_an_agent_whose_workspace_is_missing(env, db_path, config_path, launchers, tmp_path):
    gone = tmp_path / "no-such-workspace"
    launcher = make_launcher(launchers, "succeed")
    where = tmp_path / "where.txt"  # the worker's cwd and AGENT_BRIDGE_WORKSPACE
    text = launcher.read_text().replace("#!/bin/sh\n", f'#!/bin/sh\necho "$PWD $AGENT_BRIDGE_WORKSPACE" > {where}\n')
    launcher = launchers / "launch_where.sh"
    launcher.write_text(text)
    launcher.chmod(0o755)
    _write_config(config_path, launcher, workspace=gone)
    listener = start_listener(env)
    try:
        task = post_task(db_path, "not dispatched while the workspace is missing")
        seen = wait_until(lambda: (s := status(env))["stage"] == "error" and s, what="stage error")
        error = seen["progress"]["error"]
        assert error.startswith(
            f"workspace_missing: the workspace {gone} of agent 'claude' is not an existing directory"
        )
        line = cli(env, "listener", "progress", "--agent", "claude", "--once").stdout
        assert "workspace_missing" in line, line  # doctor's code, not "config invalid"
        enabled = cli(env, "listener", "enable", "--agent", "claude")  # already running: it warns all the same
        assert json.loads(enabled.stdout)["warnings"] == [error], enabled.stdout
        assert enabled.stderr == f"agent-bridge: warning: {error}\n"
        gone.mkdir()  # fixed: the listener dispatches into it
        done = wait_finished(db_path, task)
        assert done["outcome"] == "succeeded", done
        assert where.read_text().split() == [str(gone), str(gone)]
    finally:
        stop_listener(listener)
