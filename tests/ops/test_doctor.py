"""`agent-bridge doctor`: real subprocesses on real stores in temp dirs; each problem has its code and exit 1."""

import contextlib
import hashlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import PROJECT, bridge_env, environment, write_config

from dispatcher.ops.doctor import StatuslineRun
from dispatcher.store import SCHEMA_VERSION, open_store

TESTED = {"claude": "2.1.332", "kimi": "2.1.0"}
# Both dispatch on their own (auto): an agent with auto off has one `auto_off` finding instead.
AGENTS = {  # as init writes them: doctor reads each agent's CLI from its config (test_doctor_checks: older configs)
    "claude": {"auto": True, "cli": "claude"},
    "kimi": {"auto": True, "cli": "kimi"},
}
# What a healthy setup without systemd and without a running listener may warn about.
EXPECTED_WARNINGS = {"listener_not_running", "unit_not_installed"}


QUICK_STATUSLINE = StatuslineRun(subprocess.CompletedProcess([], 0, "[claude] idle  ·  [kimi] idle\n", ""), 0.05, 0.04)


def fake_cli(path: Path, line: str) -> Path:
    path.write_text(f"#!/bin/sh\necho '{line}'\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def setup(tmp_path) -> dict:
    """A healthy setup: a store, a valid config, the tested CLI versions, the status line configured."""
    config = write_config(tmp_path / "config.json", AGENTS)
    env = {
        **os.environ,
        **bridge_env(tmp_path, config),
        "HOME": str(tmp_path / "home"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"),
    }
    env.pop("AGENT_ID", None)
    bins = tmp_path / "bin"
    bins.mkdir()
    env["CLAUDE_BIN"] = str(fake_cli(bins / "claude", f"{TESTED['claude']} (Claude Code)"))
    env["KIMI_BIN"] = str(fake_cli(bins / "kimi", f"kimi, version {TESTED['kimi']}"))
    (tmp_path / "home" / ".kimi-code" / "credentials").mkdir(parents=True)  # `kimi login` was run
    (tmp_path / "claude-config").mkdir()
    configure_statusline(env)
    db = Path(env["AGENT_BRIDGE_DB"])
    open_store(db).close()
    return {"root": tmp_path, "env": env, "db": db, "config": config}


def configure_statusline(env: dict) -> None:
    """Claude's status line as `register claude --statusline` writes it for ``env``'s store."""
    from dispatcher.clis.config_files import statusline_command

    command = statusline_command(env)
    (Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json").write_text(
        json.dumps({"statusLine": {"type": "command", "command": command}})
    )


def on_store(setup: dict, location: str) -> dict:
    """The setup's environment on another store, its status line registered for it."""
    env = {**setup["env"], "AGENT_BRIDGE_DB": location}
    configure_statusline(env)
    return env


def doctor(env: dict, *args: str) -> tuple[int, dict | str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "doctor", *args],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=60)
    assert err == "", err
    return proc.returncode, (json.loads(out) if "--json" in args else out)


def checks(env: dict) -> tuple[int, dict]:
    """What ``doctor --json`` reports, from the same checks run in this process with ``env`` as the
    whole environment, the status line's five timed runs answered by one quick run: each test here
    differs from the healthy setup in one file or variable, and the Python start-ups (doctor's and
    the status line's) were most of this file's CPU. The command itself, status line included, is
    run end to end by ``test_healthy_setup_has_no_error`` (JSON), ``test_table_output``,
    ``test_doctor_changes_nothing`` and the README sample."""
    from dispatcher.ops import doctor as doctor_module
    from dispatcher.ops.doctor import statusline as statusline_check

    timed = statusline_check._time_statusline
    statusline_check._time_statusline = lambda: QUICK_STATUSLINE
    try:
        with environment(env), contextlib.redirect_stderr(io.StringIO()) as err:
            result = doctor_module.report(doctor_module.run_checks())
    finally:
        statusline_check._time_statusline = timed
    assert err.getvalue() == "", err.getvalue()
    return (0 if result["ok"] else 1), result


def codes(report: dict, level: str | None = None) -> set[str]:
    return {f["code"] for f in report["findings"] if level is None or f["level"] == level}


def assert_error(env: dict, code: str) -> dict:
    rc, report = checks(env)
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
        (
            "INSERT INTO messages (id, sender, recipient, kind, text, created_at) VALUES (7, 'kimi', ?, 'task', 'x', ?)",
            (agent, now),
        ),
        (
            "INSERT INTO dispatch_attempts (message_id, agent, state, started_at, supervisor_pid, supervisor_start_time,"
            " deadline, worker_token) VALUES (7, ?, 'spawned', ?, ?, ?, ?, 'tok')",
            (agent, now, dead.pid, now, now + 600),
        ),
    )


def add_conversation(db: Path, state: str) -> None:
    now = time.time()
    store_rows(
        db,
        (
            "INSERT INTO conversations (initiator, recipient, goal, state, max_turns, created_at, expires_at,"
            " updated_at) VALUES ('kimi', 'claude', 'g', ?, 4, ?, ?, ?)",
            (state, now, now + 3600, now),
        ),
    )


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
    rc, report = checks(setup["env"])
    assert rc == 0 and "store_missing" in codes(report, "warn"), report
    assert not setup["db"].exists()


def test_store_removed_while_doctor_opens_it_is_missing(tmp_path, monkeypatch):
    """The store file vanishing between the check that it exists and the read-only open is
    ``store_missing``, not a failed check (found by typing: ``open_read_only`` returns None then)."""
    from dispatcher.core.locations import Locations
    from dispatcher.ops.doctor import runner, store
    from dispatcher.ops.doctor.table import CHECKS

    db = tmp_path / "bridge.db"
    open_store(db).close()
    monkeypatch.setattr(store, "open_read_only", lambda path: None)  # as if unlinked just before
    ctx = runner.Context(Locations(db=db))
    found = [f for c in CHECKS if c.run.__module__ == store.__name__ for f in runner._safe(c, ctx, [])]
    assert "store_missing" in {f.code for f in found} and "check_failed" not in {f.code for f in found}, found


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
    write_config(
        setup["config"], {"claude": {"launcher": str(setup["root"] / "nope.sh")}, "kimi": {"launcher": str(script)}}
    )
    report = assert_error(setup["env"], "launcher_missing")
    assert "launcher_not_executable" in codes(report, "error")


@pytest.mark.parametrize(
    ("claude", "said"),
    [
        ({"cli": "nosuchcli"}, "agents.claude.cli: 'nosuchcli' is not a CLI the bridge has (registered: claude, codex"),
        (
            {"cli": "kimi", "launcher": "launchers/claude_headless.sh"},
            "agents.claude: its launcher claude_headless.sh runs claude, not the kimi its cli names",
        ),
    ],
)
def test_a_cli_no_package_has_or_a_launcher_of_another_is_config_invalid(setup, claude, said):
    """The rule the listener refuses the file by (``registry.config_problem``), with the registered names."""
    write_config(setup["config"], {**AGENTS, "claude": {"auto": True, **claude}})
    report = assert_error(setup["env"], "config_invalid")
    assert said in next(f["message"] for f in report["findings"] if f["code"] == "config_invalid")


def test_doctor_reads_the_cli_from_the_config_and_from_an_older_configs_launcher_alike(setup):
    """``"cli": "claude"`` and ``"launcher": "launchers/claude_headless.sh"`` are the same CLI to doctor."""
    said = []
    for claude in ({"cli": "claude"}, {"launcher": "launchers/claude_headless.sh"}):
        write_config(setup["config"], {**AGENTS, "claude": {"auto": True, **claude}})
        _, report = checks(setup["env"])
        said.append(sorted(f["code"] for f in report["findings"] if f.get("agent") == "claude" and "cli" in f["code"]))
    assert said[0] == said[1] and said[0], said


@pytest.mark.parametrize(
    ("api_key", "set_it", "code"),
    [
        ("{env:MY_OPENCODE_KEY}", True, "cli_auth_ok"),  # the TODO's gap: named in its config, and set
        ("{env:MY_OPENCODE_KEY}", False, "cli_not_authenticated"),  # named, but not set where doctor runs
        ("sk-written-in-the-file", True, "cli_not_authenticated"),  # a literal key is not a variable
    ],
)
def test_an_opencode_provider_key_named_in_its_config_is_its_credentials(setup, api_key, set_it, code):
    env = dict(setup["env"], OPENCODE_BIN=str(fake_cli(setup["root"] / "bin" / "opencode", "1.18.33")))
    env.pop("MY_OPENCODE_KEY", None)
    if set_it:
        env["MY_OPENCODE_KEY"] = "k"
    user = Path(env.get("XDG_CONFIG_HOME") or Path(env["HOME"]) / ".config") / "opencode"
    user.mkdir(parents=True, exist_ok=True)
    (user / "opencode.json").write_text(json.dumps({"provider": {"acme": {"options": {"apiKey": api_key}}}}))
    write_config(setup["config"], {**AGENTS, "opencode": {"auto": True, "cli": "opencode"}})
    _, report = checks(env)
    found = [f for f in report["findings"] if f.get("agent") == "opencode" and f["code"].startswith("cli_")]
    said = {f["code"]: f["message"] for f in found}
    assert code in said, found
    if code == "cli_auth_ok":
        assert said[code] == "opencode has credentials (MY_OPENCODE_KEY is set)"


NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def _world_writable(path: Path) -> Path:
    path.chmod(path.stat().st_mode & 0o7777 | 0o002)
    return path


def _group_writable_dir(path: Path) -> Path:
    path.parent.chmod(0o775)
    return path.parent


def _nobodys(path: Path) -> Path:
    os.chown(path, NOBODY, NOBODY)
    return path


def _link_to_nobodys(path: Path) -> Path:
    """The config becomes a link (ours) to a file that belongs to someone else."""
    theirs = path.with_name("theirs.json")
    theirs.write_text(path.read_text())
    os.chown(theirs, NOBODY, NOBODY)
    path.unlink()
    path.symlink_to(theirs)
    return theirs


OTHERS = [
    pytest.param(_world_writable, "world-writable", id="world-writable"),
    pytest.param(_group_writable_dir, "group-writable", id="in a group-writable directory"),
    pytest.param(_nobodys, "belongs to uid 65534", id="owned by another user", marks=as_root),
    pytest.param(_link_to_nobodys, "belongs to uid 65534", id="a link to another user's file", marks=as_root),
]


@pytest.mark.parametrize(("spoil", "said"), OTHERS)
def test_a_config_someone_else_could_change_is_an_error_with_the_fix(setup, spoil, said):
    """The rule the listener and every command refuse config.json by (``writable_by_others``)."""
    config = setup["root"] / "conf" / "config.json"
    config.parent.mkdir(mode=0o755)
    write_config(config, AGENTS)
    at_fault = spoil(config)
    report = assert_error({**setup["env"], "AGENT_BRIDGE_CONFIG": str(config)}, "config_writable_by_others")
    found = next(f for f in report["findings"] if f["code"] == "config_writable_by_others")
    assert str(at_fault) in found["message"] and said in found["message"]
    assert "chown" in found["fix"] and "chmod go-w" in found["fix"] and str(config) in found["fix"]


@pytest.mark.parametrize(("spoil", "said"), OTHERS[:3])
def test_a_launcher_someone_else_could_change_is_an_error_with_the_fix(setup, spoil, said):
    """The rule the supervisor refuses to run a launcher by (``writable_by_others``)."""
    launcher = setup["root"] / "launchers" / "claude_headless.sh"
    launcher.parent.mkdir(mode=0o755)
    launcher.write_text("#!/bin/sh\n")
    launcher.chmod(0o755)
    write_config(setup["config"], {**AGENTS, "claude": {"auto": True, "launcher": str(launcher)}})
    at_fault = spoil(launcher)
    report = assert_error(setup["env"], "launcher_writable_by_others")
    found = next(f for f in report["findings"] if f["code"] == "launcher_writable_by_others")
    assert found["agent"] == "claude" and str(at_fault) in found["message"] and said in found["message"]
    assert "chmod go-w" in found["fix"] and "spawn:PermissionError" in found["fix"]


def test_cli_not_found(setup):
    assert_error({**setup["env"], "CLAUDE_BIN": str(setup["root"] / "no-such-claude")}, "cli_not_found")


def test_cli_version_untested(setup):
    fake_cli(Path(setup["env"]["CLAUDE_BIN"]), "9.9.9 (Claude Code)")
    rc, report = checks(setup["env"])
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
    store_rows(
        setup["db"],
        (
            "INSERT INTO messages (sender, recipient, kind, text, created_at) VALUES "
            "('kimi', 'claude', 'task', 'x', ?)",
            (time.time() - 2 * 86400,),
        ),
    )
    rc, report = checks(setup["env"])
    assert rc == 0 and "unread_old" in codes(report, "warn"), report
    found = next(f for f in report["findings"] if f["code"] == "unread_old")
    assert found["agent"] == "claude" and "2.0 d" in found["message"]


def test_running_listener_is_seen(setup):
    """A live listener holds the store open (its -wal and -shm exist): doctor reads it the ordinary read-only way."""
    listener = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "listener", "run", "--agent", "kimi"],
        cwd=PROJECT,
        env=setup["env"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline, report = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            rc, report = checks(setup["env"])
            if any(f["code"] == "listener_ok" and f["agent"] == "kimi" for f in report["findings"]):
                break
            time.sleep(0.2)
        assert any(f["code"] == "listener_ok" and f["agent"] == "kimi" for f in report["findings"]), report
        assert rc == 0 and "store_ok" in codes(report), report
    finally:
        listener.terminate()
        listener.wait(30)


# --- the systemd unit, through a stand-in `systemctl` first on PATH ---------------------------

STUB_SYSTEMCTL = """#!/bin/sh
# A stand-in for `systemctl --user is-enabled|is-active UNIT`, answering like systemd 252: the
# word on stdout (exit 0 for enabled/active, 3 for inactive/failed, 1 otherwise), or on a
# missing user bus nothing on stdout, the reason on stderr and exit 1.
echo "$*" >> "$STUB_STATE/calls"
[ "$1" = "--user" ] || { echo "stub: expected --user" >&2; exit 64; }
f="$STUB_STATE/$2.$3"
[ -f "$f" ] || f="$STUB_STATE/$2"
answer=$(cat "$f")
case "$answer" in
  BUS) echo "Failed to connect to bus: No medium found" >&2; exit 1 ;;
  enabled|active) echo "$answer"; exit 0 ;;
  inactive|failed) echo "$answer"; exit 3 ;;
  *) echo "$answer"; exit 1 ;;
esac
"""
CLAUDE_UNIT = "agent-bridge-listener@claude.service"
KIMI_UNIT = "agent-bridge-listener@kimi.service"
UNKNOWN_FIX = (
    "make `systemctl --user status` work in this shell (a login session, or `loginctl enable-linger "
    "$USER`; XDG_RUNTIME_DIR set), then rerun doctor"
)


@pytest.fixture
def units(setup) -> dict:
    """The listener template installed, a user manager's socket present, and the stand-in first on PATH
    (kimi's unit always enabled and active)."""
    root, env = setup["root"], setup["env"]
    unit_dir = Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user"
    unit_dir.mkdir(parents=True)
    (unit_dir / "agent-bridge-listener@.service").write_text("[Service]\nExecStart=/bin/true\n")
    (Path(env["XDG_RUNTIME_DIR"]) / "systemd").mkdir(parents=True)
    (Path(env["XDG_RUNTIME_DIR"]) / "systemd" / "private").write_text("")
    stub_bin, state = root / "stub-bin", root / "stub-state"
    stub_bin.mkdir()
    state.mkdir()
    (stub_bin / "systemctl").write_text(STUB_SYSTEMCTL)
    (stub_bin / "systemctl").chmod(0o755)
    (state / f"is-enabled.{KIMI_UNIT}").write_text("enabled")
    (state / f"is-active.{KIMI_UNIT}").write_text("active")
    env = {**env, "PATH": f"{stub_bin}{os.pathsep}{env['PATH']}", "STUB_STATE": str(state)}
    return {**setup, "env": env, "state": state, "stub_bin": stub_bin}


def _unit_findings(report: dict) -> dict:
    return {f["agent"]: f for f in report["findings"] if f["code"].startswith("unit_")}


@pytest.mark.parametrize(
    "enabled, active, code, message, fix",
    [
        ("enabled", "active", "unit_ok", f"{CLAUDE_UNIT} is enabled and active", ""),
        (
            "disabled",
            None,
            "unit_not_enabled",
            f"{CLAUDE_UNIT} is disabled",
            f"systemctl --user enable --now {CLAUDE_UNIT}",
        ),
        (
            "masked",
            None,
            "unit_not_enabled",
            f"{CLAUDE_UNIT} is masked",
            f"systemctl --user enable --now {CLAUDE_UNIT}",
        ),
        (
            "enabled",
            "inactive",
            "unit_not_active",
            f"{CLAUDE_UNIT} is enabled but inactive",
            f"systemctl --user start {CLAUDE_UNIT}; journalctl --user -u {CLAUDE_UNIT}",
        ),
        (
            "enabled",
            "failed",
            "unit_not_active",
            f"{CLAUDE_UNIT} is enabled but failed",
            f"systemctl --user start {CLAUDE_UNIT}; journalctl --user -u {CLAUDE_UNIT}",
        ),
        (
            "BUS",
            None,
            "unit_unknown",
            f"`systemctl --user` could not say whether {CLAUDE_UNIT} is enabled: "
            "Failed to connect to bus: No medium found",
            UNKNOWN_FIX,
        ),
        (
            "enabled",
            "BUS",
            "unit_unknown",
            f"`systemctl --user` could not say whether {CLAUDE_UNIT} is active: "
            "Failed to connect to bus: No medium found",
            UNKNOWN_FIX,
        ),
    ],
)
def test_unit_states_from_systemctl(units, enabled, active, code, message, fix):
    state = units["state"]
    (state / f"is-enabled.{CLAUDE_UNIT}").write_text(enabled)
    if active is not None:
        (state / f"is-active.{CLAUDE_UNIT}").write_text(active)
    rc, report = checks(units["env"])
    found = _unit_findings(report)
    assert (found["claude"]["code"], found["claude"]["message"], found["claude"]["fix"]) == (code, message, fix)
    assert found["claude"]["level"] == ("ok" if code == "unit_ok" else "warn")
    assert found["kimi"]["code"] == "unit_ok"  # the other agent's unit is asked about separately
    calls = (state / "calls").read_text().splitlines()
    assert f"--user is-enabled {CLAUDE_UNIT}" in calls
    assert (f"--user is-active {CLAUDE_UNIT}" in calls) == (active is not None)  # not asked when not enabled
    assert rc == (1 if report["errors"] else 0) and not codes(report, "error") & {f["code"] for f in found.values()}


def test_unit_state_unknown_without_systemctl(units):
    env = {**units["env"], "PATH": str(units["root"] / "empty-bin")}  # no systemctl at all
    (units["root"] / "empty-bin").mkdir()
    _, report = checks(env)
    found = _unit_findings(report)
    for agent, unit in (("claude", CLAUDE_UNIT), ("kimi", KIMI_UNIT)):
        assert (found[agent]["code"], found[agent]["message"], found[agent]["fix"]) == (
            "unit_unknown",
            f"`systemctl --user` could not say whether {unit} is enabled: systemctl is not on PATH",
            UNKNOWN_FIX,
        )


def test_no_user_manager_or_no_unit_never_asks_systemctl(units):
    env = units["env"]
    (Path(env["XDG_RUNTIME_DIR"]) / "systemd" / "private").unlink()
    _, report = checks(env)
    assert {a: (f["code"], f["fix"]) for a, f in _unit_findings(report).items()} == {
        a: ("unit_no_manager", "") for a in ("claude", "kimi")
    }
    (Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user" / "agent-bridge-listener@.service").unlink()
    _, report = checks(env)
    found = _unit_findings(report)
    assert {a: (f["code"], f["level"]) for a, f in found.items()} == {
        a: ("unit_no_manager", "ok") for a in ("claude", "kimi")
    }
    assert not (units["state"] / "calls").exists()


# -- can each CLI authenticate? ---------------------------------------------------------------


def test_a_claude_that_is_not_logged_in_is_a_warning_with_the_fix(setup):
    """Before, doctor said nothing about credentials: a Claude that was not logged in showed as
    healthy, and every dispatch then failed."""
    env = {k: v for k, v in setup["env"].items() if not k.startswith(("ANTHROPIC_", "CLAUDE_CODE_"))}
    status_says_no = setup["root"] / "bin" / "claude"
    status_says_no.write_text(
        f"#!/bin/sh\n[ \"$1\" = auth ] && {{ echo '{{\"loggedIn\": false}}'; exit 1; }}\necho '{TESTED['claude']} (Claude Code)'\n"
    )
    rc, report = checks(env)
    assert rc == 0, report
    (found,) = [f for f in report["findings"] if f["code"] == "cli_not_authenticated"]
    assert (found["level"], found["agent"]) == ("warn", "claude")
    assert "auth_error" in found["message"] and "/login" in found["fix"] and "ANTHROPIC_API_KEY" in found["fix"]
    rc, report = checks({**env, "ANTHROPIC_API_KEY": "sk-test"})
    assert "cli_not_authenticated" not in codes(report)
    assert any(f["code"] == "cli_auth_ok" and "ANTHROPIC_API_KEY" in f["message"] for f in report["findings"])


def test_a_kimi_without_credentials_is_a_warning(setup):
    (setup["root"] / "home" / ".kimi-code" / "credentials").rmdir()
    rc, report = checks(setup["env"])
    (found,) = [f for f in report["findings"] if f["code"] == "cli_not_authenticated"]
    assert found["agent"] == "kimi" and "kimi" in found["fix"]


@pytest.mark.parametrize(
    ("variable", "status_ok", "file", "code"),
    [
        ("ANTHROPIC_API_KEY", None, None, "cli_auth_ok"),
        (None, True, None, "cli_auth_ok"),
        (None, False, Path("/h/.claude/.credentials.json"), "cli_auth_ok"),
        (None, None, Path("/h/.claude/.credentials.json"), "cli_auth_ok"),
        (None, False, None, "cli_not_authenticated"),
        (None, None, None, "cli_not_authenticated"),
    ],
)
def test_credentials_by_variable_status_command_or_file(variable, status_ok, file, code):
    from dispatcher.ops.doctor.clis import credentials

    said = credentials("claude", variable, status_ok, file)
    assert (said is not None) == (code == "cli_auth_ok")


def test_without_a_user_manager_doctor_says_how_to_run_the_listener_not_systemctl(units):
    """With no systemd user manager, doctor used to suggest `systemd install` and `systemctl --user`
    commands that cannot work there, and called the template "installed" for every agent."""
    env = units["env"]
    (Path(env["XDG_RUNTIME_DIR"]) / "systemd" / "private").unlink()
    _, report = checks(env)
    for agent, finding in _unit_findings(report).items():
        text = finding["message"] + finding["fix"]
        assert f"agent-bridge listener enable --agent {agent}" in text, finding
        assert "systemctl" not in text and "systemd install" not in text and "is installed" not in text, finding
        assert "no unit for it" in finding["message"], "no agent's unit was ever enabled"
    wants = Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user" / "default.target.wants"
    wants.mkdir()
    (wants / CLAUDE_UNIT).symlink_to("../agent-bridge-listener@.service")
    found = _unit_findings(checks(env)[1])
    assert f"{CLAUDE_UNIT} is enabled" in found["claude"]["message"] and "no unit" in found["kimi"]["message"]


def test_an_agent_with_auto_off_is_shown_waiting_for_a_human_not_ok(setup):
    """auto: false used to read `listener_ok` (or warn that no listener runs): its tasks wait for a
    person either way, and doctor says so, with no listener or unit warning."""
    write_config(setup["config"], {**AGENTS, "kimi": {**AGENTS["kimi"], "auto": False}})
    rc, report = checks(setup["env"])
    kimi = [
        f for f in report["findings"] if f["agent"] == "kimi" and f["code"].startswith(("listener", "unit", "auto"))
    ]
    assert [(f["code"], f["level"]) for f in kimi] == [("auto_off", "ok")], kimi
    assert "tasks for kimi wait for a human: auto is off" in kimi[0]["message"]
    assert "agents.kimi.auto" in kimi[0]["fix"]


def test_a_missing_workspace_is_an_error_whether_or_not_the_listener_runs(setup):
    """A missing workspace used to show only through a running listener's stage."""
    gone = setup["root"] / "no-such-dir"
    write_config(setup["config"], {**AGENTS, "kimi": {**AGENTS["kimi"], "workspace": str(gone)}})
    rc, report = checks(setup["env"])
    [missing] = [f for f in report["findings"] if f["code"] == "workspace_missing"]
    assert rc == 1 and missing["agent"] == "kimi" and missing["level"] == "error"
    assert str(gone) in missing["message"] and f"mkdir -p {gone}" in missing["fix"]


@pytest.mark.parametrize(
    ("seconds", "cpu_seconds", "code", "said"),
    [
        (0.12, 0.09, "statusline_ok", "120 ms (90 ms CPU), the median of 5 runs"),
        (0.41, 0.16, "statusline_ok", "the machine is busy"),  # waiting for a CPU is not the status line's cost
        (0.45, 0.30, "statusline_slow", "over its budget of 200 ms CPU"),
        (0.21, 0.201, "statusline_slow", "over its budget"),
    ],
)
def test_statusline_speed_is_judged_by_its_own_cpu(seconds, cpu_seconds, code, said):
    """At load 5-7 the status line took 310-420 ms wall-clock but about 165 ms of CPU: judged by
    the wall clock, a quick start on a busy machine warned statusline_slow."""
    from dispatcher.core.locations import Locations
    from dispatcher.ops.doctor import Context, StatuslineRun, statusline

    ctx = Context(Locations(db=Path("/nonexistent/bridge.db")))
    answered = subprocess.CompletedProcess([], 0, "[claude] idle\n", "")
    ctx.facts["statusline"] = [StatuslineRun(answered, seconds, cpu_seconds)] * statusline.STATUSLINE_RUNS
    (finding,) = statusline.statusline_ok(ctx) + statusline.statusline_slow(ctx) + statusline.statusline_failed(ctx)
    assert (finding.code, said in finding.message) == (code, True), finding
    assert ("busy" in finding.message) == (code == "statusline_ok" and seconds > 0.2)


def test_the_status_line_process_leaves_rich_unloaded(tmp_path):
    """structlog loads rich (the `top` extra) when it is installed: a third of the status line's CPU."""
    probe = (
        "import sys, io; sys.argv = ['agent-bridge-statusline']; out = io.StringIO(); sys.stdout = out\n"
        "from dispatcher.dispatch import statusline\n"
        "try:\n    statusline.main()\nexcept SystemExit:\n    pass\n"
        "sys.stdout = sys.__stdout__; print(sys.modules.get('rich'), 'structlog' in sys.modules)"
    )
    env = {**os.environ, **bridge_env(tmp_path, write_config(tmp_path / "config.json", AGENTS))}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=PROJECT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "False"], (
        done.stdout
    )  # neither rich nor structlog (the store handle loads it)


def test_doctor_reads_a_cli_version_as_init_does(setup):
    """A Kimi on too old a Node crashes with Node's version in its trace: doctor used to scrape it
    (`kimi 20.20.2`); it now reads versions with init's reader, so it says the CLI does not run."""
    crash = Path(__file__).parents[1] / "fixtures" / "kimi-node20-version-crash.stderr"
    kimi = Path(setup["env"]["KIMI_BIN"])
    kimi.write_text(f"#!/bin/sh\ncat {crash} >&2\nexit 1\n")
    rc, report = checks(setup["env"])
    (found,) = [f for f in report["findings"] if f["agent"] == "kimi" and f["code"].startswith(("cli_ok", "cli_v"))]
    assert found["code"] == "cli_version_unknown" and found["level"] == "warn", found
    assert "found but does not run (exit 1: Node.js v20.20.2)" in found["message"], found
    assert found["fix"].startswith("Kimi Code needs Node >= 22.19"), found


def _readme_doctor_sample() -> list[str]:
    text = (PROJECT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    section = text[text.index("# agent-bridge doctor") :]
    return re.search(r"```\n(OK .*?)\n```", section, re.S).group(1).splitlines()


def _as_in_the_readme(line: str, home: Path) -> str:
    """A line of doctor's output with what differs between machines and runs made generic."""
    line = line.replace(str(PROJECT), "~/.local/share/uv/tools/agent-bridge/…").replace(str(home), "~")
    line = re.sub(r" \(the machine is busy: [^)]*\)$", "", line)  # said only under load
    return re.sub(r"\(pid \d+,", "(pid N,", re.sub(r"\d+ ms", "N ms", line))


def test_the_readme_doctor_sample_is_what_doctor_prints(tmp_path):
    """The README's sample is doctor's whole output on this setup: Claude Code at the tested
    version with its listener running, a Kimi of an untested version whose listener is not
    running, the status line registered; no user manager. Paths under HOME are shown with ~,
    the checkout as the installed tool's directory, times and pids as N."""
    home = tmp_path / "home"
    bins, work = home / ".local" / "bin", home / "project"
    bins.mkdir(parents=True)
    work.mkdir()
    (home / ".kimi-code" / "credentials").mkdir(parents=True)
    config = home / ".config" / "agent-bridge" / "config.json"
    config.parent.mkdir(parents=True)
    agents = {name: {**spec, "workspace": str(work)} for name, spec in AGENTS.items()}
    write_config(config, agents)
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(
        json.dumps({"statusLine": {"type": "command", "command": "agent-bridge-statusline"}})
    )
    fake_cli(bins / "claude", f"{TESTED['claude']} (Claude Code)")
    fake_cli(bins / "kimi", "2.0.9")
    env = {"HOME": str(home), "PATH": f"{bins}:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONPATH": str(PROJECT)}
    open_store(home / ".local" / "state" / "agent-bridge" / "bridge.db").close()
    listener = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "listener", "run", "--agent", "claude"],
        cwd=PROJECT,
        env=env,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while '"stage": "idle"' not in (
            seen := subprocess.run(
                [sys.executable, "-m", "dispatcher", "listener", "status", "--agent", "claude"],
                cwd=PROJECT,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
        ):
            assert time.monotonic() < deadline, seen
        rc, out = doctor(env)
    finally:
        listener.terminate()
        listener.wait(30)
    printed = [_as_in_the_readme(line, home) for line in out.splitlines()]
    expected = "\n".join(printed)
    assert rc == 0 and _readme_doctor_sample() == printed, f"the README's sample should read:\n{expected}"


# -- a PostgreSQL store ------------------------------------------------------------------------
def _with_password(url: str) -> str:
    """The URL with a password in it (trust auth never asks for it): doctor must never print it."""
    return url.replace("postgresql://postgres@", "postgresql://postgres:hunter2-secret@", 1)


def _store_findings(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["code"].startswith(("store_", "schema_"))]


def test_a_healthy_postgresql_store_is_store_ok_with_its_schema_and_server(setup, postgres_url):
    url = _with_password(postgres_url)
    open_store(url).close()
    rc, report = checks(on_store(setup, url))
    assert rc == 0 and report["errors"] == 0, report
    [found] = _store_findings(report)
    assert (found["code"], found["level"]) == ("store_ok", "ok")
    assert f": schema {SCHEMA_VERSION}, PostgreSQL " in found["message"], found
    assert "hunter2-secret" not in json.dumps(report)


def test_a_postgresql_database_without_a_store_is_store_missing(setup, postgres_url):
    rc, report = checks(on_store(setup, postgres_url))
    assert [(f["code"], f["level"]) for f in _store_findings(report)] == [("store_missing", "warn")]


def test_a_postgresql_store_of_a_newer_schema_is_an_error(setup, postgres_url):
    open_store(postgres_url).close()
    conn = open_store(postgres_url)
    try:
        conn.execute("UPDATE bridge_schema SET version = version + 1")
    finally:
        conn.close()
    rc, report = checks(on_store(setup, postgres_url))
    assert rc == 1
    assert [(f["code"], f["level"]) for f in _store_findings(report)] == [("schema_too_new", "error")]


def test_a_postgresql_server_that_cannot_be_reached_is_one_error_without_the_password(setup):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: the connection is refused
    try:
        url = f"postgresql://postgres:hunter2-secret@127.0.0.1:{closed.getsockname()[1]}/agent_bridge"
        rc, report = checks(on_store(setup, url))
    finally:
        closed.close()
    assert rc == 1
    [found] = _store_findings(report)
    assert (found["code"], found["level"]) == ("store_unreadable", "error")
    assert "hunter2-secret" not in json.dumps(report) and "127.0.0.1" in found["message"]


def test_an_entry_of_ours_naming_another_store_is_an_error_that_names_it(setup):
    """Issue 30, item 1: the status line and a hook registered for a PostgreSQL store while doctor
    runs on the SQLite one (or a store turned into ``<cwd>/postgresql:/...``): each is named."""
    from dispatcher.clis import config_files as reg

    url = "postgresql://postgres:secret@127.0.0.1:5432/elsewhere"
    elsewhere = {"AGENT_BRIDGE_DB": url}
    settings = {
        "statusLine": {"type": "command", "command": reg.statusline_command(elsewhere)},
        "hooks": {
            "Stop": [
                {"hooks": [{"type": "command", "command": reg.hook_command("claude", "Stop", "claude", setup["env"])}]}
            ]
        },
    }
    (setup["root"] / "claude-config" / "settings.json").write_text(json.dumps(settings))
    report = assert_error(setup["env"], "registration_elsewhere")
    wrong = [f for f in report["findings"] if f["code"] == "registration_elsewhere"]
    assert len(wrong) == 1, wrong  # the hook names the store in use
    assert "status line" in wrong[0]["message"] and "settings.json" in wrong[0]["message"]
    assert "postgresql://postgres:***@127.0.0.1:5432/elsewhere" in wrong[0]["message"]
    assert "secret" not in json.dumps(report)


def test_entries_naming_the_store_in_use_are_ok(setup):
    from dispatcher.clis import config_files as reg

    settings = {"statusLine": {"type": "command", "command": reg.statusline_command(setup["env"])}}
    (setup["root"] / "claude-config" / "settings.json").write_text(json.dumps(settings))
    _, report = checks(setup["env"])
    assert "registrations_ok" in codes(report, "ok"), report


def test_a_launcher_variable_the_listener_lacks_is_a_warning_not_launcher_ok(setup):
    """Issue 30, item 2: the command launcher without AGENT_BRIDGE_WORKER_COMMAND fails every task
    (launcher_usage); doctor said launcher_ok."""
    write_config(setup["config"], {**AGENTS, "claude": {"auto": True, "launcher": "launchers/command_headless.sh"}})
    env = {k: v for k, v in setup["env"].items() if k != "AGENT_BRIDGE_WORKER_COMMAND"}
    _, report = checks(env)
    (found,) = [f for f in report["findings"] if f["code"] == "launcher_variable_unset"]
    assert found["level"] == "warn" and found["agent"] == "claude"
    assert "needs AGENT_BRIDGE_WORKER_COMMAND, which this shell has not" in found["message"]
    assert "listener restart --agent claude" in found["fix"]
    _, fine = checks({**env, "AGENT_BRIDGE_WORKER_COMMAND": "true"})
    assert "launcher_variable_unset" not in codes(fine)
