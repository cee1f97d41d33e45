"""Test harness: real server.py processes driven by the real MCP client over stdio.

Each ``McpAgent`` owns one server process and an asyncio loop in a background thread,
so tests stay synchronous and a module can keep its servers for all of its cases. The server
is a fork of this pytest process's zygote (``server_zygote.py``), which imported its code once,
unless the test asks for a ``fresh_interpreter``.
"""

import ast
import asyncio
import contextlib
import importlib.util
import io
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from dispatcher.core.locations import is_postgres_url
from dispatcher.store import open_store

PROJECT = Path(__file__).resolve().parent.parent
CALL_TIMEOUT = 120.0


def write_config(path: Path, agents: dict[str, dict] | None = None, **extra: Any) -> Path:
    agents = agents or {
        "claude": {"auto": True, "launcher": "launchers/claude_headless.sh"},
        "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
    }
    path.write_text(json.dumps({"agents": agents, **extra}))
    return path


@contextlib.contextmanager
def environment(env: dict[str, str]):
    """``env`` as this process's whole environment for a while: for a command run in process, where
    the test checks what it does, not that it starts (a Python start-up per case cost most of the CPU)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def command_here(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """`agent-bridge ARGS` run by the command line's own entry point in this process, with ``env``
    as the whole environment: its exit status, stdout and stderr as the command gives them."""
    from dispatcher.ops.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: object = None
    with environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main.main(list(args))
        except SystemExit as exc:
            code = exc.code
    assert isinstance(code, int), code  # BridgeGroup.main always ends with sys.exit(int)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def bridge_env(root: Path, config: Path) -> dict[str, str]:
    """Environment that keeps every bridge file inside ``root``; the default workspace is
    ``root/workspace`` (made here), which holds none of them (a workspace must not)."""
    (root / "workspace").mkdir(parents=True, exist_ok=True)
    return {
        "AGENT_BRIDGE_DB": str(root / "state" / "bridge.db"),
        "AGENT_BRIDGE_CONFIG": str(config),
        "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
        "AGENT_BRIDGE_WORKSPACE": str(root / "workspace"),
        "XDG_STATE_HOME": str(root / "xdg-state"),
        "XDG_CONFIG_HOME": str(root / "xdg-config"),
        "XDG_RUNTIME_DIR": str(root / "xdg-runtime"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def on_backend(environment: dict[str, str], backend: str, request) -> dict[str, str]:
    """``environment`` with its store on ``backend``: the SQLite file it names, or a fresh
    PostgreSQL store (the ``new_postgres_store`` fixture) for "postgres"."""
    if backend == "postgres":
        return {**environment, "AGENT_BRIDGE_DB": request.getfixturevalue("new_postgres_store")()}
    return environment


@dataclass
class ToolResult:
    is_error: bool
    data: dict | None
    text: str

    @property
    def code(self) -> str | None:
        return self.text.split(":", 1)[0] if self.is_error else None


def in_process_server(agent: str, env: dict[str, str]) -> tuple[Any, Any]:
    """The server that server.py would run for ``agent`` under ``env``, built in this process, and
    its store handle: for the SDK's in-memory client, where a test checks a tool's logic and not
    the process (its identity, stdio, signals). No session row is kept for it (no presence)."""
    from dispatcher.core.config import load_config
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.mcp.mcp_server import build_server
    from dispatcher.store import open_handle

    with environment({**env, "AGENT_ID": agent}):
        settings = BridgeSettings()
        config = load_config(settings.config_path())
    store = open_handle(settings.db)
    return build_server(agent, store, config, settings), store


class _Zygote:
    """This pytest process's ``server_zygote.py``, started at its first use (by whichever thread
    asks first) and ended at exit (or by the detached guard, whose marker it carries)."""

    proc: subprocess.Popen | None = None
    socket_path = ""
    _lock = threading.Lock()

    @classmethod
    def server_command(cls) -> list[str]:
        """What an MCP client starts to get a server forked from the zygote."""
        with cls._lock:
            if cls.proc is None or cls.proc.poll() is not None:
                cls._start()
            return ["-S", str(PROJECT / "tests" / "server_trampoline.py"), cls.socket_path, str(PROJECT)]

    @classmethod
    def _start(cls) -> None:
        import atexit
        import shutil
        import tempfile

        directory = tempfile.mkdtemp(prefix="agent-bridge-zygote-")
        cls.socket_path = str(Path(directory) / "socket")
        proc = subprocess.Popen(
            [sys.executable, str(PROJECT / "tests" / "server_zygote.py"), cls.socket_path],
            cwd=PROJECT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
        )
        cls.proc = proc

        def end() -> None:
            proc.kill()
            proc.wait()
            proc.stdout.close()  # type: ignore[union-attr]
            shutil.rmtree(directory, ignore_errors=True)

        atexit.register(end)
        ready = proc.stdout.readline()  # type: ignore[union-attr]
        assert ready == b"ready\n", f"the server zygote did not start (said {ready!r}, status {proc.poll()})"


class McpAgent:
    """One agent's server and a client of it: a real server process over stdio (forked from the
    zygote; with ``fresh_interpreter``, ``python server.py`` itself, for a test that looks at the
    process from outside: its parent, command line or /proc environment), or with ``in_process``
    the same server built in this process behind the SDK's in-memory client."""

    def __init__(
        self,
        agent: str,
        env: dict[str, str],
        stderr_path: Path | None = None,
        *,
        in_process: bool = False,
        fresh_interpreter: bool = False,
    ) -> None:
        self.agent = agent
        self._store = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._stop: asyncio.Event | None = None
        self._client: Client | None = None
        self._ready: Future = Future()
        self._errlog = open(stderr_path, "a") if stderr_path else sys.stderr  # noqa: SIM115 - the server's stderr for its whole life; close() closes it
        if in_process:
            server, self._store = in_process_server(agent, env)
        else:
            params = StdioServerParameters(
                command=sys.executable,
                args=[str(PROJECT / "server.py")] if fresh_interpreter else _Zygote.server_command(),
                env={**env, "AGENT_ID": agent},
                cwd=str(PROJECT),
            )
            server = stdio_client(params, errlog=self._errlog)
        self._main = asyncio.run_coroutine_threadsafe(self._run(server), self._loop)

    async def _run(self, server: Any) -> None:
        self._stop = asyncio.Event()
        try:
            async with Client(server, read_timeout_seconds=CALL_TIMEOUT) as client:
                self._client = client
                self._ready.set_result(True)
                await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise

    def wait_ready(self, timeout: float = 120) -> "McpAgent":
        self._ready.result(timeout)
        return self

    def call(self, tool: str, **arguments: Any) -> ToolResult:
        self.wait_ready()
        fut = asyncio.run_coroutine_threadsafe(self._client.call_tool(tool, arguments), self._loop)
        return self._convert(fut.result(CALL_TIMEOUT))

    def call_async(self, tool: str, **arguments: Any) -> Future:
        """Start a call now, collect it later (for races across processes)."""
        self.wait_ready()
        return asyncio.run_coroutine_threadsafe(self._client.call_tool(tool, arguments), self._loop)

    def call_at_barrier(self, barrier: threading.Barrier, tool: str, **arguments: Any) -> Future:
        """Start a call that waits on ``barrier`` in this agent's loop thread, then sends at once.

        The future's result is ``(ToolResult, sent_at, answered_at)`` (monotonic seconds)."""
        self.wait_ready()

        async def go() -> tuple[ToolResult, float, float]:
            barrier.wait(CALL_TIMEOUT)  # blocks only this agent's own loop thread, on purpose
            sent_at = time.monotonic()
            result = await self._client.call_tool(tool, arguments)
            return self._convert(result), sent_at, time.monotonic()

        return asyncio.run_coroutine_threadsafe(go(), self._loop)

    @staticmethod
    def _convert(result: Any) -> ToolResult:
        text = "".join(getattr(block, "text", "") for block in result.content or [])
        return ToolResult(bool(result.is_error), result.structured_content, text)

    def ok(self, tool: str, **arguments: Any) -> dict:
        result = self.call(tool, **arguments)
        assert not result.is_error, f"{tool} failed: {result.text}"
        return result.data

    def list_tools(self) -> list:
        self.wait_ready()
        return asyncio.run_coroutine_threadsafe(self._client.list_tools(), self._loop).result(CALL_TIMEOUT).tools

    def close(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        # Whatever the server's task ended with (closing is all that is left), the loop must stop.
        with contextlib.suppress(BaseException):
            self._main.result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
        if self._store is not None:
            self._store.close()
        if self._errlog is not sys.stderr:
            self._errlog.close()


def start_agents(
    names: list[str], env: dict[str, str], stores: dict[str, str] | None = None, *, fresh_interpreter: bool = False
) -> list[McpAgent]:
    """Start several servers at once so that their start-ups overlap; with ``stores``, each agent's
    server connects to its own store URL (its agent's database role, say)."""
    agents = [
        McpAgent(name, {**env, "AGENT_BRIDGE_DB": stores[name]} if stores else env, fresh_interpreter=fresh_interpreter)
        for name in names
    ]
    for agent in agents:
        agent.wait_ready()
    return agents


def collected_again(path: Path) -> dict[str, Any]:
    """The test functions of the module at ``path`` (those marked ``sqlite_only`` left out), named
    ``<test>__<module>``: put in another module's namespace, they run again with that module's
    fixtures (its servers on per-agent roles, say)."""
    spec = importlib.util.spec_from_file_location(f"again_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {
        f"{name}__{path.stem.removeprefix('test_')}": test
        for name, test in vars(module).items()
        if name.startswith("test_")
        and callable(test)
        and not any(mark.name == "sqlite_only" for mark in getattr(test, "pytestmark", []))
    }


def race(agents: list[McpAgent], tool: str, **arguments: Any) -> tuple[list[ToolResult], bool]:
    """The same call from every agent, released together by one barrier.

    Returns the results in agent order, and whether the calls really overlapped: every
    request was sent before the first answer came back."""
    barrier = threading.Barrier(len(agents))
    futures = [agent.call_at_barrier(barrier, tool, **arguments) for agent in agents]
    done = [f.result(CALL_TIMEOUT) for f in futures]
    overlapped = max(sent for _, sent, _ in done) < min(answered for _, _, answered in done)
    return [result for result, _, _ in done], overlapped


FIXTURES = Path(__file__).parent / "fixtures"


def store_from_fixture(db: Path, name: str, version: int) -> Path:
    """A store of an old schema: tests/fixtures/<name>.sql loaded at ``PRAGMA user_version``."""
    db.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(db)
    try:
        conn.executescript((FIXTURES / f"{name}.sql").read_text())
        conn.execute(f"PRAGMA user_version = {version}")
    finally:
        conn.close()
    return db


# A column a running server changes by itself on a timer, whatever its callers do: the session
# renewal (on a store that spans hosts), left out of before/after comparisons of a call.
CLOCKWORK_COLUMNS = {("sessions", "renewed_at")}


def _rows_without_clockwork(table: str, cursor) -> list[tuple]:
    names = [d[0] for d in cursor.description]
    keep = [i for i, name in enumerate(names) if (table, name) not in CLOCKWORK_COLUMNS]
    return [tuple(row[i] for i in keep) for row in cursor.fetchall()]


def db_snapshot(db_path: Path | str) -> list[tuple]:
    """Every row of every table, for before/after comparisons (a SQLite file or a PostgreSQL URL)."""
    if is_postgres_url(str(db_path)):
        conn = open_store(str(db_path))
        try:
            listed = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            tables = sorted(r[0] for r in conn.execute(listed))
            return [(t, _rows_without_clockwork(t, conn.execute(f"SELECT * FROM {t} ORDER BY 1"))) for t in tables]
        finally:
            conn.close()
    conn = sqlite3.connect(db_path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return [(t, _rows_without_clockwork(t, conn.execute(f"SELECT * FROM {t} ORDER BY rowid"))) for t in tables]
    finally:
        conn.close()


def wakes_counted(db: Path | str, agent: str, path: str) -> int:
    """How many times the wake path ``path`` told ``agent``'s session of new mail, by the store's counter."""
    from dispatcher.store.metrics import counter_totals

    conn = open_store(db)
    try:
        return counter_totals(conn, "wakes", agent).get((agent, path, ""), 0)
    finally:
        conn.close()


def sql(db_path: Path | str, statement: str, params: tuple = ()) -> list[tuple]:
    """One statement on the store (a SQLite file or a PostgreSQL URL), committed; its rows."""
    if is_postgres_url(str(db_path)):
        conn = open_store(str(db_path))
        try:
            cursor = conn.execute(statement, params)
            return [tuple(r) for r in cursor.fetchall()] if cursor.description else []
        finally:
            conn.close()
    conn = sqlite3.connect(db_path, timeout=30)
    try:
        with conn:
            return conn.execute(statement, params).fetchall()
    finally:
        conn.close()


def acknowledge_all(db_path: Path | str) -> None:
    """Mark every message read (a test's clean slate before the next scenario)."""
    sql(db_path, "UPDATE messages SET acknowledged_at = 1 WHERE acknowledged_at IS NULL")


# The tables of the schema-4 fixture (tests/fixtures/store_v4.sql).
V4_TABLES = ("messages", "dispatch_attempts", "conversations", "conversation_transitions", "listeners")


def table_rows(db_path: Path | str, tables: tuple[str, ...]) -> dict[str, list[tuple]]:
    """Every row of each table, in rowid order (a store's content before an upgrade)."""
    return {t: sql(db_path, f"SELECT * FROM {t} ORDER BY rowid") for t in tables}


def assert_rows_kept(conn: sqlite3.Connection, before: dict[str, list[tuple]]) -> None:
    """After an upgrade every earlier row is still there, unchanged (later migrations may add columns)."""
    for table, rows in before.items():
        after = [tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
        assert [a[: len(b)] for a, b in zip(after, rows, strict=True)] == rows, table


def dispatcher_modules() -> list[tuple[str, ast.Module]]:
    """(path relative to the checkout, syntax tree) of every module of ``dispatcher/``: for the
    tests that say which one module may do a thing (read a clock, read /proc)."""
    return [
        (str(path.relative_to(PROJECT)), ast.parse(path.read_text(), str(path)))
        for path in sorted((PROJECT / "dispatcher").rglob("*.py"))
    ]


def server_pid(agent: str, db: Path | str) -> int:
    """The pid of this test process's one ``server.py`` for ``agent`` on the store ``db``."""
    import psutil

    found = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            environ = proc.environ()
            ours = environ.get("AGENT_ID") == agent and environ.get("AGENT_BRIDGE_DB") == str(db)
            if ours and "server.py" in " ".join(proc.cmdline()):
                found.append(proc.pid)
    assert len(found) == 1, found
    return found[0]


def inotify_descriptors(pid: int) -> int:
    """How many inotify instances process ``pid`` holds (``file_events`` sleeping on the kernel)."""
    fds = Path(f"/proc/{pid}/fd")
    return sum(1 for fd in fds.iterdir() if os.readlink(fd) == "anon_inode:inotify")
