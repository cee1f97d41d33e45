"""What the benchmark needs to know about each system under test, and nothing else.

A ``Target`` says how to start a system's MCP server for a given store and identity,
how to call its send and receive tools, how to create its store and how to write
backlog rows straight into it. Every measurement in ``bench.measure`` is written
once against this description and run for both systems.

* ``ours``: Agent Bridge, ``server.py`` in this repository, run with this venv's Python.
* ``dlb``: PyPI ``dlb-mcp`` 0.6.5 (the closest installable peer: an MCP stdio server
  over one SQLite WAL file with ``send``/``read`` tools), installed by ``ensure_dlb``
  into an isolated venv under the cache dir, never as a dependency of this project.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.client.stdio import StdioServerParameters

REPO = Path(__file__).resolve().parent.parent
DLB_VERSION = "0.6.5"
# dlb-mcp 0.6.5 imports mcp.server.fastmcp, which mcp 2 removed.
DLB_REQUIREMENTS = [f"dlb-mcp=={DLB_VERSION}", "mcp<2"]

SENDERS = [f"a{i}" for i in range(16)]
READER = "reader"
RECIPIENTS = [*SENDERS, READER]

# One message text of a realistic size for an agent note (~120 bytes).
TEXT = "Benchmark note: please review the change in dispatcher/store.py and reply when done. " + "x" * 32


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agent-bridge-bench"


@dataclass(frozen=True)
class Store:
    """One store on disk for one target: its directory, SQLite file and (ours) config."""

    dir: Path
    db: Path | str  # a SQLite file, or a postgresql:// URL (``OursPostgres``)
    config: Path | None = None


@dataclass(frozen=True)
class LogicalRow:
    """A message as the backlog filler thinks of it, before a target maps it to columns."""

    sender: str
    recipient: str
    text: str
    created_at: float  # unix seconds
    acknowledged: bool


class Target:
    key: str = ""
    label: str = ""
    send_tool: str = ""
    recv_tool: str = ""
    bare_import: str = ""  # the module whose bare import is the cold-start floor
    server_args: list[str] = []
    insert_sql: str = ""

    # -- availability and processes -------------------------------------------------
    def unavailable_reason(self) -> str | None:
        return None

    def python(self) -> str:
        raise NotImplementedError

    def env(self, store: Store, agent: str) -> dict[str, str]:
        raise NotImplementedError

    def server_params(self, store: Store, agent: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=self.python(), args=list(self.server_args), env=self.env(store, agent), cwd=str(REPO)
        )

    def describe(self) -> dict[str, Any]:
        return {"label": self.label, "python": self.python(), "server_args": self.server_args}

    # -- store ----------------------------------------------------------------------
    def create_store(self, parent: Path, name: str) -> Store:
        """A fresh directory holding a store with this target's schema, created by its own code."""
        d = parent / f"{self.key}-{name}"
        d.mkdir(parents=True, exist_ok=False)
        store = self._store_paths(d)
        self._init_schema(store)
        return store

    def _store_paths(self, d: Path) -> Store:
        return Store(dir=d, db=d / "store.sqlite3")

    def _init_schema(self, store: Store) -> None:
        raise NotImplementedError

    def _run_python(self, code: str, store: Store, *args: str, timeout: float = 120) -> str:
        env = {**os.environ, **self.env(store, READER)}
        proc = subprocess.run(
            [self.python(), "-c", code, *args],
            cwd=str(REPO),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{self.key}: {code!r} failed: {proc.stderr.strip()[-2000:]}")
        return proc.stdout

    # WHERE clauses (one ? for the recipient) for an inbox's unread rows and its handled history.
    unread_where: str = ""
    handled_where: str = ""
    # Deletes all but the newest ``?`` rows matching ``{where}``.
    trim_sql = (
        "DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE {where} ORDER BY id DESC LIMIT -1 OFFSET ?)"
    )

    def connect_raw(self, store: Store) -> Any:
        """A connection straight to the store's table (untimed work: fills, the inbox keeper)."""
        import sqlite3

        return sqlite3.connect(store.db, isolation_level=None, timeout=30)

    def drop_store(self, store: Store) -> None:
        """Remove what the store holds outside its directory (nothing, for a file)."""

    def row(self, m: LogicalRow) -> tuple:
        """The tuple for ``insert_sql`` that stores ``m``."""
        raise NotImplementedError

    # -- tools ----------------------------------------------------------------------
    async def setup(self, client: Any, agent: str, *, reads: bool) -> Any:
        """Per-session preparation (untimed); the return value is passed back to the arg builders."""
        return None

    def send_args(self, agent: str, recipient: str, text: str, state: Any) -> dict[str, Any]:
        raise NotImplementedError

    def recv_args(self, agent: str, limit: int, state: Any) -> dict[str, Any]:
        raise NotImplementedError

    def sent_id(self, structured: Any) -> int | None:
        raise NotImplementedError

    def received(self, structured: Any) -> int:
        return len(self.received_ids(structured))

    def received_ids(self, structured: Any) -> list[int]:
        raise NotImplementedError

    # Acknowledging what was received, where that is a separate call (None: the read did it).
    ack_tool: str | None = None

    def ack_args(self, ids: list[int], state: Any) -> dict[str, Any]:
        raise NotImplementedError


class Ours(Target):
    key = "ours"
    label = "Agent Bridge"
    send_tool = "send_message"
    recv_tool = "receive_messages"
    bare_import = "mcp.server.mcpserver"
    server_args = [str(REPO / "server.py")]
    insert_sql = (
        "INSERT INTO messages (sender, recipient, kind, text, created_at, delivered_at, acknowledged_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)"
    )
    unread_where = "recipient = ? AND acknowledged_at IS NULL"
    handled_where = "recipient = ? AND acknowledged_at IS NOT NULL"

    def unavailable_reason(self) -> str | None:
        missing = [
            p for p in ("server.py", "dispatcher/bridge/messages.py", "dispatcher/store") if not (REPO / p).exists()
        ]
        return f"not in the repository yet: {', '.join(missing)}" if missing else None

    def python(self) -> str:
        venv = REPO / ".venv" / "bin" / "python"
        return str(venv) if venv.exists() else sys.executable

    def _store_paths(self, d: Path) -> Store:
        return Store(dir=d, db=d / "bridge.db", config=d / "config.json")

    def env(self, store: Store, agent: str) -> dict[str, str]:
        return {
            "AGENT_ID": agent,
            "AGENT_BRIDGE_DB": str(store.db),
            "AGENT_BRIDGE_CONFIG": str(store.config),
            "AGENT_BRIDGE_RUNTIME_DIR": str(store.dir / "runtime"),
            "XDG_STATE_HOME": str(store.dir / "xdg-state"),
        }

    def _init_schema(self, store: Store) -> None:
        agents = {name: {"auto": False, "launcher": "launchers/none.sh"} for name in RECIPIENTS}
        assert store.config is not None
        store.config.write_text(json.dumps({"agents": agents, "dispatch_max_age_seconds": 86400}))
        self._run_python(
            "import sys; from dispatcher.store import open_store; open_store(sys.argv[1]).close()",
            store,
            str(store.db),
        )

    def row(self, m: LogicalRow) -> tuple:
        done = m.created_at + 1.0 if m.acknowledged else None
        return (m.sender, m.recipient, None, m.text, m.created_at, done, done)

    def send_args(self, agent: str, recipient: str, text: str, state: Any) -> dict[str, Any]:
        return {"recipient": recipient, "text": text}

    def recv_args(self, agent: str, limit: int, state: Any) -> dict[str, Any]:
        return {"limit": limit}

    def sent_id(self, structured: Any) -> int | None:
        return structured.get("id") if isinstance(structured, dict) else None

    def received_ids(self, structured: Any) -> list[int]:
        return [m["id"] for m in structured.get("messages") or []] if isinstance(structured, dict) else []

    # receive_messages leaves messages in the inbox until mark_read acknowledges them.
    ack_tool = "mark_read"

    def ack_args(self, ids: list[int], state: Any) -> dict[str, Any]:
        return {"message_ids": ids}


class Dlb(Target):
    key = "dlb"
    label = f"dlb-mcp {DLB_VERSION}"
    send_tool = "send"
    recv_tool = "read"
    bare_import = "mcp.server.fastmcp"
    server_args = ["-m", "dlb_mcp"]
    insert_sql = (
        "INSERT INTO messages (recipient_name, sender_name, subject, body, sent_at_ms, read_at_ms,"
        " expires_at_ms, authenticated) VALUES (?, ?, NULL, ?, ?, ?, ?, 0)"
    )
    unread_where = "recipient_name = ? AND read_at_ms IS NULL"
    handled_where = "recipient_name = ? AND read_at_ms IS NOT NULL"

    def __init__(self, venv: Path) -> None:
        self.venv = venv
        # Backlog rows must outlive the run: dlb purges expired rows on read (default TTL 7 days).
        self._expires_ms = int((time.time() + 6 * 86400) * 1000)

    def unavailable_reason(self) -> str | None:
        return None if Path(self.python()).exists() else f"no dlb-mcp venv at {self.venv}"

    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "venv": str(self.venv), "requirements": DLB_REQUIREMENTS}

    def env(self, store: Store, agent: str) -> dict[str, str]:
        # dlb has no per-process identity: the sender is the `from_` argument, the reader
        # registers its name for a session token. DLB_STORE picks the file.
        return {"DLB_STORE": str(store.db)}

    def _init_schema(self, store: Store) -> None:
        self._run_python("from dlb_mcp import store; store.init_schema()", store)

    def row(self, m: LogicalRow) -> tuple:
        sent_ms = int(m.created_at * 1000)
        return (m.recipient, m.sender, m.text, sent_ms, sent_ms + 1000 if m.acknowledged else None, self._expires_ms)

    async def setup(self, client: Any, agent: str, *, reads: bool) -> Any:
        if not reads:
            return None
        # A registered reader's `read` marks what it returns as read (like our delivery);
        # an unregistered name's read is a non-destructive peek.
        r = await client.call_tool("register", {"name": agent})
        if r.is_error:
            raise RuntimeError(f"dlb register({agent}) failed: {r.content}")
        return r.structured_content["session_token"]

    def send_args(self, agent: str, recipient: str, text: str, state: Any) -> dict[str, Any]:
        return {"to": recipient, "body": text, "from_": agent}

    def recv_args(self, agent: str, limit: int, state: Any) -> dict[str, Any]:
        return {"name": agent, "session_token": state, "limit": limit}

    def sent_id(self, structured: Any) -> int | None:
        return structured.get("id") if isinstance(structured, dict) else None

    def received_ids(self, structured: Any) -> list[int]:
        # FastMCP wraps a list return value as {"result": [...]}; a registered reader's
        # read marks what it returns as read, so no separate acknowledgement is needed.
        return [m["id"] for m in structured.get("result") or []] if isinstance(structured, dict) else []


def ensure_dlb(cache_dir: Path, log=print) -> Path:
    """The venv holding dlb-mcp, created with uv under ``cache_dir`` on first use."""
    venv = cache_dir / f"dlb-mcp-{DLB_VERSION}"
    py = venv / "bin" / "python"
    if py.exists():
        check = subprocess.run([str(py), "-c", "import dlb_mcp, mcp.server.fastmcp"], capture_output=True)
        if check.returncode == 0:
            return venv
        shutil.rmtree(venv)
    uv = shutil.which("uv")
    if uv is None:
        raise RuntimeError("uv is needed to install the dlb-mcp peer into an isolated venv")
    log(f"installing {' '.join(DLB_REQUIREMENTS)} into {venv}")
    venv.parent.mkdir(parents=True, exist_ok=True)
    for cmd in (
        [uv, "venv", str(venv), "--python", "3.11", "--quiet"],
        [uv, "pip", "install", "--quiet", "--python", str(py), *DLB_REQUIREMENTS],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-2000:]}")
    return venv


def package_version(python: str, dist: str) -> str | None:
    proc = subprocess.run(
        [python, "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


class OursPostgres(Ours):
    """Agent Bridge with its store on a PostgreSQL server (``AGENT_BRIDGE_BENCH_PG_URL``, else the
    one on 127.0.0.1:5432): a database of its own per store, dropped with it. Only the ``postgres``
    part runs it, next to ``ours`` on SQLite."""

    key = "ours-pg"
    label = "Agent Bridge (PostgreSQL)"
    # Everything after the newest ``history_cap`` handled rows (PostgreSQL has no LIMIT -1).
    trim_sql = "DELETE FROM messages WHERE id IN (SELECT id FROM messages WHERE {where} ORDER BY id DESC OFFSET ?)"

    def __init__(self, server: str | None = None) -> None:
        self.server = (
            server or os.environ.get("AGENT_BRIDGE_BENCH_PG_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"
        )

    def unavailable_reason(self) -> str | None:
        try:
            import psycopg

            with psycopg.connect(self.server, connect_timeout=5, autocommit=True) as conn:
                conn.execute("SELECT 1")
        except Exception as exc:  # noqa: BLE001 - why the system is skipped, in one line
            return f"no PostgreSQL server at {self.server} ({type(exc).__name__}: {exc})"
        return super().unavailable_reason()

    def _store_paths(self, d: Path) -> Store:
        import uuid

        import psycopg

        name = f"agent_bridge_bench_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return Store(dir=d, db=self.server.rsplit("/", 1)[0] + f"/{name}", config=d / "config.json")

    def drop_store(self, store: Store) -> None:
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{str(store.db).rsplit("/", 1)[1]}" WITH (FORCE)')

    def connect_raw(self, store: Store) -> Any:
        from dispatcher.store import open_store  # our connector: the shared dialect, ``?`` placeholders

        return open_store(str(store.db))


class OursPostgresWithoutNotify(OursPostgres):
    """``OursPostgres`` with the wake trigger dropped from each store: what NOTIFY costs the
    send rate (a notifying commit takes a lock all of the server's notifying commits share).
    Nothing wakes a waiter on these stores but its rescan: a measurement, never a setup."""

    key = "ours-pg-quiet"
    label = "Agent Bridge (PostgreSQL, no NOTIFY)"

    def _store_paths(self, d: Path) -> Store:
        from dispatcher.store import open_store

        store = super()._store_paths(d)
        conn = open_store(str(store.db))  # the schema, then without its trigger
        try:
            conn.execute("DROP TRIGGER messages_notify_recipient ON messages")
        finally:
            conn.close()
        return store


def make_targets(cache_dir: Path, keys: list[str], log=print) -> dict[str, Target]:
    out: dict[str, Target] = {}
    for key in keys:
        if key == "ours":
            out[key] = Ours()
        elif key == "dlb":
            out[key] = Dlb(ensure_dlb(cache_dir, log))
        else:
            raise ValueError(f"unknown system {key!r} (known: ours, dlb)")
    return out


def target_from_spec(spec: dict[str, Any]) -> Target:
    """Rebuild a target in a worker process from ``spec_of``."""
    if spec["key"] == "ours":
        return Ours()
    if spec["key"] == "ours-pg":
        return OursPostgres(spec["server"])
    if spec["key"] == "ours-pg-quiet":
        return OursPostgresWithoutNotify(spec["server"])
    return Dlb(Path(spec["venv"]))


def spec_of(target: Target) -> dict[str, Any]:
    return {"key": target.key, "venv": str(getattr(target, "venv", "")), "server": getattr(target, "server", None)}
