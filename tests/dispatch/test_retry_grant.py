"""Issue 33, item 3: ``agent-bridge retry ID --allow GRANT`` sends a finished task again as a new
message linked to the old one; its attempt runs with the grant (the launcher's profile and the
recorded level), the old one keeps its verdict, config.json is unchanged. A real listener, real
fake workers, the real command; plus the grant rules (pure)."""

import json
from pathlib import Path

import pytest
from dispatch_harness import FAKE_WORKER, attempt, cli, post_task, start_listener, wait_finished, wait_until
from harness import sql, write_config

from dispatcher.core.grants import GrantRefused, parse_grant, widened
from dispatcher.core.permissions import PermissionProfile
from dispatcher.core.profile_rules import ProfileView


@pytest.mark.parametrize(
    ("level", "grants", "after", "commands"),
    [
        ("read", ["Bash(uv run pytest)"], "shell", ("uv run pytest",)),
        ("read", ["Edit"], "edit", ()),
        ("edit", ["Bash(uv run pytest*)", "Edit"], "shell", ("uv run pytest*",)),
        ("project", ["Bash(make)"], "project", ()),
        ("read", [], "read", ()),
    ],
)
def test_a_grant_widens_the_tasks_profile_never_narrows_it(level, grants, after, commands):
    for profile in (PermissionProfile(level=level), ProfileView(level)):
        wide = widened(profile, grants)
        assert (wide.level, tuple(wide.allow_commands)) == (after, commands)
        assert profile.level == level  # the agent's own is untouched


def test_a_shell_grant_adds_to_the_allowed_commands_once():
    profile = PermissionProfile(level="shell", allow_commands=("git status",))
    assert widened(profile, ["Bash(git status)", "Bash(make test)"]).allow_commands == ("git status", "make test")


@pytest.mark.parametrize("text", ["Bash(rm -rf / ; echo)", "Bash()", "Write", "Bash(uv run pytest", "bash(ls)"])
def test_an_unknown_grant_is_refused_naming_the_syntax(text):
    with pytest.raises(GrantRefused, match="Bash\\(<command prefix>\\)"):
        parse_grant(text)


def _launcher(directory: Path, seen: Path) -> Path:
    """The fake worker, in block mode, after writing the profile it was given to ``seen/<id>``."""
    path = directory / "launch_recording.sh"
    path.write_text(
        "#!/bin/sh\n"
        f'printf "%s" "$AGENT_BRIDGE_PERMISSIONS" > {seen}/$AGENT_BRIDGE_MESSAGE_ID\n'
        f'FAKE_WORKER_MODE=block exec "$AGENT_BRIDGE_PYTHON" {FAKE_WORKER} "$@"\n'
    )
    path.chmod(0o755)
    return path


def test_retry_runs_the_task_again_with_the_grant_alone(env, db_path, config_path, launchers, tmp_path):
    seen = tmp_path / "seen"
    seen.mkdir()
    agents = {
        "claude": {"auto": True, "launcher": str(_launcher(launchers, seen)), "permissions": {"level": "read"}},
        "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
    }
    write_config(config_path, agents)
    config_before = config_path.read_bytes()
    listener = start_listener(env)
    old = post_task(db_path, "run the tests please")
    assert wait_finished(db_path, old)["outcome"] == "blocked"
    done = cli(env, "retry", str(old), "--allow", "Bash(uv run pytest)")
    assert done.returncode == 0, done.stderr
    sent = json.loads(done.stdout)
    new = sent["id"]
    assert (sent["retry_of"], sent["grants"], sent["previous_outcome"]) == (old, ["Bash(uv run pytest)"], "blocked")
    row = wait_finished(db_path, new)
    assert row["permission_level"] == "shell"
    granted = json.loads(wait_until(lambda: (seen / str(new)).exists() and (seen / str(new)).read_text()))
    assert (granted["level"], granted["allow_commands"]) == ("shell", ["uv run pytest"])
    # The same task, as the same sender's, a new message; the old one keeps its attempt and verdict.
    assert (
        sql(db_path, "SELECT sender, recipient, kind, text FROM messages WHERE id IN (?, ?) ORDER BY id", (old, new))
        == [("kimi", "claude", "task", "run the tests please")] * 2
    )
    original = attempt(db_path, old)
    assert (original["outcome"], original["permission_level"]) == ("blocked", "read")
    assert json.loads((seen / str(old)).read_text())["level"] == "read"
    assert config_path.read_bytes() == config_before  # the agent's profile is unchanged
    shown = cli(env, "show", str(new)).stdout
    assert f"retry of #{old}, granted Bash(uv run pytest) for this task alone by " in shown
    # A task sent afterwards runs at the agent's own level again.
    later = post_task(db_path, "another task")
    assert wait_finished(db_path, later)["permission_level"] == "read"
    listener.terminate()
    listener.communicate(timeout=60)
    # Refusals change nothing.
    count = sql(db_path, "SELECT count(*) FROM messages")[0][0]
    bad = cli(env, "retry", str(old), "--allow", "Bash(rm -rf / ; x)")
    assert bad.returncode == 2 and "invalid_grant" in bad.stderr
    unknown = cli(env, "retry", "999999", "--allow", "Edit")
    assert unknown.returncode == 2 and "message_not_found" in unknown.stderr
    never = post_task(db_path, "never attempted")
    refused = cli(env, "retry", str(never), "--allow", "Edit")
    assert refused.returncode != 0 and "retry_refused" in refused.stderr and "never attempted" in refused.stderr
    assert sql(db_path, "SELECT count(*) FROM messages")[0][0] == count + 1
