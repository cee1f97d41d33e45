"""``python -m bench``: run the benchmark parts, print the table, write JSON and the chart."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from . import fleet, floor, listener, measure, paths, real_worker, report, startup
from .session import open_session
from .targets import (
    READER,
    OursPostgres,
    OursPostgresWithoutNotify,
    Target,
    default_cache_dir,
    make_targets,
    package_version,
)

PARTS = [
    "cold",
    "latency",
    "floor",
    "paths",
    "startup",
    "throughput",
    "domain",
    "backlog",
    "dispatch",
    "fleet",
    "worker",
    "postgres",
]
ALIASES = {"cold-start": "cold", "coldstart": "cold", "tp": "throughput", "sqlite": "domain", "raw": "domain"}
RESULTS_DIR = Path(__file__).resolve().parent / "results"

FULL = dict(
    latency_calls=1000,
    latency_warmup=20,
    cold_reps=15,
    concurrency="1,4,16",
    tp_seconds=5.0,
    tp_max_sends=100_000,
    domain_seconds=2.0,
    domain_rounds=3,
    backlogs="100,100000,1000000",
    backlog_calls=200,
    backlog_warmup=5,
    empty_calls=50,
    statusline_runs=100,
    dispatch_messages=100,
    real_worker_messages=30,
    idle_seconds=20.0,
    fleet_listeners=50,
    fleet_seconds=60.0,
)
QUICK = dict(
    latency_calls=100,
    latency_warmup=5,
    cold_reps=3,
    concurrency="1,4",
    tp_seconds=1.5,
    tp_max_sends=10_000,
    domain_seconds=0.5,
    domain_rounds=1,
    backlogs="100,10000",
    backlog_calls=10,
    backlog_warmup=1,
    empty_calls=5,
    statusline_runs=10,
    dispatch_messages=20,
    real_worker_messages=3,
    idle_seconds=5.0,
    fleet_listeners=5,
    fleet_seconds=10.0,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--only", default="", help=f"comma-separated parts to run: {','.join(PARTS)} (default: all)")
    p.add_argument("--skip", default="", help="comma-separated parts to leave out")
    p.add_argument("--quick", action="store_true", help="smoke run with small counts (writes latest-quick.json)")
    p.add_argument("--systems", default="ours,dlb", help="comma-separated: ours, dlb (default both)")
    p.add_argument("--latency-calls", type=int, help="calls per tool for the latency figure (full: 1000)")
    p.add_argument("--latency-warmup", type=int)
    p.add_argument("--cold-reps", type=int, help="cold starts per system (full: 15, after one warm-up)")
    p.add_argument("--concurrency", help="client process counts for throughput (full: 1,4,16)")
    p.add_argument("--tp-seconds", type=float, help="seconds of sending per throughput level (full: 5)")
    p.add_argument("--tp-max-sends", type=int, help="cap on sends per client process")
    p.add_argument("--domain-seconds", type=float, help="seconds per domain/raw probe round (full: 2)")
    p.add_argument("--domain-rounds", type=int, help="alternating rounds of domain and raw probes (full: 3)")
    p.add_argument("--backlogs", help="backlog sizes (full: 100,100000,1000000)")
    p.add_argument("--backlog-calls", type=int, help="full-page receives per backlog size (full: 200)")
    p.add_argument("--backlog-warmup", type=int)
    p.add_argument("--empty-calls", type=int, help="polls of the drained inbox per backlog size (full: 50)")
    p.add_argument("--statusline-runs", type=int, help="agent-bridge-statusline runs (full: 100)")
    p.add_argument("--dispatch-messages", type=int, help="messages for send-to-worker latency (full: 100)")
    p.add_argument("--real-worker-messages", type=int, help="messages for send-to-real-worker (full: 30)")
    p.add_argument("--idle-seconds", type=float, help="seconds to sample the idle listener's CPU (full: 20)")
    p.add_argument("--fleet-listeners", type=int, help="idle listeners started side by side (full: 50)")
    p.add_argument("--fleet-seconds", type=float, help="seconds to sample the fleet's CPU (full: 60)")
    p.add_argument("--max-phase-seconds", type=float, default=300.0, help="time bound for each timed call loop")
    p.add_argument("--cache-dir", type=Path, default=default_cache_dir(), help="where the dlb-mcp venv lives")
    p.add_argument("--tmp-dir", type=Path, default=None, help="parent for the temporary stores")
    p.add_argument("--out", type=Path, default=None, help="results directory (default bench/results)")
    p.add_argument("--keep-tmp", action="store_true", help="keep the temporary stores and server logs")
    p.add_argument("--no-chart", action="store_true")
    a = p.parse_args(argv)
    defaults = QUICK if a.quick else FULL
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.concurrency = [int(x) for x in str(a.concurrency).split(",") if x]
    a.backlogs = [int(x) for x in str(a.backlogs).split(",") if x]
    only = [ALIASES.get(x, x) for x in a.only.split(",") if x]
    skip = [ALIASES.get(x, x) for x in a.skip.split(",") if x]
    for x in only + skip:
        if x not in PARTS:
            p.error(f"unknown part {x!r}; parts are {', '.join(PARTS)}")
    a.parts = [x for x in PARTS if (not only or x in only) and x not in skip]
    a.systems = [x for x in a.systems.split(",") if x]
    a.out = a.out or RESULTS_DIR
    return a


class Runner:
    def __init__(self, args: argparse.Namespace, targets: dict[str, Target], tmp: Path, results: dict) -> None:
        self.a = args
        self.targets = targets
        self.tmp = tmp
        self.results = results
        self.t0 = time.monotonic()

    def log(self, msg: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.1f}s] {msg}", file=sys.stderr, flush=True)

    def sys(self, key: str) -> dict:
        return self.results["systems"][key]

    def store(self, t: Target, name: str):
        return t.create_store(self.tmp, name)

    def drop(self, store) -> None:
        if not self.a.keep_tmp:
            shutil.rmtree(store.dir, ignore_errors=True)

    def guarded(self, what: str, key: str, fn):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - one failing measurement is logged and the run goes on
            self.log(f"{what} {key} FAILED: {type(exc).__name__}: {exc}")
            return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}

    # -- parts ----------------------------------------------------------------------
    def discover(self) -> None:
        for key, t in self.targets.items():

            def go(t=t):
                store = self.store(t, "discover")

                async def run():
                    async with open_session(t, store, READER, reads=True) as s:
                        return await s.tool_schemas([t.send_tool, t.recv_tool])

                out = anyio.run(run)
                self.drop(store)
                return out

            self.sys(key)["tools"] = self.guarded("discover", key, go)
            self.log(f"{key} tools: {self.sys(key)['tools'].get('_all_tools')}")

    def cold(self) -> None:
        ts = list(self.targets.values())
        stores = {t.key: self.store(t, "cold") for t in ts}
        out = self.guarded(
            "cold start",
            "all",
            lambda: anyio.run(measure.cold_start, ts, stores, self.a.cold_reps, self.a.max_phase_seconds),
        )
        for t in ts:
            self.sys(t.key)["cold_start"] = out.get(t.key, out)
            c = self.sys(t.key)["cold_start"]
            if "server_to_first_result" in c:
                self.log(
                    f"cold {t.key}: {c['server_to_first_result']['median'] * 1000:.0f} ms to first result, "
                    f"bare import {c['bare_import']['median'] * 1000:.0f} ms "
                    f"({c['import_only']['median'] * 1000:.0f} ms without teardown)"
                )
            self.drop(stores[t.key])

    def latency(self) -> None:
        a = self.a

        def go():
            pairs = [(t, self.store(t, "latency")) for t in self.targets.values()]
            fills = {
                t.key: measure.fill_store(t, st, background=0, unread_for_reader=measure.STEADY_UNREAD)
                for t, st in pairs
            }
            out = anyio.run(
                lambda: measure.latency(
                    pairs, calls=a.latency_calls, warmup=a.latency_warmup, limit=20, max_seconds=a.max_phase_seconds
                )
            )
            for _, st in pairs:
                self.drop(st)
            return {k: {**v, "fill": fills[k]} for k, v in out.items()}

        out = self.guarded("latency", "all", go)
        for key in self.targets:
            res = self.sys(key)["latency"] = out.get(key, out)
            if "send" in res:
                self.log(
                    f"latency {key}: send {res['send']['median'] * 1000:.2f}/{res['send']['p99'] * 1000:.2f} ms, "
                    f"receive {res['receive']['median'] * 1000:.2f}/{res['receive']['p99'] * 1000:.2f} ms "
                    f"(median/p99), {res['receive']['mean_value']} msgs per receive; consume "
                    f"{res['consume']['median'] * 1000:.2f}/{res['consume']['p99'] * 1000:.2f} ms"
                )

    def floor(self) -> None:
        """Ours only: send/receive medians as a ratio to a no-op tool on a bare MCPServer."""
        if "ours" not in self.targets:
            return
        a, t = self.a, self.targets["ours"]

        def go():
            store = self.store(t, "floor")
            measure.fill_store(t, store, background=0, unread_for_reader=measure.STEADY_UNREAD)
            out = anyio.run(
                lambda: floor.floor(
                    t, store, calls=a.latency_calls, warmup=a.latency_warmup, limit=20, max_seconds=a.max_phase_seconds
                )
            )
            self.drop(store)
            return out

        res = self.sys("ours")["floor"] = self.guarded("floor", "ours", go)
        if "noop" in res:
            self.log(
                f"floor: noop {res['noop']['median'] * 1000:.2f} ms, payload {res['payload']['median'] * 1000:.2f} ms,"
                f" insert {res['insert']['median'] * 1000:.2f} ms; send {res['send']['median'] * 1000:.2f} ms"
                f" = {res['send_over_noop']:.2f}x noop, {res['send_over_insert']:.2f}x insert;"
                f" receive {res['receive']['median'] * 1000:.2f} ms = {res['receive_over_noop']:.2f}x noop,"
                f" {res['receive_over_payload']:.2f}x the same payload; server CPU per call: send"
                f" {res['cpu_send_over_noop']:.2f}x noop, {res['cpu_send_over_insert']:.2f}x insert; receive"
                f" {res['cpu_receive_over_noop']:.2f}x noop, {res['cpu_receive_over_payload']:.2f}x the same payload"
            )

    def paths(self) -> None:
        """Ours only: every send path over stdio, in process and as raw SQL (bench/paths.py)."""
        if "ours" not in self.targets:
            return
        a, t = self.a, self.targets["ours"]

        def go():
            stores = {lvl: self.store(t, f"paths-{lvl}") for lvl in ("stdio", "domain", "raw")}
            out = paths.measure(
                t, stores, calls=a.latency_calls, warmup=a.latency_warmup, max_seconds=a.max_phase_seconds
            )
            for st in stores.values():
                self.drop(st)
            return out

        res = self.sys("ours")["paths"] = self.guarded("paths", "ours", go)
        for p in paths.PATHS if "ratios" in res else ():
            f = {lvl: res[lvl][p]["median"] * 1000 for lvl in ("stdio", "domain", "raw")}
            self.log(
                f"path {p}: stdio {f['stdio']:.2f} ms (p99 {res['stdio'][p]['p99'] * 1000:.2f}), "
                f"domain {f['domain']:.3f} ms, raw SQL {f['raw']:.3f} ms; stdio/raw "
                f"{res['ratios'][p]['stdio']:.1f}x, domain/raw {res['ratios'][p]['domain']:.1f}x"
            )

    def startup(self) -> None:
        """A truly cold first call (every system); ours: the status line, doctor --json and top --once
        (bench/startup.py)."""
        a = self.a
        for key, t in self.targets.items():

            def cold(t=t):
                parent = self.tmp / f"{t.key}-cold-store"
                out = startup.cold_store(t, parent, a.cold_reps, time.monotonic() + a.max_phase_seconds)
                shutil.rmtree(parent, ignore_errors=True)
                return out

            res = self.sys(key)["cold_store"] = self.guarded("cold store", key, cold)
            if res.get("n"):
                imp = res["bare_import_without_teardown"]
                self.log(
                    f"startup {key}: new store, spawn -> first send result median {res['median'] * 1000:.0f} ms,"
                    f" p99 {res['p99'] * 1000:.0f} ms; bare import {imp['median'] * 1000:.0f} ms"
                )
        if "ours" not in self.targets:
            return
        t = self.targets["ours"]

        def go():
            store = self.store(t, "startup")
            out = startup.measure(t, store, runs=a.statusline_runs, max_seconds=a.max_phase_seconds)
            self.drop(store)
            return out

        res = self.sys("ours")["startup"] = self.guarded("startup", "ours", go)
        for k, what in (("statusline", "statusline"), ("doctor_json", "doctor --json"), ("top_once", "top --once")):
            if res.get(k, {}).get("n"):
                self.log(f"startup: {what} median {res[k]['median'] * 1000:.0f} ms, p99 {res[k]['p99'] * 1000:.0f} ms")

    def throughput(self) -> None:
        a = self.a
        for c in a.concurrency:
            for key, t in self.targets.items():

                def go(t=t, c=c):
                    store = self.store(t, f"tp{c}")
                    out = measure.throughput(t, store, clients=c, seconds=a.tp_seconds, max_sends=a.tp_max_sends)
                    self.drop(store)
                    return out

                res = self.guarded(f"throughput c={c}", key, go)
                self.sys(key).setdefault("throughput", {})[str(c)] = res
                if "sends_ok" in res:
                    self.log(
                        f"throughput {key} c={c}: {res['sends_per_second'] or 0:.0f} sends/s, "
                        f"{res['errors']} errors, {res['duplicate_ids']} duplicate ids"
                    )

    def domain(self) -> None:
        a = self.a
        raw_rounds: list[dict] = []
        per: dict[str, list[dict]] = {k: [] for k in self.targets}
        for r in range(a.domain_rounds):
            db = self.tmp / f"raw-reference-{r}.db"
            raw_rounds.append(measure.raw_round(db, seconds=a.domain_seconds, max_count=1_000_000))
            for suffix in ("", "-wal", "-shm"):
                Path(f"{db}{suffix}").unlink(missing_ok=True)
            for key, t in self.targets.items():

                def go(t=t, r=r):
                    store = self.store(t, f"domain{r}")
                    out = measure.domain_round(t, store, seconds=a.domain_seconds, max_count=1_000_000)
                    self.drop(store)
                    return out

                per[key].append(self.guarded("domain", key, go))
        raw_med = statistics.median(x["per_second"] for x in raw_rounds)
        self.results["raw_sqlite"] = {
            "per_second": raw_med,
            "rounds": raw_rounds,
            "definition": "WAL, synchronous=NORMAL, one connection, one autocommit "
            "INSERT per row (the form of a plain send), plain table "
            "with our messages columns",
        }
        self.log(f"raw SQLite reference: {raw_med:,.0f} inserts/s")
        for key, rounds in per.items():
            good = [x for x in rounds if "domain" in x]
            if not good:
                self.sys(key)["domain"] = {"error": rounds[0].get("error") if rounds else "no rounds"}
                continue
            dom = statistics.median(x["domain"]["per_second"] for x in good)
            own = statistics.median(x["raw_into_own_schema"]["per_second"] for x in good)
            # Each round's domain figure against the raw reference of the same round (measured
            # seconds apart), then the median: steadier on a shared machine than median/median.
            paired = [
                x["domain"]["per_second"] / raw["per_second"]
                for x, raw in zip(rounds, raw_rounds, strict=True)
                if "domain" in x
            ]
            self.sys(key)["domain"] = {
                "domain_per_second": dom,
                "raw_into_own_schema_per_second": own,
                "fraction_of_raw_reference": statistics.median(paired),
                "fraction_per_round": paired,
                "rounds": rounds,
            }
            self.log(
                f"domain {key}: {dom:,.0f} sends/s = {statistics.median(paired):.0%} of raw "
                f"(rounds: {', '.join(f'{p:.0%}' for p in paired)}); own schema {own:,.0f} rows/s"
            )

    def backlog(self) -> None:
        a = self.a
        for b in a.backlogs:

            def go(b=b):
                pairs = [(t, self.store(t, f"backlog{b}")) for t in self.targets.values()]
                fills = {}
                for t, st in pairs:
                    fills[t.key] = measure.fill_store(t, st, background=b, unread_for_reader=measure.STEADY_UNREAD)
                    self.log(
                        f"backlog {t.key} {b:,}: filled {fills[t.key]['rows_in_store']:,} rows in "
                        f"{fills[t.key]['fill_seconds']} s"
                    )
                out = anyio.run(
                    lambda: measure.backlog_read(
                        pairs,
                        calls=a.backlog_calls,
                        warmup=a.backlog_warmup,
                        empty_calls=a.empty_calls,
                        limit=20,
                        max_seconds=a.max_phase_seconds,
                    )
                )
                for _, st in pairs:
                    self.drop(st)
                return {k: {**v, "fill": fills[k]} for k, v in out.items()}

            out = self.guarded(f"backlog {b}", "all", go)
            for key in self.targets:
                res = self.sys(key).setdefault("backlog", {})[str(b)] = out.get(key, out)
                if "full_page" in res:
                    self.log(
                        f"backlog {key} {b:,}: receive(20) median {res['full_page']['median'] * 1000:.2f} ms, "
                        f"p99 {res['full_page']['p99'] * 1000:.2f} ms, empty poll "
                        f"{(res['after_drain']['median'] or 0) * 1000:.2f} ms"
                    )
        for key in self.targets:
            bl = self.sys(key).get("backlog") or {}
            sizes = sorted(int(x) for x in bl if "full_page" in bl[x])
            if len(sizes) >= 2:
                lo, hi = bl[str(sizes[0])]["full_page"]["median"], bl[str(sizes[-1])]["full_page"]["median"]
                self.sys(key)["backlog_ratio"] = hi / lo if lo else None

    def dispatch(self) -> None:
        """Agent Bridge only: the listener's wake-up latency and idle cost (bench/listener.py)."""
        if "ours" not in self.targets:
            return
        out = self.guarded("dispatch", "ours", lambda: listener.measure(self.a.dispatch_messages, self.a.idle_seconds))
        self.sys("ours")["dispatch"] = out
        if "send_to_supervisor_ms" in out:
            self.log(
                f"dispatch: send->supervisor median {out['send_to_supervisor_ms']['median']:.1f} ms, "
                f"idle CPU {out['idle_listener']['cpu_percent']:.2f}%; RSS floor: "
                + "; ".join(f"{step['step']} {step['rss_mib']} MiB" for step in out["rss_floor"])
            )

    def fleet(self) -> None:
        """Agent Bridge only: N declared agents, N idle listeners, their CPU and RSS (bench/fleet.py)."""
        if "ours" not in self.targets:
            return
        out = self.guarded("fleet", "ours", lambda: fleet.measure(self.a.fleet_listeners, self.a.fleet_seconds))
        self.sys("ours")["fleet"] = out
        if "cpu_percent_total" in out:
            self.log(
                f"fleet: {out['listeners']} idle listeners {out['cpu_percent_total']:.2f}% of one core in total, "
                f"RSS {out['rss_mib_median']:.1f} MiB each (load {out['load_1min_before']})"
            )

    def worker(self) -> None:
        """Agent Bridge only: send -> a real worker's first receive_messages answer (bench/real_worker.py)."""
        if "ours" not in self.targets:
            return
        out = self.guarded("worker", "ours", lambda: real_worker.measure(self.a.real_worker_messages))
        self.sys("ours")["real_worker"] = out
        if out.get("send_to_first_receive", {}).get("n"):
            r, w = out["send_to_first_receive"], out["send_to_worker_recorded"]
            self.log(
                f"real worker: send->first receive answer median {r['median'] * 1000:.0f} ms, p99 "
                f"{r['p99'] * 1000:.0f} ms (send->worker recorded {w['median'] * 1000:.0f} ms); "
                f"{out['failures']} failures"
            )

    def postgres(self) -> None:
        """Agent Bridge on SQLite and on PostgreSQL side by side in one run: the tools' latency over
        MCP (interleaved call by call) and sends/s at each concurrency (``targets.OursPostgres``)."""
        if "ours" not in self.targets:
            return
        a, lite, pg = self.a, self.targets["ours"], OursPostgres()
        quiet = OursPostgresWithoutNotify(pg.server)
        if reason := pg.unavailable_reason():
            self.sys("ours")["postgres"] = {"unavailable": reason}
            self.log(f"postgres: skipped: {reason}")
            return

        def go():
            pairs = [(lite, self.store(lite, "pg-latency-sqlite")), (pg, self.store(pg, "pg-latency"))]
            for t, st in pairs:
                measure.fill_store(t, st, background=0, unread_for_reader=measure.STEADY_UNREAD)
            try:
                lat = anyio.run(
                    lambda: measure.latency(
                        pairs, calls=a.latency_calls, warmup=a.latency_warmup, limit=20, max_seconds=a.max_phase_seconds
                    )
                )
            finally:
                for t, st in pairs:
                    t.drop_store(st)
                    self.drop(st)
            tp: dict[str, dict] = {lite.key: {}, pg.key: {}, quiet.key: {}}
            for c in a.concurrency:
                # NOTIFY's cost shows where commits contend most: at the highest concurrency.
                for t in (lite, pg, quiet) if c == max(a.concurrency) else (lite, pg):
                    st = self.store(t, f"pg-tp{c}-{t.key}")
                    try:
                        tp[t.key][str(c)] = measure.throughput(
                            t, st, clients=c, seconds=a.tp_seconds, max_sends=a.tp_max_sends
                        )
                    finally:
                        t.drop_store(st)
                        self.drop(st)
            store = self.store(pg, "pg-dispatch")
            try:
                wake = listener.measure(self.a.dispatch_messages, self.a.idle_seconds, db=str(store.db), floor=False)
            finally:
                pg.drop_store(store)
                self.drop(store)
            return {"latency": lat, "throughput": tp, "dispatch": wake}

        res = self.sys("ours")["postgres"] = self.guarded("postgres", "ours", go)
        lat = res.get("latency", {})
        if "send" in lat.get(pg.key, {}):
            ratios = {op: lat[pg.key][op]["median"] / lat[lite.key][op]["median"] for op in ("send", "receive")}
            res["median_ratio_postgres_over_sqlite"] = ratios
            self.log(
                "postgres: send {:.2f} ms vs SQLite {:.2f} ms ({:.2f}x), receive(20) {:.2f} ms vs {:.2f} ms ({:.2f}x)".format(
                    lat[pg.key]["send"]["median"] * 1000,
                    lat[lite.key]["send"]["median"] * 1000,
                    ratios["send"],
                    lat[pg.key]["receive"]["median"] * 1000,
                    lat[lite.key]["receive"]["median"] * 1000,
                    ratios["receive"],
                )
            )
        if "send_to_supervisor_ms" in res.get("dispatch", {}):
            wake = res["dispatch"]
            self.log(
                f"postgres: send->supervisor median {wake['send_to_supervisor_ms']['median']:.1f} ms, p99 "
                f"{wake['send_to_supervisor_ms']['p99']:.1f} ms; idle listener {wake['idle_listener']['cpu_percent']:.2f}%"
                " of a core"
            )
        for c, by in sorted(res.get("throughput", {}).get(pg.key, {}).items(), key=lambda kv: int(kv[0])):
            other = res["throughput"][lite.key].get(c, {})
            without = res["throughput"][quiet.key].get(c)
            self.log(
                f"postgres c={c}: {by.get('sends_per_second') or 0:.0f} sends/s, {by.get('errors')} errors "
                f"(SQLite {other.get('sends_per_second') or 0:.0f} sends/s, {other.get('errors')} errors"
                + (
                    f"; without NOTIFY {without.get('sends_per_second') or 0:.0f} sends/s, {without.get('errors')} errors)"
                    if without
                    else ")"
                )
            )


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    started = datetime.now(UTC)
    print(f"bench: parts={','.join(a.parts)} systems={','.join(a.systems)} quick={a.quick}", file=sys.stderr)
    targets_all = make_targets(a.cache_dir, a.systems, log=lambda m: print(m, file=sys.stderr))
    systems: dict[str, dict] = {}
    targets: dict[str, Target] = {}
    for key, t in targets_all.items():
        reason = t.unavailable_reason()
        systems[key] = {"label": t.label, "available": reason is None, **t.describe()}
        if reason:
            systems[key]["unavailable"] = reason
            print(f"bench: skipping {key}: {reason}", file=sys.stderr)
        else:
            targets[key] = t
    machine = (
        f"{os.cpu_count()} cores (shared), {platform.system()} {platform.machine()}, Python {platform.python_version()}"
    )
    results: dict[str, Any] = {
        "meta": {
            "started": started.isoformat(timespec="seconds"),
            "machine": machine,
            "sqlite": sqlite3.sqlite_version,
            "load_1min_at_start": round(os.getloadavg()[0], 2),  # the machine is shared: say how busy it was
            "argv": sys.argv[1:] if argv is None else argv,
            "settings": {k: (v if not isinstance(v, Path) else str(v)) for k, v in vars(a).items()},
            "client": f"mcp {package_version(sys.executable, 'mcp')} Client over stdio (mode auto)",
            "versions": {
                k: {
                    "mcp": package_version(t.python(), "mcp"),
                    **({"dlb-mcp": package_version(t.python(), "dlb-mcp")} if k == "dlb" else {}),
                }
                for k, t in targets.items()
            },
        },
        "systems": systems,
    }
    out_dir: Path = a.out
    # Only a full run of every part replaces latest.json / chart.png.
    suffix = ("-quick" if a.quick else "") + ("-partial" if a.parts != PARTS or a.systems != ["ours", "dlb"] else "")
    json_path, chart_path = out_dir / f"latest{suffix}.json", out_dir / f"chart{suffix}.png"
    tmp = Path(tempfile.mkdtemp(prefix="agent-bridge-bench-", dir=a.tmp_dir))
    runner = Runner(a, targets, tmp, results)
    try:
        if targets:
            runner.discover()
        for part in a.parts:
            if not targets and part != "domain":
                continue
            runner.log(f"== {part}")
            getattr(runner, part)()
            _write(json_path, results)  # partial results survive an interrupted run
    except KeyboardInterrupt:
        runner.log("interrupted; writing what was measured")
    finally:
        if a.keep_tmp:
            print(f"bench: kept temporary stores in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    results["meta"]["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
    results["meta"]["duration_seconds"] = round(time.monotonic() - runner.t0, 1)
    results["meta"]["load_1min_at_end"] = round(os.getloadavg()[0], 2)
    results["comparison"] = report.rows(results)
    results["targets"] = report.targets(results)
    _write(json_path, results)
    print()
    load = f"load(1m) {results['meta']['load_1min_at_start']} -> {results['meta']['load_1min_at_end']}"
    print(f"Agent Bridge benchmark - {machine}; {results['meta']['duration_seconds']} s; {load}")
    print()
    print(report.table(results))
    print()
    print("Targets (ours is Agent Bridge; the same checks applied to dlb-mcp for comparison):")
    print(report.targets_text(results))
    if not a.no_chart:
        problem = report.chart(results, chart_path)
        print(problem or f"\nchart: {chart_path}")
    print(f"raw results: {json_path}")
    return 0


def _write(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(path)
