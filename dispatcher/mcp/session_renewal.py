"""The server renews its session row while it runs, on a store that several hosts share.

Another host cannot see this server's process in its /proc; the renewal is its evidence
(``presence.sessions``). Every quarter of the session lease the row is renewed from a worker
thread on a connection of its own (``ServerPresence.renew_on_own_connection``), so a store that
does not answer never stalls the event loop. A SQLite store is one host's: nothing runs there.
"""

import anyio
from anyio.abc import TaskGroup

from dispatcher.bridge.presence import ServerPresence, session_lease
from dispatcher.core.host_lease import renew_every
from dispatcher.mcp.lifespan import run_alongside


async def _renew_forever(presence: ServerPresence) -> None:
    every = renew_every(session_lease())
    while True:
        await anyio.sleep(every)
        # abandon_on_cancel: a renewal stuck on an unanswering server must not hold up the exit
        await anyio.to_thread.run_sync(presence.renew_on_own_connection, abandon_on_cancel=True)


def install(low: object, presence: ServerPresence) -> None:
    def enter(tg: TaskGroup) -> None:
        tg.start_soon(_renew_forever, presence)

    run_alongside(low, enter)
