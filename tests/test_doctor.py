"""`agent-bridge doctor`: real subprocesses on real stores in temp dirs; each problem has its code and exit 1."""

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import bridge_env, write_config

from dispatcher.store import open_store

PROJECT = Path(__file__).resolve().parent.parent
TESTED = {"claude": "2.1.332", "kimi": "2.1.0"}
# What a healthy setup without systemd and without a running listener may warn about.
EXPECTED_WARNINGS = {"listener_not_running", "unit_not_installed", "statusline_slow"}


def fake_cli(path: Path, line: str) -> Path:
    path.write_text(f"#!/bin/sh\necho '{line}'\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def setup(tmp_path) -> dict:
    """A healthy setup: a store, a valid config, the tested CLI versions, the status line configured."""
    config = write_config(tmp_path / "config.json")
    env = {**os.environ, **bridge_env(tmp_path, config), "HOME": str(tmp_path / "home"),
           "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config")}
    env.pop("AGENT_ID", None)
    bins = tmp_path / "bin"
    bins.mkdir()
    env["CLAUDE_BIN"] = str(fake_cli(bins / "claude", f"{TESTED['claude']} (Claude Code)"))
    env["KIMI_BIN"] = str(fake_cli(bins / "kimi", f"kimi, version {TESTED['kimi']}"))
    (tmp_path / "claude-config").mkdir()
    (tmp_path / "claude-config" / "settings.json").write_text(
        json.dumps({"statusLine": {"type": "command", "command": "agent-bridge-statusline"}}))
    db = Path(env["AGENT_BRIDGE_DB"])
    open_store(db).close()
    return {"root": tmp_path, "env": env, "db": db, "config": config}


def doctor(env: dict, *args: str) -> tuple[int, dict | str]:
    proc = subprocess.Popen([sys.executable, "-m", "dispatcher", "doctor", *args], cwd=PROJECT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert err == "", err
    return proc.returncode, (json.loads(out) if "--json" in args else out)


def codes(report: dict, level: str | None = None) -> set[str]:
    return {f["code"] for f in report["findings"] if level is None or f["level"] == level}


def assert_error(env: dict, code: str) -> dict:
    rc, report = doctor(env, "--json")
    assert code in codes(report, "error"), report
    assert rc == 1 and report["ok"] is False
    found = next(f for f in report["findings"] if f["code"] == code)
    assert found["message"] and found["fix"] and "\n" not in found["message"] + found["fix"]
    return report


def store_rows(db: Path, *statements: tuple[str, tuple]) -> None:
    conn = open_store(db)
    try:
        for sql, params in statements:
            conn.execute(sql, params)
    finally:
        conn.close()


def add_stale_attempt(db: Path, agent: str = "claude") -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    now = time.time()
    store_rows(
        db,
        ("INSERT INTO messages (id, sender, recipient, kind, text, created_at) VALUES (7, 'kimi', ?, 'task', 'x', ?)",
         (agent, now)),
        ("INSERT INTO dispatch_attempts (message_id, agent, state, started_at, supervisor_pid, supervisor_start_time,"
         " deadline, worker_token) VALUES (7, ?, 'spawned', ?, ?, ?, ?, 'tok')", (agent, now, dead.pid, now, now + 600)),
    )


def add_conversation(db: Path, state: str) -> None:
    now = time.time()
    store_rows(db, ("INSERT INTO conversations (initiator, recipient, goal, state, max_turns, created_at, expires_at,"
                    " updated_at) VALUES ('kimi', 'claude', 'g', ?, 4, ?, ?, ?)", (state, now, now + 3600, now)))


def test_healthy_setup_has_no_error(setup):
    rc, report = doctor(setup["env"], "--json")
    assert rc == 0 and report["ok"] is True and report["errors"] == 0, report
    assert codes(report, "warn") <= EXPECTED_WARNINGS, report
    assert {"store_ok", "config_ok", "launcher_ok", "cli_ok", "statusline_configured", "nothing_stuck"} <= codes(report)
    for finding in report["findings"]:
        assert set(finding) == {"code", "level", "message", "fix", "agent"}
        assert finding["level"] in ("ok", "warn", "error")


def test_table_output(setup):
    os.chmod(setup["db"], 0o644)
    rc, text = doctor(setup["env"])
    assert rc == 1
    line = next(li for li in text.splitlines() if li.startswith("ERROR store_mode:"))
    assert "bridge.db is 0644" in line and f"— fix: chmod 600 {setup['db']}" in line
    assert text.splitlines()[-1].startswith("1 error(s)")


def test_missing_store_is_a_warning_and_is_not_created(setup):
    setup["db"].unlink()
    rc, report = doctor(setup["env"], "--json")
    assert rc == 0 and "store_missing" in codes(report, "warn"), report
    assert not setup["db"].exists()


def test_store_mode(setup):
    os.chmod(setup["db"], 0o644)
    assert_error(setup["env"], "store_mode")


def test_corrupt_store(setup):
    setup["db"].write_bytes(b"this is not a database" * 100)
    assert_error(setup["env"], "store_corrupt")


def test_config_invalid(setup):
    setup["config"].write_text('{"agents": {}}')
    report = assert_error(setup["env"], "config_invalid")
    assert "agents" in next(f["message"] for f in report["findings"] if f["code"] == "config_invalid")


def test_launcher_missing_and_not_executable(setup):
    script = setup["root"] / "plain.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    write_config(setup["config"], {"claude": {"launcher": str(setup["root"] / "nope.sh")},
                                   "kimi": {"launcher": str(script)}})
    report = assert_error(setup["env"], "launcher_missing")
    assert "launcher_not_executable" in codes(report, "error")


def test_cli_not_found(setup):
    assert_error({**setup["env"], "CLAUDE_BIN": str(setup["root"] / "no-such-claude")}, "cli_not_found")


def test_cli_version_untested(setup):
    fake_cli(Path(setup["env"]["CLAUDE_BIN"]), "9.9.9 (Claude Code)")
    rc, report = doctor(setup["env"], "--json")
    assert rc == 0 and "cli_version_untested" in codes(report, "warn"), report
    found = next(f for f in report["findings"] if f["code"] == "cli_version_untested")
    assert "9.9.9" in found["message"] and TESTED["claude"] in found["message"] and found["agent"] == "claude"


def test_stale_attempt(setup):
    add_stale_attempt(setup["db"])
    report = assert_error(setup["env"], "stale_attempt")
    assert "#7" in next(f["message"] for f in report["findings"] if f["code"] == "stale_attempt")


def test_needs_human_conversation(setup):
    add_conversation(setup["db"], "needs_human")
    assert_error(setup["env"], "conversation_needs_human")


def snapshot(root: Path) -> dict:
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        found[str(path.relative_to(root))] = (info.st_mode, info.st_size, info.st_mtime_ns, digest)
    return found


def test_doctor_changes_nothing(setup):
    add_stale_attempt(setup["db"])
    add_conversation(setup["db"], "blocked")
    runtime = Path(setup["env"]["AGENT_BRIDGE_RUNTIME_DIR"])
    runtime.mkdir(mode=0o700)
    before = snapshot(setup["root"])
    assert any(name.endswith("bridge.db") for name in before)
    rc, report = doctor(setup["env"], "--json")
    assert rc == 1 and {"stale_attempt", "conversation_blocked"} <= codes(report, "error")
    assert snapshot(setup["root"]) == before


def test_old_unread_message_warns(setup):
    store_rows(setup["db"], ("INSERT INTO messages (sender, recipient, kind, text, created_at) VALUES "
                             "('kimi', 'claude', 'task', 'x', ?)", (time.time() - 2 * 86400,)))
    rc, report = doctor(setup["env"], "--json")
    assert rc == 0 and "unread_old" in codes(report, "warn"), report
    found = next(f for f in report["findings"] if f["code"] == "unread_old")
    assert found["agent"] == "claude" and "2.0 d" in found["message"]


def test_running_listener_is_seen(setup):
    """A live listener holds the store open (its -wal and -shm exist): doctor reads it the ordinary read-only way."""
    listener = subprocess.Popen([sys.executable, "-m", "dispatcher", "listener", "run", "--agent", "kimi"],
                                cwd=PROJECT, env=setup["env"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline, report = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            rc, report = doctor(setup["env"], "--json")
            if any(f["code"] == "listener_ok" and f["agent"] == "kimi" for f in report["findings"]):
                break
            time.sleep(0.2)
        assert any(f["code"] == "listener_ok" and f["agent"] == "kimi" for f in report["findings"]), report
        assert rc == 0 and "store_ok" in codes(report), report
    finally:
        listener.terminate()
        listener.wait(30)
