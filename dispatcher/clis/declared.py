"""A CLI the user declares in config.json (``agents.<id>.cli``, ``core.config.DeclaredCli``): its
launch plan from the declaration, run by ``launchers/declared_headless.sh``.

What such a CLI gets: the request file (on stdin, or its path in argv), the bridge as an MCP
server in a config file written from the user's template, the supervisor's environment, its own
process group, the worker timeout, the verdict by evidence in the store, and a refusal (78) of
any level above the one it declares it enforces. What it does not get: the bridge cannot check
that it enforces that level, reads no usage, cost or denials from its output (its stdout and
stderr go to the attempt's worker.log), and has no login check, registration, hooks or wake path.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dispatcher.clis.launch import Attempt, File, LaunchPlan, Unenforceable

if TYPE_CHECKING:
    from dispatcher.core.config import DeclaredCli

LEVELS = ("bridge", "read", "edit", "shell", "project")


def _substitute(value: str, places: dict[str, str]) -> str:
    for name, text in places.items():
        value = value.replace(name, text)
    return value


def _filled(template: Any, places: dict[str, str], server: dict) -> Any:
    """The template with ``"{bridge_server}"`` replaced by the server entry and the placeholders filled."""
    from dispatcher.core.config import BRIDGE_SERVER_PLACEHOLDER

    if template == BRIDGE_SERVER_PLACEHOLDER:
        return server
    if isinstance(template, dict):
        return {_substitute(k, places): _filled(v, places, server) for k, v in template.items()}
    if isinstance(template, list):
        return [_filled(v, places, server) for v in template]
    return _substitute(template, places) if isinstance(template, str) else template


def plan(spec: "DeclaredCli", attempt: Attempt) -> LaunchPlan:
    """The declared CLI's run (pure): this argv, these files. Unenforceable above its ``max_level``."""
    import json

    level = attempt.profile.level
    if LEVELS.index(level) > LEVELS.index(spec.max_level):
        raise Unenforceable(
            f"level {level} is above what this declared CLI enforces (max_level {spec.max_level}"
            f"{'' if spec.sandbox is None else ', sandbox ' + spec.sandbox}): lower the agent's permissions level"
        )
    mcp_path = attempt.attempt_dir / spec.mcp_config.file if spec.mcp_config is not None else Path()
    places = {
        "{request_file}": str(attempt.request_file),
        "{mcp_config}": str(mcp_path),
        "{attempt_dir}": str(attempt.attempt_dir),
        "{workspace}": str(attempt.workspace),
        "{agent}": attempt.env["AGENT_ID"],
        "{message_id}": attempt.env["AGENT_BRIDGE_MESSAGE_ID"],
    }
    steps: tuple[File, ...] = ()
    if spec.mcp_config is not None:
        document = _filled(spec.mcp_config.template, places, dict(attempt.server))
        steps = (File(mcp_path, json.dumps(document, indent=2) + "\n"),)
    argv = [attempt.binary, *(_substitute(word, places) for word in spec.argv[1:])]
    return LaunchPlan(
        argv=tuple(argv),
        steps=steps,
        stdin=attempt.request_file if spec.prompt == "stdin" else None,
    )


class Declared:
    """The launch side of a declared CLI, as ``dispatch/launch.py`` asks any CLI."""

    def __init__(self, agent: str, spec: "DeclaredCli") -> None:
        from dispatcher.clis.base import Discovery

        self.name, self.spec = agent, spec
        self.discovery = Discovery(
            agent,
            "",
            spec.argv[0],
            "",
            False,
            spec.max_level,
            "",
            display=f"the CLI agent {agent} declares",
            install=f"fix agents.{agent}.cli.argv[0] in config.json",
        )

    def launch_plan(self, attempt: Attempt) -> LaunchPlan:
        return plan(self.spec, attempt)

    def launch_check(self, attempt: Attempt, plan: LaunchPlan) -> str | None:
        return None
