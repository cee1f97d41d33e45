"""A CLI the user declares in config.json (``agents.<id>.cli``, issue 32 item 4): its launch plan
from the declaration (pure, one row per way of passing the prompt and per level), the
declaration's validation, and a small script CLI declared this way that a real listener
dispatches a task to, answering through the bridge server its MCP config template names."""

import json
import os
import sys
from pathlib import Path

import pytest
from dispatch_harness import SCRIPT_CLI, post_task, start_listener, status, stop_listener, wait_finished, wait_until

from dispatcher.clis.declared import plan
from dispatcher.clis.launch import Attempt, File, Unenforceable
from dispatcher.core.config import ConfigError, DeclaredCli, load_config
from dispatcher.core.permissions import BRIDGE_ONLY, PermissionProfile

ROOT = Path(__file__).resolve().parents[2]
SERVER = {"command": "/py", "args": ["/p/server.py"], "env": {"AGENT_ID": "mine", "AGENT_BRIDGE_ROLE": "worker"}}
TEMPLATE = {"servers": {"bridge": "{bridge_server}"}, "note": "for {agent}"}


def attempt(tmp_path: Path, level: str = "bridge") -> Attempt:
    profile = BRIDGE_ONLY if level == "bridge" else PermissionProfile.from_json({"level": level})
    return Attempt(
        env={"AGENT_ID": "mine", "AGENT_BRIDGE_MESSAGE_ID": "7"},
        attempt_dir=tmp_path / "a",
        request_file=tmp_path / "request",
        workspace=tmp_path / "ws",
        cwd=tmp_path / "ws",
        profile=profile,
        server=SERVER,
        binary="/bin/mycli",
    )


@pytest.mark.parametrize(
    ("declared", "argv", "stdin"),
    [
        ({"argv": ["mycli", "run", "--id", "{message_id}"]}, ("/bin/mycli", "run", "--id", "7"), True),
        (
            {"argv": ["mycli", "--task-file={request_file}"], "prompt": "file"},
            ("/bin/mycli", "--task-file={request}"),
            False,
        ),
    ],
)
def test_the_prompt_reaches_the_cli_on_stdin_or_as_its_file(tmp_path, declared, argv, stdin):
    run = plan(DeclaredCli.model_validate(declared), attempt(tmp_path))
    assert run.argv == tuple(word.replace("{request}", str(tmp_path / "request")) for word in argv)
    assert run.stdin == ((tmp_path / "request") if stdin else None)
    assert run.steps == () and run.env == {} and run.stdout is None  # its output goes to worker.log


def test_the_mcp_config_is_written_from_the_template_with_the_bridge_server(tmp_path):
    spec = DeclaredCli.model_validate(
        {"argv": ["mycli", "--mcp", "{mcp_config}"], "mcp_config": {"file": "mine-mcp.json", "template": TEMPLATE}}
    )
    run = plan(spec, attempt(tmp_path))
    path = tmp_path / "a" / "mine-mcp.json"
    assert run.argv == ("/bin/mycli", "--mcp", str(path))
    [step] = run.steps
    assert isinstance(step, File) and step.path == path
    assert json.loads(step.text) == {"servers": {"bridge": SERVER}, "note": "for mine"}


@pytest.mark.parametrize(
    ("declared", "level", "refused"),
    [
        ({}, "bridge", False),
        ({}, "read", True),
        ({"max_level": "edit", "sandbox": "its own bwrap"}, "edit", False),
        ({"max_level": "edit", "sandbox": "its own bwrap"}, "project", True),
    ],
)
def test_a_level_above_the_declared_one_is_refused(tmp_path, declared, level, refused):
    spec = DeclaredCli.model_validate({"argv": ["mycli"], **declared})
    if refused:
        with pytest.raises(Unenforceable, match=f"level {level} is above"):
            plan(spec, attempt(tmp_path, level))
    else:
        assert plan(spec, attempt(tmp_path, level)).argv == ("/bin/mycli",)


@pytest.mark.parametrize(
    ("declared", "said"),
    [
        ({"argv": ["mycli"], "max_level": "edit"}, "needs sandbox"),
        ({"argv": ["mycli"], "prompt": "file"}, "needs {request_file}"),
        ({"argv": ["mycli"], "mcp_config": {"file": "m.json", "template": {}}}, "needs {mcp_config}"),
        ({"argv": ["mycli", "{mcp_config}"], "mcp_config": {"file": "../m.json", "template": {}}}, "file"),
        ({"argv": []}, "argv"),
    ],
)
def test_a_declaration_that_cannot_work_is_refused_by_the_config(tmp_path, declared, said):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"agents": {"mine": {"cli": declared}}}))
    with pytest.raises(ConfigError, match=r"agents\.mine\.cli") as raised:
        load_config(path)
    assert said in str(raised.value)


@pytest.mark.parametrize("mode", ["stdin", "file"])
def test_a_declared_script_cli_is_dispatched_a_task_and_answers_through_the_bridge(env, db_path, tmp_path, mode):
    """Run by the generic launcher (no ``launcher``: file mode) or, as an older config names it,
    by launchers/declared_headless.sh (stdin mode)."""
    script = tmp_path / f"mycli-{mode}"
    script.write_text(SCRIPT_CLI.format(python=sys.executable))
    script.chmod(0o700)
    argv = [str(script), mode, "{mcp_config}", *(["{request_file}"] if mode == "file" else [])]
    declared = {"argv": argv, "prompt": mode, "mcp_config": {"file": "mycli-mcp.json", "template": TEMPLATE}}
    config = Path(env["AGENT_BRIDGE_CONFIG"])
    agents = {
        "claude": {
            "auto": True,
            "cli": declared,
            **({"launcher": "launchers/declared_headless.sh"} if mode == "stdin" else {}),
        },
        "kimi": {"cli": "kimi"},
    }
    config.write_text(json.dumps({"agents": agents}))
    os.chmod(config, 0o600)
    listener = start_listener(env)
    try:
        wait_until(lambda: status(env)["stage"] == "idle", what="listener idle")
        task = post_task(db_path, f"say hello ({mode})")
        done = wait_finished(db_path, task)
        assert (done["outcome"], done["error_kind"], done["exit_code"]) == ("succeeded", None, 0)
    finally:
        stop_listener(listener)
