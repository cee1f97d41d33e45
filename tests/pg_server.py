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
import socket
import subprocess
import tempfile
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


@contextlib.contextmanager
def _throwaway_server() -> Iterator[str]:
    """initdb and start a server in a temporary directory; stop and remove it afterwards."""
    binaries = _server_binaries()
    directory = Path(tempfile.mkdtemp(prefix="agent-bridge-pg-"))
    user = pwd.getpwnam("nobody") if os.geteuid() == 0 else None
    as_user = ["runuser", "-u", user.pw_name, "--"] if user else []
    if user:
        os.chown(directory, user.pw_uid, user.pw_gid)
    data = directory / "data"
    port = _free_port()
    subprocess.run(
        [*as_user, str(binaries / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync"],
        check=True,
        capture_output=True,
    )
    server = subprocess.Popen(
        [*as_user, str(binaries / "postgres"), "-D", str(data), "-k", str(directory), "-p", str(port)]
        + ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    try:
        subprocess.run(
            [str(binaries / "pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-t", str(START_DEADLINE_SECONDS)],
            check=True,
            capture_output=True,
        )
        yield url
    finally:
        server.terminate()
        server.wait(timeout=START_DEADLINE_SECONDS)
        shutil.rmtree(directory, ignore_errors=True)


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


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """The URL of a new, empty database on the first server found (see the module's docstring),
    dropped afterwards with whatever connections are still open on it."""
    with _server() as server:
        name = f"agent_bridge_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield _with_database(server, name)
        finally:
            with psycopg.connect(server, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
