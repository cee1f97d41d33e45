"""How long a store call waits for another writer's lock before it gives up: SQLite's busy
timeout, and PostgreSQL's ``lock_timeout`` set to the same (``postgres.SESSION_BOUNDS``)."""

BUSY_TIMEOUT_MS = 15_000
# A running counter's increment (``store.metrics.count_event``) waits at most this long for the
# lock, then is dropped: it is never worth delaying the wake or the notice it counts.
COUNT_WAIT_MS = 250
