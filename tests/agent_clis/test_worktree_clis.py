"""A git worktree per attempt with the real CLIs (docs/worktrees.md): the pinned Claude Code and
Codex, through the real listener and launchers at level ``edit``, against the scripted models on
127.0.0.1 (``MODE=workspace``). Each worker edits a file of its worktree. Afterwards the user's
checkout (a path with a space, with an uncommitted change of the user's) is byte-identical, tree
and index; the branch has exactly one commit, by the supervisor; ``show`` prints its diffstat; the
worktree is gone."""

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_harness import claude_worker_env, require_cli, without_cli_settings
from dispatch_harness import attempt, cli, end_listeners, start_listener, status, wait_finished, wait_until
from harness import PROJECT, McpAgent, bridge_env

pytestmark = pytest.mark.cli

DEADLINE = 180.0
NOTES = "first line\n"


def git(repo: Path, *args: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    ident = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "U", "GIT_AUTHOR_EMAIL": "u@x",
             "GIT_COMMITTER_NAME": "U", "GIT_COMMITTER_EMAIL": "u@x"}  # fmt: skip
    done = subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env={**clean, **ident}
    )
    return done.stdout.strip()


def user_checkout(root: Path) -> Path:
    repo = root / "user checkout"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "notes.txt").write_text(NOTES)
    (repo / "other.txt").write_text("committed\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "start")
    (repo / "other.txt").write_text("the user's own uncommitted edit\n")
    return repo


def fingerprint(repo: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in repo.rglob("*") if ".git" not in p.relative_to(repo).parts):
        digest.update(str(path.relative_to(repo)).encode() + (path.read_bytes() if path.is_file() else b"/"))
    digest.update((repo / ".git" / "index").read_bytes() + (repo / ".git" / "HEAD").read_bytes())
    digest.update(git(repo, "for-each-ref", "refs/heads/main").encode())
    return digest.hexdigest()


def config(agent: str, launcher: str, repo: Path) -> dict:
    entry = {
        "auto": True,
        "launcher": str(PROJECT / "launchers" / launcher),
        "worker_timeout_seconds": 150,
        "workspace": str(repo),
        "permissions": {"level": "edit"},
    }
    other = "kimi" if agent != "kimi" else "claude"
    return {"agents": {agent: entry, other: {"auto": False, "launcher": "launchers/kimi_headless.sh"}}}


def run_edit_task(env: dict, agent: str, toolkit: str, repo: Path, inherited: dict | None = None) -> tuple[int, dict]:
    """One task whose worker edits notes.txt in its worktree. The worktree's path is known before the
    task is sent: ``<runtime>/worktrees/<agent>/<message id>``, and a fresh store's first id is 1."""
    worktree = Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "worktrees" / agent / "1"
    actions = [
        {"read": str(worktree / "notes.txt")},
        {"edit": str(worktree / "notes.txt"), "old": "first line", "new": "first line\nadded line"},
    ]
    text = "\n".join(["Work in the workspace.", "MODE=workspace", f"TOOLKIT={toolkit}",
                      *(f"DO={json.dumps(a)}" for a in actions)])  # fmt: skip
    listener = start_listener(env, agent=agent, inherited=inherited)
    sender = McpAgent("kimi", env)
    try:
        wait_until(lambda: status(env, agent)["stage"] == "idle", DEADLINE, what="listener idle")
        task = sender.wait_ready().ok("send_message", recipient=agent, kind="task", text=text)["id"]
        assert task == 1, "the worktree path in the task assumed message id 1"
        wait_finished(Path(env["AGENT_BRIDGE_DB"]), task, deadline=DEADLINE)
        # The worktree goes right after the verdict, by the same supervisor.
        row = wait_until(
            lambda: (a := attempt(env["AGENT_BRIDGE_DB"], task))["worktree_state"] == "removed" and a,
            DEADLINE,
            what="the worktree removed",
        )
        dispatch = sender.ok("get_message", message_id=task)["dispatch"]
    finally:
        sender.close()
        end_listeners([listener])
    return task, {**row, "dispatch": dispatch}


def check_result(env: dict, agent: str, repo: Path, before: str, task: int, row: dict) -> None:
    assert row["outcome"] == "succeeded", row
    assert fingerprint(repo) == before, "the user's checkout changed"
    branch = f"agent-bridge/{agent}/{task}"
    assert row["worktree_branch"] == branch and row["worktree_state"] == "removed"
    log = git(repo, "log", "--format=%an|%s", f"{row['worktree_base']}..{branch}").splitlines()
    assert log == [f"Agent Bridge|agent-bridge: {agent} task #{task}"]
    assert git(repo, "show", f"{branch}:notes.txt") == "first line\nadded line"
    # The worker started from what the user saw: their uncommitted edit is in the snapshot it got.
    assert git(repo, "show", f"{row['worktree_base']}:other.txt") == "the user's own uncommitted edit"
    assert (row["worktree_files"], row["worktree_insertions"], row["worktree_deletions"]) == (1, 1, 0)
    assert row["dispatch"]["worktree"]["diffstat"] == "1 file changed, 1 insertion(+), 0 deletions(-)"
    shown = cli(env, "show", str(task))
    assert "1 file changed, 1 insertion(+), 0 deletions(-)" in shown.stdout and branch in shown.stdout
    listed = status(env, agent)["worktrees"]
    assert [(w["message_id"], w["branch"], w["diffstat"]) for w in listed] == [
        (task, branch, row["dispatch"]["worktree"]["diffstat"])
    ]
    assert not Path(row["worktree_path"]).exists()
    listed = git(repo, "worktree", "list", "--porcelain").splitlines()
    left = [line for line in listed[1:] if line.startswith("worktree ") and "/worktree-pool/" not in line]
    assert left == []  # (the pool's ready worktree stays, by design: docs/worktrees.md)


def test_a_real_claude_worker_edits_its_worktree_and_the_checkout_stays_as_it_was(tmp_path):
    from models.anthropic import AnthropicModel

    claude_bin = require_cli("claude")
    repo = user_checkout(tmp_path)
    before = fingerprint(repo)
    with AnthropicModel(tmp_path / "requests.jsonl") as model:
        env = claude_worker_env(bridge_env(tmp_path, tmp_path / "config.json"), tmp_path, model.base_url, claude_bin)
        Path(env["AGENT_BRIDGE_CONFIG"]).write_text(json.dumps(config("claude", "claude_headless.sh", repo)))
        task, row = run_edit_task(env, "claude", "claude", repo, inherited=without_cli_settings(dict(os.environ)))
    check_result(env, "claude", repo, before, task, row)


def test_a_real_codex_worker_edits_its_worktree_and_the_checkout_stays_as_it_was(tmp_path):
    from models.openai_responses import ResponsesServer

    codex = require_cli("codex")
    repo = user_checkout(tmp_path)
    before = fingerprint(repo)
    home = tmp_path / "home" / ".codex"
    home.mkdir(parents=True)
    (home / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-not-a-real-key"}))
    with ResponsesServer(tmp_path / "model" / "requests.jsonl") as model:
        env = {
            **bridge_env(tmp_path, tmp_path / "config.json"),
            "HOME": str(tmp_path / "home"),
            "CODEX_HOME": str(home),
            "CODEX_BIN": str(codex),
            "AGENT_BRIDGE_CODEX_BASE_URL": model.base_url,
            "AGENT_BRIDGE_CODEX_MODEL": "gpt-5.5",
            "AGENT_BRIDGE_CODEX_MAX_RETRIES": "0",
        }
        Path(env["AGENT_BRIDGE_CONFIG"]).write_text(json.dumps(config("codex", "codex_headless.sh", repo)))
        task, row = run_edit_task(env, "codex", "codex", repo)
    check_result(env, "codex", repo, before, task, row)
