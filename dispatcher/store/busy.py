"""How long a store call waits for another writer's lock before it gives up: SQLite's busy
timeout, and PostgreSQL's ``lock_timeout`` set to the same (``postgres.SESSION_BOUNDS``)."""

BUSY_TIMEOUT_MS = 15_000
