"""Helpers for dispatcher tests: fake launchers, config rewrites, listener processes, polling."""

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from harness import PROJECT

from dispatcher.core.locations import is_postgres_url, store_location
from dispatcher.store import open_store

FAKE_WORKER = Path(__file__).parent / "workers" / "fake_worker.py"
DEADLINE = 120.0


# A small CLI of a user's own (format it with python=sys.executable): argv MODE MCP_CONFIG [TASK_FILE];
# the task from the file or stdin, the bridge's server from the MCP config's servers.bridge entry;
# it acknowledges and answers the task through the bridge, as a worker of a real CLI would.
SCRIPT_CLI = """#!{python}
import json, os, sys
import anyio
sys.path.insert(0, os.environ["AGENT_BRIDGE_PROJECT"])
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from dispatcher.ops.demo_worker import answer

mode, config = sys.argv[1], sys.argv[2]
prompt = open(sys.argv[3]).read() if mode == "file" else sys.stdin.read()
message_id = int(os.environ["AGENT_BRIDGE_MESSAGE_ID"])
assert str(message_id) in prompt, "the task did not reach the CLI"
server = json.load(open(config))["servers"]["bridge"]


async def main():
    params = StdioServerParameters(command=server["command"], args=server["args"], env=server["env"])
    async with Client(params) as client:
        async def call(tool, **arguments):
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result.content
            return result.structured_content
        await answer(call, message_id, lambda message: f"declared CLI ({{mode}}) did it")


anyio.run(main)
"""


def make_launcher(directory: Path, mode: str, executable: bool = True, **env: str) -> Path:
    path = directory / f"launch_{mode}.sh"
    exports = "".join(f"{k}={v} " for k, v in {"FAKE_WORKER_MODE": mode, **env}.items())
    path.write_text(f'#!/bin/sh\n{exports}exec "$AGENT_BRIDGE_PYTHON" {FAKE_WORKER} "$@"\n')
    path.chmod(0o755 if executable else 0o644)
    return path


def write_config_atomic(
    path: Path, launcher: Path | str, *, auto: bool = True, timeout: int = 60, max_age: int = 86400
) -> None:
    doc = {
        "agents": {
            "claude": {"auto": auto, "launcher": str(launcher), "worker_timeout_seconds": timeout},
            "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
        },
        "dispatch_max_age_seconds": max_age,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def cli(env: dict, *args: str, timeout: float = DEADLINE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher", *args],
        cwd=PROJECT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


# Every listener a test starts; conftest's autouse fixture ends those a test left behind
# and closes their pipes (an unclosed pipe is a ResourceWarning, and warnings are errors).
STARTED: list[subprocess.Popen] = []


def start_listener(
    env: dict, agent: str = "claude", inherited: dict | None = None, wrapper: tuple[str, ...] = ()
) -> subprocess.Popen:
    """``listener run`` with ``env`` over ``inherited`` (default: this process's environment),
    run by ``wrapper`` (say, ``unshare`` and its options) when one is given."""
    proc = subprocess.Popen(
        [*wrapper, sys.executable, "-m", "dispatcher", "listener", "run", "--agent", agent],
        cwd=PROJECT,
        env={**(os.environ if inherited is None else inherited), **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    STARTED.append(proc)
    return proc


def end_listeners(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        except ValueError:  # its pipes were already read to the end and closed
            pass


def wait_until(predicate, deadline: float = DEADLINE, what: str = "condition", interval: float = 0.05):
    """Poll ``predicate`` until it returns something truthy (and return that); fail after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {deadline:.0f} s waiting for {what}")
        time.sleep(interval)


def record_attempt(conn, message_id: int, config, token: str) -> None:
    """The barrier's write for ``message_id`` (manual: no auto or age test), as a supervisor makes it."""
    from dispatcher.dispatch.attempts import begin_attempt

    begin_attempt(
        conn,
        message_id=message_id,
        config=config,
        now=time.time(),
        manual=True,
        supervisor_pid=1,
        supervisor_start=None,
        worker_token=token,
    )


def _reader(db: Path | str):
    """A connection whose rows read by name: the SQLite file as it is, or the PostgreSQL store."""
    if is_postgres_url(str(db)):
        return open_store(str(db))
    conn = sqlite3.connect(db, timeout=30)
    conn.row_factory = sqlite3.Row
    return conn


def attempt(db: Path | str, message_id: int) -> dict | None:
    conn = _reader(db)
    try:
        row = conn.execute("SELECT * FROM dispatch_attempts WHERE message_id = ?", (message_id,)).fetchone()
        return {key: row[key] for key in row.keys()} if row else None  # noqa: SIM118 - a sqlite3.Row iterates over its values
    finally:
        conn.close()


def wait_finished(db: Path, message_id: int, deadline: float = DEADLINE) -> dict:
    return wait_until(
        lambda: (a := attempt(db, message_id)) and a["state"] == "finished" and a,
        deadline,
        what=f"attempt on message #{message_id} to finish",
    )


def status_cli(env: dict, agent: str = "claude") -> dict:
    """What ``agent-bridge listener status`` prints, from the command itself."""
    done = cli(env, "listener", "status", "--agent", agent)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def status(env: dict, agent: str = "claude") -> dict:
    """The same document as ``status_cli``, read in this process: tests poll it many times while
    they wait, and a Python start-up per poll made waiting the suite's largest CPU cost.
    ``test_listener`` checks once that both give the same document."""
    from dispatcher.core.locations import Locations
    from dispatcher.dispatch.control import listener_status

    if "AGENT_BRIDGE_DB" not in env:  # the default store of the env's HOME: only the command knows it
        return status_cli(env, agent)
    where = Locations(
        db=store_location(env["AGENT_BRIDGE_DB"]),
        config=Path(env["AGENT_BRIDGE_CONFIG"]) if env.get("AGENT_BRIDGE_CONFIG") else None,
        runtime_dir=Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) if env.get("AGENT_BRIDGE_RUNTIME_DIR") else None,
    )
    return json.loads(json.dumps(listener_status(where, agent), default=str))


def post_task(
    db: Path,
    text: str,
    *,
    conversation: bool = False,
    sender: str = "kimi",
    recipient: str = "claude",
    kind: str | None = "task",
    max_cost_usd: float | None = None,
) -> int:
    """Send a task through the domain layer on a connection that is closed again at once, so
    the test process holds nothing open on the store."""
    from dispatcher.bridge import conversations, messages
    from dispatcher.store import open_store

    conn = open_store(db)
    try:
        agents = {sender, recipient}
        if conversation:
            return conversations.start_conversation(
                conn,
                initiator=sender,
                recipient=recipient,
                goal=text,
                agents=agents,
                max_body_bytes=65536,
                max_cost_usd=max_cost_usd,
            )["message_id"]
        return messages.send_message(conn, sender=sender, recipient=recipient, text=text, kind=kind, agents=agents)[
            "id"
        ]
    finally:
        conn.close()


def query(db: Path | str, statement: str, params: tuple = ()) -> list:
    conn = _reader(db)
    try:
        return conn.execute(statement, params).fetchall()
    finally:
        conn.close()


def integrity(db: Path | str) -> str:
    """SQLite's integrity check; "ok" on PostgreSQL, which checks its pages and keys on every write."""
    return "ok" if is_postgres_url(str(db)) else query(db, "PRAGMA integrity_check")[0][0]


def notices_for(db: Path, message_id: int) -> list[sqlite3.Row]:
    return query(
        db, "SELECT * FROM messages WHERE reply_to = ? AND kind = 'notice' AND origin = 'system'", (message_id,)
    )


def log_events(env: dict, event: str) -> list[dict]:
    """The listener's and supervisors' JSON log lines with this event name."""
    path = Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "dispatcher.log"
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if doc.get("event") == event:
            found.append(doc)
    return found


def stop_listener(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(60)


def tree_of(token: str) -> list[int]:
    """Live processes whose environment carries this worker token (read from /proc here,
    independently of the dispatcher's own scan)."""
    needle, found = f"AGENT_BRIDGE_WORKER_TOKEN={token}".encode(), []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def alive(pid: int | None, start: str | None) -> bool:
    """The process recorded as (pid, start time) is still running (not a zombie, not a reused pid),
    read here independently: the start time is ``<boot_id>:<start ticks>`` of /proc/PID/stat."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return False
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0] not in ("Z", "X") and f"{boot}:{fields[19]}" == start
