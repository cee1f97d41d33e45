"""A PostgreSQL server for the tests, found or started without manual setup.

In order: ``AGENT_BRIDGE_TEST_PG_URL`` when set; else the project machines' server on
127.0.0.1:5432 (trust auth, role ``postgres``); else a throwaway server of Debian's
``postgresql`` package (``initdb`` + ``postgres`` in a temporary directory, run as an
unprivileged user when the tests run as root, since PostgreSQL refuses to run as root).
Each test process gets a fresh database of its own on that server, dropped at its end.
Under ``CI=true`` a missing server fails the run instead of skipping it.
"""

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
START_DEADLINE_SECONDS = 60


class NoServer(Exception):
    """No PostgreSQL server could be found or started here."""


def _reachable(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def _server_binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise NoServer(
            "no PostgreSQL server on 127.0.0.1:5432 and no initdb to start one; "
            "install Debian's postgresql package or set AGENT_BRIDGE_TEST_PG_URL"
        )
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ThrowawayServer:
    """A PostgreSQL server of Debian's package in a temporary directory (``initdb``, then
    ``postgres``), as ``nobody`` when the tests run as root. It can be stopped and started again
    on the same data (a restart, for the fault tests); ``remove`` stops it and deletes it all."""

    def __init__(self) -> None:
        self._binaries = _server_binaries()
        self.directory = Path(tempfile.mkdtemp(prefix="agent-bridge-pg-"))
        self._user = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
        if self._user:
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
        self._data = self.directory / "data"
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._process: subprocess.Popen | None = None
        self._run([str(self._binaries / "initdb"), "-D", str(self._data), "-U", "postgres", "-A", "trust", "--no-sync"])

    def _as_user(self) -> dict:
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []} if self._user else {}

    def _run(self, argv: list[str]) -> None:
        subprocess.run(argv, check=True, capture_output=True, timeout=START_DEADLINE_SECONDS, **self._as_user())

    def start(self) -> None:
        self._process = subprocess.Popen(
            [str(self._binaries / "postgres"), "-D", str(self._data), "-k", str(self.directory), "-p", str(self.port)]
            + ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **self._as_user(),
        )
        deadline = time.monotonic() + START_DEADLINE_SECONDS
        while not _reachable(self.url):  # (refused until it listens: pg_isready does not wait for that)
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.remove()
                raise NoServer(f"the throwaway PostgreSQL server in {self.directory} did not start")
            time.sleep(0.1)

    def stop(self) -> None:
        """A fast shutdown (SIGINT): open sessions are ended, as in a restart by an administrator."""
        if self._process is not None:
            self._process.send_signal(signal.SIGINT)
            self._process.wait(timeout=START_DEADLINE_SECONDS)
            self._process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def _throwaway_server() -> Iterator[str]:
    server = ThrowawayServer()
    try:
        server.start()
        yield server.url
    finally:
        server.remove()


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@contextlib.contextmanager
def _server() -> Iterator[str]:
    configured = os.environ.get("AGENT_BRIDGE_TEST_PG_URL")
    if configured:
        if not _reachable(configured):
            raise NoServer(f"AGENT_BRIDGE_TEST_PG_URL={configured} does not answer; start that server or unset it")
        yield configured
    elif _reachable(LOCAL_SERVER):
        yield LOCAL_SERVER
    else:
        with _throwaway_server() as url:
            yield url


def fresh_database_on(server: str) -> str:
    """A new, empty database on ``server``: its URL."""
    name = f"agent_bridge_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return _with_database(server, name)


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """The URL of a new, empty database on the first server found (see the module's docstring),
    dropped afterwards with whatever connections are still open on it."""
    with _server() as server:
        url = fresh_database_on(server)
        try:
            yield url
        finally:
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{urlsplit(url).path[1:]}" WITH (FORCE)')


def end_sessions(database_url: str, *, listening: bool | None = None) -> list[int]:
    """``pg_terminate_backend`` of every other session on ``database_url``'s database (only its
    LISTEN sessions, or only the others, when ``listening`` says so), as a restart or a failover
    ends them; their pids. Only for a database of a server the test made (``ThrowawayServer``)."""
    with psycopg.connect(database_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND (%s::boolean IS NULL OR (query LIKE 'LISTEN %%') = %s::boolean)",
            (listening, listening),
        ).fetchall()
    return [pid for pid, _ in rows]
