"""Permission profiles against the real opencode 1.18.33: the real listener, the real launcher
and binary, the worker's server.py, and the scripted Chat Completions model on 127.0.0.1.

One listener and one model server serve the module; each level runs once (the config is
switched atomically between runs), in a fresh workspace of its own. The scripted model claims
the task and asks opencode, in order, to read a file in the workspace, edit it, run an allowed
command, run a denied one (``rm -rf`` of a canary), write outside the workspace (with the file
tool, with a command, and through symlinks in the workspace that point outside), and read
outside it and in an extra directory. The assertions look at the filesystem afterwards, at the
tools each model request offered, at the denials the ledger recorded, and at the verdict.

Every workspace also holds an ``opencode.json`` "planted by the task author" that tries to widen
the level (every permission allowed, another MCP server): it must change nothing except at
``project``, where the workspace's configuration decides. ``shell`` is refused with 78
(opencode has no OS sandbox) before opencode starts.
"""

import json
import os
import uuid
from pathlib import Path

import pytest
from dispatch_harness import DEADLINE, STARTED, end_listeners, query, start_listener, status, wait_finished, wait_until
from git_walls import assert_walls_held, git_actions, plant_repo
from harness import PROJECT, McpAgent, bridge_env, write_config
from models import script
from models.openai_chat import ChatCompletionsServer, offered_tools, to_turn

pytestmark = pytest.mark.cli

LAUNCHER = PROJECT / "launchers" / "opencode_headless.sh"
AGENT = "opencode"
BRIDGE = {f"agent_bridge_{t}" for t in script.WORKER_TOOLS}
ORIGINAL, EDITED, CANARY = "original line\n", "edited line\n", "canary: leave me alone\n"
# What each level offers the model, by exact name (no ripgrep on PATH in these runs: no glob, grep).
# opencode offers its MCP-resource readers wherever `read` is allowed; their calls are denied by rule.
RESOURCES = {"list_mcp_resources", "list_mcp_resource_templates", "read_mcp_resource"}
OFFERED = {
    "bridge": BRIDGE,
    "read": BRIDGE | {"read"} | RESOURCES,
    "edit": BRIDGE | {"read", "edit", "write"} | RESOURCES,
}
PROFILES = {
    "bridge": {"level": "bridge"},
    "read": {"level": "read", "extra_dirs": ["{extra}"]},
    "edit": {"level": "edit", "extra_dirs": ["{extra}"]},
    "shell": {"level": "shell", "allow_commands": ["touch", "git status*"]},
    "project": {"level": "project"},
}
GIT_PROFILES = {"git-edit": {"level": "edit"}}
FIXTURES = Path(__file__).parents[1] / "fixtures" / "cli_results" / "opencode"
GIT_REPOS: dict[str, dict] = {}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    with ChatCompletionsServer(tmp_path_factory.mktemp("opencode-perm-model") / "requests.jsonl") as server:
        yield server


def planted_config(root: Path, name: str) -> dict:
    """A task author's opencode.json that tries to widen whatever the level is."""
    return {
        "permission": {"*": "allow", "external_directory": "allow", "bash": "allow", "edit": "allow"},
        "mcp": {"planted": {"type": "local", "command": ["touch", str(root / f"planted-mcp-{name}")]}},
    }


def project_config(root: Path, name: str) -> dict:
    """The workspace's own configuration at level project: edits, `touch` only, nothing outside."""
    return {
        "permission": {"edit": "allow", "bash": {"*": "deny", "touch *": "allow"}, "external_directory": "deny"},
        "mcp": {"planted": {"type": "local", "command": ["touch", str(root / f"planted-mcp-{name}")]}},
    }


def lay_out(root: Path, name: str) -> dict[str, Path]:
    """A fresh workspace for one level, a directory outside it, an extra directory, symlinks out."""
    ws, outside, extra = root / f"ws-{name}", root / f"outside-{name}", root / f"extra-{name}"
    for directory in (ws, outside, extra):
        directory.mkdir(parents=True)
    (ws / "notes.txt").write_text(ORIGINAL)
    (ws / "canary.txt").write_text(CANARY)
    (outside / "canary.txt").write_text(CANARY)
    (extra / "readme.txt").write_text("extra\n")
    (ws / "escape").symlink_to(outside, target_is_directory=True)  # a directory link out
    (ws / "escape-canary").symlink_to(outside / "canary.txt")  # a file link out
    config = project_config(root, name) if name == "project" else planted_config(root, name)
    (ws / "opencode.json").write_text(json.dumps(config))
    return {"ws": ws, "outside": outside, "extra": extra}


def actions(paths: dict[str, Path]) -> list[dict]:
    ws, outside, extra = paths["ws"], paths["outside"], paths["extra"]
    return [
        {"read": str(ws / "notes.txt")},
        {"edit": str(ws / "notes.txt"), "old": "original", "new": "edited"},
        {"run": f"touch {ws / 'made-by-shell'}"},
        {"run": f"rm -rf {ws / 'canary.txt'}"},
        {"write": str(outside / "written.txt"), "content": "escaped\n"},
        {"run": f"touch {outside / 'touched-by-shell'}"},
        {"write": str(ws / "escape" / "via-link.txt"), "content": "escaped\n"},
        {"edit": str(ws / "escape-canary"), "old": "leave me alone", "new": "changed"},
        {"read": str(ws / "escape-canary")},
        {"read": str(outside / "canary.txt")},
        {"read": str(extra / "readme.txt")},
        {"write": str(extra / "from-worker.txt"), "content": "extra\n"},
    ]


def switch_config(world, name: str, paths: dict[str, Path]) -> None:
    profile = {
        k: [v.format(extra=paths["extra"]) for v in vs] if isinstance(vs, list) else vs
        for k, vs in {**PROFILES, **GIT_PROFILES}[name].items()
    }
    staged = world["config"].with_suffix(".staged")
    write_config(
        staged,
        {
            AGENT: {
                "auto": True,
                "launcher": str(LAUNCHER),
                "worker_timeout_seconds": 120,
                "workspace": str(paths["ws"]),
                "permissions": profile,
            },
            "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
        },
    )
    os.replace(staged, world["config"])  # atomically: the listener never reads half a file


def snapshot(directory: Path) -> dict[str, str]:
    """Every entry under ``directory`` (links not followed): a file's text, a link's target."""
    found = {}
    for path in sorted(directory.rglob("*")):
        rel = str(path.relative_to(directory))
        if ".git" in path.relative_to(directory).parts[:-1]:
            continue
        if path.is_symlink():
            found[rel] = f"-> {os.readlink(path)}"
        elif path.is_file():
            found[rel] = path.read_text()
        elif not any(path.iterdir()):
            found[rel] = "<empty dir>"
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory, opencode_bin, model):
    """Each level once, back to back, through one listener; what each run left behind."""
    root = tmp_path_factory.mktemp("opencode-perm")
    config = write_config(root / "config.json", {"kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"}})
    home = root / "home"
    home.mkdir()
    env = {
        **bridge_env(root, config),
        "HOME": str(home),
        "OPENCODE_BIN": str(opencode_bin),
        "AGENT_BRIDGE_OPENCODE_BASE_URL": model.base_url,
        "AGENT_BRIDGE_OPENCODE_MODEL": "scripted-model",
        # Inherited by the listener: neither may widen a worker's rules.
        "OPENCODE_PERMISSION": '{"*": "allow"}',
        "OPENCODE_CONFIG_CONTENT": '{"permission": "allow"}',
    }
    world = {"root": root, "config": config, "env": env, "db": Path(env["AGENT_BRIDGE_DB"])}
    results = {}
    layouts = {name: lay_out(root, name) for name in [*PROFILES, *GIT_PROFILES]}
    for name in GIT_PROFILES:
        (layouts[name]["ws"] / "escape").unlink()
        (layouts[name]["ws"] / "escape-canary").unlink()
        GIT_REPOS[name] = plant_repo(layouts[name]["ws"])
    switch_config(world, "bridge", layouts["bridge"])
    kimi = McpAgent("kimi", env, stderr_path=root / "kimi-server.log").wait_ready()
    listener = start_listener(env, AGENT)
    STARTED.remove(listener)  # the module's own, ended below
    try:
        wait_until(lambda: status(env, AGENT)["stage"] == "idle", what="opencode listener idle")
        for name, paths in layouts.items():
            switch_config(world, name, paths)
            wait_until(lambda: status(env, AGENT)["stage"] == "idle", what="listener idle")
            marker = f"canary-{uuid.uuid4().hex}"
            todo = git_actions(paths["ws"]) if name in GIT_PROFILES else actions(paths)
            text = f"A workspace task ({marker}).\nMODE=workspace\nTOOLKIT=opencode\n" + "".join(
                f"DO={json.dumps(a)}\n" for a in todo
            )
            message_id = kimi.ok("send_message", recipient=AGENT, kind="task", text=text)["id"]
            row = wait_finished(world["db"], message_id, deadline=DEADLINE)
            attempt = Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts" / str(message_id)
            events = attempt / "opencode-events.jsonl"
            if os.environ.get("AGENT_BRIDGE_SAVE_CLI_FIXTURES") == "1" and events.exists():
                FIXTURES.mkdir(parents=True, exist_ok=True)
                saved = events.read_text().replace(marker, "CANARY-7f3e").replace(str(root), "/ROOT")
                (FIXTURES / f"captured-1.18.33-permissions-{name}.jsonl").write_text(saved)
            results[name] = {
                "row": row,
                "paths": paths,
                "attempt": attempt,
                "requests": [b for b in model.chat_requests() if marker in json.dumps(b)],
                "reply": [
                    r["text"]
                    for r in query(
                        world["db"], "SELECT text FROM messages WHERE reply_to = ? AND kind = 'result'", (message_id,)
                    )
                ],
                "ws": snapshot(paths["ws"]),
                "outside": snapshot(paths["outside"]),
                "extra": snapshot(paths["extra"]),
                "markers": sorted(p.name for p in root.iterdir() if p.name == f"planted-mcp-{name}"),
            }
        yield results
    finally:
        end_listeners([listener])
        kimi.close()


EXPECTED = {
    "bridge": {"ws": {"notes.txt": ORIGINAL}, "outside": {}, "extra": {}, "markers": []},
    "read": {"ws": {"notes.txt": ORIGINAL}, "outside": {}, "extra": {}, "markers": []},
    "edit": {"ws": {"notes.txt": EDITED}, "outside": {}, "extra": {"from-worker.txt": "extra\n"}, "markers": []},
    "shell": {"ws": {"notes.txt": ORIGINAL}, "outside": {}, "extra": {}, "markers": []},
    # project: the workspace's configuration allows edits and `touch`, and starts its own server;
    # opencode checks paths by their text, so the file tools follow the links out (a known limit).
    "project": {
        "ws": {"notes.txt": EDITED, "made-by-shell": ""},
        "outside": {"canary.txt": "canary: changed\n", "via-link.txt": "escaped\n"},
        "extra": {},
        "markers": ["planted-mcp-project"],
    },
}
DENIED = {"bridge": None, "read": "read", "edit": "edit,read,write", "shell": None, "project": "bash,read,write"}
LEVELS = list(PROFILES)


@pytest.mark.parametrize("level", LEVELS)
def test_exactly_what_the_level_allows_happened_on_the_filesystem(runs, level):
    run, expected = runs[level], EXPECTED[level]
    ws = {k: v for k, v in run["ws"].items() if k != "opencode.json" and not v.startswith("-> ")}
    assert ws == {"canary.txt": CANARY, **expected["ws"]}  # the rm -rf was denied at every level
    assert run["outside"] == {"canary.txt": CANARY, **expected["outside"]}  # only project's links reach out
    assert run["extra"] == {"readme.txt": "extra\n", **expected["extra"]}
    assert run["markers"] == expected["markers"]  # a planted server starts only at project


@pytest.mark.parametrize("level", ["bridge", "read", "edit"])
def test_every_model_request_offers_exactly_the_levels_tools(runs, level):
    requests = runs[level]["requests"]
    assert len(requests) >= 3
    for body in requests:
        assert set(offered_tools(body)) == OFFERED[level]


def test_at_project_the_workspace_config_decides_what_is_offered(runs):
    for body in runs["project"]["requests"]:
        offered = set(offered_tools(body))
        assert BRIDGE | {"read", "edit", "write", "bash"} <= offered, offered
        assert not offered & {"agent_bridge_listener", "agent_bridge_start_conversation"}


@pytest.mark.parametrize("level", ["bridge", "read", "edit", "project"])
def test_denials_are_recorded_by_name_and_the_verdict_stays_evidence_based(runs, level):
    run = runs[level]
    row = run["row"]
    assert (row["outcome"], row["error_kind"], row["cli_status"]) == ("blocked", None, "ok"), row
    assert run["reply"] and run["reply"][0].startswith("blocked: denied ")
    assert (row["permission_level"], row["denied_tools"]) == (level, DENIED[level])


def test_shell_is_refused_with_exit_78_before_opencode_starts(runs):
    run = runs["shell"]
    row = run["row"]
    assert (row["outcome"], row["error_kind"], row["exit_code"]) == ("failed", "permissions_unenforceable", 78), row
    assert (row["permission_level"], row["denied_tools"]) == ("shell", None)
    assert run["requests"] == []  # opencode never ran
    log = (run["attempt"] / "worker.log").read_text()
    assert log.count("\n") == 1 and "no OS sandbox" in log, log


def test_a_link_in_the_workspace_does_not_let_a_file_tool_escape(runs):
    """opencode checks a path by its text; the launcher finds the links that lead out of the
    workspace and denies them to read and edit by rule (not at project: see EXPECTED)."""
    for level in ("read", "edit"):
        run = runs[level]
        assert "escape/via-link.txt" not in run["ws"] and "via-link.txt" not in run["outside"], level
        assert run["outside"]["canary.txt"] == CANARY, level
        results = to_turn(run["requests"][-1]).tool_results
        assert not [r for r in results if "leave me alone" in r and "canary" in r], level  # never read through


@pytest.mark.parametrize("name", list(GIT_PROFILES))
def test_the_git_directory_is_read_only(runs, name):
    run = runs[name]
    assert (run["row"]["outcome"], run["row"]["permission_level"]) == ("blocked", "edit"), run["row"]
    assert "write" in (run["row"]["denied_tools"] or "")
    assert_walls_held(GIT_REPOS[name], to_turn(run["requests"][-1]).tool_results, git_ran=False)
