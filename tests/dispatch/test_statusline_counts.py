"""Issue 30, item 6: on a PostgreSQL store the status line cost 0.26 CPU-s per refresh (0.07 s on
SQLite), most of it loading psycopg, for the unread counts and every agent's "elsewhere" lease
(one connection each). It now reads them on one connection at most every COUNTS_SECONDS and keeps
them in the runtime directory in between: a refresh inside the window loads no psycopg."""

import json
import os
import subprocess
import sys

from harness import PROJECT, write_config

from dispatcher.bridge.messages import send_message
from dispatcher.dispatch.statusline import COUNTS_FILE, COUNTS_SECONDS
from dispatcher.store import open_store

PROBE = (
    "import sys\nfrom dispatcher.dispatch.statusline import statusline_text\n"
    "print(statusline_text())\nprint('psycopg' in sys.modules)"
)


def refresh(env: dict) -> tuple[str, bool]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=PROJECT, capture_output=True, text=True, timeout=60, check=True
    )
    line, loaded = done.stdout.splitlines()
    return line, loaded == "True"


def test_a_refresh_inside_the_window_loads_no_psycopg_and_a_stale_one_reads_again(tmp_path, postgres_url):
    config = write_config(
        tmp_path / "config.json",
        {
            "claude": {"launcher": "launchers/scripted_headless.sh"},
            "me": {"launcher": "launchers/scripted_headless.sh"},
        },
    )
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {
        **os.environ,
        "AGENT_BRIDGE_DB": postgres_url,
        "AGENT_BRIDGE_CONFIG": str(config),
        "AGENT_BRIDGE_RUNTIME_DIR": str(runtime),
    }
    conn = open_store(postgres_url)
    try:
        send_message(conn, sender="me", recipient="claude", text="one", kind="task", agents=frozenset({"me", "claude"}))
    finally:
        conn.close()
    first, loaded = refresh(env)
    assert loaded and "[claude] stopped · 1 unread" in first, first
    again, loaded = refresh(env)
    assert again == first and not loaded
    kept = runtime / COUNTS_FILE
    document = json.loads(kept.read_text())
    kept.write_text(json.dumps({**document, "at": document["at"] - COUNTS_SECONDS - 1}))
    _, loaded = refresh(env)
    assert loaded  # past the window: read from the store again


def test_the_status_line_judges_the_generic_launcher_for_an_agent_that_names_its_cli():
    """An agent with ``cli`` and no ``launcher`` runs launchers/agent_headless.sh: that is the one judged."""
    from dispatcher.core.findings import CODES
    from dispatcher.dispatch.statusline import _launcher

    assert _launcher({"cli": "codex"}) == []  # the generic launcher is there and runs
    assert _launcher({"cli": "codex", "launcher": "/nonexistent/x.sh"}) == [CODES["launcher_missing"].said()]
    assert _launcher({"auto": True}) == []  # neither: an invalid entry, which config_invalid names
