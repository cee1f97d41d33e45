"""Metrics are off unless asked for, and asking wrongly is one clear refusal (docs/metrics.md):
with them off, a send and a receive never import prometheus_client (the listener's loop:
tests/dispatch/test_listener_wakes.py); ``metrics serve`` listens on loopback only, says what is
missing when the extra or the store is, and a bad ``metrics_textfile_dir`` is refused."""

import json
import socket
import subprocess
import sys

import pytest
from dispatch_harness import cli
from harness import PROJECT, bridge_env, write_config

from dispatcher.core.config import ConfigError, load_config

AGENTS = {
    "claude": {"auto": False, "launcher": "launchers/command_headless.sh"},
    "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
}


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return bridge_env(tmp_path, write_config(tmp_path / "config.json", AGENTS))


def test_with_metrics_off_a_send_and_a_receive_never_import_prometheus_client(env):
    probe = (
        "import sys\n"
        "from dispatcher.ops.cli import main\n"
        "try:\n    main(['send', '--from', 'kimi', '--to', 'claude', '--task', 'hello'])\n"
        "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "import dispatcher.mcp.mcp_server\n"
        "from dispatcher.bridge.messages import receive_messages\n"
        "from dispatcher.store import open_store\n"
        "from dispatcher.core.settings import BridgeSettings\n"
        "conn = open_store(BridgeSettings().db)\n"
        "assert receive_messages(conn, agent='claude', worker_id='w')['messages'], 'the task is not received'\n"
        "print(sorted(m for m in ('prometheus_client', 'dispatcher.dispatch.metrics') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


@pytest.mark.parametrize("bind", ["0.0.0.0", "::", "192.168.1.5", "example.org"])  # noqa: S104 - refused: the point
def test_metrics_serve_refuses_a_bind_that_is_not_loopback(env, bind):
    done = cli(env, "metrics", "serve", "--port", "0", "--bind", bind)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert (
        line.startswith("agent-bridge: usage_error: ")
        and "--bind" in line
        and "loopback" in line
        or "IP address" in line
    )


def test_metrics_serve_without_the_extra_or_a_store_says_so(env):
    without = (
        "import sys; sys.modules['prometheus_client'] = None\n"
        "from dispatcher.ops.cli import main\n"
        "sys.exit(main(['metrics', 'serve', '--port', '0']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", without], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and "missing_extra" in done.stderr and "[metrics," in done.stderr, done.stderr
    done = cli(env, "metrics", "serve", "--port", "0")
    assert done.returncode == 1 and "store_missing" in done.stderr, done.stderr


@pytest.mark.parametrize("value", ["relative/dir", "", 7])
def test_a_bad_metrics_textfile_dir_is_one_clear_error(tmp_path, value):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"agents": AGENTS, "metrics_textfile_dir": value}))
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert "metrics_textfile_dir" in str(raised.value)


def test_metrics_serve_on_a_port_in_use_says_so(env):
    from dispatcher.store import open_store

    open_store(env["AGENT_BRIDGE_DB"]).close()  # a store to export
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = cli(env, "metrics", "serve", "--port", str(taken.getsockname()[1]))
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert "metrics_bind_failed" in line and "pick another --port" in line, line
