"""The idle listener sleeps on file events (inotify) and still wakes for everything it waited
for by polling: a send, a config change, a stop. The same run with the fallback forced
(``AGENT_BRIDGE_FILE_EVENTS=poll``, as on a file system without inotify). The listener stays
light: through start, a dispatch and its stop, it never imports the MCP SDK, pydantic or click,
and its supervisor never imports pydantic; with metrics off, it never imports prometheus_client."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dispatch_harness import DEADLINE, STARTED, post_task, status, wait_finished, wait_until, write_config_atomic
from harness import PROJECT, bridge_env, inotify_descriptors, write_config

from dispatcher.core.file_events import MODE_VARIABLE
from dispatcher.core.locations import store_location

# What the listener leaves to forked children or never needs; a supervisor, pydantic too.
HEAVY = ("mcp", "anyio", "httpx", "pydantic", "pydantic_settings", "asyncio", "ssl", "rich")
LISTENER_NEVER = (
    *HEAVY,
    "click",
    "dispatcher.ops.cli",
    "tempfile",
    "shutil",
    "random",
    "bz2",
    "lzma",
    "dispatcher.dispatch.cli_results",
    "dispatcher.clis.results",
    "dispatcher.dispatch.outcome",
    "dispatcher.dispatch.evidence",
    # Metrics are off unless config.json sets metrics_textfile_dir (docs/metrics.md).
    "prometheus_client",
    "dispatcher.dispatch.metrics",
)
SUPERVISOR_NEVER = ("mcp", "pydantic", "pydantic_core", "pydantic_settings", "click", "rich")
# Loaded into every Python process the listener's environment starts (PYTHONPATH): the process
# ``listener run`` becomes (its exec runs no atexit of the command line's) tells on its way out
# which of LISTENER_NEVER it loaded; a supervisor (a fork, which ends with os._exit) which of
# SUPERVISOR_NEVER. The checked children never load the supervisor's module, and say nothing.
TELL = f"""
import atexit, os, sys


def _loaded(names):
    return sorted(m for m in names if m in sys.modules)


atexit.register(lambda: print("modules:", _loaded({LISTENER_NEVER!r}), file=sys.stderr))
_exit = os._exit


def _telling_exit(code):
    if "dispatcher.dispatch.supervisor" in sys.modules:
        print("supervisor modules:", _loaded({SUPERVISOR_NEVER!r}), file=sys.stderr, flush=True)
    _exit(code)


os.register_at_fork(after_in_child=lambda: setattr(os, "_exit", _telling_exit))
"""


def _start(env: dict) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "listener", "run", "--agent", "claude"],
        cwd=PROJECT,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    STARTED.append(proc)  # ended by conftest's fixture if the test fails first
    return proc


def _telling(tmp_path: Path) -> dict:
    """The environment entry that loads TELL into each Python process started with it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(TELL)
    return {"PYTHONPATH": str(site)}


@pytest.mark.parametrize("mode", ["inotify", "poll"])
def test_an_idle_listener_wakes_on_a_send_a_config_change_and_a_stop_and_stays_light(tmp_path, mode):
    launcher = tmp_path / "instant.sh"
    launcher.write_text("#!/bin/sh\nexit 0\n")
    launcher.chmod(0o755)
    env = {**bridge_env(tmp_path, write_config(tmp_path / "config.json")), MODE_VARIABLE: mode}
    config = Path(env["AGENT_BRIDGE_CONFIG"])
    write_config_atomic(config, launcher)
    proc = _start({**env, **_telling(tmp_path)})
    wait_until(lambda: (status(env)["progress"] or {}).get("stage") == "idle", what="listener idle")
    assert status(env)["progress"]["listener_pid"] == proc.pid  # the command line's exec kept its pid
    # Two instances: what the idle wait sleeps on, and the store handle's check of its file names.
    assert inotify_descriptors(proc.pid) == (2 if mode == "inotify" else 0)

    task = post_task(store_location(env["AGENT_BRIDGE_DB"]), "wake up")
    assert wait_finished(store_location(env["AGENT_BRIDGE_DB"]), task)["state"] == "finished"

    write_config_atomic(config, launcher, auto=False)
    wait_until(lambda: status(env)["progress"]["auto"] is False, what="the config change seen")

    proc.terminate()  # a SIGTERM ends the sleeping wait at once (interrupt), not at its timeout
    out, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, err
    assert "modules: []" in err.splitlines()[-1], err  # none of LISTENER_NEVER in the listener
    assert [line for line in err.splitlines() if line.startswith("supervisor modules:")] == [
        "supervisor modules: []"
    ], err  # the task's supervisor launched its worker without pydantic
    assert status(env)["progress"]["stage"] == "stopped"


def test_on_postgresql_a_dispatch_leaves_the_listeners_own_listen_session_alone(tmp_path, postgres_url):
    """The supervisor is a fork of the listener and inherits its LISTEN connection: closing it
    there would end the session the listener still sleeps on, and a notice sent until it listened
    again would be lost (the next task then waited for the 5 s rescan). The child lets it be."""
    import psycopg

    launcher = tmp_path / "instant.sh"
    launcher.write_text("#!/bin/sh\nexit 0\n")
    launcher.chmod(0o755)
    env = {**bridge_env(tmp_path, write_config(tmp_path / "config.json")), "AGENT_BRIDGE_DB": postgres_url}
    write_config_atomic(Path(env["AGENT_BRIDGE_CONFIG"]), launcher)

    def listening() -> set[int]:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'"
            ).fetchall()
        return {pid for (pid,) in rows}

    proc = _start(env)
    wait_until(lambda: (status(env)["progress"] or {}).get("stage") == "idle", what="listener idle")
    before = listening()
    assert len(before) == 1, before
    for n in range(2):
        task = post_task(postgres_url, f"task {n}")
        assert wait_finished(postgres_url, task)["state"] == "finished"
        wait_until(lambda: (status(env)["progress"] or {}).get("current") is None, what="listener idle again")
    assert listening() == before
    proc.terminate()
    proc.wait(timeout=DEADLINE)
