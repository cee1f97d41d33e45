"""A dlb-mcp agent for the wake benchmarks, run with the peer's own interpreter.

``<dlb venv>/bin/python bench/dlb_agent.py`` with ``DLB_STORE`` set reads one command per
line on stdin and answers one line on stdout, calling the functions dlb-mcp's own MCP
tools call (its ``send`` tool is ``store.send``, its ``read`` tool ``store.read``), in
this process, on their own connections, as its server would:

- ``send SENDER RECIPIENT KIND|- NONCE`` -> ``ok T ID``: sends the body ``bench payload
  NONCE``; ``T`` is ``time.monotonic()`` just before ``store.send`` (the system-wide
  CLOCK_MONOTONIC, comparable with the benchmark process's clock);
- ``register NAME`` -> ``ok``: takes the name's session token (kept here, never printed);
- ``drain NAME`` -> ``ok NONCE ...``: reads (and so marks read) everything unread, 100 at
  a time, as the registered owner; answers the nonces of the bodies it got;
- ``unread NAME`` -> ``ok COUNT``.

A failure answers ``error <exception type>``. Only the standard library and dlb_mcp are
imported: this file runs outside this project's venv.
"""

import sqlite3
import sys
import time

from dlb_mcp import store

BODY = "bench payload"


def handle(line: str, tokens: dict[str, str]) -> str:
    cmd, _, rest = line.strip().partition(" ")
    if cmd == "send":
        sender, recipient, kind, nonce = rest.split(" ")
        before = time.monotonic()
        message = store.send(to=recipient, body=f"{BODY} {nonce}", from_=sender,
                             msg_type=None if kind == "-" else kind)
        return f"ok {before!r} {message.id}"
    if cmd == "register":
        tokens[rest] = store.register(rest)["session_token"]
        return "ok"
    if cmd == "drain":
        nonces: list[str] = []
        while got := store.read(rest, tokens.get(rest), limit=100):
            nonces += [m.body.rsplit(" ", 1)[-1] for m in got]
        return " ".join(["ok", *nonces])
    if cmd == "unread":
        conn = sqlite3.connect(str(store.store_path()), timeout=5.0)
        try:
            count = conn.execute("SELECT COUNT(*) FROM messages WHERE recipient_name = ? AND read_at_ms IS NULL",
                                 (rest,)).fetchone()[0]
        finally:
            conn.close()
        return f"ok {count}"
    raise ValueError(cmd)


def main() -> None:
    store.init_schema()
    tokens: dict[str, str] = {}
    print("ready", flush=True)
    for line in sys.stdin:
        try:
            answer = handle(line, tokens)
        except Exception as e:  # noqa: BLE001 - the driver reports it
            answer = f"error {type(e).__name__}"
        print(answer, flush=True)


if __name__ == "__main__":
    main()
