"""A parent that has imported ``server.py``'s code once and forks a server for each test that asks.

A ``server.py`` spends about 1.7 CPU-seconds importing the MCP SDK before it says a word, and the
suite starts a few hundred of them. This process pays that once per pytest process: each server is
a fork of it that takes the caller's stdin, stdout, stderr, environment and working directory, then
runs exactly what ``server.py`` runs (``dispatcher.mcp.serve.run_server``). What a test talks to is
still a real server process over real pipes; only the interpreter start-up is shared.

The caller's side is ``server_trampoline.py``: the MCP client starts it as it would start
``server.py``; it hands its standard streams over a Unix socket and lives as long as its server,
exiting with its status. Not for a test that looks at the server process from outside (its parent,
its command line or its environment in /proc): ``McpAgent(..., fresh_interpreter=True)`` execs
``server.py`` as before.

Usage: python server_zygote.py SOCKET_PATH (it says ``ready`` on stdout once it listens).
"""

import array
import contextlib
import json
import os
import selectors
import signal
import socket
import sys
from pathlib import Path
from typing import Any, NoReturn

HEADER_LIMIT = 1 << 20


def _preload() -> None:
    """What ``run_server`` imports, so that no fork imports it again."""
    import dispatcher.bridge.presence
    import dispatcher.core.config
    import dispatcher.core.logs
    import dispatcher.core.settings
    import dispatcher.mcp.mcp_server
    import dispatcher.mcp.mcp_stdio
    import dispatcher.mcp.serve
    import dispatcher.store
    import dispatcher.store.roles  # noqa: F401


def receive_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """The caller's header (environment, working directory) and its three standard streams."""
    fds = array.array("i")
    data, ancdata, _, _ = conn.recvmsg(HEADER_LIMIT, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return json.loads(data), list(fds)


def _serve_in_child(header: dict, fds: list[int], zygote_files: list[Any]) -> NoReturn:
    """In the fork: become the caller's server.py. It ends as that process would (``sys.exit``,
    the interpreter's own exit: threads joined, exit handlers run), never back in the zygote's loop."""
    signal.set_wakeup_fd(-1)
    for owned in zygote_files:  # another caller's hang-up must reach the zygote, not stay open here
        owned.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(header["cwd"])
    os.environ.clear()
    os.environ.update(header["env"])
    sys.argv = [str(Path(header["project"]) / "server.py")]
    from dispatcher.mcp.serve import run_server

    sys.exit(run_server())


def main(socket_path: str) -> None:
    _preload()
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(socket_path + ".tmp")
    os.rename(socket_path + ".tmp", socket_path)
    listening.listen(64)
    sys.stdout.write("ready\n")  # the caller starts servers only once this is said
    sys.stdout.flush()
    # A server's end wakes the loop at once: its caller is told its exit status without waiting.
    child_ended, wakeup = os.pipe()
    os.set_blocking(wakeup, False)
    signal.set_wakeup_fd(wakeup)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    parent = os.getppid()
    callers: dict[int, socket.socket] = {}  # server pid -> its caller's connection
    selector = selectors.DefaultSelector()
    selector.register(listening, selectors.EVENT_READ)
    selector.register(child_ended, selectors.EVENT_READ)
    while os.getppid() == parent:  # the test process gone: so is this one
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is listening:
                conn, _ = listening.accept()
                header, fds = receive_request(conn)
                pid = os.fork()
                if pid == 0:
                    pipe = [os.fdopen(child_ended, "rb", buffering=0), os.fdopen(wakeup, "wb", buffering=0)]
                    _serve_in_child(header, fds, [listening, conn, selector, *callers.values(), *pipe])
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                callers[pid] = conn
                selector.register(conn, selectors.EVENT_READ, pid)
            elif key.fileobj is child_ended:
                os.read(child_ended, 4096)
            else:  # a caller hung up before its server ended: end the server as its exit would
                selector.unregister(key.fileobj)
                os.kill(key.data, signal.SIGKILL)
        _tell_ended(callers, selector)
    for pid in callers:
        os.kill(pid, signal.SIGKILL)


def _tell_ended(callers: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    """Reap every ended server and send its caller the exit status."""
    while callers:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        conn = callers.pop(pid)
        if conn in (key.fileobj for key in selector.get_map().values()):
            selector.unregister(conn)
        with contextlib.suppress(OSError):
            conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        conn.close()


if __name__ == "__main__":
    main(sys.argv[1])
