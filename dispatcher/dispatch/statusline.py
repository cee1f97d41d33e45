"""The text for Claude Code's ``statusLine``: one progress line per declared agent.

It must answer fast and never fail: it reads only config.json (as plain JSON, no
validation), /proc/locks and the progress documents; any error becomes a short word.
"""

import json
from collections.abc import Callable

from ..settings import BridgeSettings

SEPARATOR = "  ·  "


def statusline_text(make_settings: Callable[[], BridgeSettings], only: tuple[str, ...] = ()) -> str:
    try:
        settings = make_settings()
        agents = list(only) or sorted(json.loads(settings.config_path().read_text())["agents"])
        from .control import progress_line

        return SEPARATOR.join(progress_line(settings, agent) for agent in agents)
    except Exception as exc:  # a status line that fails degrades the whole session UI
        return f"[agent-bridge] unavailable ({type(exc).__name__})"
