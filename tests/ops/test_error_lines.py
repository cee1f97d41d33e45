"""Every failing command ends with one line ``agent-bridge: <code>: ...`` and a documented exit status.

Real subprocesses (``python -m dispatcher ...`` and ``server.py``) on real files: a store
full of garbage, a store path under a regular file, a runtime directory owned by
another user, bad settings, out-of-range arguments, and an injected bug.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dispatch_harness import cli
from harness import PROJECT, bridge_env, write_config


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return bridge_env(tmp_path, write_config(tmp_path / "config.json"))


def one_line(done: subprocess.CompletedProcess, code: str, status: int, *, before: int = 0) -> str:
    """The failure line; ``before`` informational lines may precede it (the listener's start line)."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == before + 1, done.stderr
    assert lines[-1].startswith(f"agent-bridge: {code}: "), done.stderr
    assert done.returncode == status, done.stderr
    return lines[-1]


def corrupt(env: dict[str, str]) -> None:
    db = Path(env["AGENT_BRIDGE_DB"])
    db.parent.mkdir(parents=True, exist_ok=True)
    db.write_bytes(b"this is not a SQLite database\n" * 200)


@pytest.mark.parametrize(
    ("args", "before"),
    [
        (("listener", "run", "--agent", "claude"), 1),
        (("listener", "pending", "--agent", "claude"), 0),
        (("listener", "recover", "--agent", "claude"), 0),
        (("dispatch", "1"), 0),
    ],
)
def test_a_store_that_is_not_sqlite_is_named_corrupt(env, args, before):
    corrupt(env)
    line = one_line(cli(env, *args), "store_corrupt", 1, before=before)
    assert env["AGENT_BRIDGE_DB"] in line and "restore a backup" in line


def test_the_server_names_the_same_corrupt_store_before_the_handshake(env):
    corrupt(env)
    done = subprocess.run(
        [sys.executable, str(PROJECT / "server.py")],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        env={**os.environ, **env, "AGENT_ID": "claude"},
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    one_line(done, "store_corrupt", 2)
    assert done.stdout == ""


@pytest.mark.parametrize("message_id", ["9223372036854775808", "0", "-1", "many"])
def test_a_message_id_out_of_sqlite_range_is_a_usage_error(env, message_id):
    line = one_line(cli(env, "dispatch", message_id), "usage_error", 2)
    assert "agent-bridge dispatch --help" in line


@pytest.mark.parametrize("interval", ["-1", "nan", "inf", "0"])
def test_a_watch_interval_must_be_a_finite_positive_number(env, interval):
    line = one_line(cli(env, "listener", "watch", "--agent", "claude", "--interval", interval), "usage_error", 2)
    assert "--interval" in line


@pytest.mark.parametrize(
    "args",
    [
        ("listener", "status", "--agent", "claude"),
        ("listener", "run", "--agent", "claude"),
        ("dispatch", "1"),
        ("systemd", "install", "--agent", "claude"),
        ("serve",),
    ],
)
def test_an_unknown_log_level_is_one_invalid_setting_line(env, args):
    line = one_line(cli({**env, "AGENT_BRIDGE_LOG_LEVEL": "LOUD", "AGENT_ID": "claude"}, *args), "invalid_setting", 2)
    assert "AGENT_BRIDGE_LOG_LEVEL='LOUD'" in line and "'DEBUG', 'INFO', 'WARNING' or 'ERROR'" in line


def test_the_server_refuses_a_bad_setting_before_the_handshake(env):
    done = subprocess.run(
        [sys.executable, str(PROJECT / "server.py")],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        env={**os.environ, **env, "AGENT_ID": "claude", "AGENT_BRIDGE_LOG_LEVEL": "LOUD"},
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    one_line(done, "invalid_setting", 2)
    assert done.stdout == ""


@pytest.mark.parametrize("variable", ["AGENT_BRIDGE_DB", "AGENT_BRIDGE_CONFIG", "AGENT_BRIDGE_RUNTIME_DIR"])
def test_a_relative_path_setting_is_refused_by_cli_and_server(env, variable):
    bad = {**env, variable: "relative/place", "AGENT_ID": "claude"}
    assert variable in one_line(cli(bad, "listener", "status", "--agent", "claude"), "invalid_setting", 2)
    assert "absolute path" in one_line(cli(bad, "serve"), "invalid_setting", 2)


def test_the_status_line_still_answers_with_a_relative_store_path(env):
    done = cli({**env, "AGENT_BRIDGE_DB": "bridge.db"}, "statusline")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.strip() == "[agent-bridge] unavailable (invalid_setting AGENT_BRIDGE_DB)"


@pytest.mark.parametrize(
    ("args", "code", "before"),
    [
        (("listener", "run", "--agent", "claude"), "path_unusable", 1),  # the runtime dir is made first
        (("dispatch", "1"), "path_unusable", 0),
    ],
)
def test_a_store_directory_under_a_regular_file(env, tmp_path, args, code, before):
    (tmp_path / "plain-file").write_text("")
    unreachable = {
        **env,
        "AGENT_BRIDGE_DB": str(tmp_path / "plain-file" / "state" / "bridge.db"),
        "AGENT_BRIDGE_RUNTIME_DIR": "",
    }
    line = one_line(cli(unreachable, *args), code, 1, before=before)
    assert str(tmp_path / "plain-file") in line and "Not a directory" in line


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown a directory to another user")
def test_a_runtime_directory_owned_by_another_user_is_refused(env):
    runtime = Path(env["AGENT_BRIDGE_RUNTIME_DIR"])
    runtime.mkdir(mode=0o700)
    os.chown(runtime, 65534, 65534)
    one_line(cli(env, "listener", "enable", "--agent", "claude"), "unsafe_path", 1)
    assert runtime.stat().st_uid == 65534 and runtime.stat().st_mode & 0o777 == 0o700


BUG = (
    "import sys; import dispatcher.dispatch.control as control; "
    "control.listener_status = lambda *a, **k: {}['no such key']; "
    "from dispatcher.ops.cli import main; main(sys.argv[1:])"
)


def test_a_bug_is_one_internal_error_line_with_the_traceback_in_the_log(env):
    runtime = Path(env["AGENT_BRIDGE_RUNTIME_DIR"])
    runtime.mkdir(mode=0o700)
    argv = [sys.executable, "-c", BUG, "listener", "status", "--agent", "claude"]
    done = subprocess.run(argv, cwd=PROJECT, env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    line = one_line(done, "internal_error", 1)
    assert "KeyError" in line and str(runtime / "dispatcher.log") in line
    assert "Traceback" in (runtime / "dispatcher.log").read_text()
    debug = subprocess.run(
        argv,
        cwd=PROJECT,
        env={**os.environ, **env, "AGENT_BRIDGE_LOG_LEVEL": "DEBUG"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" in debug.stderr and debug.stderr.splitlines()[-1].startswith("agent-bridge: internal_error: ")


def test_a_usage_error_is_one_line_too(env):
    line = one_line(cli(env, "listener", "explode"), "usage_error", 2)
    assert "explode" in line


def test_a_bare_group_shows_its_help_and_one_line(env):
    done = cli(env, "listener")
    one_line(done, "usage_error", 2)
    assert "Commands:" in done.stdout and "enable" in done.stdout


def test_listener_run_after_disable_says_how_to_run_it_in_the_foreground_anyway(env, tmp_path):
    """It used to point only at `listener enable`, which starts a detached listener, not this one."""
    assert cli(env, "listener", "disable", "--agent", "claude").returncode == 0
    done = cli(env, "listener", "run", "--agent", "claude")
    marker = tmp_path / "runtime" / "claude.disabled"
    assert done.returncode == 0, done.stderr
    assert f"rm {marker}" in done.stderr and "agent-bridge listener enable --agent claude" in done.stderr
    assert marker.exists(), "the command only explains; the marker stays"


def test_a_store_path_that_is_a_directory_says_so(env, tmp_path):
    """It used to read `store_unavailable ... unable to open database file`, naming no cause."""
    directory = tmp_path / "a-dir"
    directory.mkdir()
    done = cli({**env, "AGENT_BRIDGE_DB": str(directory)}, "show", "1")
    line = one_line(done, "path_unusable", 1)
    assert f"{directory} is a directory" in line and str(directory / "bridge.db") in line
