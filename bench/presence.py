"""Presence figures: `who` false-alive and false-dead counts under kill -9, SIGTERM, clean exits
and real pid reuse, plus how long `who` and the status line take.
``uv run python -m bench.presence [--rounds N] [--sessions K] [--quick]``.

Each round starts K real MCP servers (``server.py``, each sends its ``initialize``), waits for
their session rows, then ends them in every way a session ends: kill -9, SIGTERM, a clean exit
(stdin closed), and leaves the rest running. Each kill -9 victim's pid is then really reused
(as root, through ``/proc/sys/kernel/ns_last_pid``; otherwise the row's pid is pointed at a
live unrelated process with another start time, which is what a reuse looks like): half by an
unrelated process, half by a new real server. A row of another host is added as well. Then
`who` (the CLI's read-only report) is compared with the truth, which the benchmark knows
because it started every process:

- false alive: a session `who` shows whose process has ended (or whose pid now belongs to
  another process);
- false dead: a session whose server is running that `who` does not show;
- the other host's row must be shown as ``unknown``, never alive and never hidden as dead.

The round ends by killing everything left and asking again (every shown session is then a
false alive). The goal is 0 and 0.
"""

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")
INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1.0"},
        },
    }
)


def _wait(predicate, deadline: float = 120.0, what: str = "condition"):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if value := predicate():
            return value
        time.sleep(0.02)
    raise TimeoutError(f"benchmark wait timed out: {what}")


def _rows(db: str) -> dict[int, tuple]:
    import sqlite3

    conn = sqlite3.connect(db, timeout=30)
    try:
        return {r[0]: r[1:] for r in conn.execute("SELECT id, pid, start_time, host FROM sessions")}
    finally:
        conn.close()


def _start_server(env: dict) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, str(PROJECT / "server.py")],
        cwd=PROJECT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    proc.stdin.write(INITIALIZE + "\n")
    proc.stdin.flush()
    return proc


def _reuse_pid(pid: int, argv: list[str], env: dict) -> subprocess.Popen | None:
    """Start ``argv`` under exactly ``pid`` (a real pid reuse), or None when that cannot be done."""
    for _ in range(20):
        try:
            NS_LAST_PID.write_text(str(pid - 1))
        except OSError:
            return None
        proc = subprocess.Popen(
            argv,
            cwd=PROJECT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        if proc.pid == pid:
            return proc
        _finish(proc)  # another fork won the race: try again
    return None


def _finish(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    try:
        proc.communicate(timeout=30)
    except (ValueError, OSError):
        proc.wait()


def _who(settings) -> tuple[dict, float]:
    from dispatcher.dispatch.who import who_cli

    started = time.perf_counter()
    report = who_cli(settings)
    return report, (time.perf_counter() - started) * 1000


def _score(report: dict, live_ids: set[int], foreign_ids: set[int]) -> dict:
    shown = {s["id"]: s["liveness"] for a in report["agents"] for s in a["sessions"]}
    return {
        "false_alive": len([i for i, v in shown.items() if i not in live_ids and i not in foreign_ids]),
        "false_dead": len(live_ids - set(shown)),
        "foreign_wrong": len([i for i in foreign_ids if shown.get(i) != "unknown"]),
        "shown": len(shown),
    }


def run(rounds: int, sessions: int, seed: int) -> dict:
    from dispatcher.core.processes import this_host
    from dispatcher.core.settings import BridgeSettings
    from dispatcher.store import open_store

    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="bench-presence-"))
    config = root / "config.json"
    config.write_text(
        json.dumps(
            {
                "agents": {
                    "claude": {"launcher": "launchers/claude_headless.sh"},
                    "kimi": {"launcher": "launchers/kimi_headless.sh"},
                }
            }
        )
    )
    db = str(root / "bridge.db")
    env = {
        **os.environ,
        "AGENT_BRIDGE_DB": db,
        "AGENT_BRIDGE_CONFIG": str(config),
        "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
        "AGENT_BRIDGE_WORKSPACE": str(root),
    }
    os.environ.update(
        {
            k: env[k]
            for k in ("AGENT_BRIDGE_DB", "AGENT_BRIDGE_CONFIG", "AGENT_BRIDGE_RUNTIME_DIR", "AGENT_BRIDGE_WORKSPACE")
        }
    )
    open_store(db).close()
    settings = BridgeSettings()
    totals = {
        "false_alive": 0,
        "false_dead": 0,
        "foreign_wrong": 0,
        "checks": 0,
        "kill9": 0,
        "sigterm": 0,
        "clean_exit": 0,
        "pid_reuse_real": 0,
        "pid_reuse_simulated": 0,
        "reuse_by_server": 0,
    }
    who_ms: list[float] = []
    for _ in range(rounds):
        procs = []
        for i in range(sessions):
            agent = "claude" if i % 2 == 0 else "kimi"
            procs.append(_start_server({**env, "AGENT_ID": agent}))
        ids = _wait(
            lambda procs=procs: (
                (
                    found := {
                        r[0]: i
                        for i, p in enumerate(procs)
                        for r in [(rid, pid) for rid, (pid, _s, _h) in _rows(db).items()]
                        if r[1] == p.pid
                    }
                )
                and len(found) == sessions
                and found
            ),
            what="every server's session row",
        )
        by_index = {i: rid for rid, i in ids.items()}
        order = list(range(sessions))
        rng.shuffle(order)
        n_kill = max(1, sessions // 2)
        kill9, term, clean, keep = (
            order[:n_kill],
            order[n_kill : n_kill + 1],
            order[n_kill + 1 : n_kill + 2],
            order[n_kill + 2 :],
        )
        for i in kill9:
            procs[i].send_signal(signal.SIGKILL)
        for i in term:
            procs[i].send_signal(signal.SIGTERM)
        for i in clean:
            procs[i].stdin.close()
        for i in kill9 + term + clean:
            procs[i].wait(timeout=60)
        totals["kill9"] += len(kill9)
        totals["sigterm"] += len(term)
        totals["clean_exit"] += len(clean)
        live_ids = {by_index[i] for i in keep}
        extra: list[subprocess.Popen] = []
        # Reuse each kill -9 victim's pid: an unrelated process, or a new real server on that pid.
        for n, i in enumerate(kill9):
            pid = procs[i].pid
            by_server = n % 2 == 1
            argv = [sys.executable, str(PROJECT / "server.py")] if by_server else ["sleep", "600"]
            reuse = _reuse_pid(pid, argv, {**env, "AGENT_ID": "claude"})
            if reuse is None:  # not root: what a reuse looks like, a live pid with another start time
                stand_in = subprocess.Popen(["sleep", "600"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                extra.append(stand_in)
                import sqlite3

                conn = sqlite3.connect(db, timeout=30)
                with conn:
                    conn.execute("UPDATE sessions SET pid = ? WHERE id = ?", (stand_in.pid, by_index[i]))
                conn.close()
                totals["pid_reuse_simulated"] += 1
                continue
            extra.append(reuse)
            totals["pid_reuse_real"] += 1
            if by_server:
                reuse.stdin.write(INITIALIZE + "\n")
                reuse.stdin.flush()
                new_id = _wait(
                    lambda p=pid, known=ids: next(
                        (rid for rid, (rpid, _s, _h) in _rows(db).items() if rpid == p and rid not in known), None
                    ),
                    what="the reusing server's row",
                )
                live_ids.add(new_id)
                totals["reuse_by_server"] += 1
        import sqlite3

        conn = sqlite3.connect(db, timeout=30)
        with conn:
            foreign = conn.execute(
                "INSERT INTO sessions (agent, role, host, pid, start_time, started_at) VALUES"
                " ('kimi', 'interactive', ?, ?, 1.0, ?)",
                (this_host() + "-elsewhere", os.getpid(), time.time()),
            ).lastrowid
        conn.close()
        report, ms = _who(settings)
        who_ms.append(ms)
        score = _score(report, live_ids, {foreign})
        for key in ("false_alive", "false_dead", "foreign_wrong"):
            totals[key] += score[key]
        totals["checks"] += 1
        # The CLI itself, once per round: the same verdicts.
        done = subprocess.run(
            [sys.executable, "-m", "dispatcher", "who", "--json"],
            cwd=PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        cli_score = _score(json.loads(done.stdout), live_ids, {foreign})
        for key in ("false_alive", "false_dead", "foreign_wrong"):
            totals[key] += cli_score[key]
        totals["checks"] += 1
        # End everything; nothing may be shown alive afterwards.
        for p in procs + extra:
            _finish(p)
        report, ms = _who(settings)
        who_ms.append(ms)
        score = _score(report, set(), {foreign})
        totals["false_alive"] += score["false_alive"]
        totals["foreign_wrong"] += score["foreign_wrong"]
        totals["checks"] += 1
        conn = sqlite3.connect(db, timeout=30)
        with conn:
            conn.execute("DELETE FROM sessions")  # the next round starts from an empty table
        conn.close()
    statusline_ms = []
    for _ in range(10):
        started = time.perf_counter()
        subprocess.run(
            [str(Path(sys.executable).parent / "agent-bridge-statusline")], env=env, capture_output=True, timeout=30
        )
        statusline_ms.append((time.perf_counter() - started) * 1000)
    return {
        **totals,
        "rounds": rounds,
        "sessions_per_round": sessions,
        "seed": seed,
        "who_ms_median": round(statistics.median(who_ms), 1),
        "who_ms_max": round(max(who_ms), 1),
        "statusline_subprocess_ms_median": round(statistics.median(statusline_ms), 1),
        "statusline_subprocess_ms_max": round(max(statusline_ms), 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=6, help="servers started per round (at least 4)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 4 sessions")
    args = parser.parse_args()
    rounds, sessions = (2, 4) if args.quick else (args.rounds, max(4, args.sessions))
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    result = run(rounds, sessions, seed)
    print(json.dumps(result, indent=2))
    print(
        f"who: false alive {result['false_alive']}, false dead {result['false_dead']} over {result['checks']} "
        f"checks ({result['kill9']} kill -9, {result['sigterm']} SIGTERM, {result['clean_exit']} clean exits, "
        f"{result['pid_reuse_real']} real pid reuses ({result['reuse_by_server']} by a new server), "
        f"{result['pid_reuse_simulated']} simulated); other host shown wrong {result['foreign_wrong']}; "
        f"who {result['who_ms_median']} ms median; status line {result['statusline_subprocess_ms_median']} ms "
        f"median (process start included)"
    )


if __name__ == "__main__":
    main()
