"""Running a person's ``notify_command`` (docs/notices.md): in the background, bounded, logged.

``spawn_notice`` (``core.notice_spawn``) starts a small runner (this module,
``python -m dispatcher.dispatch.notify``) with ``posix_spawn``, in a session of its own: nothing of the caller's process is copied (no
store connection crosses), and the caller goes on at once. The caller reaps the runner later,
without waiting (``reap``). The runner runs the command with the notice's fields in its
arguments and environment, ends its process group once ``notify_timeout_seconds`` have passed,
and writes one log line: ``notice_sent``, or ``notice_failed`` with why (its exit status, the
limit, or why it could not start). Nothing is retried: one event, at most one notice.
"""

import contextlib
import os
import signal
import sys
from pathlib import Path

from dispatcher.core.logs import get_logger
from dispatcher.core.notice_spawn import command_environment as command_environment
from dispatcher.core.notice_spawn import spawn_notice as spawn_notice
from dispatcher.core.notices import ENV_PREFIX

log = get_logger("agent_bridge.notify")


def reap(pids: list[int]) -> list[int]:
    """The runners among ``pids`` still running; those that ended are reaped (never waits)."""
    running = []
    for pid in pids:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue  # reaped elsewhere
        if done == 0:
            running.append(pid)
    return running


def run(timeout_seconds: float, argv: list[str]) -> str | None:
    """Run ``argv`` (the runner's side) with the environment as given; None when it exited 0,
    else why not (one line, payload-free)."""
    import subprocess

    try:
        proc = subprocess.Popen(  # noqa: S603 - the person's own configured command, as argv
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        return f"cannot start {argv[0]!r}: {exc.strerror or type(exc).__name__}"
    try:
        code = proc.wait(timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return f"still running after notify_timeout_seconds ({timeout_seconds:g} s): ended"
    return None if code == 0 else f"exited {code}"


def main(args: list[str]) -> int:
    """``python -m dispatcher.dispatch.notify TIMEOUT LOG_FILE -- ARGV...``."""
    import logging

    from dispatcher.core.logs import configure_logging

    timeout, log_file, _, *argv = args
    configure_logging(stderr_level=logging.CRITICAL, log_file=Path(log_file) if log_file else None)
    fields = {
        "notice_event": os.environ.get(ENV_PREFIX + "EVENT"),
        "agent": os.environ.get(ENV_PREFIX + "AGENT"),
        "message_id": os.environ.get(ENV_PREFIX + "MESSAGE_ID") or None,
    }
    if (why := run(float(timeout), argv)) is None:
        log.info("notice_sent", **fields)
        return 0
    log.warning("notice_failed", **fields, reason=why)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
