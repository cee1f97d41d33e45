"""A PostgreSQL server that stops answering (a network partition, a host that is down) while
the MCP server's event loop waits on its LISTEN connection: listening again happens in a worker
thread, so the loop goes on serving; once the server answers again, the waiter listens again and
a notice wakes it. The partition is a TCP proxy in front of the real server that cuts its
connections and then accepts new ones without a word (a connect waits for its timeout)."""

import contextlib
import socket
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest

from dispatcher.core.locations import StoreUrl
from dispatcher.store import open_store
from dispatcher.store.changes import StoreChanges
from dispatcher.store.messages import insert_message
from dispatcher.store.postgres import CONNECT_TIMEOUT_SECONDS


class Partition:
    """127.0.0.1:<port> in front of the server at ``upstream``; ``cut()`` drops every connection
    and leaves new ones unanswered, ``heal()`` forwards again."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream, self.cut_off = upstream, False
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.sockets.append(client)
            if self.cut_off:
                continue  # held open, never answered
            server = socket.create_connection(self.upstream)
            self.sockets.append(server)
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.cut_off = True
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def heal(self) -> None:
        self.cut_off = False

    def close(self) -> None:
        self.cut()
        self.listener.close()


@pytest.fixture
def partition(postgres_url):
    parts = urlsplit(postgres_url)
    made = Partition((parts.hostname or "127.0.0.1", parts.port or 5432))
    via = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{made.port}"))
    open_store(postgres_url).close()  # the schema, made directly
    yield made, via, postgres_url
    made.close()


def test_a_server_that_stops_answering_blocks_no_event_loop_and_the_waiter_listens_again(partition):
    made, via, direct = partition
    changes = StoreChanges(StoreUrl(via), "claude")
    gaps: list[float] = []

    async def main() -> None:
        async def tick() -> None:
            last = time.monotonic()
            while True:
                await anyio.sleep(0.05)
                gaps.append(time.monotonic() - last)
                last = time.monotonic()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(tick)
            made.cut()
            # Each look while cut off ends within its own limit; one worker thread tries to listen
            # again, for as long as a connect that nobody answers takes.
            until = time.monotonic() + CONNECT_TIMEOUT_SECONDS + 2
            while time.monotonic() < until:
                assert await changes.next_change(1.0)  # "look now": nothing is listening
            made.heal()
            deadline = time.monotonic() + 120
            while changes._notices.listening() is None:  # noqa: SLF001 - the waiter's own LISTEN connection
                assert time.monotonic() < deadline, "the waiter never listened again"
                await changes.next_change(1.0)
            conn = open_store(direct)
            try:
                insert_message(conn, sender="kimi", recipient="claude", text="after the partition", created_at=1.0)
            finally:
                conn.close()
            assert await changes.next_change(120.0), "the notice after the partition did not wake the waiter"
            tasks.cancel_scope.cancel()

    try:
        anyio.run(main)
    finally:
        changes.close()
    # The loop never stood still for a connect's timeout: the ticker ran all along.
    assert max(gaps) < CONNECT_TIMEOUT_SECONDS / 2, max(gaps)
