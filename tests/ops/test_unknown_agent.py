"""Every ``--agent`` command refuses an agent that config.json does not declare, and names the declared ones.

An invalid config.json is refused with its reason where the command needs it; status,
progress, watch and disable still work, and ``listener run`` starts in stage ``error``
(it picks up the fixed file without a restart).
"""

import json
import subprocess
from pathlib import Path

import pytest
from dispatch_harness import cli, start_listener, status, wait_until
from harness import bridge_env, write_config

AGENT_COMMANDS = [
    ("listener", "run"),
    ("listener", "status"),
    ("listener", "progress", "--once"),
    ("listener", "watch"),
    ("listener", "pending"),
    ("listener", "enable"),
    ("listener", "disable"),
    ("listener", "recover"),
    ("systemd", "install"),
]
NEEDS_CONFIG = [("listener", "pending"), ("listener", "enable"), ("listener", "recover"), ("systemd", "install")]
BROKEN = '{"agents": {"claude": {"auto": "yes"}}}'


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return bridge_env(tmp_path, write_config(tmp_path / "config.json"))


def failure_line(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.splitlines()
    return line


@pytest.mark.parametrize("command", AGENT_COMMANDS, ids=" ".join)
def test_an_undeclared_agent_is_refused_with_the_declared_ones(env, tmp_path, command):
    done = cli(env, *command, "--agent", "nobody", timeout=60)
    line = failure_line(done)
    assert done.returncode == 2, done.stderr
    assert line.startswith("agent-bridge: unknown_agent: --agent 'nobody' is not declared")
    assert "claude, kimi" in line and env["AGENT_BRIDGE_CONFIG"] in line
    assert done.stdout == ""
    assert not list(Path(env["AGENT_BRIDGE_RUNTIME_DIR"]).glob("nobody*"))  # no listener, no marker
    assert not (tmp_path / "xdg-config" / "systemd").exists()  # no unit installed


@pytest.mark.parametrize("command", NEEDS_CONFIG + [("dispatch",)], ids=" ".join)
def test_an_invalid_config_is_refused_with_its_reason(env, command):
    Path(env["AGENT_BRIDGE_CONFIG"]).write_text(BROKEN)
    args = ("1",) if command == ("dispatch",) else ("--agent", "claude")
    done = cli(env, *command, *args, timeout=60)
    line = failure_line(done)
    assert done.returncode == 2 and line.startswith("agent-bridge: config_invalid: ")
    assert env["AGENT_BRIDGE_CONFIG"] in line and "auto" in line  # the reason, not just the verdict


def test_status_and_disable_still_work_with_an_invalid_config(env):
    Path(env["AGENT_BRIDGE_CONFIG"]).write_text(BROKEN)
    st = status(env)
    assert st["stage"] == "error" and "auto" in st["config_error"]
    done = cli(env, "listener", "disable", "--agent", "claude")
    assert done.returncode == 0 and json.loads(done.stdout)["enabled"] is False


def test_a_listener_started_on_an_invalid_config_runs_in_stage_error_until_it_is_fixed(env):
    config = Path(env["AGENT_BRIDGE_CONFIG"])
    config.write_text(BROKEN)
    listener = start_listener(env)
    try:
        wait_until(lambda: (st := status(env))["running"] and st["stage"] == "error", what="stage error")
        write_config(config)
        wait_until(lambda: status(env)["stage"] == "idle", what="idle after the fix")
    finally:
        listener.terminate()
        _, err = listener.communicate(timeout=60)
    assert listener.returncode == 0, err
    assert err.splitlines()[0].startswith("agent-bridge listener for claude: pid ")


def test_listener_run_says_what_it_runs_on(env):
    assert cli(env, "listener", "disable", "--agent", "claude").returncode == 0
    done = cli(env, "listener", "run", "--agent", "claude")  # disabled: it says so and exits 0
    assert done.returncode == 0, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("agent-bridge listener for claude: pid ")
    assert f"store {env['AGENT_BRIDGE_DB']}" in first and f"runtime {env['AGENT_BRIDGE_RUNTIME_DIR']}" in first
