"""Background work that lives exactly as long as the server's run (the SDK's lifespan)."""

from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskGroup


def run_alongside(low: Any, enter: Callable[[TaskGroup], None], leave: Callable[[], None] = lambda: None) -> None:
    """Wrap the low-level server's lifespan: ``enter`` gets a task group when the run starts;
    when it ends the group is cancelled and ``leave`` runs."""
    outer_lifespan = low.lifespan

    @asynccontextmanager
    async def lifespan(server: Any):
        async with outer_lifespan(server) as state, anyio.create_task_group() as tg:
            enter(tg)
            try:
                yield state
            finally:
                tg.cancel_scope.cancel()
                leave()

    low.lifespan = lifespan
