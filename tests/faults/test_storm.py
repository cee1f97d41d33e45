"""Fault injection, part 2 (slow, about a minute on each backend): a busy storm on one store.

8 writer and 8 reader processes for 6 s (tens of thousands of messages on 2 cores; draining
them takes most of the time, so a longer storm only adds minutes; FAULT_STORM_SECONDS sets
it): half of each are real MCP servers (server.py, driven over stdio by threads of this
test), half are plain processes on the domain layer (tests/workers/storm_worker.py), which
hammer the store much harder than the servers can (a server costs ~1.5 CPU-s to start, the
suite's time is what the count of them trades against).
Writers w00..w07 send to one recipient, "sink"; every reader is a "sink" process (its own
worker id) that receives, claims and then acknowledges. Exactly once is then well defined:
each message must show up in exactly one reader's mark_read ``acknowledged`` list, and no
caller may ever see an error other than losing a claim race (claimed_by_other /
already_acknowledged), in particular no store_unavailable from a busy store.
"""

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from dispatch_harness import integrity, wait_until
from faultkit import kill_marked, new_marker
from harness import PROJECT, McpAgent, bridge_env, on_backend, sql, write_config

pytestmark = [pytest.mark.slow, pytest.mark.both_backends]

WRITERS = 8
READERS = 8
MCP_WRITERS = 4  # the rest are domain-layer processes
MCP_READERS = 4
STORM_SECONDS = float(os.environ.get("FAULT_STORM_SECONDS", "6"))
DRAIN_DEADLINE = 180.0
CONTENTION = ("claimed_by_other", "already_acknowledged")
STORM_WORKER = PROJECT / "tests" / "workers" / "storm_worker.py"


class McpWriter(threading.Thread):
    def __init__(self, agent: McpAgent, seconds: float) -> None:
        super().__init__(daemon=True)
        self.agent, self.seconds = agent, seconds
        self.sent: list[int] = []
        self.errors: list[str] = []

    def run(self) -> None:
        deadline = time.monotonic() + self.seconds
        n = 0
        while time.monotonic() < deadline:
            key = f"{self.agent.agent}-{n}"
            try:
                result = self.agent.call("send_message", recipient="sink", text=f"storm {key}", dedup_key=key)
            except Exception as exc:  # noqa: BLE001 - transport failure: the caller saw an error
                self.errors.append(f"send {key}: {type(exc).__name__}: {exc}")
                return
            if result.is_error:
                self.errors.append(f"send {key}: {result.text}")
                continue  # retry the same key
            self.sent.append(result.data["id"])
            n += 1


class McpReader(threading.Thread):
    def __init__(self, agent: McpAgent, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.agent, self.stop = agent, stop
        self.rng = random.Random(id(self))
        self.acknowledged: list[int] = []
        self.refusals: Counter = Counter()
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                received = self.agent.call("receive_messages", limit=50, wait_seconds=0.5)
                if received.is_error:
                    self.errors.append(f"receive: {received.text}")
                    continue
                batch = received.data["messages"]
                self.rng.shuffle(batch)  # every reader sees the same oldest messages: spread the claims
                for message in batch:
                    claimed = self.agent.call("claim_message", message_id=message["id"])
                    if claimed.is_error:
                        if claimed.code in CONTENTION:
                            self.refusals[claimed.code] += 1
                        else:
                            self.errors.append(f"claim #{message['id']}: {claimed.text}")
                        continue
                    done = self.agent.call("mark_read", message_ids=[message["id"]])
                    if done.is_error or done.data["acknowledged"] != [message["id"]]:
                        self.errors.append(f"mark_read #{message['id']} after claiming it: {done.text}")
                        continue
                    self.acknowledged.extend(done.data["acknowledged"])
        except Exception as exc:  # noqa: BLE001 - any failure of the reader thread is recorded and asserted empty
            self.errors.append(f"{type(exc).__name__}: {exc}")


def test_busy_storm_every_message_acknowledged_exactly_once(tmp_path, backend, request):
    writers = [f"w{i:02d}" for i in range(WRITERS)]
    agents = {name: {"launcher": "unused"} for name in [*writers, "sink"]}
    marker = new_marker()
    env = on_backend(
        {**bridge_env(tmp_path, write_config(tmp_path / "config.json", agents)), "FAULT_RUN": marker},
        backend,
        request,
    )
    db: Path | str = env["AGENT_BRIDGE_DB"] if backend == "postgres" else Path(env["AGENT_BRIDGE_DB"])
    out = tmp_path / "out"
    out.mkdir()
    stop_file = tmp_path / "stop"
    stop = threading.Event()
    started = time.monotonic()
    servers = [McpAgent(name, env, tmp_path / "servers.stderr") for name in writers[:MCP_WRITERS]]
    servers += [McpAgent("sink", env, tmp_path / "servers.stderr") for _ in range(MCP_READERS)]
    procs: list[subprocess.Popen] = []
    try:
        for server in servers:
            server.wait_ready()
        boot = time.monotonic() - started
        proc_env = {**os.environ, **env, "PYTHONPATH": str(PROJECT)}

        def spawn(*args: str) -> None:
            with open(tmp_path / "workers.stderr", "ab") as err:  # Popen keeps its own copy
                procs.append(
                    subprocess.Popen(
                        [sys.executable, str(STORM_WORKER), *args],
                        cwd=PROJECT,
                        env=proc_env,
                        stdin=subprocess.DEVNULL,
                        stderr=err,
                    )
                )

        for i in range(READERS - MCP_READERS):
            spawn("reader", "sink", str(stop_file), str(out / f"reader-{i}.json"))
        for name in writers[MCP_WRITERS:]:
            spawn("writer", name, "sink", str(STORM_SECONDS), str(out / f"{name}.json"))
        mcp_writers = [McpWriter(s, STORM_SECONDS) for s in servers[:MCP_WRITERS]]
        mcp_readers = [McpReader(s, stop) for s in servers[MCP_WRITERS:]]
        for thread in (*mcp_writers, *mcp_readers):
            thread.start()

        for thread in mcp_writers:
            thread.join(STORM_SECONDS + 150)
            assert not thread.is_alive(), "an MCP writer hung"
        writer_procs = procs[READERS - MCP_READERS :]
        for proc in writer_procs:
            assert proc.wait(STORM_SECONDS + 150) == 0, "a writer process failed; see workers.stderr"
        stormed = time.monotonic() - started - boot

        def unacknowledged() -> int:
            return sql(db, "SELECT count(*) FROM messages WHERE acknowledged_at IS NULL")[0][0]

        backlog = unacknowledged()
        wait_until(lambda: unacknowledged() == 0, DRAIN_DEADLINE, "the readers to acknowledge every message")
        drained = time.monotonic() - started - boot - stormed
        stop.set()
        stop_file.touch()
        for thread in mcp_readers:
            thread.join(150)
            assert not thread.is_alive(), "an MCP reader hung"
        for proc in procs[: READERS - MCP_READERS]:
            assert proc.wait(150) == 0, "a reader process failed; see workers.stderr"
    finally:
        stop.set()
        stop_file.touch()
        for server in servers:
            server.close()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        kill_marked(marker)

    results = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    sent = [i for r in results for i in r.get("sent", [])] + [i for t in mcp_writers for i in t.sent]
    acks = [i for r in results for i in r.get("acknowledged", [])] + [i for t in mcp_readers for i in t.acknowledged]
    errors = [e for r in results for e in r["errors"]] + [e for t in (*mcp_writers, *mcp_readers) for e in t.errors]
    refusals = sum((Counter(r.get("refusals", {})) for r in results), Counter())
    refusals += sum((t.refusals for t in mcp_readers), Counter())
    mcp_sent = sum(len(t.sent) for t in mcp_writers)
    mcp_acks = sum(len(t.acknowledged) for t in mcp_readers)
    print(
        f"\n[storm] servers up in {boot:.1f} s; {len(sent)} sent in {stormed:.1f} s ({mcp_sent} over MCP); "
        f"backlog {backlog} drained in {drained:.1f} s; {len(acks)} acknowledged ({mcp_acks} over MCP); "
        f"contention refusals {dict(refusals)}; total {time.monotonic() - started:.1f} s"
    )

    assert not errors, f"{len(errors)} errors reached callers, e.g. {errors[:5]}"
    assert len(set(sent)) == len(sent), "a writer got one id for two messages"
    twice = [i for i, n in Counter(acks).items() if n > 1]
    assert not twice, f"acknowledged more than once: {twice[:10]}"
    assert sorted(acks) == sorted(sent), (
        f"never acknowledged: {sorted(set(sent) - set(acks))[:10]}, unknown: {sorted(set(acks) - set(sent))[:10]}"
    )
    stored = sql(db, "SELECT count(*), count(acknowledged_at) FROM messages WHERE recipient = 'sink'")[0]
    assert stored == (len(sent), len(sent))
    assert mcp_sent > 0 and mcp_acks > 0, "the MCP half did no work"
    assert integrity(db) == "ok"
