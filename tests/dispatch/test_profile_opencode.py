"""dispatcher/clis/opencode/profile.py: the permission rules per level and the launch plan, as
pure functions (the real CLI is in tests/agent_clis/test_opencode.py and test_opencode_permissions.py).
A CLI upgrade that changes a rule or a flag shows up here as a table diff."""

import json
from pathlib import Path

import pytest

from dispatcher.clis.launch import Attempt, Dir, File, Link, Unenforceable
from dispatcher.clis.opencode import launch
from dispatcher.clis.opencode import profile as opencode
from dispatcher.core.permissions import WORKER_BRIDGE_TOOLS, PermissionProfile

WS = Path("/work/ws")
ATTEMPT = Path("/run/attempts/7")
BRIDGE = {f"agent_bridge_{tool}": "allow" for tool in WORKER_BRIDGE_TOOLS}
HIDDEN = {"agent_bridge_start_conversation": "deny", "agent_bridge_listener": "deny"}
READ = {"*": "allow", "*.env": "deny", "*.env.*": "deny", "*.env.example": "allow", "mcp:*": "deny"}
GIT = {".git": "deny", ".git/*": "deny", "*/.git": "deny", "*/.git/*": "deny"}
SERVER = {"command": "/py", "args": ["/proj/server.py"], "env": {"AGENT_ID": "oc", "AGENT_BRIDGE_ROLE": "worker"}}
ENV = {"AGENT_ID": "oc", "AGENT_BRIDGE_MESSAGE_ID": "7", "HOME": "/home/u"}


@pytest.mark.parametrize(
    ("profile", "rules"),
    [
        (PermissionProfile(level="bridge"), {"*": "deny", **BRIDGE, **HIDDEN}),
        (
            PermissionProfile(level="read"),
            {"*": "deny", **BRIDGE, "read": READ, "external_directory": "deny", **HIDDEN},
        ),
        (
            PermissionProfile(level="read", extra_dirs=("/data/a/",)),
            {"*": "deny", **BRIDGE, "read": READ, "external_directory": {"*": "deny", "/data/a/*": "allow"}, **HIDDEN},
        ),
        (
            PermissionProfile(level="edit"),
            {
                "*": "deny",
                **BRIDGE,
                "read": READ,
                "external_directory": "deny",
                "edit": {"*": "allow", **GIT},
                **HIDDEN,
            },
        ),
        (PermissionProfile(level="project"), HIDDEN),
    ],
    ids=["bridge", "read", "read-extra", "edit", "project"],
)
def test_the_rules_of_each_level(profile, rules):
    got = opencode.permission_rules(profile, WS)
    assert got == rules
    assert list(got) == list(rules)  # order matters: the last matching rule wins
    if profile.level != "project":
        assert next(iter(got)) == "*"  # deny everything first


def test_shell_is_unenforceable_without_an_os_sandbox():
    with pytest.raises(Unenforceable, match="no OS sandbox"):
        opencode.permission_rules(PermissionProfile(level="shell", allow_commands=("git status",)), WS)


def test_ripgrep_adds_glob_and_grep_at_read_and_edit_only():
    assert {"glob", "grep"} <= set(opencode.permission_rules(PermissionProfile(level="read"), WS, ripgrep=True))
    assert "glob" not in opencode.permission_rules(PermissionProfile(level="bridge"), WS, ripgrep=True)


def test_links_out_and_protected_paths_are_denied_relative_to_the_worktree():
    rules = opencode.permission_rules(
        PermissionProfile(level="edit"),
        WS,
        protected=("/work/ws/.agent-bridge", "/elsewhere/store"),
        worktree=Path("/work"),
        links_out=("escape", "sub/link"),
    )
    links = {"ws/escape": "deny", "ws/escape/*": "deny", "ws/sub/link": "deny", "ws/sub/link/*": "deny"}
    assert rules["read"] == {**READ, **links}
    assert rules["edit"] == {"*": "allow", **GIT, "ws/.agent-bridge": "deny", "ws/.agent-bridge/*": "deny", **links}


def test_links_leading_out_are_found_and_links_inside_are_not(tmp_path):
    ws, outside, extra = tmp_path / "ws", tmp_path / "outside", tmp_path / "extra"
    for directory in (ws / "sub", ws / ".git", outside, extra):
        directory.mkdir(parents=True)
    (ws / "out").symlink_to(outside)
    (ws / "sub" / "file-out").symlink_to(outside / "f")
    (ws / "inside").symlink_to(ws / "sub")
    (ws / "to-extra").symlink_to(extra)
    (ws / ".git" / "skipped").symlink_to(outside)
    (ws / "chain").symlink_to(ws / "out")  # a link to a link out
    assert opencode.links_leading_out(ws, [ws, extra]) == ["chain", "out", "sub/file-out"]


def test_the_worktree_is_the_nearest_directory_with_a_git_entry(tmp_path):
    (tmp_path / "repo" / "a" / "b").mkdir(parents=True)
    (tmp_path / "repo" / ".git").write_text("gitdir: /elsewhere\n")  # a linked worktree's .git file
    assert opencode.worktree_root(tmp_path / "repo" / "a" / "b") == tmp_path / "repo"
    assert opencode.worktree_root(Path("/")) == Path("/")


def _attempt(
    level: str = "bridge", user_config: str | None = None, auth: bool = False, profile=None, **env: str
) -> Attempt:
    user = {Path("/home/u/.config/opencode/opencode.json"): user_config}
    return Attempt(
        env={**ENV, "PATH": "/usr/bin", **env},
        attempt_dir=ATTEMPT,
        request_file=ATTEMPT / "request.md",
        workspace=WS,
        cwd=Path("/nonexistent-ws"),  # nothing to walk: no links out
        profile=profile or PermissionProfile(level=level),  # type: ignore[arg-type]
        server=SERVER,
        binary="/bin/opencode",
        exists=lambda path: auth and path == Path("/home/u/.local/share/opencode/auth.json"),
        read=lambda path: user.get(path),
    )


def _files(plan) -> dict[str, str]:
    return {str(step.path.relative_to(ATTEMPT)): step.text for step in plan.steps if isinstance(step, File)}


def test_the_launch_plan_at_bridge():
    plan = launch.plan(_attempt())
    assert plan.argv == (
        "/bin/opencode",
        "run",
        "--pure",
        "--format",
        "json",
        "--title",
        "agent-bridge-worker",
        launch.instruction("oc", "7"),
    )
    assert (plan.stdin, plan.stdout) == (ATTEMPT / "request.md", ATTEMPT / "opencode-events.jsonl")
    home = str(ATTEMPT / "opencode-home")
    assert plan.env == {
        "HOME": home,
        "XDG_CONFIG_HOME": f"{home}/.config",
        "XDG_DATA_HOME": f"{home}/.local/share",
        "XDG_STATE_HOME": f"{home}/.local/state",
        "XDG_CACHE_HOME": f"{home}/.cache",
        "TMPDIR": str(ATTEMPT / "tmp"),
        "OPENCODE_PERMISSION": json.dumps({"*": "deny", **BRIDGE, **HIDDEN}),
        "OPENCODE_DB": ":memory:",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
    }
    assert set(plan.unset) == {
        "OPENCODE_CONFIG",
        "OPENCODE_CONFIG_CONTENT",
        "OPENCODE_CONFIG_DIR",
        "OPENCODE_AUTH_CONTENT",
    }
    files = _files(plan)
    config = json.loads(files["opencode-home/.config/opencode/opencode.json"])
    assert config["mcp"] == {
        "agent_bridge": {
            "type": "local",
            "command": ["/py", "/proj/server.py"],
            "environment": {"AGENT_ID": "oc", "AGENT_BRIDGE_ROLE": "worker", "HOME": "/home/u"},
            "enabled": True,
            "timeout": 120_000,
        }
    }
    assert (config["share"], config["autoupdate"], config["snapshot"], config["instructions"]) == (
        "disabled",
        False,
        False,
        [],
    )
    assert "provider" not in config and "model" not in config  # no user config, no endpoint: opencode's own
    assert "@opencode-ai/plugin" in files["opencode-home/.config/opencode/package-lock.json"]
    assert not [step for step in plan.steps if isinstance(step, Link)]  # no saved credentials to link
    # Every directory is made before anything in it (the launch creates them in order, new).
    made: set[Path] = {ATTEMPT}
    for step in plan.steps:
        assert step.path.parent in made, step
        if isinstance(step, Dir):
            made.add(step.path)


def test_saved_credentials_are_linked_never_copied():
    plan = launch.plan(_attempt(auth=True))
    [link] = [step for step in plan.steps if isinstance(step, Link)]
    assert link == Link(
        ATTEMPT / "opencode-home/.local/share/opencode/auth.json", Path("/home/u/.local/share/opencode/auth.json")
    )


def test_at_project_the_workspace_config_loads():
    plan = launch.plan(_attempt("project"))
    assert "OPENCODE_DISABLE_PROJECT_CONFIG" not in plan.env and "OPENCODE_DISABLE_PROJECT_CONFIG" in plan.unset
    assert json.loads(plan.env["OPENCODE_PERMISSION"]) == HIDDEN
    assert "instructions" not in json.loads(_files(plan)["opencode-home/.config/opencode/opencode.json"])


def test_a_base_url_becomes_a_provider_of_its_own():
    plan = launch.plan(
        _attempt(
            AGENT_BRIDGE_OPENCODE_BASE_URL="http://127.0.0.1:9/v1",
            AGENT_BRIDGE_OPENCODE_MODEL="m1",
            AGENT_BRIDGE_OPENCODE_ENV_KEY="MY_KEY",
            AGENT_BRIDGE_OPENCODE_PRICE="3,15",
        )
    )
    assert plan.argv[7:9] == ("--model", "agent_bridge_endpoint/m1")
    config = json.loads(_files(plan)["opencode-home/.config/opencode/opencode.json"])
    assert config["model"] == config["small_model"] == "agent_bridge_endpoint/m1"
    provider = config["provider"]["agent_bridge_endpoint"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": "http://127.0.0.1:9/v1", "apiKey": "{env:MY_KEY}"}
    assert provider["models"]["m1"]["cost"] == {"input": 3.0, "output": 15.0}


@pytest.mark.parametrize(
    "env",
    [
        {"AGENT_BRIDGE_OPENCODE_BASE_URL": "http://x/v1"},  # no model
        {"AGENT_BRIDGE_OPENCODE_BASE_URL": "http://x/v1", "AGENT_BRIDGE_OPENCODE_MODEL": "p/m"},
        {
            "AGENT_BRIDGE_OPENCODE_BASE_URL": "http://x/v1",
            "AGENT_BRIDGE_OPENCODE_MODEL": "m",
            "AGENT_BRIDGE_OPENCODE_PRICE": "1",
        },
    ],
)
def test_bad_endpoint_settings_are_refused_with_the_fix(env):
    with pytest.raises(ValueError, match="AGENT_BRIDGE_OPENCODE_"):
        launch.plan(_attempt(**env))


def test_shell_is_refused_by_the_plan():
    with pytest.raises(Unenforceable, match="no OS sandbox"):
        launch.plan(_attempt(profile=PermissionProfile(level="shell", allow_commands=("git status",))))


def test_without_a_base_url_the_users_model_and_providers_are_kept_and_nothing_else():
    user = {"model": "anthropic/x", "provider": {"p": {}}, "mcp": {"mine": {}}, "permission": "allow", "plugin": ["a"]}
    assert opencode.user_model_settings(user) == {"model": "anthropic/x", "provider": {"p": {}}}
    assert opencode.user_model_settings(["not", "a", "dict"]) == {}
    plan = launch.plan(_attempt(user_config=json.dumps(user)))
    config = json.loads(_files(plan)["opencode-home/.config/opencode/opencode.json"])
    assert config["model"] == "anthropic/x" and set(config["mcp"]) == {"agent_bridge"} and "permission" not in config
    jsonc = launch.plan(_attempt(user_config='{"model": "a/b", // mine\n}'))  # JSONC: skipped
    assert "model" not in json.loads(_files(jsonc)["opencode-home/.config/opencode/opencode.json"])


def test_doctor_is_told_shell_is_refused_and_project_unconfined():
    shell = opencode.enforcement(PermissionProfile(level="shell", allow_commands=("git status",)), lambda _: None)
    assert shell is not None and shell.kind == "refused" and "no OS sandbox" in shell.why and "level edit" in shell.fix
    project = opencode.enforcement(PermissionProfile(level="project"), lambda _: None)
    assert project is not None and project.kind == "unconfined"
    assert opencode.enforcement(PermissionProfile(level="edit"), lambda _: None) is None
