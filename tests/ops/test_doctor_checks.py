"""Each row of doctor's table (``dispatcher.ops.doctor.table.CHECKS``), one case each way: in a
healthy setup (real store, config.json, launchers and directories) and in that setup spoiled in
the one way its question is about, the check reports its code in exactly one of the two.

What a check learns from a process (a CLI's version, systemctl, a listener, the status line's
timed runs, git) is given as the fact it reads (``ctx.facts``); the process itself is run end to
end by ``tests/ops/test_doctor.py``. The table is run in order up to the check, as doctor runs it,
so a check that reads what the checks before it reported (store_ok, nothing_stuck) is tested as it runs."""

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dispatcher.clis.base import StatuslineSetting
from dispatcher.core.findings import CODES, OK
from dispatcher.core.locations import Locations
from dispatcher.core.permissions import PermissionProfile
from dispatcher.ops import init
from dispatcher.ops.doctor import runner
from dispatcher.ops.doctor import store as store_checks
from dispatcher.ops.doctor.context import Context
from dispatcher.ops.doctor.statusline import STATUSLINE_RUNS, StatuslineRun
from dispatcher.ops.doctor.table import CHECKS
from dispatcher.ops.store_pointers import Pointer
from dispatcher.store import open_store

AGENTS = ("claude", "kimi")
CLAUDE_STATUSLINE = ("statusline_setting", "claude")  # the fact doctor reads Claude Code's status line from
CLI = {cli.agent: cli for cli in init.CLIS}


class Scene:
    """A healthy setup, and the ways to spoil it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self.state = root / "state"
        self.state.mkdir(mode=0o700)
        self.db = self.state / "bridge.db"
        open_store(self.db).close()
        self.db.chmod(0o600)
        self.runtime = root / "run"
        self.runtime.mkdir(mode=0o700)
        self.workspace = root / "ws"
        self.workspace.mkdir()
        self.launchers = root / "launchers"
        self.launchers.mkdir(mode=0o755)
        for agent in AGENTS:
            self.launcher(agent).write_text("#!/bin/sh\nexit 0\n")
            self.launcher(agent).chmod(0o755)
        self.config_path = root / "config.json"
        self.agents = {
            agent: {"launcher": str(self.launcher(agent)), "auto": True, "workspace": str(self.workspace)}
            for agent in AGENTS
        }
        self.write_config()
        self.facts: dict = {}
        for agent in AGENTS:
            self.facts[("listener", agent, True)] = self.facts[("listener", agent, False)] = {
                "enabled": True,
                "elsewhere": None,
                "running": True,
                "stage": "idle",
                "pid": 4242,
                "config_error": None,
                "progress": {},
                "progress_state": "ok",
                "last": {"result": "succeeded", "message_id": 1},
                "environment": [],
                "clis": list(AGENTS),
            }
            self.facts[("cli", agent)] = (agent, f"/bin/{agent}", self.found(agent, CLI[agent].tested_version))
            self.facts[("unit", f"agent-bridge-listener@{agent}.service")] = ("enabled", "active", "")
        self.facts["auth"] = [(agent, agent, f"{agent} has credentials (X_API_KEY is set)") for agent in AGENTS]
        self.facts["systemd"] = (True, True)
        self.facts["statusline"] = [self.run(0.05)] * STATUSLINE_RUNS
        settings = self.root / "claude" / "settings.json"
        self.facts[CLAUDE_STATUSLINE] = StatuslineSetting(settings, True, "agent-bridge-statusline")
        self.facts["pointers"] = [Pointer(settings, "status line", str(self.db))]
        self.facts["isolation"] = []
        self.facts["orphans"] = {"worktrees": [], "branches": []}

    def launcher(self, agent: str) -> Path:
        return self.launchers / f"{agent}_headless.sh"

    def write_config(self) -> None:
        self.config_path.write_text(json.dumps({"agents": self.agents}))
        self.config_path.chmod(0o600)

    def agent(self, agent: str, **entry: object) -> None:
        self.agents[agent] = {**self.agents[agent], **entry}
        self.write_config()

    @staticmethod
    def found(agent: str, version: str | None, problem: str | None = None) -> init.Found:
        return init.Found(CLI[agent], f"/bin/{agent}", version, problem)

    @staticmethod
    def run(cpu: float, answer: str = "[claude] idle\n", code: int = 0) -> StatuslineRun:
        return StatuslineRun(SimpleNamespace(returncode=code, stdout=answer), cpu, cpu)  # type: ignore[arg-type]

    def listener(self, agent: str, **status: object) -> None:
        for check_config in (True, False):
            self.facts[("listener", agent, check_config)] = {**self.facts[("listener", agent, check_config)], **status}

    def each_unit(self, answer: tuple) -> None:
        for agent in AGENTS:
            self.facts[("unit", f"agent-bridge-listener@{agent}.service")] = answer

    def rows(self, *statements: tuple[str, tuple]) -> None:
        conn = open_store(self.db)
        try:
            for sql, params in statements:
                conn.execute(sql, params)
        finally:
            conn.close()

    def message(self, age: float) -> None:
        sql = (
            "INSERT INTO messages (sender, recipient, kind, text, created_at) VALUES ('kimi', 'claude', 'task', 'x', ?)"
        )
        self.rows((sql, (time.time() - age,)))

    def conversation(self, state: str) -> None:
        now = time.time()
        sql = (
            "INSERT INTO conversations (initiator, recipient, goal, state, max_turns, created_at, expires_at,"
            " updated_at) VALUES ('kimi', 'claude', 'g', ?, 4, ?, ?, ?)"
        )
        self.rows((sql, (state, now, now + 3600, now)))

    def stale_attempt(self) -> None:
        """An unsettled attempt whose supervisor is this process by pid but not by start time: gone."""
        now = time.time()
        self.rows(
            (
                "INSERT INTO messages (id, sender, recipient, kind, text, created_at) "
                "VALUES (7, 'kimi', 'claude', 'task', 'x', ?)",
                (now,),
            ),
            (
                "INSERT INTO dispatch_attempts (message_id, agent, state, started_at, supervisor_pid,"
                " supervisor_start_time, deadline, worker_token) VALUES (7, 'claude', 'spawned', ?, ?, ?, ?, 'tok')",
                (now, os.getpid(), 1.0, now + 600),
            ),
        )

    def profile(self, agent: str, level: str) -> None:
        given = {"level": level, "allow_commands": ["git status"]} if level == "shell" else {"level": level}
        self.facts["permissions"] = [
            (a, a, PermissionProfile.from_json(given if a == agent else {"level": "bridge"}), lambda name: "/bin/x")
            for a in AGENTS
        ]

    def report(self, code: str) -> list:
        """The table run in order up to ``code``'s check, as doctor runs it: that check's findings."""
        ctx = Context(Locations(db=self.db, config=self.config_path, runtime_dir=self.runtime))
        ctx.facts.update(self.facts)
        try:
            for check in CHECKS:
                found = runner._safe(check, ctx, []) if runner._ready(check, ctx) else []
                ctx.found += found
                if check.name == code:
                    failed = [f for f in ctx.found if f.code == "check_failed"]
                    assert not failed, failed
                    return found
        finally:
            if ctx.conn is not None:
                ctx.conn.close()
        raise AssertionError(f"no check {code}")


def _not_open(exc: Exception):
    def refuse(path):
        raise exc

    return refuse


def _spoil_store_busy(s: Scene, mp: pytest.MonkeyPatch) -> None:
    """A writer started while doctor read the idle store as immutable: its -wal appears, the read fails."""
    mp.setattr(store_checks, "store_is_idle", lambda db: True)
    mp.setattr(store_checks.views, "integrity_problems", lambda conn, n: ["row 3 missing from index"])
    Path(f"{s.db}-wal").touch(mode=0o600)


def _other_uid(mp: pytest.MonkeyPatch) -> None:
    other = os.getuid() + 1
    mp.setattr(store_checks.os, "getuid", lambda: other)


def _replace(path: Path, with_directory: bool) -> None:
    path.unlink()
    if with_directory:
        path.mkdir()


# code -> how to spoil the healthy setup so that the code's check answers the other way
SPOIL = {
    "disk_low": lambda s, mp: mp.setattr(store_checks, "LOW_DISK_BYTES", 1 << 62),
    "store_dir_mode": lambda s, mp: s.state.chmod(0o755),
    "store_missing": lambda s, mp: s.db.unlink(),
    "store_not_file": lambda s, mp: _replace(s.db, with_directory=True),
    "store_owner": lambda s, mp: _other_uid(mp),
    "store_mode": lambda s, mp: s.db.chmod(0o644),
    "store_unreadable": lambda s, mp: mp.setattr(
        store_checks, "open_read_only", _not_open(__import__("sqlite3").OperationalError("unable to open"))
    ),
    "store_busy": _spoil_store_busy,
    "store_corrupt": lambda s, mp: s.db.write_bytes(b"not a database " * 512),
    "schema_too_new": lambda s, mp: mp.setattr("dispatcher.store.SCHEMA_VERSION", _schema() - 1),
    "schema_old": lambda s, mp: mp.setattr("dispatcher.store.SCHEMA_VERSION", _schema() + 1),
    "store_ok": lambda s, mp: s.db.chmod(0o644),
    "runtime_dir_mode": lambda s, mp: s.runtime.chmod(0o755),
    "runtime_dir_owner": lambda s, mp: _other_uid(mp),
    "config_writable_by_others": lambda s, mp: s.config_path.chmod(0o666),
    "config_invalid": lambda s, mp: s.config_path.write_text("{"),
    "config_ok": lambda s, mp: s.config_path.write_text("{"),
    "launcher_ok": lambda s, mp: [s.launcher(a).unlink() for a in AGENTS],
    "launcher_missing": lambda s, mp: s.launcher("kimi").unlink(),
    "launcher_not_executable": lambda s, mp: s.launcher("kimi").chmod(0o644),
    "launcher_writable_by_others": lambda s, mp: s.launcher("kimi").chmod(0o777),
    "launcher_variable_unset": lambda s, mp: _command_launcher(s),
    "workspace_unsafe": lambda s, mp: _default_workspace(s, mp, "/"),  # holds the home directory
    "workspace_ok": lambda s, mp: s.workspace.rmdir(),
    "workspace_missing": lambda s, mp: s.workspace.rmdir(),
    "isolation_refused": lambda s, mp: s.facts.update(isolation=[("claude", "workspace_not_git: ... fail", None)]),
    "isolation_ok": lambda s, mp: s.facts.update(isolation=[("claude", None, SimpleNamespace(toplevel=s.workspace))]),
    "cli_not_found": lambda s, mp: s.facts.update({("cli", "kimi"): ("kimi", None, None)}),
    "cli_version_unknown": lambda s, mp: s.facts.update(
        {("cli", "kimi"): ("kimi", "/bin/kimi", s.found("kimi", None))}
    ),
    "cli_version_untested": lambda s, mp: s.facts.update(
        {("cli", "kimi"): ("kimi", "/bin/kimi", s.found("kimi", "0.1"))}
    ),
    "cli_ok": lambda s, mp: s.facts.update({("cli", a): (a, None, None) for a in AGENTS}),
    "cli_auth_ok": lambda s, mp: s.facts.update(auth=[(a, a, None) for a in AGENTS]),
    "cli_not_authenticated": lambda s, mp: s.facts.update(auth=[("kimi", "kimi", None)]),
    "permissions_unenforceable": lambda s, mp: s.profile("kimi", "project"),
    "permissions_unconfined": lambda s, mp: s.profile("kimi", "shell"),
    "permissions_ok": lambda s, mp: s.facts.update(permissions=[]),
    "auto_off": lambda s, mp: s.agent("kimi", auto=False),
    "listener_disabled": lambda s, mp: s.listener("kimi", enabled=False),
    "listener_ok": lambda s, mp: [s.listener(a, running=False) for a in AGENTS],
    "listener_not_running": lambda s, mp: s.listener("kimi", running=False),
    "listener_error": lambda s, mp: s.listener("kimi", stage="error", config_error="agents.kimi: bad"),
    "last_attempt_failed": lambda s, mp: s.listener("kimi", last={"result": "failed", "message_id": 3}),
    "listener_cli_missing": lambda s, mp: s.listener("kimi", clis=["claude"]),
    "unit_no_manager": lambda s, mp: s.facts.update(systemd=(False, False)),
    "unit_not_installed": lambda s, mp: s.facts.update(systemd=(True, False)),
    "unit_unknown": lambda s, mp: s.each_unit((None, None, "Failed to connect to bus")),
    "unit_not_enabled": lambda s, mp: s.each_unit(("disabled", None, "")),
    "unit_not_active": lambda s, mp: s.each_unit(("enabled", "inactive", "")),
    "unit_ok": lambda s, mp: s.each_unit(("disabled", None, "")),
    "cost_known": lambda s, mp: s.agent("claude", launcher=str(s.launcher("kimi"))),
    "cost_unknown": lambda s, mp: s.agent("kimi", prices={"input": 1.0, "output": 2.0}),
    "budget_reached": lambda s, mp: mp.setattr(
        "dispatcher.dispatch.control.daily_budget", lambda conn, agent, config, now: {"reached": "max_tokens_per_day"}
    ),
    "registrations_ok": lambda s, mp: s.facts.update(pointers=[]),
    "registration_elsewhere": lambda s, mp: s.facts.update(
        pointers=[Pointer(s.root / ".claude.json", "MCP server", str(s.root / "other.db"))]
    ),
    "statusline_failed": lambda s, mp: s.facts.update(statusline=[s.run(0.05, "agent-bridge: unavailable")] * 5),
    "statusline_slow": lambda s, mp: s.facts.update(statusline=[s.run(0.5)] * STATUSLINE_RUNS),
    "statusline_ok": lambda s, mp: s.facts.update(statusline=[s.run(0.5)] * STATUSLINE_RUNS),
    "statusline_configured": lambda s, mp: s.facts.update({CLAUDE_STATUSLINE: StatuslineSetting(s.root, True)}),
    "statusline_not_configured": lambda s, mp: s.facts.update({CLAUDE_STATUSLINE: StatuslineSetting(s.root, False)}),
    "statusline_settings_unreadable": lambda s, mp: s.facts.update(
        {CLAUDE_STATUSLINE: StatuslineSetting(s.root, True, unreadable="JSONDecodeError")}
    ),
    "stale_attempt": lambda s, mp: s.stale_attempt(),
    "conversation_needs_human": lambda s, mp: s.conversation("needs_human"),
    "conversation_blocked": lambda s, mp: s.conversation("blocked"),
    "unread": lambda s, mp: s.message(age=60),
    "unread_old": lambda s, mp: s.message(age=3 * 86400),
    "nothing_stuck": lambda s, mp: s.stale_attempt(),
    "orphan_worktree": lambda s, mp: s.facts.update(
        orphans={"worktrees": [{"path": s.root, "bytes": 4096}], "branches": []}
    ),
    "orphan_branch": lambda s, mp: s.facts.update(
        orphans={"worktrees": [], "branches": [{"branch": "agent-bridge/7", "repository": s.root, "commit": "ab" * 20}]}
    ),
}


def _schema() -> int:
    from dispatcher.store import SCHEMA_VERSION

    return SCHEMA_VERSION


def _default_workspace(s: Scene, mp: pytest.MonkeyPatch, workspace: str) -> None:
    """kimi declares no workspace: its workers run in the settings' (config.json refuses an unsafe one it declares)."""
    del s.agents["kimi"]["workspace"]
    s.write_config()
    mp.setenv("AGENT_BRIDGE_WORKSPACE", workspace)


def _command_launcher(s: Scene) -> None:
    """A launcher that needs AGENT_BRIDGE_WORKER_COMMAND, which the running listener recorded it lacks."""
    command = s.launchers / "command_headless.sh"
    command.write_text("#!/bin/sh\nexit 0\n")
    command.chmod(0o755)
    s.agent("kimi", launcher=str(command))


def test_every_check_has_its_case():
    assert sorted(SPOIL) == sorted(check.name for check in CHECKS)


@pytest.mark.parametrize("code", [check.name for check in CHECKS])
def test_each_check_answers_its_question_each_way(code, tmp_path, monkeypatch):
    healthy = Scene(tmp_path / "healthy")
    before = healthy.report(code)
    spoiled = Scene(tmp_path / "spoiled")
    SPOIL[code](spoiled, monkeypatch)
    after = spoiled.report(code)
    assert bool(before) != bool(after), (before, after)
    for f in before + after:
        assert f.code == code and f.level in CODES[code].levels and f.message and "\n" not in f.message + f.fix
        assert f.level == OK or f.fix, f"{code} reported without its fix"


def _checks(*rows):
    from dispatcher.ops.doctor.check import Check

    return tuple(Check(run, CODES[code], group=group) for run, code, group in rows)


def test_a_setting_doctor_cannot_read_is_invalid_setting_and_nothing_else(monkeypatch):
    monkeypatch.setenv("AGENT_BRIDGE_DB", "relative/bridge.db")
    (found,) = runner.run_checks()
    assert (found.code, found.level) == ("invalid_setting", "error") and "AGENT_BRIDGE_DB" in found.fix


def test_a_check_that_fails_or_reports_another_code_is_one_check_failed(tmp_path, monkeypatch):
    from dispatcher.core.findings import finding

    monkeypatch.setenv("AGENT_BRIDGE_DB", str(tmp_path / "bridge.db"))

    def broken(ctx):
        raise KeyError("stage")

    def shares_a_broken_fact(ctx):
        return ctx.fact("broken", lambda: broken(ctx))

    found = runner.run_checks(
        _checks(
            (broken, "unread", ""),
            (lambda ctx: [finding("unread", "u", "kimi")], "nothing_stuck", ""),  # another code than its own
            (shares_a_broken_fact, "unread_old", ""),
            (shares_a_broken_fact, "stale_attempt", ""),  # the same exception: not said twice
        )
    )
    said = [(f.code, f.message) for f in found]
    assert said == [
        ("check_failed", "the unread check failed (KeyError: 'stage')"),
        ("check_failed", "the nothing_stuck check reported unread, not its own code"),
        ("check_failed", "the unread_old check failed (KeyError: 'stage')"),
    ], said


def test_a_group_of_checks_is_shown_agent_by_agent(tmp_path, monkeypatch):
    """Each agent's outcomes together, in the order of the group's rows: doctor's output as it was
    when one function per area answered for each agent in turn."""
    from dispatcher.core.findings import finding

    monkeypatch.setenv("AGENT_BRIDGE_DB", str(tmp_path / "bridge.db"))
    found = runner.run_checks(
        _checks(
            (lambda ctx: [finding("unread", "u", a) for a in ("claude", "kimi")], "unread", "g"),
            (lambda ctx: [finding("unread_old", "o", "claude")], "unread_old", "g"),
            (lambda ctx: [finding("nothing_stuck", "n")], "nothing_stuck", ""),
        )
    )
    assert [(f.code, f.agent) for f in found] == [
        ("unread", "claude"),
        ("unread_old", "claude"),
        ("unread", "kimi"),
        ("nothing_stuck", None),
    ]
