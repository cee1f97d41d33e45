"""The permission profile: what config.json accepts, what the launcher is handed, what the
worker is told, and what the ledger keeps of the denials its CLI reported."""

import json
from pathlib import Path

import pytest

from dispatcher.bridge import messages
from dispatcher.core import clock
from dispatcher.core.config import BridgeConfig
from dispatcher.core.permissions import (
    BRIDGE_ONLY,
    PERMISSIONS_ENV,
    PermissionProfile,
    ProfileError,
    profile_from_env,
)
from dispatcher.dispatch.attempts import begin_attempt, clean_diagnostics, denied_tools_text, ledger_fields
from dispatcher.dispatch.outcome import decide
from dispatcher.dispatch.prompts import worker_prompt
from dispatcher.store.messages import fetch_message


def _config(permissions: object) -> BridgeConfig:
    agent = {"launcher": "x.sh", "auto": True}
    if permissions is not None:
        agent["permissions"] = permissions
    return BridgeConfig.model_validate({"agents": {"claude": agent, "kimi": {"launcher": "y.sh"}}})


@pytest.mark.parametrize(
    "profile",
    [
        {"level": "bridge"},
        {"level": "read"},
        {"level": "read", "extra_dirs": ["/srv/docs", "~/notes"]},
        {"level": "edit", "extra_dirs": ["/srv/shared"]},
        {"level": "shell", "allow_commands": ["git status", "git diff*", "uv run pytest *", "make test-unit"]},
        {"level": "project"},
    ],
)
def test_every_level_is_accepted(profile):
    config = _config(profile)
    assert config.permissions("claude").level == profile["level"]


def test_no_profile_is_the_bridge_level_as_before_profiles_existed():
    config = _config(None)
    assert config.permissions("claude") == BRIDGE_ONLY and config.permissions("kimi").level == "bridge"


@pytest.mark.parametrize(
    ("profile", "complaint"),
    [
        ({"level": "root"}, "Input should be 'bridge', 'read', 'edit', 'shell' or 'project'"),
        ({}, "level"),
        ({"level": "shell"}, "level shell needs allow_commands"),
        ({"level": "edit", "allow_commands": ["git status"]}, "allow_commands is used only at level shell"),
        ({"level": "bridge", "extra_dirs": ["/srv"]}, "extra_dirs needs level read or above"),
        ({"level": "read", "extra_dirs": ["relative/dir"]}, "must be an absolute path"),
        ({"level": "read", "extra_dirs": [""]}, "must be an absolute path"),
        ({"level": "shell", "allow_commands": ["git status; rm -rf /"]}, "not a plain command prefix"),
        ({"level": "shell", "allow_commands": ["git $(whoami)"]}, "not a plain command prefix"),
        ({"level": "shell", "allow_commands": ["rm *.txt"]}, "not a plain command prefix"),
        ({"level": "shell", "allow_commands": ["a  b"]}, "not a plain command prefix"),
        ({"level": "shell", "allow_commands": ["*"]}, "not a plain command prefix"),
        ({"level": "shell", "allow_commands": ["ls\nrm"]}, "not a plain command prefix"),
        ({"level": "shell", "allow_commands": [7]}, "not a plain command prefix"),
        ({"level": "read", "sandbox": False}, "Extra inputs are not permitted"),
        ("edit", "valid dictionary"),
    ],
)
def test_a_bad_profile_is_refused_with_the_reason(profile, complaint):
    with pytest.raises(ValueError, match=None) as raised:
        _config(profile)
    assert complaint in str(raised.value)


def test_allowed_commands_are_prefixes_of_words():
    profile = PermissionProfile(level="shell", allow_commands=("git status", "uv run pytest*", "git diff *"))
    assert profile.command_prefixes() == (("git", "status"), ("uv", "run", "pytest"), ("git", "diff"))


def test_the_launcher_gets_the_resolved_profile_and_reads_it_back(monkeypatch):
    monkeypatch.setenv("HOME", "/home/someone")
    profile = PermissionProfile(level="edit", extra_dirs=("~/shared",))
    env = {PERMISSIONS_ENV: profile.to_env()}
    assert json.loads(env[PERMISSIONS_ENV]) == {
        "level": "edit",
        "allow_commands": [],
        "extra_dirs": ["/home/someone/shared"],
    }
    assert profile_from_env(env) == PermissionProfile(level="edit", extra_dirs=("/home/someone/shared",))
    assert profile_from_env({}) == BRIDGE_ONLY  # a launcher run by hand


@pytest.mark.parametrize("raw", ['{"level": "god"}', "not json", '["edit"]', '{"level": "shell"}'])
def test_a_launcher_refuses_a_broken_profile(raw):
    with pytest.raises(ProfileError, match=PERMISSIONS_ENV):
        profile_from_env({PERMISSIONS_ENV: raw})


def test_the_supervisor_hands_the_configured_profile_and_never_an_inherited_one(tmp_path, monkeypatch):
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.dispatch.worker_run import worker_env

    monkeypatch.setenv(PERMISSIONS_ENV, '{"level": "project"}')  # the listener's own environment
    settings = BridgeSettings(db=tmp_path / "bridge.db", runtime_dir=tmp_path / "rt")
    shell = PermissionProfile(level="shell", allow_commands=("git status",))
    assert (
        json.loads(
            worker_env(settings, "claude", 5, tmp_path, tmp_path / "d", "t", permissions=shell)[PERMISSIONS_ENV]
        )["level"]
        == "shell"
    )
    bridge = worker_env(settings, "claude", 5, tmp_path, tmp_path / "d", "t", permissions=BRIDGE_ONLY)
    assert json.loads(bridge[PERMISSIONS_ENV]) == {
        "level": "bridge",
        "allow_commands": [],
        "extra_dirs": [],
    }


def _task(conn) -> int:
    return messages.send_message(
        conn, sender="kimi", recipient="claude", text="fix the test", agents={"claude", "kimi"}, kind="task"
    )["id"]


@pytest.mark.parametrize(
    ("profile", "told"),
    [
        (BRIDGE_ONLY, ['permission level "bridge"', "no file, search or shell tool"]),
        (
            PermissionProfile(level="read", extra_dirs=("/srv/docs",)),
            ['permission level "read"', "in the workspace /work/ws", "You may also read in: /srv/docs."],
        ),
        (
            PermissionProfile(level="edit", extra_dirs=("/srv/out",)),
            ["create and edit files", "read and write in: /srv/out"],
        ),
        (
            PermissionProfile(level="shell", allow_commands=("git status", "uv run pytest*")),
            ["run only the allowed commands", "Allowed commands (each a prefix of words): git status, uv run pytest*."],
        ),
        (PermissionProfile(level="project"), ["the workspace's own CLI settings allow"]),
    ],
)
def test_the_prompt_says_what_the_worker_may_do_and_how_to_report_a_denial(conn, profile, told, tmp_path):
    from pathlib import Path

    prompt = worker_prompt(conn, fetch_message(conn, _task(conn)), profile, Path("/work/ws"))
    for words in told:
        assert words in prompt
    assert 'reply with a result "blocked: denied <ToolName>' in prompt
    assert "never its arguments" in prompt and "enforced by your CLI" in prompt


def test_the_barrier_records_the_level_the_worker_runs_at(conn):
    task = _task(conn)
    config = _config({"level": "shell", "allow_commands": ["git status"]})
    begin_attempt(
        conn,
        message_id=task,
        config=config,
        now=clock.now(),
        manual=True,
        supervisor_pid=1,
        supervisor_start=None,
        worker_token="t",
    )
    row = conn.execute(
        "SELECT permission_level, denied_tools FROM dispatch_attempts WHERE message_id = ?", (task,)
    ).fetchone()
    assert (row["permission_level"], row["denied_tools"]) == ("shell", None)


@pytest.mark.parametrize(
    ("reported", "kept"),
    [
        (["Edit", "Bash", "Edit"], "Bash,Edit"),
        (["run_shell_command"], "run_shell_command"),
        ([], None),
        (None, None),
        ("Edit", None),  # not a list
        (["Bash(rm -rf /)", "Edit"], "Edit"),  # an argument-bearing name is never kept
        ([f"tool{i:02d}" for i in range(40)], ",".join(f"tool{i:02d}" for i in range(16))),
    ],
)
def test_the_ledger_keeps_denied_tool_names_only(reported, kept):
    assert denied_tools_text(reported) == kept
    assert ledger_fields({"denied_tools": reported}, None)["denied_tools"] == kept


def test_diagnostics_keep_a_short_list_of_words_and_drop_anything_else():
    kept = clean_diagnostics(
        {"denied_tools": ["Edit", "Bash"], "long": ["x"] * 17, "text": ["rm -rf /"], "mixed": ["Edit", 3]}
    )
    assert kept == {"denied_tools": ["Edit", "Bash"]}


def test_a_denial_never_fails_an_attempt_by_itself_and_exit_78_names_the_unenforceable_profile():
    assert decide("succeeded", None, "failed", None, "ok", 0) == ("succeeded", None)
    assert decide(None, "no_evidence", "failed", None, None, 78) == ("failed", "permissions_unenforceable")


def test_init_gives_edit_only_where_a_sandbox_confines_writes_and_read_elsewhere(tmp_path):
    from dispatcher.ops.init import CLIS, Found, build_config

    config = build_config([Found(cli, f"/bin/{cli.agent}", cli.tested_version) for cli in CLIS], tmp_path)
    levels = {agent: entry["permissions"] for agent, entry in config["agents"].items()}
    assert levels == {
        "claude": {"level": "edit"},
        "codex": {"level": "edit"},
        "gemini": {"level": "read"},
        "kimi": {"level": "read"},
        "opencode": {"level": "read"},
    }
    assert BridgeConfig.model_validate(config).permissions("kimi").level == "read"
    assert build_config([], tmp_path)["agents"]["claude"]["permissions"] == {"level": "edit"}


# -- doctor: what each agent's workers may do, and whether its CLI can enforce it here -------------------------


def _which(missing: set[str]):
    return lambda name: None if name in missing else f"/usr/bin/{name}"


@pytest.mark.parametrize(
    ("cli", "profile", "missing", "code", "words"),
    [
        (
            "claude",
            {"level": "edit"},
            {"bwrap", "socat"},
            "permissions_ok",
            "may read, search, list, create and edit files inside the workspace (level edit)",
        ),
        ("claude", {"level": "shell", "allow_commands": ["git status"]}, set(), "permissions_ok", "level shell"),
        (
            "claude",
            {"level": "shell", "allow_commands": ["git status"]},
            {"socat"},
            "permissions_unenforceable",
            "needs claude's sandbox, but socat is not on PATH",
        ),
        (
            "claude",
            {"level": "shell", "allow_commands": ["git status"]},
            {"bwrap", "socat"},
            "permissions_unenforceable",
            "bwrap and socat are not on PATH",
        ),
        (
            "gemini",
            {"level": "shell", "allow_commands": ["git status"]},
            {"bwrap"},
            "permissions_unenforceable",
            "needs gemini's sandbox, but bwrap is not on PATH",
        ),
        ("gemini", {"level": "read"}, {"bwrap"}, "permissions_ok", "level read"),
        ("gemini", {"level": "project"}, set(), "permissions_unconfined", "no OS sandbox"),
        (
            "kimi",
            {"level": "shell", "allow_commands": ["git status"]},
            set(),
            "permissions_unconfined",
            "no OS sandbox",
        ),
        ("kimi", {"level": "project"}, set(), "permissions_unenforceable", "cannot be enforced by Kimi"),
        ("kimi", {"level": "read"}, set(), "permissions_ok", "level read"),
        (
            "opencode",
            {"level": "shell", "allow_commands": ["git status"]},
            set(),
            "permissions_unenforceable",
            "cannot be enforced by opencode",
        ),
        ("opencode", {"level": "project"}, set(), "permissions_unconfined", "no OS sandbox"),
        ("opencode", {"level": "edit"}, {"bwrap", "socat"}, "permissions_ok", "level edit"),
        (
            "codex",
            {"level": "shell", "allow_commands": ["git status"]},
            {"bwrap", "socat"},
            "permissions_ok",
            "level shell",
        ),
    ],
)
def test_doctor_says_what_workers_may_do_and_whether_the_cli_can_enforce_it(cli, profile, missing, code, words):
    from dispatcher.core.locations import Locations
    from dispatcher.ops.doctor import ERROR, OK, WARN, Context
    from dispatcher.ops.doctor.table import CHECKS

    ctx = Context(Locations(db=Path("/nonexistent/bridge.db")))  # what the permission checks read, given
    ctx.facts["permissions"] = [("agent", cli, PermissionProfile.from_json(profile), _which(missing))]
    (finding,) = [f for check in CHECKS if check.group == "permissions" for f in check(ctx)]
    assert finding.code == code and words in finding.message and finding.agent == "agent"
    assert (
        finding.level
        == {"permissions_ok": OK, "permissions_unconfined": WARN, "permissions_unenforceable": ERROR}[code]
    )
    assert code == "permissions_ok" or finding.fix


@pytest.mark.parametrize(
    ("words", "allowed"),
    [
        (["git", "status"], True),
        (["git", "status", "--short"], True),
        (["git", "statusx"], False),
        (["git"], False),
        (["uv", "run", "pytest", "-x"], True),
        (["uv", "run", "python"], False),
        ([], False),
    ],
)
def test_a_command_is_allowed_when_it_starts_with_an_allowed_prefix_of_words(words, allowed):
    profile = PermissionProfile(level="shell", allow_commands=("git status", "uv run pytest*"))
    assert profile.allows_command(words) is allowed
