"""Issue 32's "Done when": adding a CLI is its package and nothing else. A toy CLI package, written
outside the checkout and put on ``dispatcher.clis``'s path (a ``sitecustomize`` on PYTHONPATH does
what its directory under dispatcher/clis/ would), is found by the registry; config.json names it
(``"cli": "toy"``, no launcher); the listener accepts the file, the supervisor runs its launch
plan through launchers/agent_headless.sh and the toy answers the task through the bridge; doctor
reads from the config that the agent runs it, finds its binary and its version. No file of the
checkout names it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dispatch_harness import SCRIPT_CLI, post_task, start_listener, status_cli, stop_listener, wait_finished, wait_until
from harness import PROJECT

TOY = '''"""A toy agent CLI: everything the bridge knows about it."""

from pathlib import Path

from dispatcher.clis.base import SILENT, Discovery, Login, Packaged


class Toy(Packaged):
    name = "toy"
    discovery = Discovery("toy", "TOY_BIN", "toy", "1.2.3", True, "bridge", r"toy (\\d+\\.\\d+\\.\\d+)")
    login = Login(("TOY_KEY",), (), "set TOY_KEY", "", ".toy", "credentials")
    output_file = "toy-out.txt"
    statusline = False
    hook_events = ()
    wait_events = ()
    launch_variables = ("TOY_BIN",)
    reports_cost = False

    def hook_answer(self, event, line, block):
        return SILENT

    def diagnostics(self, attempt_dir: Path, exit_code):
        return {"cli": "toy", "cli_status": "success" if exit_code == 0 else "error"}


CLI = Toy()
'''
LAUNCH = '''"""The toy's run: the task on stdin, the bridge in an MCP config file of the attempt."""

import json

from dispatcher.clis.launch import File, LaunchPlan


def plan(attempt):
    config = attempt.attempt_dir / "toy-mcp.json"
    return LaunchPlan(
        argv=(attempt.binary, "stdin", str(config)),
        steps=(File(config, json.dumps({"servers": {"bridge": dict(attempt.server)}})),),
        stdin=attempt.request_file,
        stdout=attempt.attempt_dir / "toy-out.txt",
    )


def check(attempt, plan):
    return None
'''
SITE = """import os

if os.environ.get("TOY_CLIS"):  # (not every process of the test's tree is told)
    import dispatcher.clis

    dispatcher.clis.__path__.append(os.environ["TOY_CLIS"])
"""
# The toy binary: the script CLI, and its own --version line.
VERSION = "import sys\nif sys.argv[1:] == ['--version']:\n    print('toy 1.2.3')\n    sys.exit(0)\n"


@pytest.fixture
def toy_env(env, tmp_path) -> dict[str, str]:
    clis, site = tmp_path / "clis", tmp_path / "site"
    (clis / "toy").mkdir(parents=True)
    (clis / "toy" / "__init__.py").write_text(TOY)
    (clis / "toy" / "launch.py").write_text(LAUNCH)
    (clis / "toy" / "profile.py").write_text("def enforcement(profile, which):\n    return None\n")
    (clis / "toy" / "registration.py").write_text("def files():\n    return []\n")
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE)
    binary = tmp_path / "toy"
    binary.write_text(SCRIPT_CLI.format(python=sys.executable).replace("import json", VERSION + "import json", 1))
    binary.chmod(0o700)
    config = Path(env["AGENT_BRIDGE_CONFIG"])
    config.write_text(json.dumps({"agents": {"claude": {"cli": "toy", "auto": True}, "kimi": {"cli": "kimi"}}}))
    config.chmod(0o600)
    return {**env, "PYTHONPATH": str(site), "TOY_CLIS": str(clis), "TOY_BIN": str(binary), "TOY_KEY": "k"}


def _python(env: dict[str, str], code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_sixth_cli_is_its_package_alone(toy_env, db_path):
    # The registry finds it (and only where its package is on the path: not in this process).
    from dispatcher.clis import registry

    assert "toy" not in registry.NAMES
    names = _python(toy_env, "from dispatcher.clis import registry; print(','.join(registry.NAMES))")
    assert names.split(",") == sorted([*registry.NAMES, "toy"])
    # config.json names it; the listener's check accepts it (a name no package has is refused).
    view = _python(
        toy_env,
        "import os; from pathlib import Path; from dispatcher.dispatch.checked import checked_config; "
        "c = checked_config(Path(os.environ['AGENT_BRIDGE_CONFIG'])); "
        "print(c.agents['claude'].cli, c.launcher_path('claude', Path('/p')))",
    )
    assert view == "toy /p/launchers/agent_headless.sh"
    # The listener dispatches a task to it: the generic launcher runs its launch plan.
    listener = start_listener(toy_env)
    try:
        wait_until(lambda: status_cli(toy_env)["stage"] == "idle", what="listener idle")
        task = post_task(db_path, "say hello to the toy")
        done = wait_finished(db_path, task)
        assert (done["outcome"], done["error_kind"], done["exit_code"]) == ("succeeded", None, 0)
    finally:
        stop_listener(listener)
    attempt = Path(toy_env["AGENT_BRIDGE_RUNTIME_DIR"]) / "attempts" / str(task)
    assert (attempt / "toy-mcp.json").is_file() and (attempt / "toy-out.txt").is_file()  # its plan's files
    # doctor reads the CLI from the config, finds the toy's binary and says its version.
    doctor = subprocess.run(
        [sys.executable, "-m", "dispatcher", "doctor", "--json"],
        cwd=PROJECT,
        env={**os.environ, **toy_env},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    findings = [f for f in json.loads(doctor.stdout)["findings"] if f.get("agent") == "claude"]
    said = {f["code"]: f["message"] for f in findings}
    assert said["cli_ok"].startswith(f"toy 1.2.3 ({toy_env['TOY_BIN']})"), findings
    assert "cli_auth_ok" in said, findings


def test_no_file_of_the_checkout_names_the_toy():
    """What the test above ran came from its package alone: no code, launcher or config names it."""
    tracked = subprocess.run(
        ["git", "grep", "-l", "-w", "-i", "toy", "--", "dispatcher", "launchers", "server.py", "*.json", "*.toml"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert tracked.stdout == ""
