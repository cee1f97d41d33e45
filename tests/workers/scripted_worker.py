"""A fast scripted headless worker: the domain layer directly, no MCP SDK, no model.

Usage (from a launcher): scripted_worker.py REQUEST_FILE. The supervisor's environment
names the message (AGENT_BRIDGE_MESSAGE_ID), the store (AGENT_BRIDGE_DB) and who we are
(AGENT_ID). Before touching the store it appends the message id to the file named by
SCRIPTED_WORKER_LAUNCHES (one O_APPEND write per launch, so a second launch of the same
message shows up as a duplicate line). Then it does what a well-behaved worker does:
get_message, claim, reply with a result, mark_read (as its attempt, the way a worker's
server bound to the attempt does), pausing a seeded random moment
(up to SCRIPTED_WORKER_MAX_PAUSE seconds) between steps so that a fault injector can
land a kill inside any of them. With SCRIPTED_WORKER_FORK set it first forks a child that
outlives it (sleeping, carrying the worker's environment) and forks again whenever it gets
TERM, only the new child going on: what containment must end with the attempt.
"""

import os
import random
import sys
import time

PROJECT = os.environ.get("AGENT_BRIDGE_PROJECT")
if PROJECT and PROJECT not in sys.path:
    sys.path.insert(0, PROJECT)


def main() -> int:
    message_id = int(os.environ["AGENT_BRIDGE_MESSAGE_ID"])
    agent = os.environ["AGENT_ID"]
    fd = os.open(os.environ["SCRIPTED_WORKER_LAUNCHES"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{message_id} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
    if os.environ.get("SCRIPTED_WORKER_FORK") and os.fork() == 0:
        import signal

        signal.signal(signal.SIGTERM, lambda *_: os.fork() and os._exit(0))
        while True:
            time.sleep(60)
    rng = random.Random(f"{os.environ.get('FAULT_SEED', '0')}:{message_id}")
    max_pause = float(os.environ.get("SCRIPTED_WORKER_MAX_PAUSE", "0"))

    def pause() -> None:
        if max_pause > 0:
            time.sleep(rng.uniform(0, max_pause))

    from dispatcher.bridge.claims import claim_message
    from dispatcher.bridge.messages import get_message, mark_read, send_message
    from dispatcher.bridge.worker_scope import attempt_claim_owner
    from dispatcher.store import open_store

    conn = open_store(os.environ["AGENT_BRIDGE_DB"])
    worker_id = attempt_claim_owner(agent, message_id)  # as its attempt's worker server acts
    message = get_message(conn, agent=agent, worker_id=worker_id, message_id=message_id)
    pause()
    claim_message(conn, agent=agent, worker_id=worker_id, message_id=message_id)
    pause()
    send_message(
        conn,
        sender=agent,
        recipient=message["sender"],
        kind="result",
        reply_to=message_id,
        text=f"done: scripted worker handled message {message_id}",
        agents={agent, message["sender"]},
        attempt=message_id,  # recorded on the row, as the worker's server records it
    )
    pause()
    mark_read(conn, agent=agent, worker_id=worker_id, message_ids=[message_id])
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
