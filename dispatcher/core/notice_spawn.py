"""Starting a person's ``notify_command`` for one notice, without waiting (docs/notices.md).

``spawn_notice`` starts the small runner ``python -m dispatcher.dispatch.notify`` (which runs the
command, bounded, and logs) with ``posix_spawn``, in a session of its own: nothing of the caller's
process is copied (no store connection crosses), and the caller goes on at once. Here, below
every caller (the listener, a worker's bridge server, a worker's shell hook); the runner is
``dispatch.notify``, named by its module path only.
"""

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dispatcher.core.logs import get_logger
from dispatcher.core.notices import Notice, notice_argv, notice_environment

if TYPE_CHECKING:
    from dispatcher.core.config import BridgeConfig

log = get_logger("agent_bridge.notify")

# Not passed on to the command: the bridge's own settings and a worker's identity (a token, the
# attempt it is), which a notice has no use for. The notice's own fields are set afresh.
_WITHHELD_PREFIX = "AGENT_BRIDGE_"


def command_environment(base: dict[str, str] | os._Environ[str], notice: Notice) -> dict[str, str]:
    """The command's environment: ``base`` (the desktop's session bus, PATH, HOME, for
    ``notify-send``) without the bridge's variables, and the notice's fields."""
    kept = {k: v for k, v in base.items() if not k.startswith(_WITHHELD_PREFIX)}
    return {**kept, **notice_environment(notice)}


def spawn_notice(command: list[str], notice: Notice, timeout_seconds: int, log_file: Path | None) -> int | None:
    """Start the runner for one notice and return its pid (reap it with ``dispatch.notify.reap``); None, logged,
    when it cannot start. Never waits."""
    runner = [sys.executable, "-m", "dispatcher.dispatch.notify", str(timeout_seconds), str(log_file or ""), "--"]
    environment = command_environment(os.environ, notice)
    try:
        return os.posix_spawn(
            sys.executable,
            [*runner, *notice_argv(command, notice)],
            environment,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
            ],
            setsid=True,
        )
    except OSError as exc:
        log.warning(
            "notice_failed", notice_event=notice.event, agent=notice.agent, reason=f"cannot start: {exc.strerror}"
        )
        return None


def notify_agent(config: "BridgeConfig", notice: Notice) -> bool | None:
    """``notice`` to its agent's ``notify_command`` (its own, else the global one), when it has
    one: whether its runner started (None: no command), never reaped by the caller (a worker's
    server or hook; init reaps it once the caller is gone). No log file: the caller has none."""
    command = config.notify_command_of(notice.agent)
    return None if command is None else spawn_notice(command, notice, config.notify_timeout_seconds, None) is not None
