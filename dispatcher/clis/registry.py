"""The agent CLIs the bridge drives, in the order ``init`` declares them; the one list to extend."""

from pathlib import Path
from typing import Any

from dispatcher.clis import claude, codex, gemini, kimi
from dispatcher.clis.base import AgentCli

CLIS: tuple[AgentCli, ...] = (claude.CLI, kimi.CLI, codex.CLI, gemini.CLI)
BY_NAME: dict[str, AgentCli] = {cli.name: cli for cli in CLIS}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def get(name: str) -> AgentCli | None:
    """The CLI called ``name``, or None."""
    return BY_NAME.get(name)


def diagnostics(attempt_dir: Path, exit_code: int | None) -> dict[str, Any] | None:
    """The diagnostics of the CLI whose output file the launch left, or None (no known CLI ran)."""
    for cli in CLIS:
        output = attempt_dir / cli.output_file
        if output.exists() or output.is_symlink():
            return cli.diagnostics(attempt_dir, exit_code)
    return None
