"""One process of the busy storm (tests/faults/test_storm.py), on the domain layer directly.

    storm_worker.py writer AGENT RECIPIENT SECONDS OUT_JSON
        send messages to RECIPIENT as fast as possible for SECONDS, each with a fresh
        dedup_key; a failed send is retried with the same key (so it counts once).
    storm_worker.py reader AGENT STOP_FILE OUT_JSON
        receive, claim and mark_read messages for AGENT until STOP_FILE exists.

Writes {"sent" | "acknowledged": [ids], "refusals": {code: n}, "errors": [text]} to
OUT_JSON. "errors" is everything a tool caller would have seen as a failure: a store
error, a busy timeout, an unexpected refusal.
"""

import json
import os
import random
import sqlite3
import sys
import time
from collections import Counter
from pathlib import Path

from dispatcher.bridge.claims import claim_message
from dispatcher.bridge.messages import mark_read, receive_messages, send_message
from dispatcher.core.errors import BridgeError
from dispatcher.store import open_store

CONTENTION = {"claimed_by_other", "already_acknowledged"}  # losing a race to another reader


def writer(agent: str, recipient: str, seconds: float, out: Path) -> None:
    conn = open_store(os.environ["AGENT_BRIDGE_DB"])
    agents = {agent, recipient}
    sent, errors = [], []
    n = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        key = f"{agent}-{n}"
        try:
            result = send_message(
                conn, sender=agent, recipient=recipient, text=f"storm {key}", dedup_key=key, agents=agents
            )
        except (BridgeError, sqlite3.Error) as exc:
            errors.append(f"send {key}: {exc}")
            continue  # the same key again
        sent.append(result["id"])  # a retried key that did commit comes back as a duplicate
        n += 1
    out.write_text(json.dumps({"sent": sent, "errors": errors}))


def reader(agent: str, stop_file: Path, out: Path) -> None:
    conn = open_store(os.environ["AGENT_BRIDGE_DB"])
    worker_id = f"{agent}-storm-{os.getpid()}"
    acknowledged, errors, refusals = [], [], Counter()
    rng = random.Random(os.getpid())
    while not stop_file.exists():
        try:
            batch = receive_messages(conn, agent=agent, worker_id=worker_id, limit=50)["messages"]
        except (BridgeError, sqlite3.Error) as exc:
            errors.append(f"receive: {exc}")
            continue
        if not batch:
            time.sleep(0.01)  # idle: look again shortly
        rng.shuffle(batch)  # every reader sees the same oldest messages: spread the claims
        for message in batch:
            try:
                claim_message(conn, agent=agent, worker_id=worker_id, message_id=message["id"])
                done = mark_read(conn, agent=agent, worker_id=worker_id, message_ids=[message["id"]])
            except BridgeError as exc:
                if exc.code in CONTENTION:
                    refusals[exc.code] += 1
                else:
                    errors.append(f"#{message['id']}: {exc}")
                continue
            except sqlite3.Error as exc:
                errors.append(f"#{message['id']}: {exc}")
                continue
            if done["acknowledged"] != [message["id"]]:
                errors.append(f"#{message['id']}: claimed but not acknowledged: {done}")
            acknowledged.extend(done["acknowledged"])
    out.write_text(json.dumps({"acknowledged": acknowledged, "refusals": refusals, "errors": errors}))


if __name__ == "__main__":
    mode, agent = sys.argv[1], sys.argv[2]
    if mode == "writer":
        writer(agent, sys.argv[3], float(sys.argv[4]), Path(sys.argv[5]))
    else:
        reader(agent, Path(sys.argv[3]), Path(sys.argv[4]))
