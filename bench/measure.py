"""The measurements, each written once against ``Target`` and run for every system.

Every loop is bounded twice: by a count and by a wall-clock deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from .session import open_floor_tool, open_session, server_log_tail
from .stats import summarize
from .targets import (
    READER,
    RECIPIENTS,
    REPO,
    SENDERS,
    TEXT,
    LogicalRow,
    Store,
    Target,
    spec_of,
)

HERE = Path(__file__).resolve().parent
PROBE = HERE / "probe_domain.py"


def _round(samples: list[float]) -> list[float]:
    return [round(s, 7) for s in samples]


# ----------------------------------------------------------------------------- backlog fill


# dlb-mcp keeps every inbox to its newest 1000 messages (DLB_MAX_INBOX); a reader's handled
# history is held to the same size for both systems, so neither is charged for rows that
# one of them would never have kept.
READER_HISTORY_CAP = 1000
STEADY_UNREAD = 100


def backlog_rows(
    background: int, unread_for_reader: int, now: float | None = None, reader_history_cap: int = READER_HISTORY_CAP
) -> Iterator[LogicalRow]:
    """``background`` old rows the reader must not get, then ``unread_for_reader`` new ones for it.

    The background is spread evenly over the 17 inboxes (a0..a15 and the reader), as in a
    long-lived bridge, except that the reader's share, all acknowledged history, is held
    to ``reader_history_cap`` rows. 1 % of the other agents' rows are still unread (their
    business, not the reader's).
    """
    now = time.time() if now is None else now
    start = now - 3600 - background * 0.001
    quota = min(background // len(RECIPIENTS), reader_history_cap)
    j = 0
    for i in range(background):
        if quota and (i * quota) // background != ((i + 1) * quota) // background:
            recipient = READER
            sender = SENDERS[i % len(SENDERS)]
            acknowledged = True
        else:
            recipient = SENDERS[j % len(SENDERS)]
            sender = SENDERS[(j + 1 + (j // len(SENDERS)) % (len(SENDERS) - 1)) % len(SENDERS)]
            acknowledged = j % 100 != 7
            j += 1
        yield LogicalRow(sender, recipient, TEXT, start + i * 0.001, acknowledged)
    for k in range(unread_for_reader):
        yield LogicalRow(SENDERS[k % len(SENDERS)], READER, TEXT, now - 600 + k * 0.001, False)


class InboxKeeper:
    """Holds the reader's inbox steady between timed calls (its work is never timed).

    After each call it tops the unread messages back up to ``unread`` and, every few
    hundred inserted rows, trims the reader's handled history to ``history_cap`` rows. So
    every call sees the same inbox whether receiving removes messages (dlb's read) or not
    (ours until mark_read), and history doesn't pile up beyond what dlb would keep.
    """

    def __init__(
        self, target: Target, store: Store, *, unread: int = STEADY_UNREAD, history_cap: int = READER_HISTORY_CAP
    ) -> None:
        self.target, self.unread, self.history_cap = target, unread, history_cap
        self.conn = target.connect_raw(store)
        self.inserted_since_trim = 0
        self.inserted = 0

    def __call__(self) -> None:
        t = self.target
        have = self.conn.execute(f"SELECT count(*) FROM messages WHERE {t.unread_where}", (READER,)).fetchone()[0]
        missing = self.unread - have
        if missing <= 0:
            return
        now = time.time()
        rows = [
            t.row(LogicalRow(SENDERS[k % len(SENDERS)], READER, TEXT, now + k * 1e-6, False)) for k in range(missing)
        ]
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(t.insert_sql, rows)
        self.inserted += missing
        self.inserted_since_trim += missing
        if self.inserted_since_trim >= 200:
            self.conn.execute(t.trim_sql.format(where=t.handled_where), (READER, self.history_cap))
            self.inserted_since_trim = 0
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


def fill_store(target: Target, store: Store, *, background: int, unread_for_reader: int) -> dict[str, Any]:
    """Bulk-insert straight into the target's table: one executemany in one transaction."""
    t0 = time.perf_counter()
    rows = (target.row(m) for m in backlog_rows(background, unread_for_reader))
    conn = target.connect_raw(store)
    try:
        if isinstance(store.db, Path):
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN")
        conn.executemany(target.insert_sql, rows)
        conn.execute("COMMIT")
        if isinstance(store.db, Path):  # fold the WAL into the file: the first measured call doesn't pay for the fill
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        total = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        size = (
            store.db.stat().st_size
            if isinstance(store.db, Path)
            else conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        )
    finally:
        conn.close()
    return {
        "background": background,
        "unread_for_reader": unread_for_reader,
        "rows_in_store": total,
        "fill_seconds": round(time.perf_counter() - t0, 3),
        "db_bytes": size,
    }


# ----------------------------------------------------------------------------- cold start


def bare_import_seconds(target: Target, *, teardown: bool) -> float:
    """Wall time of ``python -c "import <the SDK's server module>"``.

    With ``teardown`` the clock stops when the interpreter has exited normally (the literal
    command); without it the child leaves through ``os._exit`` right after the import, so
    the figure is spawn + import only, which is what a server pays before it can answer.
    """
    code = f"import {target.bare_import}" + ("" if teardown else "; import os; os._exit(0)")
    t0 = time.perf_counter()
    subprocess.run([target.python(), "-c", code], check=True, cwd=str(REPO))
    return time.perf_counter() - t0


async def cold_start_seconds(target: Target, store: Store) -> tuple[float, bool, str | None]:
    """Spawn the server, complete the MCP handshake and get the first tool result back."""
    t0 = time.perf_counter()
    async with open_session(target, store, SENDERS[0]) as s:
        out = await s.send(READER, "cold start")
        elapsed = time.perf_counter() - t0
    return elapsed, out.ok, out.error


async def cold_start(targets: list[Target], stores: dict[str, Store], reps: int, max_seconds: float) -> dict:
    """Interleave the systems and their bare imports rep by rep; the first rep warms caches."""
    kinds = ("server", "import_only", "bare_import")
    raw: dict[str, dict[str, list]] = {t.key: {k: [] for k in (*kinds, "errors")} for t in targets}
    deadline = time.monotonic() + max_seconds
    for rep in range(reps + 1):
        if time.monotonic() > deadline:
            break
        for t in targets:
            imp_only = bare_import_seconds(t, teardown=False)
            srv, ok, err = await cold_start_seconds(t, stores[t.key])
            imp = bare_import_seconds(t, teardown=True)
            if rep == 0:
                continue
            for k, v in zip(kinds, (srv, imp_only, imp), strict=True):
                raw[t.key][k].append(v)
            if not ok:
                raw[t.key]["errors"].append(err)
    out = {}
    for t in targets:
        r = raw[t.key]
        summ = {k: summarize(r[k]) for k in kinds}

        def over(base: str) -> float | None:
            return summ["server"]["median"] - summ[base]["median"] if summ["server"]["n"] and summ[base]["n"] else None  # noqa: B023 - the closure runs at once, inside this iteration

        out[t.key] = {
            "server_to_first_result": summ["server"],
            "bare_import": {**summ["bare_import"], "command": f'python -c "import {t.bare_import}"'},
            "import_only": {
                **summ["import_only"],
                "command": f'python -c "import {t.bare_import}; import os; os._exit(0)"',
            },
            "over_bare_import_median": over("bare_import"),
            "over_import_only_median": over("import_only"),
            "errors": len(r["errors"]),
            "error_samples": r["errors"][:3],
            "samples": {k: _round(r[k]) for k in kinds},
        }
    return out


# ----------------------------------------------------------------------------- latency


SDK_INSERT = "sdk_insert"  # ours only: a bare SDK tool inserting one SQLite row, timed in the send loop
# Calls per system in a row: a call after one of another system's pays for the switch (caches, the
# scheduler; +0.58 ms for our send, +0.47 for dlb's, in the call-by-call run of 2 December 14:58).
LATENCY_BLOCK = 10
# A session's calls come seconds apart: sends timed after an idle gap as well, call by call.
IDLE_GAP_SECONDS = 0.1
IDLE_CALLS = 200


async def latency(
    pairs: list[tuple[Target, Store]], *, calls: int, warmup: int, limit: int, max_seconds: float
) -> dict[str, dict]:
    """Per-call latency of send, of receive (limit ``limit``) and of a consume cycle.

    One call at a time, the systems interleaved in blocks of ``LATENCY_BLOCK`` calls (their order
    alternating), so a burst of load on the shared machine hits both alike; then sends once more,
    call by call, each after ``IDLE_GAP_SECONDS`` of nothing (``send_after_idle``), as a session's
    calls come. Sends go from a0 to a1. The
    reader's inbox is held at ``STEADY_UNREAD`` unread messages by an untimed
    ``InboxKeeper``, so every receive returns a full page whether or not receiving
    removes messages (dlb's read does; ours leaves them until mark_read). A consume cycle
    takes a page out for good: ours receive_messages + mark_read, dlb read. With ours among the
    systems, the send loop also times the ``insert`` tool of a bare ``MCPServer``
    (``bench/noop_server.py``: one SQLite row in its own transaction) on a process of its own:
    the floor of any send that writes its message, over this SDK.
    """
    out: dict[str, dict] = {t.key: {} for t, _ in pairs}
    ours = next(((t, st) for t, st in pairs if t.key == "ours"), None)
    async with AsyncExitStack() as stack:
        senders = {t.key: await stack.enter_async_context(open_session(t, st, SENDERS[0])) for t, st in pairs}
        readers = {t.key: await stack.enter_async_context(open_session(t, st, READER, reads=True)) for t, st in pairs}
        keepers = {t.key: InboxKeeper(t, st) for t, st in pairs}
        stack.callback(lambda: [k.close() for k in keepers.values()])
        sends = {k: (lambda s=s: s.send(SENDERS[1], TEXT), None) for k, s in senders.items()}
        if ours is not None:  # the floor of a call that writes, in the same loop: what no send of ours can go below
            target, store = ours
            errlog = stack.enter_context(open(store.dir / "noop-server.stderr.log", "a", encoding="utf-8"))  # noqa: SIM115 - closed by the ExitStack it is entered into
            (store.dir / "floor-payload.json").write_text("{}", encoding="utf-8")
            floor_args = (str(store.dir / "floor-payload.json"), str(store.dir / "floor-insert.db"))
            insert = {"recipient": SENDERS[1], "text": TEXT}
            sends[SDK_INSERT] = (
                await stack.enter_async_context(
                    open_floor_tool(target.python(), "insert", insert, errlog, *floor_args)
                ),
                None,
            )
        for op, calls_by_key in (
            ("send", sends),
            ("receive", {k: (lambda r=r: r.receive(limit), keepers[k]) for k, r in readers.items()}),
            ("consume", {k: (lambda r=r: r.consume(limit), keepers[k]) for k, r in readers.items()}),
        ):
            for key, res in (await _timed_interleaved(calls_by_key, calls, warmup, max_seconds, LATENCY_BLOCK)).items():
                if key == SDK_INSERT:
                    out["ours"][SDK_INSERT] = res
                else:
                    out[key][op] = res
        idle = {k: (call, lambda: time.sleep(IDLE_GAP_SECONDS)) for k, (call, _) in sends.items()}
        for key, res in (await _timed_interleaved(idle, min(calls, IDLE_CALLS), 5, max_seconds)).items():
            system, name = ("ours", "sdk_insert_after_idle") if key == SDK_INSERT else (key, "send_after_idle")
            out[system][name] = res
    for t, _ in pairs:
        r = out[t.key]
        r["receive"]["limit"] = r["consume"]["limit"] = limit
        r["consume"]["calls"] = f"{t.recv_tool} + {t.ack_tool}" if t.ack_tool else t.recv_tool
        k = keepers[t.key]
        r["reader_inbox"] = {"unread": k.unread, "history_cap": k.history_cap, "rows_topped_up": k.inserted}
    return out


async def _timed_interleaved(
    calls_by_key: dict[str, tuple],
    calls: int,
    warmup: int,
    max_seconds: float,
    block: int = 1,
) -> dict[str, dict]:
    """Time ``calls`` calls per system in rounds of ``block`` consecutive calls each, the order of
    the systems alternating round by round; each entry is ``(call, after)``, where ``after()`` (or
    None) runs untimed after every call. Bounded by ``max_seconds`` too.

    With ``block`` > 1 a call mostly follows one of its own system, as a server answering its
    client's calls does, while the rounds (a fraction of a second) still spread a burst of load
    over every system alike. The first call of a block that follows another system's block is
    summarised apart (``after_switch``): what switching costs."""
    keys = list(calls_by_key)
    samples: dict[str, list[float]] = {k: [] for k in keys}
    switched: dict[str, list[float]] = {k: [] for k in keys}
    values: dict[str, list[int]] = {k: [] for k in keys}
    errors: dict[str, list[str]] = {k: [] for k in keys}
    deadline = time.monotonic() + max_seconds
    rounds = -(-(warmup + calls) // block)
    for n in range(rounds):
        if n * block >= warmup and time.monotonic() > deadline:
            break
        for position, key in enumerate(keys if n % 2 == 0 else keys[::-1]):
            call, after = calls_by_key[key]
            for i in range(n * block, min((n + 1) * block, warmup + calls)):
                t0 = time.perf_counter()
                out = await call()
                elapsed = time.perf_counter() - t0
                if after:
                    after()
                if i < warmup:
                    continue
                # (a round's first system follows its own last call: the order alternates)
                first_after_another = block > 1 and position > 0 and i == n * block
                (switched if first_after_another else samples)[key].append(elapsed)
                if out.ok:
                    values[key].append(out.value or 0)
                else:
                    errors[key].append(out.error or "")
    return {
        k: {
            **summarize(samples[k]),
            "block": block,
            "after_switch": summarize(switched[k]) if block > 1 else None,
            "requested": calls,
            "errors": len(errors[k]),
            "error_samples": errors[k][:3],
            "mean_value": (sum(values[k]) / len(values[k])) if values[k] else None,
            "samples": _round(samples[k]),
        }
        for k in keys
    }


async def backlog_read(
    pairs: list[tuple[Target, Store]], *, calls: int, warmup: int, empty_calls: int, limit: int, max_seconds: float
) -> dict[str, dict]:
    """receive(limit) against big stores: full pages first, then polls of a drained inbox.

    The systems are interleaved call by call. During the full-page calls an
    ``InboxKeeper`` holds each reader at ``STEADY_UNREAD`` unread messages. Then the
    readers' unread messages are consumed (untimed, bounded) so the polls see an empty
    inbox on both systems.
    """
    out: dict[str, dict] = {}
    async with AsyncExitStack() as stack:
        readers = {t.key: await stack.enter_async_context(open_session(t, st, READER, reads=True)) for t, st in pairs}
        keepers = {t.key: InboxKeeper(t, st) for t, st in pairs}
        stack.callback(lambda: [k.close() for k in keepers.values()])
        full = await _timed_interleaved(
            {k: (lambda r=r: r.receive(limit), keepers[k]) for k, r in readers.items()}, calls, warmup, max_seconds
        )
        drained: dict[str, bool] = {}
        for k, r in readers.items():
            drained[k] = False
            for _ in range(2 * STEADY_UNREAD // 100 + 10):
                got = await r.consume(100)
                if not got.ok or not got.value:
                    drained[k] = got.ok
                    break
        empty = await _timed_interleaved(
            {k: (lambda r=r: r.receive(limit), None) for k, r in readers.items()}, empty_calls, 0, max_seconds
        )
    for k in readers:
        full[k]["rows_topped_up"] = keepers[k].inserted
        empty[k]["drained"] = drained[k]
        out[k] = {"full_page": full[k], "after_drain": empty[k]}
    return out


# ----------------------------------------------------------------------------- throughput


def throughput(target: Target, store: Store, *, clients: int, seconds: float, max_sends: int, log=print) -> dict:
    """``clients`` client processes, each with its own server process, all on one store.

    Every worker connects, reports READY, and starts sending to the reader as fast as it
    can when told GO, for ``seconds`` or ``max_sends`` calls. Throughput is the sum of
    successful sends over the span from the first GO to the last worker's last reply.
    """
    procs: list[subprocess.Popen] = []
    lines: queue.Queue[tuple[int, str]] = queue.Queue()
    startup = {"ready": 0, "failed": []}
    results: list[dict] = []
    t_spawn = time.perf_counter()
    try:
        for i in range(clients):
            job = {
                "target": spec_of(target),
                "store": {
                    "dir": str(store.dir),
                    "db": str(store.db),
                    "config": str(store.config) if store.config else None,
                },
                "agent": SENDERS[i % len(SENDERS)],
                "recipient": READER,
                "seconds": seconds,
                "max_sends": max_sends,
            }
            p = subprocess.Popen(
                [sys.executable, "-m", "bench.worker", json.dumps(job)],
                cwd=str(REPO),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
            procs.append(p)
            threading.Thread(target=_pump, args=(i, p, lines), daemon=True).start()

        ready: set[int] = set()
        deadline = time.monotonic() + 60 + 5 * clients
        while len(ready) + len(startup["failed"]) < clients and time.monotonic() < deadline:
            try:
                i, line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line.startswith("READY"):
                ready.add(i)
            elif line.startswith("FAILED") or line == "EOF":
                startup["failed"].append({"worker": i, "reason": line[:500]})
        startup["ready"] = len(ready)
        startup["seconds"] = round(time.perf_counter() - t_spawn, 2)
        for i in ready:
            procs[i].stdin.write("GO\n")
            procs[i].stdin.flush()
        deadline = time.monotonic() + seconds + 60
        pending = set(ready)
        while pending and time.monotonic() < deadline:
            try:
                i, line = lines.get(timeout=1)
            except queue.Empty:
                continue
            if line.startswith("RESULT "):
                results.append(json.loads(line[len("RESULT ") :]))
                pending.discard(i)
            elif line == "EOF":
                startup["failed"].append({"worker": i, "reason": "exited without a result"})
                pending.discard(i)
        for i in pending:
            startup["failed"].append({"worker": i, "reason": "no result before the deadline"})
        for p in procs:
            try:
                p.stdin.close()
                p.wait(timeout=20)
            except (subprocess.TimeoutExpired, OSError):
                pass
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)

    ok = sum(r["ok"] for r in results)
    errors = sum(r["errors"] for r in results) + len(startup["failed"])
    ids = [i for r in results for i in r["ids"]]
    span = (max(r["end"] for r in results) - min(r["start"] for r in results)) if results else None
    lat = [x for r in results for x in r["latencies"]]
    return {
        "clients": clients,
        "sends_ok": ok,
        "errors": errors,
        "tool_errors": sum(r["errors"] for r in results),
        "worker_failures": startup["failed"],
        "error_samples": [e for r in results for e in r["error_samples"]][:5],
        "span_seconds": span,
        "sends_per_second": (ok / span) if span else None,
        "duplicate_ids": len(ids) - len(set(ids)),
        "call_latency": summarize(lat),
        "startup_seconds": startup.get("seconds"),
        "per_worker": [{k: r[k] for k in ("agent", "ok", "errors", "start", "end")} for r in results],
        "server_log_tail": server_log_tail(store, SENDERS[0], 800) if errors else "",
    }


def _pump(i: int, p: subprocess.Popen, lines: queue.Queue) -> None:
    assert p.stdout is not None
    for line in p.stdout:
        lines.put((i, line.rstrip("\n")))
    lines.put((i, "EOF"))


# ----------------------------------------------------------------------------- domain layer


def run_probe(python: str, args: list[str], env: dict[str, str] | None = None, timeout: float = 300) -> dict:
    proc = subprocess.run(
        [python, str(PROBE), *args],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if proc.returncode != 0:
        raise RuntimeError(f"probe {args[:1]} failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def domain_round(target: Target, store: Store, *, seconds: float, max_count: int) -> dict:
    """Sends through the target's own library (no MCP), and single-row inserts into its schema."""
    common = ["--db", str(store.db), "--seconds", str(seconds), "--max", str(max_count)]
    domain = run_probe(
        target.python(),
        [target.key, *common, "--config", str(store.config or ""), "--repo", str(REPO)],
        env=target.env(store, SENDERS[0]),
    )
    row = list(target.row(LogicalRow(SENDERS[0], READER, TEXT, time.time(), False)))
    schema = run_probe(sys.executable, ["schema", *common, "--sql", target.insert_sql, "--row", json.dumps(row)])
    return {"domain": domain, "raw_into_own_schema": schema}


def raw_round(db: Path, *, seconds: float, max_count: int) -> dict:
    return run_probe(sys.executable, ["raw", "--db", str(db), "--seconds", str(seconds), "--max", str(max_count)])
