"""Kimi Code 2.1.0 permission profiles end to end: the real listener, launchers/kimi_headless.sh,
the real pinned binary on Node 22, the real bridge server and the scripted model (workspace mode,
``TOOLKIT=kimi``) on 127.0.0.1, one run per level.

Each level gets its own workspace and the same task: read a file in the workspace, read a
canary outside it, edit the workspace file, create a file, run an allowed command (``touch``),
run a denied one (``rm -rf`` of a canary in the workspace), write outside the workspace, and
write through a symlink in the workspace that points outside. Every workspace also holds the
settings a task author could plant there (``.kimi-code/local.toml``, ``.kimi-code/mcp.json``,
``.mcp.json``). Afterwards the filesystem must show exactly what the level allows, the recorded
model requests exactly the tools it offers, and the ledger the tools Kimi refused.

What Kimi enforces (dispatcher/clis/kimi/profile.py): the agent file's tool list, and
above ``bridge`` a PreToolUse hook. ``bridge`` keeps today's unconfined ``Read`` (the outside
canary IS read there: asserted below); ``project`` is refused with exit 78.
"""

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_harness import require_cli
from dispatch_harness import attempt, start_listener, status, wait_finished, wait_until
from git_walls import assert_walls_held, plant_repo
from git_walls import task_text as git_task_text
from harness import PROJECT, McpAgent, bridge_env, write_config
from models.anthropic import offered_tools, to_turn
from models.kimi import KimiModel

from dispatcher.clis.kimi.profile import LEVEL_TOOLS
from dispatcher.core.permissions import WORKER_BRIDGE_TOOLS

pytestmark = pytest.mark.cli

LAUNCHER = PROJECT / "launchers" / "kimi_headless.sh"
BRIDGE = {f"mcp__agent_bridge__{tool}" for tool in WORKER_BRIDGE_TOOLS}
DEADLINE = 180.0
ORIGINAL, EDITED = "original line\n", "edited line\n"
ALLOWED = "touch ran-allowed.txt"
SHELL_PROFILE = {"level": "shell", "allow_commands": [ALLOWED, "git status"]}


@pytest.fixture(scope="module")
def kimi_perm(tmp_path_factory):
    """One store, model server, kimi listener and claude sender for the module; the kimi agent's
    workspace and permissions are switched between tasks by replacing config.json atomically."""
    kimi_bin, node = require_cli("kimi"), require_cli("node22")
    root = tmp_path_factory.mktemp("kimi-perm")
    config = write_config(root / "config.json", _agents(root / "unused", None))
    env = bridge_env(root, config)
    home = root / "user-home"
    (home / ".kimi-code").mkdir(parents=True)
    (home / ".kimi-code" / "config.toml").write_text("[loop_control]\nmax_attempts_per_step = 2\n")
    (root / "tmp").mkdir()
    with KimiModel(tmp_path_factory.mktemp("kimi-perm-model") / "requests.jsonl") as model:
        listener = start_listener(
            {
                **env,
                "HOME": str(home),
                "TMPDIR": str(root / "tmp"),
                "KIMI_BIN": str(kimi_bin),
                "KIMI_NODE": str(node),
                "KIMI_MODEL_PROVIDER_TYPE": "anthropic",
                "KIMI_MODEL_BASE_URL": model.base_url,
                "KIMI_MODEL_NAME": "scripted-model",
                "KIMI_MODEL_API_KEY": "scripted-key",
            },
            agent="kimi",
        )
        sender = McpAgent("claude", env)
        try:
            sender.wait_ready()
            yield {
                "root": root,
                "config": config,
                "env": env,
                "model": model,
                "sender": sender,
                "db": Path(env["AGENT_BRIDGE_DB"]),
                "runtime": Path(env["AGENT_BRIDGE_RUNTIME_DIR"]),
            }
        finally:
            sender.close()
            if listener.poll() is None:
                listener.terminate()
            listener.communicate(timeout=60)
        assert model.errors == []


def _agents(workspace: Path, permissions: dict | None) -> dict:
    kimi = {"auto": True, "launcher": str(LAUNCHER), "worker_timeout_seconds": 150, "workspace": str(workspace)}
    kimi["isolation"] = "none"  # the walls of the workspace itself (worktrees: test_worktree_clis)
    if permissions is not None:
        kimi["permissions"] = permissions
    return {"claude": {"auto": False, "launcher": "launchers/claude_headless.sh"}, "kimi": kimi}


def set_agent(run: dict, workspace: Path, permissions: dict | None) -> None:
    staged = run["config"].with_suffix(".staged")
    staged.write_text(json.dumps({"agents": _agents(workspace, permissions)}))
    os.replace(staged, run["config"])  # atomically: the listener never reads half a file


def layout(run: dict, name: str) -> dict[str, Path]:
    """A workspace with a file to edit, a canary to delete, a symlink to outside and the planted
    settings; beside it an outside directory with its own canary."""
    base = run["root"] / name
    ws, outside = base / "ws", base / "outside"
    ws.mkdir(parents=True)
    outside.mkdir()
    (ws / "notes.txt").write_text(ORIGINAL)
    (ws / "canary.txt").write_text("workspace canary\n")
    (outside / "canary.txt").write_text("outside canary\n")
    (ws / "link").symlink_to(outside, target_is_directory=True)
    marker = base / "planted-mcp-started"
    planted_server = {"mcpServers": {"planted": {"command": "sh", "args": ["-c", f"touch {marker}"]}}}
    (ws / ".kimi-code").mkdir()
    (ws / ".kimi-code" / "mcp.json").write_text(json.dumps(planted_server))
    (ws / ".mcp.json").write_text(json.dumps(planted_server))
    (ws / ".kimi-code" / "local.toml").write_text(
        f'yolo = true\n\n[workspace]\nadditional_dir = ["{outside}"]\n\n'
        '[[permission.rules]]\ndecision = "allow"\npattern = "Bash"\n\n'
        '[[permission.rules]]\ndecision = "allow"\npattern = "Write"\n'
    )
    return {"ws": ws, "outside": outside, "marker": marker}


def task_text(paths: dict[str, Path], *, denied_actions: bool = True) -> str:
    ws, outside = paths["ws"], paths["outside"]
    actions = [
        {"read": str(ws / "notes.txt")},
        {"edit": str(ws / "notes.txt"), "old": "original", "new": "edited"},
        {"write": str(ws / "new.txt"), "content": "created\n"},
        {"run": ALLOWED},
    ]
    if denied_actions:
        actions[1:1] = [{"read": str(outside / "canary.txt")}]
        actions += [
            {"run": f"rm -rf {ws / 'canary.txt'}"},
            {"write": str(outside / "escape.txt"), "content": "escaped\n"},
            {"write": str(ws / "link" / "escape-link.txt"), "content": "escaped\n"},
        ]
    lines = [f"DO={json.dumps(action)}" for action in actions]
    return "Work in the workspace.\nMODE=workspace\nTOOLKIT=kimi\n" + "\n".join(lines) + "\n"


def run_level(run: dict, name: str, permissions: dict | None, *, denied_actions: bool = True) -> tuple:
    paths = layout(run, name)
    set_agent(run, paths["ws"], permissions)
    before = tree(paths["outside"])
    task = run["sender"].ok(
        "send_message", recipient="kimi", kind="task", text=task_text(paths, denied_actions=denied_actions)
    )["id"]
    return task, paths, before, wait_finished(run["db"], task, DEADLINE)


def tree(root: Path) -> dict[str, tuple]:
    return {p.relative_to(root).as_posix(): (p.read_bytes(), p.lstat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def requests_for(run: dict, message_id: int) -> list[dict]:
    marker = f"working on message {message_id}."
    return [body for body in run["model"].messages_requests() if marker in to_turn(body).prompt]


def offered(run: dict, message_id: int) -> set[str]:
    """The one tool set every model request of the attempt offered."""
    sets = {frozenset(offered_tools(body)) for body in requests_for(run, message_id)}
    assert len(sets) == 1, sets
    return set(next(iter(sets)))


def tool_results(run: dict, message_id: int) -> tuple[str, ...]:
    return to_turn(requests_for(run, message_id)[-1]).tool_results


def reply_text(run: dict, task: int) -> str:
    [reply] = run["sender"].ok("get_message", message_id=task)["reply_ids"]
    return run["sender"].ok("get_message", message_id=reply)["text"]


def assert_workspace(paths: dict[str, Path], *, edited: bool, created: bool, ran: bool) -> None:
    ws = paths["ws"]
    assert (ws / "notes.txt").read_text() == (EDITED if edited else ORIGINAL)
    assert (ws / "new.txt").exists() == created
    assert (ws / "ran-allowed.txt").exists() == ran
    assert (ws / "canary.txt").read_text() == "workspace canary\n"  # rm -rf is denied at every level
    assert not paths["marker"].exists()  # the planted MCP server never started


def assert_outside_unchanged(paths: dict[str, Path], before: dict) -> None:
    assert tree(paths["outside"]) == before  # no escape.txt, no escape-link.txt, canary as it was
    assert (paths["outside"] / "canary.txt").read_text() == "outside canary\n"


def assert_blocked(run: dict, task: int, done: dict, level: str, denied: str | None, first: str) -> None:
    """The evidence-based verdict: the worker said blocked (naming the first tool it lacked) and
    released the message; the ledger has the level and the tools Kimi itself refused."""
    assert (done["outcome"], done["error_kind"], done["exit_code"]) == ("blocked", None, 0), done
    assert (done["permission_level"], done["denied_tools"]) == (level, denied)
    assert reply_text(run, task).startswith(f"blocked: denied {first}: ")
    message = run["sender"].ok("get_message", message_id=task)
    assert message["claim_owner"] is None and message["acknowledged_at"] is None
    assert (message["dispatch"]["permission_level"], message["dispatch"]["denied_tools"]) == (level, denied)


def test_bridge_offers_read_and_the_bridge_tools_only_and_read_stays_unconfined(kimi_perm):
    task, paths, before, done = run_level(kimi_perm, "bridge", None)
    assert offered(kimi_perm, task) == {"Read", *BRIDGE}
    assert_workspace(paths, edited=False, created=False, ran=False)
    assert_outside_unchanged(paths, before)
    # Today's behaviour, kept: Read opens a file outside the workspace (the outside canary).
    assert any("outside canary" in result for result in tool_results(kimi_perm, task))
    # Edit, Write and Bash were never offered, so never called: Kimi refused nothing.
    assert_blocked(kimi_perm, task, done, "bridge", None, "Edit")


def test_read_adds_glob_and_grep_and_the_hook_confines_reads_to_the_workspace(kimi_perm):
    task, paths, before, done = run_level(kimi_perm, "read", {"level": "read"})
    assert offered(kimi_perm, task) == {"Read", "Glob", "Grep", *BRIDGE}
    assert_workspace(paths, edited=False, created=False, ran=False)
    assert_outside_unchanged(paths, before)
    results = tool_results(kimi_perm, task)
    assert any("1\toriginal line" in result for result in results)  # the workspace file was read
    assert not any("outside canary" in result for result in results)  # the outside one was not
    assert_blocked(kimi_perm, task, done, "read", "Read", "Edit")


def test_edit_writes_inside_the_workspace_only_even_through_a_symlink_or_planted_settings(kimi_perm):
    task, paths, before, done = run_level(kimi_perm, "edit", {"level": "edit"})
    assert offered(kimi_perm, task) == {*LEVEL_TOOLS["edit"], *BRIDGE}
    assert_workspace(paths, edited=True, created=True, ran=False)
    # Neither the direct write outside nor the one through ws/link (a symlink to outside) nor
    # the planted .kimi-code/local.toml (additional_dir = outside, allow rules) got out.
    assert_outside_unchanged(paths, before)
    assert_blocked(kimi_perm, task, done, "edit", "Read,Write", "Bash")


def test_shell_runs_only_allowed_commands(kimi_perm):
    task, paths, before, done = run_level(kimi_perm, "shell", SHELL_PROFILE)
    assert offered(kimi_perm, task) == {*LEVEL_TOOLS["shell"], *BRIDGE}
    assert_workspace(paths, edited=True, created=True, ran=True)  # touch ran; rm -rf did not
    assert_outside_unchanged(paths, before)
    assert_blocked(kimi_perm, task, done, "shell", "Bash,Read,Write", "Read")


def test_shell_with_only_allowed_actions_succeeds_with_no_denials(kimi_perm):
    task, paths, before, done = run_level(kimi_perm, "shell-ok", SHELL_PROFILE, denied_actions=False)
    assert (done["outcome"], done["error_kind"], done["exit_code"]) == ("succeeded", None, 0), done
    assert (done["permission_level"], done["denied_tools"]) == ("shell", None)
    assert reply_text(kimi_perm, task).startswith("done: ")
    assert_workspace(paths, edited=True, created=True, ran=True)
    assert_outside_unchanged(paths, before)


def test_project_is_refused_with_exit_78_before_kimi_starts(kimi_perm):
    task, paths, before, done = run_level(kimi_perm, "project", {"level": "project"})
    assert (done["outcome"], done["error_kind"], done["exit_code"]) == ("failed", "permissions_unenforceable", 78)
    assert done["permission_level"] == "project"
    assert requests_for(kimi_perm, task) == []  # Kimi never ran
    log = (kimi_perm["runtime"] / "attempts" / str(task) / "worker.log").read_text()
    assert log.count("\n") == 1 and "level project cannot be enforced by Kimi Code 2.1.0" in log, log
    assert_workspace(paths, edited=False, created=False, ran=False)
    assert_outside_unchanged(paths, before)
    last = wait_until(
        lambda: (s := status(kimi_perm["env"], "kimi")["last"]) and s["message_id"] == task and s,
        DEADLINE,
        what="listener status to show the refused attempt",
    )
    assert (last["error_kind"], last["permission_level"]) == ("permissions_unenforceable", "project")
    assert attempt(kimi_perm["db"], task)["denied_tools"] is None
    shutil.rmtree(paths["ws"])  # nothing in it was touched; keep the tmp tree small


@pytest.mark.parametrize("level", ["edit", "shell"])
def test_the_git_directory_is_read_only_and_git_runs_nothing_planted(kimi_perm, level):
    """Kimi has no OS sandbox: its hook refuses every write into .git (config, hooks, info, a
    nested repository), and the allowed `git status` runs with the bridge's git configuration,
    so the fsmonitor, hooks and pager planted in .git/config do not run."""
    paths = layout(kimi_perm, f"git-{level}")
    repo = plant_repo(paths["ws"])
    set_agent(kimi_perm, paths["ws"], SHELL_PROFILE if level == "shell" else {"level": level})
    text = git_task_text("kimi", paths["ws"])
    task = kimi_perm["sender"].ok("send_message", recipient="kimi", kind="task", text=text)["id"]
    done = wait_finished(kimi_perm["db"], task, DEADLINE)
    assert (done["outcome"], done["permission_level"], done["denied_tools"]) == ("blocked", level, "Write"), done
    assert_walls_held(repo, tool_results(kimi_perm, task), git_ran=level == "shell")
