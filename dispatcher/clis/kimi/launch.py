"""Kimi Code's launch plan (2.1.0): ``kimi --agent-file FILE --output-format stream-json -p
INSTRUCTION`` with a private KIMI_CODE_HOME in the attempt directory.

The task never goes in argv: the fixed instruction tells the model to Read the request file.
The private home holds the bridge as the only MCP server (mcp.json), links to the user's
credentials, device id, region and config.toml (never copies), and above ``bridge`` a
config.toml of its own: the user's settings with the permission hook appended (profile.py),
and a link to the user's bundled ripgrep. ``--agent-file`` lists exactly the tools offered.
Environment: KIMI_CODE_HOME (the private home), KIMI_DISABLE_TELEMETRY=1,
KIMI_CODE_NO_AUTO_UPDATE=1, and KIMI_LOOP_MAX_STEPS_PER_TURN from AGENT_BRIDGE_MAX_TURNS unless
set. KIMI_NODE (a node >= 22.19) runs the CLI's script under that node.

Read from the listener's environment (the worker launcher's contract, launchers/agent_headless.sh):
KIMI_BIN (default ``kimi`` on PATH); KIMI_NODE (a Node >= 22.19 that runs KIMI_BIN, for npm
installs whose script would pick up an older ``node``); KIMI_CODE_HOME (the user's real Kimi home,
default ~/.kimi-code; the worker gets a private home); AGENT_BRIDGE_MAX_TURNS (a positive integer:
KIMI_LOOP_MAX_STEPS_PER_TURN unless set; Kimi counts steps, not turns, so it is approximate).
Why ``auto`` is off by default (``Discovery``): in prompt mode (-p) Kimi Code 2.1.0 approves every
tool the agent can see, -p cannot be combined with --yolo/--auto/--plan, and [[permission.rules]]
are parsed but not applied (a deny rule for Read did not stop a Read): what the model can *see* is
the only control, so turning it on is a deliberate local decision (docs/launchers.md).
Exit: Kimi's own; 2 for a bad invocation (an invalid profile included); 127 when the CLI is
missing; 78 at level project, which Kimi cannot enforce. End to end with the 2.1.0 binary on Node
22 and a scripted Anthropic-style model: tests/agent_clis/test_kimi.py.
"""

import json
from pathlib import Path

from dispatcher.clis import kimi
from dispatcher.clis.kimi import profile as profiles
from dispatcher.clis.launch import Attempt, Dir, File, LaunchPlan, Link, Step
from dispatcher.core.protected import protected_from_env

AGENT_FILE = "kimi-agent-bridge-worker.md"
LINKED = ("config.toml", "credentials", "device_id", "region")  # from the user's home, when there


def user_home(env) -> Path:  # noqa: ANN001 - a Mapping[str, str]
    return Path(env.get("KIMI_CODE_HOME") or f"{env.get('HOME', '')}/.kimi-code")


def plan(attempt: Attempt) -> LaunchPlan:
    """The run (pure but for reading the user's config.toml): this argv, env and these files."""
    env, profile = attempt.env, attempt.profile
    home, worker_home = user_home(env), attempt.attempt_dir / kimi.KIMI_HOME
    agent_file = attempt.attempt_dir / AGENT_FILE
    steps: list[Step] = [Dir(worker_home), File(agent_file, profiles.agent_file(profile))]
    generated: set[str] = set()
    if profile.level != "bridge":
        policy = profiles.hook_policy(profile, attempt.cwd, attempt.request_file, protected_from_env(env))
        hook = Path(env["AGENT_BRIDGE_PROJECT"]) / "dispatcher" / "clis" / "kimi" / "kimi_hook.py"
        command = profiles.hook_command(env["AGENT_BRIDGE_PYTHON"], hook, policy)
        steps.append(
            File(worker_home / "config.toml", profiles.worker_config(attempt.read(home / "config.toml"), command))
        )
        generated.add("config.toml")
        rg = home / "bin" / "rg"
        if attempt.exists(rg):
            steps += [Dir(worker_home / "bin"), Link(worker_home / "bin" / "rg", rg)]
    steps += [
        Link(worker_home / item, home / item)
        for item in LINKED
        if item not in generated and attempt.exists(home / item)
    ]
    notes: tuple[str, ...] = ()
    if "config.toml" not in generated and not attempt.exists(home / "config.toml"):
        notes = (f"no {home / 'config.toml'}; relying on KIMI_MODEL_* environment variables",)
    steps.append(
        File(
            worker_home / "mcp.json",
            json.dumps({"mcpServers": {"agent_bridge": dict(attempt.server)}}, indent=2) + "\n",
        )
    )
    instruction = (
        f"You are the Agent Bridge worker for agent '{env['AGENT_ID']}', working on message "
        f"{env['AGENT_BRIDGE_MESSAGE_ID']}. Read your task from the file {attempt.request_file} with the "
        "Read tool and carry it out exactly as it says, using the agent_bridge tools."
    )
    run_env = {"KIMI_CODE_HOME": str(worker_home), "KIMI_DISABLE_TELEMETRY": "1", "KIMI_CODE_NO_AUTO_UPDATE": "1"}
    if attempt.max_turns is not None and not env.get("KIMI_LOOP_MAX_STEPS_PER_TURN"):
        run_env["KIMI_LOOP_MAX_STEPS_PER_TURN"] = str(attempt.max_turns)
    runner = env.get(kimi.CLI.discovery.runner_env)
    command_prefix = [runner, attempt.binary] if runner else [attempt.binary]
    return LaunchPlan(
        argv=(*command_prefix, "--agent-file", str(agent_file), "--output-format", "stream-json", "-p", instruction),
        env=run_env,
        steps=tuple(steps),
        stdin=None,
        stdout=attempt.attempt_dir / kimi.OUTPUT_FILE,
        notes=notes,
    )


def check(attempt: Attempt, plan: LaunchPlan) -> str | None:
    """Nothing to probe: Kimi's own checks and the hook need no sandbox."""
    return None
