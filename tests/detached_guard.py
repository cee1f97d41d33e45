"""A pytest plugin (loaded by conftest.py): nothing a test run started outlives it.

Detached processes (a listener `listener enable` starts in its own session, a model server, an
agent CLI, a worker's grandchild) escape the fixture that started them when a test fails badly
or the run is killed. So each pytest process marks its environment with a token of its own
(``RUN_MARKER``), which every process it starts inherits, and ends every process carrying it:
when its session finishes, and when it is sent SIGTERM or SIGINT (then the run stops as if
interrupted). An xdist controller marks its workers; each worker marks what its tests start, and
ends those itself. A test that builds an environment from nothing passes ``marker()`` on."""

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

RUN_MARKER = "PYTEST_BRIDGE_RUN"
END_SECONDS = 10.0


def marker() -> dict[str, str]:
    """The marker to put into an environment a test builds from nothing."""
    return {RUN_MARKER: os.environ[RUN_MARKER]} if os.environ.get(RUN_MARKER) else {}


def marked(token: str) -> list[int]:
    """Every live process (but this one) whose environment at start carried ``token``."""
    wanted = f"{RUN_MARKER}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if wanted in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def end_marked(token: str, seconds: float = END_SECONDS) -> list[int]:
    """SIGTERM every process carrying ``token`` (its whole process group when it leads one of its
    own), then SIGKILL what is left after ``seconds``. The pids it found."""
    pids = marked(token)
    own_group = os.getpgrp()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != own_group and group == pid:
                os.killpg(group, signal.SIGTERM)
            else:
                os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + seconds
    while (left := marked(token)) and time.monotonic() < deadline:
        _reap()
        time.sleep(0.05)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    _reap()
    return pids


def _reap() -> None:
    """Collect this process's own ended children, so a killed child is not left a zombie."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _runs_tests(config: pytest.Config) -> bool:
    """Not an xdist controller (its tests run in its workers, which end their own processes)."""
    return not config.pluginmanager.has_plugin("dsession")


def pytest_configure(config: pytest.Config) -> None:
    token = uuid.uuid4().hex
    os.environ[RUN_MARKER] = token

    def interrupted(signum, frame):
        end_marked(token)
        raise KeyboardInterrupt(f"signal {signum}: ended every process this run started")

    signal.signal(signal.SIGTERM, interrupted)
    config.add_cleanup(lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if _runs_tests(session.config) or session.shouldstop or session.shouldfail:
        end_marked(os.environ[RUN_MARKER])
