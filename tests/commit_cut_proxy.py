"""A TCP proxy on 127.0.0.1 in front of a real PostgreSQL server that loses the answer to a
committed send: the connection drops after the server committed and before its answer arrives.

Once a client has sent an ``INSERT INTO messages``, the proxy holds what the server answers from
the next CommandComplete on, up to the ReadyForQuery that reports the session idle (``I``: the
transaction has ended, the INSERT is committed). Then, while cuts are left, it drops what it holds
and closes both sides: the row is stored and the client never hears so. Nothing is timed: the
cut follows the server's own protocol messages. ``refuse_after_cuts``: once the cuts are used
up, every new connection is closed at once (the store stays unreachable through the proxy)."""

import contextlib
import socket
import threading
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

PATTERN = b"INSERT INTO messages"
COMMAND_COMPLETE, READY_FOR_QUERY, IDLE = ord("C"), ord("Z"), ord("I")


class CommitCutProxy:
    def __init__(self, url: str, *, cuts: int = 1, refuse_after_cuts: bool = False) -> None:
        parts = urlsplit(url)
        self._server = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self.cuts_left = cuts
        self.cut_count = 0
        self._refuse = refuse_after_cuts
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        # No TLS or GSS negotiation: every message of the server's side then has a type byte.
        query = dict(parse_qsl(parts.query)) | {"sslmode": "disable", "gssencmode": "disable"}
        netloc = f"{parts.username}@127.0.0.1:{port}" if parts.username else f"127.0.0.1:{port}"
        self.url = urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), ""))
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                refuse = self._refuse and self.cuts_left == 0
            if refuse:
                client.close()
                continue
            server = socket.create_connection(self._server)
            self._sockets += [client, server]
            pending = threading.Event()  # this connection sent the INSERT
            for target in (self._client_to_server, self._server_to_client):
                thread = threading.Thread(target=target, args=(client, server, pending), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _client_to_server(self, client: socket.socket, server: socket.socket, pending: threading.Event) -> None:
        tail = b""
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                if PATTERN in tail + data:
                    pending.set()  # before the INSERT reaches the server: its answer is judged
                tail = (tail + data)[-len(PATTERN) :]
                server.sendall(data)
        _close(client, server)

    def _server_to_client(self, client: socket.socket, server: socket.socket, pending: threading.Event) -> None:
        buffer, held = b"", b""
        with contextlib.suppress(OSError):
            while data := server.recv(65536):
                buffer += data
                while len(buffer) >= 5 and len(buffer) >= 1 + int.from_bytes(buffer[1:5], "big"):
                    size = 1 + int.from_bytes(buffer[1:5], "big")
                    message, buffer = buffer[:size], buffer[size:]
                    if not pending.is_set():
                        client.sendall(message)
                        continue
                    if message[0] == COMMAND_COMPLETE or held:
                        held += message
                    else:
                        client.sendall(message)
                    if message[0] == READY_FOR_QUERY:
                        if message[5] == IDLE and held and self._take_cut():
                            _close(client, server)  # committed; the answer is dropped with `held`
                            return
                        client.sendall(held)  # (ends with this ReadyForQuery when anything was held)
                        held = b""
                        if message[5] == IDLE:
                            pending.clear()
        _close(client, server)

    def _take_cut(self) -> bool:
        with self._lock:
            if self.cuts_left == 0:
                return False
            self.cuts_left -= 1
            self.cut_count += 1
            return True

    def close(self) -> None:
        _close(self._listener)  # the shutdown wakes the accept() that a close alone would leave blocked
        for sock in self._sockets:
            _close(sock)
        for thread in self._threads:
            thread.join(10)

    def __enter__(self) -> "CommitCutProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
