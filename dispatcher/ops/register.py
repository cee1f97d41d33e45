"""`agent-bridge register CLI --agent ID`: write this installation's MCP server into an agent CLI's own config.

What to write, where, and how is each CLI's own (``dispatcher/clis/<cli>/registration.py``);
how a file is edited safely (backup, atomic replace, dry-run diff, conflicts, TOML through
tomlkit) is shared (``dispatcher/clis/config_files.py``). This module builds the server entry
this installation wants and asks the registry for the CLI.
"""

import os
import subprocess
import sys
from collections.abc import Mapping

from dispatcher.clis import registry
from dispatcher.clis.config_files import Registration
from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import absolute_setting


def server_registration(agent: str, environ: Mapping[str, str] | None = None) -> Registration:
    """`python -m dispatcher serve` with the current interpreter, AGENT_ID and the store/config in use."""
    environ = os.environ if environ is None else environ
    env = {"AGENT_ID": agent}
    for name in ("AGENT_BRIDGE_DB", "AGENT_BRIDGE_CONFIG"):
        if environ.get(name):
            env[name] = absolute_setting(environ[name])
    return Registration(agent, os.path.abspath(sys.executable), server_args(), env)


def server_args() -> list[str]:
    """``-m dispatcher serve`` when this Python imports the package from anywhere (an install, editable or not).

    A checkout run with a Python that only finds the package from the current directory gets the
    checkout's ``server.py`` instead, which puts its own directory on ``sys.path``.
    """
    from dispatcher.core.locations import PROJECT_DIR

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # Codex would not pass it on
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import dispatcher.mcp.serve"],
            cwd="/",
            env=env,
            capture_output=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        importable = probe.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        importable = True  # cannot tell: the documented form
    script = PROJECT_DIR / "server.py"
    if not importable and script.is_file():
        return [str(script)]
    return ["-m", "dispatcher", "serve"]


def register(
    cli: str, agent: str, *, dry_run: bool = False, force: bool = False, statusline: bool = False, hooks: bool = False
) -> list[str]:
    """Register this installation for ``cli`` as ``agent`` (declared: checked by the caller). Lines to print."""
    target = registry.BY_NAME[cli]
    if statusline and not target.statusline:
        having = ", ".join(f"`register {c.name}`" for c in registry.CLIS if c.statusline)
        raise BridgeError("usage_error", f"--statusline: {cli} has no status line; drop it or use {having}.")
    if hooks:
        target.register_hooks(agent, True, force)  # a hook conflict refuses the whole command before any write
    lines = target.register(server_registration(agent), dry_run, force)
    if statusline:
        lines += target.register_statusline(dry_run, force)
    if hooks:
        lines += target.register_hooks(agent, dry_run, force)
    return lines
