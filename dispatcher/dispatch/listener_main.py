"""The listener's process: ``agent-bridge listener run`` once click has checked its arguments.

One listener runs per agent for as long as the machine is up, so it does without click and the
command line's modules (README, "The listener's footprint"): ``listener run`` execs
``python -m dispatcher.dispatch.listener_main AGENT`` in its own process, whose pid (the one its
lock, lease and progress document record, and systemd's main pid) stays the same. A failure
ends as every command's does (``exits.finish``): one line on stderr and its exit status.
"""

import os
import sys

from dispatcher.core.config_view import declared
from dispatcher.core.exits import finish
from dispatcher.core.locations import shown
from dispatcher.dispatch.checked import checked_config, checked_settings
from dispatcher.dispatch.environment import taken
from dispatcher.dispatch.listener import run_listener
from dispatcher.store import BACKEND_ERRORS


def listen(agent: str) -> int:
    """Refuse bad settings or an undeclared agent; with an invalid config.json, start anyway (stage
    ``error``). Both are validated in a forked child (``checked``): pydantic never loads here."""
    settings = checked_settings()
    declared(settings.config_path(), agent, checked_config, config_required=False)
    print(  # noqa: T201 - the listener's first stderr line
        f"agent-bridge listener for {agent}: pid {os.getpid()}, store {shown(settings.db)}, "
        f"runtime {settings.private_dir()}, launcher environment: {', '.join(taken(os.environ)) or 'none'}",
        file=sys.stderr,
        flush=True,
    )
    return run_listener(settings, agent)


if __name__ == "__main__":
    finish(lambda: listen(sys.argv[1]), lambda: BACKEND_ERRORS)
