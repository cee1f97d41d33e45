"""The Python half of every agent CLI launcher: build the attempt, ask the CLI's module for its
launch plan, carry it out, and exec the CLI (``launchers/_common.sh``'s ``launch_cli``). Which CLI:
the one the supervisor names in ``AGENT_BRIDGE_CLI`` (``launchers/agent_headless.sh``), or the one
an older config's launcher names (``launchers/codex_headless.sh``).

Exit codes, as the launchers always had them: 2 for a bad invocation (an invalid profile or
setting, a planted name in the attempt directory), 127 when the CLI is not found, 78 when the
profile's level cannot be enforced here; otherwise the CLI's own (this process becomes it).
"""

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dispatcher.clis import registry
from dispatcher.clis.launch import UNENFORCEABLE, Attempt, Dir, File, LaunchPlan, Link, Unenforceable, positive_int
from dispatcher.core.errors import BridgeError
from dispatcher.core.launchers import DECLARED_CLI
from dispatcher.core.permissions import profile_from_env
from dispatcher.core.private_files import create_private_file
from dispatcher.dispatch.worker_mcp import bridge_server

NOT_FOUND = 127


class LaunchError(Exception):
    def __init__(self, code: int, line: str) -> None:
        super().__init__(line)
        self.code = code


def cli_for(cli_name: str, env: Mapping[str, str]) -> Any:
    """The CLI to launch: one the registry lists, or the one the agent declares (``cli`` in config.json)."""
    if cli_name != DECLARED_CLI:
        cli = registry.get(cli_name)
        if cli is None:
            raise LaunchError(2, f"{registry.unknown(cli_name)}; fix agents.{env.get('AGENT_ID')}.cli in config.json")
        return cli
    from dispatcher.clis.declared import Declared
    from dispatcher.core.config import load_config

    agent = env["AGENT_ID"]
    spec = load_config(Path(env["AGENT_BRIDGE_CONFIG"])).agents[agent].cli
    if spec is None or isinstance(spec, str):
        raise LaunchError(2, f"agent {agent} declares no cli in config.json: add its cli block (docs/agent-clis.md)")
    return Declared(agent, spec)


def attempt_for(cli: Any, request_file: Path, env: Mapping[str, str]) -> Attempt:
    """The attempt as the supervisor's environment describes it; LaunchError when it cannot run."""
    wanted = cli.discovery.binary(env)
    binary = shutil.which(wanted, path=env.get("PATH", os.defpath))
    if binary is None:
        raise LaunchError(NOT_FOUND, f"{cli.discovery.display} not found: '{wanted}' ({cli.discovery.install})")
    try:
        profile = profile_from_env(env)
        max_turns = positive_int(env, "AGENT_BRIDGE_MAX_TURNS")
    except (ValueError, BridgeError) as exc:
        raise LaunchError(2, " ".join(str(exc).split())) from None
    return Attempt(
        env=env,
        attempt_dir=Path(env["AGENT_BRIDGE_ATTEMPT_DIR"]),
        request_file=request_file,
        workspace=Path(env.get("AGENT_BRIDGE_WORKSPACE") or Path.cwd()),
        cwd=Path.cwd(),
        profile=profile,
        server=bridge_server(env),
        binary=os.path.abspath(binary),
        max_turns=max_turns,
    )


def carry_out(plan: LaunchPlan) -> None:
    """Create the plan's files, directories and links; an existing name stops the launch (2)."""
    try:
        for step in plan.steps:
            if isinstance(step, Dir):
                os.mkdir(step.path, 0o700)
            elif isinstance(step, File):
                create_private_file(step.path, step.text)
            elif isinstance(step, Link):
                step.path.symlink_to(step.target)
    except (OSError, BridgeError) as exc:
        raise LaunchError(2, f"cannot prepare the attempt directory: {' '.join(str(exc).split())}") from None


def exec_plan(plan: LaunchPlan, env: Mapping[str, str]) -> None:
    """Become the CLI: the plan's stdin and stdout, its environment, its argv (never returns)."""
    environ = {k: v for k, v in env.items() if k not in plan.unset}
    environ.update(plan.env)
    stdin = os.open(plan.stdin or os.devnull, os.O_RDONLY | os.O_NOFOLLOW * bool(plan.stdin))
    os.dup2(stdin, 0)
    if plan.stdout is not None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        try:
            out = os.open(plan.stdout, flags, 0o600)
        except OSError as exc:
            raise LaunchError(2, f"cannot create {plan.stdout}: {exc.strerror}") from None
        os.dup2(out, 1)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(plan.argv[0], list(plan.argv), environ)  # noqa: S606 - the CLI, argv built by its module
    except FileNotFoundError:
        raise LaunchError(NOT_FOUND, f"not found: '{plan.argv[0]}'") from None
    except OSError as exc:
        raise LaunchError(126, f"cannot run '{plan.argv[0]}': {exc.strerror}") from None


def main(cli_name: str, request_file: str, prog: str) -> int:
    os.umask(0o077)
    env = dict(os.environ)
    try:
        cli = cli_for(cli_name, env)
        attempt = attempt_for(cli, Path(request_file), env)
        plan = cli.launch_plan(attempt)
        carry_out(plan)
        for note in plan.notes:
            print(f"{prog}: note: {note}", file=sys.stderr)  # noqa: T201 - the launcher's own line
        problem = cli.launch_check(attempt, plan)
        if problem is not None:
            raise Unenforceable(problem)
        exec_plan(plan, env)
    except LaunchError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)  # noqa: T201 - the launcher's one line
        return exc.code
    except Unenforceable as exc:
        print(f"{prog}: permissions cannot be enforced: {' '.join(str(exc).split())}", file=sys.stderr)  # noqa: T201
        return UNENFORCEABLE
    except (ValueError, BridgeError) as exc:  # ProfileError, a bad setting, a malformed AGENT_BRIDGE_PROTECTED
        print(f"{prog}: " + " ".join(str(exc).split()), file=sys.stderr)  # noqa: T201 - the launcher's one line
        return 2
    return 0  # not reached: exec_plan does not return


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
