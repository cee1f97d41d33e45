"""Turn the raw results into the side-by-side table, our pass/fail targets and the chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

MS = 1000.0


def _get(d: Any, *path: Any) -> Any:
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _ms(v: float | None) -> float | None:
    return None if v is None else v * MS


POSTGRES = "postgres"


def postgres_column(results: dict) -> dict | None:
    """The ``postgres`` part's own figures for our server on a PostgreSQL store, shaped as a
    system's results, so every figure it measured stands in a column next to SQLite and dlb."""
    pg = _get(results, "systems", "ours", "postgres")
    if not isinstance(pg, dict) or "latency" not in pg:
        return None
    return {
        "label": "Agent Bridge on PostgreSQL",
        "latency": _get(pg, "latency", "ours-pg"),
        "throughput": _get(pg, "throughput", "ours-pg"),
        "backlog": {size: by["ours-pg"] for size, by in (pg.get("backlog") or {}).items() if "ours-pg" in by},
        "dispatch": pg.get("dispatch"),
    }


def columns(results: dict) -> dict[str, dict]:
    """Each column of the table: the systems run, then our server on PostgreSQL if measured."""
    pg = postgres_column(results)
    return {**results["systems"], **({POSTGRES: pg} if pg else {})}


def rows(results: dict) -> list[dict]:
    """One row per figure: name, unit, which direction is better, value per column."""
    systems = columns(results)
    out: list[dict] = []

    def add(name: str, unit: str, better: str, fn, ratio: bool = True) -> None:
        vals = {k: fn(v) for k, v in systems.items()}
        if any(x is not None for x in vals.values()):
            out.append({"figure": name, "unit": unit, "better": better, "values": vals, "ratio": ratio})

    add(
        "cold start: spawn -> first tool result (median)",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "cold_start", "server_to_first_result", "median")),
    )
    add(
        "  bare `python -c 'import mcp.server.*'` (median)",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "cold_start", "bare_import", "median")),
    )
    add(
        "  same import, exit skipping teardown (median)",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "cold_start", "import_only", "median")),
    )
    add(
        "  cold start minus bare import",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "cold_start", "over_bare_import_median")),
        ratio=False,
    )
    add(
        "  cold start minus import without teardown",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "cold_start", "over_import_only_median")),
        ratio=False,
    )
    add(
        "cold start on a new store: spawn -> first send result (median)",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "cold_store", "median")),
    )
    add("  p99", "ms", "lower", lambda s: _ms(_get(s, "cold_store", "p99")))
    add(
        "  bare import without teardown, same reps (median)",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "cold_store", "bare_import_without_teardown", "median")),
    )
    add(
        "  new-store cold start minus that import",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "cold_store", "over_bare_import_median")),
        ratio=False,
    )
    names = {"send": "send", "receive": "receive(20)", "consume": "consume 20 (receive + ack)"}
    for op in ("send", "receive", "consume"):
        for stat in ("median", "p99"):
            add(
                f"{names[op]} latency over stdio ({stat})",
                "ms",
                "lower",
                lambda s, op=op, stat=stat: _ms(_get(s, "latency", op, stat)),
            )
    add(
        "  send, a block's first call, after another system's block (median)",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "latency", "send", "after_switch", "median")),
    )
    add(
        "  send after 100 ms idle, call by call (median)",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "latency", "send_after_idle", "median")),
    )
    add(
        "  a bare SDK tool inserting one SQLite row, in the same send loop (median; ours only)",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "latency", "sdk_insert", "median")),
        ratio=False,
    )

    def over_sdk_insert(s: dict) -> float | None:
        """dlb's send over that bare insert, in our column only: a send of ours writes its message
        over the same SDK, so no ratio of ours to dlb can pass this."""
        insert = _get(systems, "ours", "latency", "sdk_insert", "median")
        dlb_send = _get(systems, "dlb", "latency", "send", "median")
        return dlb_send / insert if s is systems.get("ours") and insert and dlb_send else None

    add(
        "  dlb's send over that insert: the most a send over this SDK can lead dlb by",
        "x",
        "higher",
        over_sdk_insert,
        ratio=False,
    )
    add(
        "floor: no-op tool on a bare MCPServer (median; ours only)",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "floor", "noop", "median")),
        ratio=False,
    )
    add(
        "floor: the same tool returning receive(20)'s 20 messages (median)",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "floor", "payload", "median")),
        ratio=False,
    )
    for label, key in (
        ("floor: the same tool inserting one SQLite row (median)", "insert"),
        ("floor: the same tool reading the reader's 20 rows of our store by plain SQL (median)", "read"),
        ("floor: the same tool inserting one message row into our store by plain SQL (median)", "insert_message"),
    ):
        add(label, "ms", "lower", lambda s, key=key: _ms(_get(s, "floor", key, "median")), ratio=False)
    for label, key in (
        ("send / no-op", "send_over_noop"),
        ("send / insert floor", "send_over_insert"),
        ("receive(20) / no-op", "receive_over_noop"),
        ("receive(20) / same-payload floor", "receive_over_payload"),
        ("send / store insert floor", "send_over_insert_message"),
        ("receive(20) / store read floor", "receive_over_read"),
    ):
        add(f"  {label} (medians, same run)", "x", "lower", lambda s, key=key: _get(s, "floor", key), ratio=False)
        add(
            f"  {label} (server CPU per call, same run)",
            "x",
            "lower",
            lambda s, key=key: _get(s, "floor", f"cpu_{key}"),
            ratio=False,
        )
    path_names = {
        "plain": "plain send",
        "task_dedup": "task with dedup_key",
        "reply": "reply (result, reply_to)",
        "conversation_turn": "conversation turn",
    }
    for p, label in path_names.items():
        for stat in ("median", "p99"):
            add(
                f"{label} over stdio ({stat}; ours only)",
                "ms",
                "lower",
                lambda s, p=p, stat=stat: _ms(_get(s, "paths", "stdio", p, stat)),
                ratio=False,
            )
        add(
            f"  {label}: raw SQL, same transaction form (median)",
            "µs",
            "lower",
            lambda s, p=p: _us(_get(s, "paths", "raw", p, "median")),
            ratio=False,
        )
        add(
            f"  {label}: domain call, no MCP (median)",
            "µs",
            "lower",
            lambda s, p=p: _us(_get(s, "paths", "domain", p, "median")),
            ratio=False,
        )
        add(
            f"  {label}: stdio / raw SQL",
            "x",
            "lower",
            lambda s, p=p: _get(s, "paths", "ratios", p, "stdio"),
            ratio=False,
        )
        add(
            f"  {label}: domain call / raw SQL",
            "x",
            "lower",
            lambda s, p=p: _get(s, "paths", "ratios", p, "domain"),
            ratio=False,
        )
    conc = sorted({int(c) for s in systems.values() for c in (_get(s, "throughput") or {})})
    for c in conc:
        add(
            f"throughput, {c} client process{'es' if c > 1 else ''}",
            "sends/s",
            "higher",
            lambda s, c=c: _get(s, "throughput", str(c), "sends_per_second"),
        )
        add(
            f"  send p99 with {c} client process{'es' if c > 1 else ''}",
            "ms",
            "lower",
            lambda s, c=c: _ms(_get(s, "throughput", str(c), "call_latency", "p99")),
        )
        add(
            f"  errors, {c} client process{'es' if c > 1 else ''}",
            "count",
            "lower",
            lambda s, c=c: _get(s, "throughput", str(c), "errors"),
            ratio=False,
        )
    add("domain layer sends, no MCP", "sends/s", "higher", lambda s: _get(s, "domain", "domain_per_second"))
    add(
        "single-row inserts into its own schema",
        "rows/s",
        "higher",
        lambda s: _get(s, "domain", "raw_into_own_schema_per_second"),
    )
    add(
        "domain layer / raw SQLite reference",
        "%",
        "higher",
        lambda s: _pct(_get(s, "domain", "fraction_of_raw_reference")),
    )
    sizes = sorted({int(b) for s in systems.values() for b in (_get(s, "backlog") or {})})
    for b in sizes:
        add(
            f"receive(20) with {b:,} backlog (median)",
            "ms",
            "lower",
            lambda s, b=b: _ms(_get(s, "backlog", str(b), "full_page", "median")),
        )
    for b in sizes:
        add(
            f"empty-inbox poll with {b:,} backlog (median)",
            "ms",
            "lower",
            lambda s, b=b: _ms(_get(s, "backlog", str(b), "after_drain", "median")),
        )
    if len(sizes) >= 2:
        add(f"receive(20): {sizes[-1]:,} backlog / {sizes[0]:,}", "x", "lower", lambda s: _get(s, "backlog_ratio"))
    for what, key in (("supervisor", "send_to_supervisor_ms"), ("worker", "send_to_worker_ms")):
        for stat in ("median", "p99"):
            add(
                f"send -> {what} start ({stat}; ours only)",
                "ms",
                "lower",
                lambda s, key=key, stat=stat: _get(s, "dispatch", key, stat),
                ratio=False,
            )
    for stat in ("median", "p99"):
        add(
            f"send -> real worker's first receive answer ({stat}; ours only)",
            "ms",
            "lower",
            lambda s, stat=stat: _ms(_get(s, "real_worker", "send_to_first_receive", stat)),
            ratio=False,
        )
    add(
        "  send -> worker start recorded, same runs (median)",
        "ms",
        "lower",
        lambda s: _ms(_get(s, "real_worker", "send_to_worker_recorded", "median")),
        ratio=False,
    )
    for k, label in (
        ("statusline", "agent-bridge-statusline"),
        ("doctor_json", "agent-bridge doctor --json"),
        ("top_once", "agent-bridge top --once"),
    ):
        for stat in ("median", "p99"):
            add(
                f"{label} process wall time ({stat}; ours only)",
                "ms",
                "lower",
                lambda s, k=k, stat=stat: _ms(_get(s, "startup", k, stat)),
                ratio=False,
            )
    add(
        "idle listener CPU (ours only)",
        "% core",
        "lower",
        lambda s: _get(s, "dispatch", "idle_listener", "cpu_percent"),
        ratio=False,
    )
    add(
        "idle listener RSS after start (ours only)",
        "MiB",
        "lower",
        lambda s: _get(s, "dispatch", "idle_listener", "rss_mib"),
        ratio=False,
    )
    add(
        "listener RSS after the dispatches (ours only)",
        "MiB",
        "lower",
        lambda s: _get(s, "dispatch", "idle_listener", "rss_after_dispatches_mib"),
        ratio=False,
    )
    add(
        "fleet of idle listeners: CPU in total (ours only)",
        "% core",
        "lower",
        lambda s: _get(s, "fleet", "cpu_percent_total"),
        ratio=False,
    )
    add(
        "fleet of idle listeners: RSS each, median (ours only)",
        "MiB",
        "lower",
        lambda s: _get(s, "fleet", "rss_mib_median"),
        ratio=False,
    )
    return out


def _us(v: float | None) -> float | None:
    return None if v is None else v * 1e6


def _pct(v: float | None) -> float | None:
    return None if v is None else v * 100


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def table(results: dict) -> str:
    shown = columns(results)
    keys = list(shown)
    labels = {k: shown[k].get("label", k) for k in keys}
    header = ["figure", "unit", *[labels[k] for k in keys]]
    pair = [k for k in results["systems"]][:2]  # ours and dlb: the peer comparison
    two = len(pair) == 2
    if two:
        header += [f"{pair[0]}/{pair[1]}", "better"]
    lines = [header]
    for r in rows(results):
        vals = [r["values"].get(k) for k in keys]
        line = [r["figure"], r["unit"], *[_fmt(v) for v in vals]]
        if two:
            a, b = (r["values"].get(k) for k in pair)
            if a is None or b is None:
                line += ["-", "-"]
            else:
                line.append(f"{a / b:.2f}" if r["ratio"] and b > 0 and a >= 0 else "-")
                line.append("=" if a == b else (pair[0] if (a < b) == (r["better"] == "lower") else pair[1]))
        lines.append(line)
    raw = results.get("raw_sqlite") or {}
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(header))]
    text = []
    for n, row in enumerate(lines):
        text.append("  ".join(str(c).ljust(widths[i]) if i < 2 else str(c).rjust(widths[i]) for i, c in enumerate(row)))
        if n == 0:
            text.append("  ".join("-" * w for w in widths))
    if raw.get("per_second"):
        text.append("")
        text.append(
            f"raw SQLite reference (WAL, synchronous=NORMAL, one connection, one autocommit INSERT per row): "
            f"{raw['per_second']:,.0f} inserts/s (median of {len(raw.get('rounds', []))} rounds)"
        )
    return "\n".join(text)


def targets(results: dict, key: str = "ours") -> list[dict]:
    """Our own pass/fail targets, evaluated for every system for comparison."""
    out = []
    for k, s in results["systems"].items():
        checks = []
        over = _get(s, "cold_start", "over_bare_import_median")
        if over is not None:
            checks.append(("cold start <= 100 ms above bare import", f"{over * MS:.0f} ms", over <= 0.100))
        strict = _get(s, "cold_start", "over_import_only_median")
        if strict is not None:
            checks.append(
                ("  same, bare import timed without interpreter teardown", f"{strict * MS:.0f} ms", strict <= 0.100)
            )
        tp = _get(s, "throughput") or {}
        if tp:
            errs = sum(v.get("errors", 0) for v in tp.values())
            checks.append(("zero errors under concurrency", f"{errs} errors", errs == 0))
        frac = _get(s, "domain", "fraction_of_raw_reference")
        if frac is not None:
            checks.append(("domain sends >= 50% of raw inserts", f"{frac * 100:.0f}%", frac >= 0.5))
        ratio = _get(s, "backlog_ratio")
        if ratio is not None:
            checks.append(("receive at largest backlog <= 2x smallest", f"{ratio:.2f}x", ratio <= 2.0))
        wake = _get(s, "dispatch", "send_to_supervisor_ms", "median")
        if wake is not None:
            checks.append(("send -> supervisor start median < 100 ms", f"{wake:.1f} ms", wake < 100))
        idle = _get(s, "dispatch", "idle_listener", "cpu_percent")
        if idle is not None:
            checks.append(("idle listener < 1% of a core", f"{idle:.2f}%", idle < 1.0))
        fleet = _get(s, "fleet") or {}
        if "cpu_percent_total" in fleet:
            total = fleet["cpu_percent_total"]
            what = f"{fleet['listeners']} idle listeners <= 1% of one core in total"
            checks.append((what, f"{total:.2f}%", total <= 1.0))
        rss = _get(s, "dispatch", "idle_listener", "rss_after_dispatches_mib")
        if rss is not None:
            checks.append(("listener RSS after the dispatches <= 20 MiB", f"{rss:.1f} MiB", rss <= 20.0))
        for name, value, ok in checks:
            out.append({"system": k, "target": name, "value": value, "pass": ok, "ours": k == key})
    return out


def targets_text(results: dict) -> str:
    lines = []
    for t in targets(results):
        lines.append(f"  [{'PASS' if t['pass'] else 'FAIL'}] {t['system']:<5} {t['target']}: {t['value']}")
    return "\n".join(lines)


def chart(results: dict, path: Path) -> str | None:
    """Two panels: receive latency vs backlog, throughput vs concurrency. None if written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (uv run --group bench ...); no chart written"
    systems = columns(results)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {"ours": "tab:blue", "dlb": "tab:orange", POSTGRES: "tab:green"}
    top = 0.0
    for k, s in systems.items():
        color = colors.get(k)
        bl = s.get("backlog") or {}
        if bl:
            sizes = sorted(int(b) for b in bl)
            med = [bl[str(b)]["full_page"]["median"] * MS for b in sizes]
            p99 = [bl[str(b)]["full_page"]["p99"] * MS for b in sizes]
            left.plot(sizes, med, "o-", color=color, label=f"{s.get('label', k)} median")
            left.plot(sizes, p99, "x--", color=color, alpha=0.6, label=f"{s.get('label', k)} p99")
        tp = s.get("throughput") or {}
        if tp:
            conc = sorted(int(c) for c in tp)
            rate = [tp[str(c)]["sends_per_second"] or 0 for c in conc]
            right.plot(conc, rate, "o-", color=color, label=s.get("label", k))
            top = max(top, *rate)
            for c, r in zip(conc, rate, strict=True):
                errs = tp[str(c)]["errors"]
                right.annotate(
                    f"{r:.0f}/s" + (f"\n{errs} err" if errs else ""),
                    (c, r),
                    textcoords="offset points",
                    xytext=(0, 7),
                    ha="center",
                    fontsize=8,
                    color=color,
                )
    left.set_xscale("log")
    left.set_xlabel("messages already in the store (backlog)")
    left.set_ylabel("receive / read (limit 20) latency, ms")
    left.set_title("Inbox read latency vs backlog (MCP over stdio)")
    left.set_ylim(bottom=0)
    left.grid(True, alpha=0.3)
    if left.get_legend_handles_labels()[0]:
        left.legend(fontsize=8)
    right.set_xscale("log", base=2)
    right.set_xticks([1, 2, 4, 8, 16])
    right.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
    right.set_xlabel("concurrent client processes (one server each, one store)")
    right.set_ylabel("successful sends per second (all clients)")
    right.set_title("Send throughput vs concurrency")
    right.set_ylim(0, top * 1.2 or 1)
    right.grid(True, alpha=0.3)
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=8)
    fig.suptitle(
        f"Agent Bridge (SQLite{', PostgreSQL' if POSTGRES in systems else ''}) vs dlb-mcp - "
        f"{results['meta'].get('machine', '')}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
