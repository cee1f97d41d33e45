"""One agent's send and read paths for the wake benchmarks, in a process of its own.

``<python> bench/wake_agent.py ours|dlb``, run with that system's own interpreter and its store
in the environment (ours: ``AGENT_BRIDGE_DB``, dlb: ``DLB_STORE``), reads one command per line
on stdin and answers one line on stdout. It calls the function each system's own MCP tool
calls, on its own connection, as that system's server process would: ours
``dispatcher.bridge.messages.send_message`` / ``receive_messages`` + ``mark_read``; dlb-mcp
``dlb_mcp.store.send`` / ``store.read`` (its ``send`` and ``read`` tools are thin wrappers).

- ``send SENDER RECIPIENT KIND|- NONCE`` -> ``ok T ID``: commits a message whose body is
  ``bench payload NONCE``; ``T`` is ``time.monotonic()`` just before the call (the
  system-wide CLOCK_MONOTONIC, comparable with the benchmark process's clock);
- ``register NAME`` -> ``ok``: dlb takes the name's session token (kept here, never
  printed), so that its reads mark read; ours has nothing to do;
- ``drain NAME`` -> ``ok KEY ...``: takes everything unread, 100 at a time, and acknowledges
  it (ours: receive + mark_read; dlb: a registered owner's read); the keys are our ids, or the
  nonces of dlb's bodies (dlb's monitor lines carry no id);
- ``unread NAME`` -> ``ok COUNT`` (ours: unacknowledged; dlb: not read).

A failure answers ``error <exception type>``. Imports are the standard library and the
system's own package only: the dlb side runs outside this project's venv.
"""

import os
import sqlite3
import sys
import time
from pathlib import Path

BODY = "bench payload"
AGENTS = {"claude", "kimi", "codex"}


def ours():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from dispatcher.bridge import messages
    from dispatcher.store import SqliteStore

    store = SqliteStore(os.environ["AGENT_BRIDGE_DB"])

    def send(sender: str, recipient: str, kind: str | None, body: str) -> int:
        return messages.send_message(
            store.connection(), sender=sender, recipient=recipient, text=body, agents=AGENTS, kind=kind
        )["id"]

    def drain(name: str) -> list[str]:
        keys: list[str] = []
        while got := messages.receive_messages(store.connection(), agent=name, worker_id="bench", limit=100)[
            "messages"
        ]:
            ids = [m["id"] for m in got]
            messages.mark_read(store.connection(), agent=name, worker_id="bench", message_ids=ids)
            keys += map(str, ids)
        return keys

    def unread(name: str) -> int:
        return (
            store.connection()
            .execute("SELECT COUNT(*) FROM messages WHERE recipient = ? AND acknowledged_at IS NULL", (name,))
            .fetchone()[0]
        )

    return send, (lambda name: None), drain, unread


def dlb():
    from dlb_mcp import store

    store.init_schema()
    tokens: dict[str, str] = {}

    def send(sender: str, recipient: str, kind: str | None, body: str) -> int:
        return store.send(to=recipient, body=body, from_=sender, msg_type=kind).id

    def register(name: str) -> None:
        tokens[name] = store.register(name)["session_token"]

    def drain(name: str) -> list[str]:
        keys: list[str] = []
        while got := store.read(name, tokens.get(name), limit=100):
            keys += [m.body.rsplit(" ", 1)[-1] for m in got]
        return keys

    def unread(name: str) -> int:
        conn = sqlite3.connect(str(store.store_path()), timeout=5.0)
        try:
            return conn.execute(
                "SELECT COUNT(*) FROM messages WHERE recipient_name = ? AND read_at_ms IS NULL", (name,)
            ).fetchone()[0]
        finally:
            conn.close()

    return send, register, drain, unread


def main() -> None:
    send, register, drain, unread = {"ours": ours, "dlb": dlb}[sys.argv[1]]()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, _, rest = line.strip().partition(" ")
        try:
            if cmd == "send":
                sender, recipient, kind, nonce = rest.split(" ")
                before = time.monotonic()
                mid = send(sender, recipient, None if kind == "-" else kind, f"{BODY} {nonce}")
                answer = f"ok {before!r} {mid}"
            elif cmd == "register":
                register(rest)
                answer = "ok"
            elif cmd == "drain":
                answer = " ".join(["ok", *drain(rest)])
            elif cmd == "unread":
                answer = f"ok {unread(rest)}"
            else:
                raise ValueError(cmd)
        except Exception as e:  # noqa: BLE001 - the driver reports it
            answer = f"error {type(e).__name__}"
        print(answer, flush=True)


if __name__ == "__main__":
    main()
