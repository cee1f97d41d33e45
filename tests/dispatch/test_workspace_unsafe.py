"""A workspace that holds the bridge's own files (or is the home directory) is refused everywhere:
config validation, the listener, ``listener enable``, doctor, the supervisor's pre-launch check
(``agent-bridge dispatch``) and ``init`` (issue 28, item 1)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from dispatch_harness import cli, post_task, start_listener, status, stop_listener, wait_until
from harness import PROJECT, bridge_env, write_config


def _launcher(tmp_path: Path) -> tuple[Path, Path]:
    """A launcher that only leaves a mark: it must never run for an unsafe workspace."""
    marker = tmp_path / "launcher-ran"
    launcher = tmp_path / "launchers" / "mark.sh"
    launcher.parent.mkdir()
    launcher.write_text(f"#!/bin/sh\ntouch {marker}\n")
    launcher.chmod(0o755)
    return launcher, marker


def _agents(launcher: Path, **claude: object) -> dict:
    return {
        "claude": {"auto": True, "launcher": str(launcher), "worker_timeout_seconds": 60, **claude},
        "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
    }


def test_config_validation_refuses_a_declared_workspace_that_holds_the_config(tmp_path):
    launcher, _ = _launcher(tmp_path)
    config = write_config(tmp_path / "config.json", _agents(launcher, workspace=str(tmp_path)))
    env = bridge_env(tmp_path, config)
    done = cli(env, "doctor", "--json")
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "config_invalid" in text and "workspace_unsafe" not in text.split("config_invalid")[0]
    assert f"the workspace of agent 'claude' is unsafe: {tmp_path} contains the bridge's config" in text
    assert f"set agents.claude.workspace in {config} to a project directory" in text


@pytest.mark.parametrize("inside", ["runtime", "launchers"])
def test_config_validation_refuses_a_writable_extra_dir_inside_the_runtime_or_holding_a_launcher(tmp_path, inside):
    launcher, _ = _launcher(tmp_path)
    (tmp_path / "ws").mkdir()
    agents = _agents(
        launcher, workspace=str(tmp_path / "ws"), permissions={"level": "edit", "extra_dirs": [str(tmp_path / inside)]}
    )
    env = bridge_env(tmp_path, write_config(tmp_path / "config.json", agents))
    done = cli(env, "doctor", "--json")
    assert "the workspace of agent 'claude' is unsafe" in done.stdout + done.stderr
    # Read-only access to the same directory is not a write: the level read keeps it.
    agents["claude"]["permissions"]["level"] = "read"
    write_config(tmp_path / "config.json", agents)
    assert "is unsafe" not in cli(env, "doctor", "--json").stdout


def test_the_default_workspace_holding_the_store_is_refused_by_the_listener_doctor_and_the_barrier(tmp_path):
    launcher, marker = _launcher(tmp_path)
    env = {
        **bridge_env(tmp_path, write_config(tmp_path / "config.json", _agents(launcher))),
        "AGENT_BRIDGE_WORKSPACE": str(tmp_path),
    }  # the default workspace: holds the store, config, runtime
    # doctor
    done = cli(env, "doctor", "--json")
    findings = [f for f in json.loads(done.stdout)["findings"] if f["code"] == "workspace_unsafe"]
    assert findings and findings[0]["level"] == "error", done.stdout
    assert findings[0]["fix"].startswith("set agents.claude.workspace in ")
    # listener enable warns, the listener dispatches nothing and says why
    listener = start_listener(env)
    try:
        task = post_task(Path(env["AGENT_BRIDGE_DB"]), "not dispatched into an unsafe workspace")
        seen = wait_until(lambda: (s := status(env))["stage"] == "error" and s, what="stage error")
        assert seen["progress"]["error"].startswith(
            f"workspace_unsafe: the workspace of agent 'claude' is unsafe: {tmp_path} contains "
        )
        assert "nothing is dispatched; set agents.claude.workspace in" in seen["progress"]["error"]
        enabled = cli(env, "listener", "enable", "--agent", "claude")
        assert json.loads(enabled.stdout)["warnings"][0].startswith("workspace_unsafe: ")
    finally:
        stop_listener(listener)
    # the barrier: a human's dispatch goes past the listener; the supervisor refuses to launch
    done = cli(env, "dispatch", str(task))
    result = json.loads(done.stdout)
    assert (result["outcome"], result["error_kind"]) == ("failed", "workspace_unsafe"), result
    assert done.returncode == 4 and not marker.exists()
    shown = cli(env, "show", str(task)).stdout
    assert "workspace_unsafe: the agent's workspace holds or lies in the bridge's own files" in shown


def _init(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "dispatcher", "init", "--scripted", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_init_in_the_home_directory_is_refused_and_writes_nothing(tmp_path):
    home = tmp_path / "home"
    (home / "my-project").mkdir(parents=True)
    done = _init(home, home)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"agent-bridge: workspace_unsafe: workspace {home} is the home directory {home}: its workers could rewrite "
        "the bridge's own files and raise their own permissions; nothing was written. Run init in a project "
        "directory (mkdir -p ~/my-project && cd ~/my-project), or pass --workspace DIR\n"
    )
    assert not (home / ".config").exists()
    assert "contains the installed code" in _init(home, home / "my-project", "--workspace", str(PROJECT.parent)).stderr
    done = _init(home, home / "my-project")  # the quick start's way
    assert done.returncode == 0, done.stderr
    config = json.loads((home / ".config" / "agent-bridge" / "config.json").read_text())
    assert config["agents"]["claude"]["workspace"] == str(home / "my-project")
