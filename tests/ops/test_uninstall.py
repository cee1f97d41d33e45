"""`agent-bridge unregister CLI --agent ID` and `agent-bridge uninstall [--purge]`: the real commands on
real files under a temporary HOME, after the real `register`, `systemd install` and a real listener.
Before these commands existed, removing the package left every CLI pointing at a deleted server and
hooks, and a detached listener running."""

import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from register_harness import backups, register, register_env, target

from dispatcher.core.processes import flock_holder

CLIS = ("claude", "kimi", "codex", "gemini")
USER_JSON = {"theme": "dark", "mcpServers": {"other": {"command": "/bin/other"}}}
USER_TOML = '# mine\nmodel = "x"\n\n[mcp_servers.other]\ncommand = "/bin/other"\n'


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {**register_env(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def bridge(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher", *args], env=env, capture_output=True, text=True, timeout=120
    )


def hook_files(env: dict) -> dict[str, Path]:
    return {
        "claude": Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json",
        "kimi": Path(env["KIMI_CODE_HOME"]) / "config.toml",
        "codex": Path(env["CODEX_HOME"]) / "hooks.json",
        "gemini": Path(env["GEMINI_CLI_HOME"]) / ".gemini" / "settings.json",
    }


def with_user_content(env: dict) -> None:
    """Each CLI's files hold the user's own settings before anything is registered."""
    for cli in CLIS:
        path = target(env, cli)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(USER_TOML if cli == "codex" else json.dumps(USER_JSON))
    kimi = hook_files(env)["kimi"]
    kimi.write_text('default_model = "k"\n\n[[hooks]]\nevent = "Stop"\ncommand = "my-own-hook"\n')


def registered_everywhere(env: dict) -> None:
    with_user_content(env)
    for cli in CLIS:
        extra = ("--statusline",) if cli == "claude" else ()
        done = register(env, cli, "--agent", cli, "--hooks", *extra)
        assert done.returncode == 0, done.stderr


def mentions_agent_bridge(path: Path) -> bool:
    return path.exists() and ("agent_bridge" in path.read_text() or "agent-bridge" in path.read_text())


def test_unregister_takes_out_the_server_hooks_and_status_line_and_keeps_the_rest(env):
    registered_everywhere(env)
    for cli in CLIS:
        done = bridge(env, "unregister", cli, "--agent", cli)
        assert done.returncode == 0, done.stderr
        assert "removed MCP server agent_bridge" in done.stdout and "removed hooks" in done.stdout
        assert not mentions_agent_bridge(target(env, cli)), target(env, cli).read_text()
        assert not mentions_agent_bridge(hook_files(env)[cli]), hook_files(env)[cli].read_text()
        assert backups(target(env, cli)), "the file was backed up before the edit"
    for cli in ("claude", "kimi", "gemini"):
        assert json.loads(target(env, cli).read_text())["mcpServers"] == USER_JSON["mcpServers"]
    assert json.loads(target(env, "gemini").read_text())["theme"] == "dark"
    codex = tomllib.loads(target(env, "codex").read_text())
    assert codex["mcp_servers"] == {"other": {"command": "/bin/other"}} and codex["model"] == "x"
    assert "# mine" in target(env, "codex").read_text()
    kimi = tomllib.loads(hook_files(env)["kimi"].read_text())
    assert kimi == {"default_model": "k", "hooks": [{"event": "Stop", "command": "my-own-hook"}]}
    assert "statusLine" not in json.loads(hook_files(env)["claude"].read_text())

    again = bridge(env, "unregister", "claude", "--agent", "claude")
    assert again.returncode == 0 and again.stdout.count("nothing changed") == 3, again.stdout


def test_unregister_refuses_an_entry_registered_for_another_agent(env):
    assert register(env, "kimi", "--agent", "kimi").returncode == 0
    before = target(env, "kimi").read_bytes()
    done = bridge(env, "unregister", "kimi", "--agent", "claude")
    assert done.returncode != 0 and "registration_conflict" in done.stderr, done.stderr
    assert "--agent kimi" in done.stderr
    assert target(env, "kimi").read_bytes() == before


def test_uninstall_purge_leaves_no_registration_unit_listener_or_store(env, tmp_path):
    registered_everywhere(env)
    assert bridge(env, "systemd", "install", "--agent", "claude").returncode == 0
    units = Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user"
    assert (units / "agent-bridge-listener@.service").is_file()
    listener = listen(env, "kimi")
    try:
        lock = tmp_path / "state" / "runtime" / "kimi.lock"
        deadline = time.monotonic() + 60
        while flock_holder(lock) != listener.pid and time.monotonic() < deadline:
            time.sleep(0.05)
        assert flock_holder(lock) == listener.pid, "the listener did not start"

        done = bridge(env, "uninstall", "--purge")
        assert done.returncode == 0, done.stderr
        assert listener.wait(5) is not None, "uninstall returned with the listener still running"
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    assert "listener kimi: stopped" in done.stdout
    assert not list(units.glob("agent-bridge*")), list(units.iterdir())
    for cli in CLIS:
        assert not mentions_agent_bridge(target(env, cli)), target(env, cli)
        assert not mentions_agent_bridge(hook_files(env)[cli]), hook_files(env)[cli]
    assert not (tmp_path / "state" / "bridge.db").exists() and not (tmp_path / "state" / "runtime").exists()
    assert Path(env["AGENT_BRIDGE_CONFIG"]).is_file(), "config.json is the user's: kept"
    assert "uv tool uninstall agent-bridge" in done.stdout


def test_uninstall_on_a_clean_machine_changes_nothing_and_succeeds(env):
    done = bridge(env, "uninstall")
    assert done.returncode == 0, done.stderr
    assert "no agent-bridge unit installed" in done.stdout and "kept the store" in done.stdout
    assert not any(target(env, cli).exists() for cli in CLIS)


def test_uninstall_run_with_the_runtime_dir_in_its_environment_does_not_stop_itself(env, tmp_path):
    # A shell that exports AGENT_BRIDGE_RUNTIME_DIR gives it to uninstall too: its own process (and
    # the shell) carry the variable every worker of that runtime carries, and are not workers.
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    done = bridge({**env, "AGENT_BRIDGE_RUNTIME_DIR": str(runtime)}, "uninstall", "--purge")
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "workers of" not in done.stdout, done.stdout


def listen(env: dict, agent: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "listener", "run", "--agent", agent],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_for(predicate, what: str, seconds: float = 120):
    deadline = time.monotonic() + seconds
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def test_uninstall_purge_stops_a_running_worker_and_its_escaped_grandchild_and_settles_it(env, tmp_path):
    """Issue 30, item 4: `uninstall --purge` while a worker ran exited 0 and left the supervisor, the
    worker and a grandchild in its own session running."""
    from dispatch_harness import make_launcher
    from harness import write_config

    from dispatcher.dispatch.stop import workers_of

    launcher = make_launcher(
        tmp_path,
        "daemonize",
        FAKE_WORKER_LEADER="hang",
        FAKE_WORKER_DELAY="3600",
        FAKE_WORKER_LATE_FILE=str(tmp_path / "late"),
    )
    write_config(
        Path(env["AGENT_BRIDGE_CONFIG"]),
        {"claude": {"auto": True, "launcher": str(launcher)}, "kimi": {"auto": False, "launcher": str(launcher)}},
    )
    workspace = tmp_path / "ws"  # not tmp_path itself: it holds the store, which no workspace may hold
    workspace.mkdir()
    env = {**env, "AGENT_BRIDGE_WORKSPACE": str(workspace)}
    runtime = tmp_path / "state" / "runtime"
    listener = listen(env, "claude")
    try:
        sent = bridge(env, "send", "--from", "kimi", "--to", "claude", "--task", "hang around")
        assert sent.returncode == 0, sent.stderr
        wait_for(lambda: len(workers_of(runtime)) >= 2, "the worker and its grandchild")
        running = workers_of(runtime)
        done = bridge(env, "uninstall", "--purge")
        assert done.returncode == 0, done.stderr
        assert listener.wait(30) is not None
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    assert workers_of(runtime) == [] and not [p for p in running if Path(f"/proc/{p}").exists()], done.stdout
    assert f"workers of {runtime.resolve()}: stopped with SIGTERM after 10 s" in done.stdout, done.stdout
    assert not runtime.exists()


@pytest.mark.usefixtures("postgres_url")
def test_uninstall_stops_the_listener_of_another_store_and_names_it(env, tmp_path, new_postgres_store):
    """Issue 30, item 4: a PostgreSQL listener survived `uninstall` run in a shell without AGENT_BRIDGE_DB."""
    state = tmp_path / "xdg-state"
    env = {**env, "XDG_STATE_HOME": str(state), "AGENT_BRIDGE_WORKSPACE": str(tmp_path)}
    listener = listen({**env, "AGENT_BRIDGE_DB": new_postgres_store()}, "claude")
    try:
        lock = wait_for(
            lambda: next((p for p in state.glob("agent-bridge/pg-*/runtime/claude.lock") if flock_holder(p)), None),
            "the listener",
        )
        done = bridge(env, "uninstall")
        assert done.returncode == 0, done.stderr
        assert listener.wait(30) is not None, "uninstall left the other store's listener running"
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    assert f"listener claude (another store's, runtime {lock.parent}): stopped." in done.stdout, done.stdout


def test_purge_removes_what_register_made_and_keeps_the_users_files(env, tmp_path):
    """Issue 30, item 4: `--purge` left the empty settings files register made, its backups and
    empty runtime folders."""
    for cli in ("claude", "kimi"):
        extra = ("--statusline",) if cli == "claude" else ()
        assert register(env, cli, "--agent", cli, "--hooks", *extra).returncode == 0
        assert register(env, cli, "--agent", cli, "--hooks", "--force", *extra).returncode == 0  # backups too
    codex = target(env, "codex")
    codex.parent.mkdir(parents=True)
    codex.write_text(USER_TOML)
    assert register(env, "codex", "--agent", "codex").returncode == 0
    state = tmp_path / "xdg-state" / "agent-bridge"
    env = {**env, "XDG_STATE_HOME": str(tmp_path / "xdg-state")}
    (state / "pg-0123456789ab" / "runtime").mkdir(parents=True)  # another store's, empty
    done = bridge(env, "uninstall", "--purge")
    assert done.returncode == 0, done.stderr
    for cli in ("claude", "kimi"):
        assert not target(env, cli).parent.exists(), sorted(target(env, cli).parent.rglob("*"))
    assert tomllib.loads(codex.read_text()) == tomllib.loads(USER_TOML)  # the user's file stays
    assert not list(codex.parent.glob("*.bak-*"))
    assert not state.exists()
