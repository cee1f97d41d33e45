"""Issue 30, items 3 and 5: a listener started before the agent's CLI was on PATH keeps the old PATH;
`listener enable` says so (environment_differs compares PATH and which CLIs it finds), doctor says
listener_cli_missing instead of cli_ok, and `listener restart` starts one with the caller's
environment. `listener progress` prints one line and exits."""

import json
import os
from pathlib import Path

import pytest
from dispatch_harness import cli, status, wait_until
from harness import bridge_env, environment, write_config

from dispatcher.dispatch.environment import difference, record


def fake_claude(directory: Path) -> Path:
    directory.mkdir(exist_ok=True)
    binary = directory / "claude"
    binary.write_text("#!/bin/sh\necho '2.1.332 (Claude Code)'\n")
    binary.chmod(0o755)
    return binary


def test_a_cli_found_on_one_path_and_not_the_other_is_named(tmp_path):
    bins = fake_claude(tmp_path / "bin").parent
    old = record({"PATH": "/usr/bin:/bin"})
    assert "claude" not in old["clis"]
    assert (
        difference(old, {"PATH": f"{bins}:/usr/bin:/bin"}) == "this shell's PATH finds claude, which its PATH does not"
    )
    newer = record({"PATH": f"{bins}:/usr/bin:/bin"})
    assert difference(newer, {"PATH": "/usr/bin:/bin"}) == "its PATH finds claude, which this shell's does not"
    assert difference(newer, {"PATH": f"{bins}:/usr/bin:/bin"}) is None
    assert difference(old, {"PATH": "/bin:/usr/bin"}) == "its PATH differs (or a CLI resolves to another binary)"


@pytest.fixture
def setup(tmp_path):
    config = write_config(
        tmp_path / "config.json", {"claude": {"auto": True, "launcher": "launchers/claude_headless.sh"}}
    )
    env = {**bridge_env(tmp_path, config), "PATH": "/usr/bin:/bin", "CLAUDE_BIN": ""}
    yield env, fake_claude(tmp_path / "bin").parent
    # the detached listeners this test started: disable, then wait for the lock to be free
    cli(env, "listener", "disable", "--agent", "claude")
    wait_until(lambda: not status(env)["running"], deadline=60, what="the listener to stop")


def test_restart_gives_the_listener_the_path_that_finds_the_cli(setup):
    env, bins = setup
    started = json.loads(cli(env, "listener", "enable", "--agent", "claude").stdout)
    assert started["running"], started
    wait_until(lambda: status(env)["clis"] is not None, what="the listener's environment record")
    assert status(env)["clis"] == []
    here = {**env, "PATH": f"{bins}:/usr/bin:/bin"}
    warned = json.loads(cli(here, "listener", "enable", "--agent", "claude").stdout)["warnings"]
    assert any("this shell's PATH finds claude, which its PATH does not" in w for w in warned), warned

    from dispatcher.core.locations import Locations
    from dispatcher.ops.doctor.context import Context
    from dispatcher.ops.doctor.listeners import listener_cli_missing

    with environment({**os.environ, **here}):
        findings = listener_cli_missing(Context(Locations.from_env(), _config(env)))
    (found,) = findings
    assert (found.code, found.level) == ("listener_cli_missing", "error")
    assert f"does not find claude on its PATH (this shell finds {bins / 'claude'})" in found.message
    assert found.fix.startswith("agent-bridge listener restart --agent claude")

    restarted = cli(here, "listener", "restart", "--agent", "claude")
    assert restarted.returncode == 0, restarted.stderr
    report = json.loads(restarted.stdout)
    assert report["stopped_pid"] == started["pid"] and report["running"] and report["pid"] != started["pid"]
    wait_until(lambda: status(env)["clis"] == ["claude"], what="the new listener's record")


def _config(env):
    from dispatcher.core.config import load_config

    return load_config(Path(env["AGENT_BRIDGE_CONFIG"]))


def test_restart_with_no_listener_running_starts_one(setup):
    env, _ = setup
    done = cli(env, "listener", "restart", "--agent", "claude")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["stopped_pid"] is None and report["running"]


def test_progress_prints_one_line_and_exits(setup):
    env, _ = setup
    done = cli(env, "listener", "progress", "--agent", "claude", timeout=60)
    assert done.returncode == 0 and done.stdout == "[claude] stopped\n", done
