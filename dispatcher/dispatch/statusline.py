"""The text for Claude Code's ``statusLine``: one progress line per declared agent.

It must answer fast and never fail: it reads only the environment, config.json (as
plain JSON, no validation), /proc/locks and the progress documents; it imports neither
pydantic nor the MCP SDK. Any error becomes a short word (an invalid setting: its name). ``agent-bridge-statusline``
runs it without even loading the CLI.
"""

import json
import sys

from ..locations import InvalidSetting, Locations

SEPARATOR = "  ·  "


def statusline_text(only: tuple[str, ...] = ()) -> str:
    try:
        locations = Locations.from_env()
    except InvalidSetting as exc:  # e.g. a relative AGENT_BRIDGE_DB
        return f"[agent-bridge] unavailable (invalid_setting {exc.variable})"
    try:
        agents = list(only) or sorted(json.loads(locations.config_path().read_text())["agents"])
        from .control import progress_line

        return SEPARATOR.join(progress_line(locations, agent, check_config=False) for agent in agents)
    except Exception as exc:  # a status line that fails degrades the whole session UI
        return f"[agent-bridge] unavailable ({type(exc).__name__})"


def main() -> None:
    print(statusline_text(tuple(sys.argv[1:])))
    sys.exit(0)
