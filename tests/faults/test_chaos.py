"""Fault injection, part 1 (slow, ~1 min): kill -9 at random moments, then restart and recover.

Two listeners (claude, codex) dispatch a scripted worker (tests/workers/scripted_worker.py:
the domain layer, no MCP SDK, so a cycle costs a fraction of a second) for 120+ tasks that
kimi sends through a real MCP server. A seeded injector meanwhile SIGKILLs listeners,
supervisors, workers and the MCP servers (the sending kimi one, and a claude one that
long-polls receive_messages), restarting what the system itself would restart (listeners
like systemd; MCP servers like the agent CLI, whose caller re-sends with the same
dedup_key). Afterwards every task must have exactly one finished attempt, no worker may
have been launched twice, every failed attempt must have told its sender exactly once (and
no other attempt at all), nothing of any worker may still run (each one leaves a child that
forks on TERM), and a SQLite store must pass PRAGMA integrity_check. It runs on both backends.

Replay a failure with FAULT_SEED=<seed printed by the test>; FAULT_CYCLES sets the
number of tasks (default 120 on SQLite, 60 on PostgreSQL).
"""

import json
import os
import random
import time
from collections import Counter
from concurrent.futures import Future
from pathlib import Path

import psutil
import pytest
from dispatch_harness import integrity, status, wait_until
from faultkit import (
    fault_seed,
    kill9,
    kill_marked,
    kill_process,
    marked_processes,
    mcp_server_pid,
    new_marker,
    scripted_launcher,
    start_listener,
    stop,
)
from harness import McpAgent, bridge_env, sql, write_config

from dispatcher.dispatch.attempts import FAILURE_OUTCOMES, OUTCOMES

pytestmark = [pytest.mark.slow, pytest.mark.both_backends]

RECIPIENTS = ("claude", "codex")
MIN_KILLS = 3  # of each kind, before the injector stops
CHAOS_DEADLINE = 240.0
SETTLE_DEADLINE = 180.0


class Chaos:
    def __init__(self, root: Path, seed: int, cycles: int, store: str | None = None) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.cycles = cycles
        self.marker = new_marker()
        launcher = scripted_launcher(root)
        agents = {a: {"auto": True, "launcher": str(launcher), "worker_timeout_seconds": 10} for a in RECIPIENTS}
        agents["kimi"] = {"auto": False, "launcher": str(launcher)}
        self.launches = root / "launches.txt"
        self.env = {
            **bridge_env(root, write_config(root / "config.json", agents)),
            "FAULT_RUN": self.marker,
            "FAULT_SEED": str(seed),
            "SCRIPTED_WORKER_LAUNCHES": str(self.launches),
            "SCRIPTED_WORKER_MAX_PAUSE": "0.05",
            "SCRIPTED_WORKER_FORK": "1",  # each worker leaves a child that forks on TERM
        }
        if store is not None:  # a PostgreSQL store (else the SQLite file bridge_env names)
            self.env["AGENT_BRIDGE_DB"] = store
        self.db: Path | str = store or Path(self.env["AGENT_BRIDGE_DB"])
        self.listeners: dict[str, object] = {a: None for a in RECIPIENTS}
        self.restart_in: dict[str, int] = {}
        self.servers: dict[str, McpAgent | None] = {"sender": None, "observer": None}
        self.server_starts = Counter()
        self.sends: list[tuple[str, Future]] = []
        self.confirmed: dict[str, int] = {}
        self.unconfirmed: set[str] = set()
        self.observer_call: Future | None = None
        self.next_task = 0
        self.kills = Counter()
        self.unattempted_at_kill: set[int] = set()
        self.events: list[str] = []

    # -- processes --------------------------------------------------------------------
    def start_listener(self, agent: str) -> None:
        self.listeners[agent] = start_listener(self.env, agent, self.root / f"listener-{agent}.log")

    def restart_failed_listeners(self) -> None:
        """What systemd's unit does (Restart=on-failure, RestartPreventExitStatus=2): a listener
        that ended by itself with a failure starts again. One way it fails here: the injector
        kills the child a starting listener forks to check its settings (it has the listener's
        command line) three times over, and the listener says check_failed and exits 1."""
        for agent, proc in self.listeners.items():
            if proc is not None and proc.poll() not in (None, 0, 2):
                tail = self.log_tail(agent)
                # Any other failure is a defect this test exists to find.
                assert any("agent-bridge: check_failed:" in line for line in tail), (
                    f"the {agent} listener exited {proc.returncode}: {tail}"
                )
                self.events.append(f"{agent} listener exited {proc.returncode} (check_failed); restarted")
                self.start_listener(agent)

    def log_tail(self, agent: str) -> list[str]:
        """The last lines the agent's listeners (and their supervisors) wrote on stderr."""
        return (self.root / f"listener-{agent}.log").read_text(errors="replace").splitlines()[-20:]

    def server(self, role: str) -> McpAgent:
        if self.servers[role] is None:
            self.server_starts[role] += 1
            tag = f"{role}-{self.server_starts[role]}"
            agent = "kimi" if role == "sender" else "claude"
            self.servers[role] = McpAgent(
                agent, {**self.env, "FAULT_TAG": tag}, self.root / f"{role}.stderr", fresh_interpreter=True
            )
            self.servers[role].tag = tag
        return self.servers[role].wait_ready()

    def drop_server(self, role: str) -> None:
        agent = self.servers[role]
        if agent is not None:
            agent.close()
            self.servers[role] = None

    # -- traffic ----------------------------------------------------------------------
    def task_key(self, n: int) -> str:
        return f"chaos-{n}"

    def recipient(self, key: str) -> str:
        return RECIPIENTS[int(key.rsplit("-", 1)[1]) % len(RECIPIENTS)]

    def send(self, key: str) -> None:
        sender = self.server("sender")
        fut = sender.call_async(
            "send_message", recipient=self.recipient(key), text=f"chaos task {key}", kind="task", dedup_key=key
        )
        self.sends.append((key, fut))

    def collect_sends(self, block: bool = False) -> None:
        still = []
        for key, fut in self.sends:
            if not fut.done() and not block:
                still.append((key, fut))
                continue
            try:
                result = fut.result(120)
            except Exception as exc:  # noqa: BLE001 - the server died under the call: the caller retries later
                self.unconfirmed.add(key)
                self.events.append(f"send {key} lost its server ({type(exc).__name__})")
                continue
            assert not result.is_error, f"send_message {key} failed: {result.content[0].text}"
            self.confirmed[key] = result.structured_content["id"]
            self.unconfirmed.discard(key)
        self.sends = still

    def observe(self, server_killed: bool = False) -> None:
        """Keep one receive_messages long-poll in flight on the claude server."""
        if self.observer_call is not None and (server_killed or self.observer_call.done()):
            try:
                result = self.observer_call.result(120)
                assert not result.is_error, f"receive_messages failed: {result.content[0].text}"
            except Exception as exc:
                if not server_killed:
                    raise
                self.events.append(f"receive_messages lost its server ({type(exc).__name__})")
            self.observer_call = None
        if self.observer_call is None and self.servers["observer"] is not None and not server_killed:
            self.observer_call = self.servers["observer"].call_async("receive_messages", limit=5, wait_seconds=2)

    # -- faults -----------------------------------------------------------------------
    def _target(self, cmd: str, exclude: set[int], timeout: float = 1.5) -> psutil.Process | None:
        """A random live process of ours to kill; with none running, send a task to make one."""
        deadline = time.monotonic() + timeout
        first = True
        while time.monotonic() < deadline:
            if not first and not self.pending_dispatch():
                self.send(self.task_key(self.next_task))
                self.next_task += 1
            first = False
            procs = sorted((p for p in marked_processes(self.marker, cmd) if p.pid not in exclude), key=lambda p: p.pid)
            if procs:
                return self.rng.choice(procs)
            time.sleep(0.02)
        return None

    def pending_dispatch(self) -> bool:
        """Whether some confirmed task is not yet attempted (or a send is still in flight)."""
        self.collect_sends()
        if self.sends:
            return True
        attempted = {r[0] for r in sql(self.db, "SELECT message_id FROM dispatch_attempts")}
        return any(i not in attempted for i in self.confirmed.values())

    def kill_listener(self) -> None:
        running = [a for a, p in self.listeners.items() if p is not None]
        if not running:
            return
        agent = self.rng.choice(running)
        proc = self.listeners[agent]
        kill9(proc.pid)
        proc.wait(30)
        # Tasks the dead listener had not yet recorded an attempt for: the restart must take them.
        attempted = {r[0] for r in sql(self.db, "SELECT message_id FROM dispatch_attempts")}
        self.unattempted_at_kill |= {
            i for k, i in self.confirmed.items() if self.recipient(k) == agent and i not in attempted
        }
        self.listeners[agent] = None
        self.restart_in[agent] = self.rng.randint(0, 3)
        self.kills["listener"] += 1

    def kill_supervisor(self) -> None:
        listener_pids = {p.pid for p in self.listeners.values() if p is not None}
        # A supervisor is forked from its listener: the listener's command line, another pid.
        proc = self._target("dispatcher.dispatch.listener_main", listener_pids)
        if proc is not None:
            time.sleep(self.rng.uniform(0, 0.1))
            if kill_process(proc):
                self.kills["supervisor"] += 1

    def kill_worker(self) -> None:
        proc = self._target("scripted_worker.py", set())
        if proc is not None:
            time.sleep(self.rng.uniform(0, 0.08))
            if kill_process(proc):
                self.kills["worker"] += 1

    def kill_server(self, role: str) -> None:
        agent = self.servers[role]
        if agent is None:
            return
        pid = mcp_server_pid(agent.tag)
        assert pid is not None, f"cannot find the {role} MCP server process"
        time.sleep(self.rng.uniform(0, 0.05))
        kill9(pid)
        self.kills[f"mcp_{role}"] += 1
        if role == "sender":
            self.collect_sends(block=True)  # the in-flight calls fail with "connection closed"
        else:
            self.observe(server_killed=True)
        self.drop_server(role)

    def step(self) -> None:
        roll = self.rng.random()
        if roll < 0.45:
            for key in sorted(self.unconfirmed):  # the caller retries, with the same dedup_key
                self.send(key)
            self.unconfirmed.clear()
            for _ in range(self.rng.randint(1, 4)):
                self.send(self.task_key(self.next_task))
                self.next_task += 1
        elif roll < 0.56:
            self.kill_listener()
        elif roll < 0.72:
            self.kill_supervisor()
        elif roll < 0.88:
            self.kill_worker()
        elif roll < 0.95:
            self.kill_server("sender")
        else:
            self.kill_server("observer")
            self.server("observer")

    def run(self) -> None:
        for agent in RECIPIENTS:
            self.start_listener(agent)
        self.server("sender")
        self.server("observer")
        deadline = time.monotonic() + CHAOS_DEADLINE
        kinds = ("listener", "supervisor", "worker", "mcp_sender", "mcp_observer")
        while self.next_task < self.cycles or any(self.kills[k] < MIN_KILLS for k in kinds):
            assert time.monotonic() < deadline, f"injector did not finish in time; kills so far {dict(self.kills)}"
            self.step()
            self.collect_sends()
            self.observe()
            self.restart_failed_listeners()
            for agent, countdown in list(self.restart_in.items()):
                if countdown <= 0:
                    self.start_listener(agent)
                    del self.restart_in[agent]
                else:
                    self.restart_in[agent] = countdown - 1
            time.sleep(self.rng.uniform(0, 0.1))  # the random moment of the next fault

    def recover(self) -> None:
        """What a restart does: listeners back up, callers re-send what they could not confirm."""
        for agent in RECIPIENTS:
            if self.listeners[agent] is None:
                self.start_listener(agent)
        self.restart_in.clear()
        self.restart_failed_listeners()
        self.collect_sends(block=True)
        for key in sorted(self.unconfirmed):
            self.send(key)
        self.collect_sends(block=True)
        assert not self.unconfirmed, f"sends never confirmed: {sorted(self.unconfirmed)}"

    def unsettled(self) -> list[int]:
        ids = list(self.confirmed.values())
        finished = {row[0] for row in sql(self.db, "SELECT message_id FROM dispatch_attempts WHERE state = 'finished'")}
        return [i for i in ids if i not in finished]

    def diagnosis(self) -> str:
        """What a timed-out wait needs to be read: the unsettled tasks' messages and attempts, and
        each listener's process and status document."""
        ids = self.unsettled()
        marks = ",".join("?" * len(ids)) or "NULL"
        messages = sql(
            self.db,
            f"SELECT id, recipient, acknowledged_at, claim_owner FROM messages WHERE id IN ({marks})",
            tuple(ids),
        )
        attempts = sql(self.db, f"SELECT * FROM dispatch_attempts WHERE message_id IN ({marks})", tuple(ids))
        listeners = {
            agent: (None if proc is None else proc.poll(), status(self.env, agent))
            for agent, proc in self.listeners.items()
        }
        # A listener that ended: the last lines of its stderr say why.
        ended = {
            agent: self.log_tail(agent)
            for agent, proc in self.listeners.items()
            if proc is not None and proc.poll() is not None
        }
        return (
            f"unsettled {ids}; messages {messages}; attempts {attempts}; listeners {listeners}; "
            f"ended {ended}; events {self.events}"
        )

    def close(self) -> None:
        for proc in self.listeners.values():
            if proc is not None:
                stop(proc)
        for role in self.servers:
            self.drop_server(role)
        kill_marked(self.marker)


@pytest.fixture
def chaos(tmp_path, backend, request):
    seed = fault_seed("chaos")
    store = request.getfixturevalue("new_postgres_store")() if backend == "postgres" else None
    # On PostgreSQL half the tasks: the same kinds of kill, as many of each; the suite's time is shared.
    cycles = int(os.environ.get("FAULT_CYCLES", "60" if store else "120"))
    run = Chaos(tmp_path, seed, cycles, store)
    yield run
    run.close()


def test_random_kill9_then_restart_every_task_settles_once(chaos):
    started = time.monotonic()
    chaos.run()
    chaos.recover()
    injected = time.monotonic() - started

    def settled() -> bool:
        chaos.restart_failed_listeners()
        return not chaos.unsettled()

    try:
        wait_until(settled, SETTLE_DEADLINE, "every task to have a finished attempt")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {chaos.diagnosis()}") from None
    print(
        f"[chaos] {len(chaos.confirmed)} tasks, kills {dict(chaos.kills)}, "
        f"{len(chaos.unattempted_at_kill)} tasks not yet attempted when their listener died, "
        f"injection {injected:.1f} s, total {time.monotonic() - started:.1f} s; "
        f"{sum('check_failed' in e for e in chaos.events)} listener restarts after check_failed"
    )

    db = chaos.db
    tasks = dict(sql(db, "SELECT dedup_key, id FROM messages WHERE sender = 'kimi' AND kind = 'task'"))
    # Re-sent with the same dedup_key: exactly one message per task, and the ids the callers saw.
    assert tasks == chaos.confirmed
    assert len(tasks) >= chaos.cycles

    attempts = {row[0]: row[1:] for row in sql(db, "SELECT message_id, state, outcome FROM dispatch_attempts")}
    for key, message_id in tasks.items():
        state, outcome = attempts[message_id]
        assert state == "finished" and outcome in OUTCOMES, (key, message_id, state, outcome)
    assert set(attempts) == set(tasks.values()), "an attempt exists for a message that is not a task"

    launched = Counter(int(line.split()[0]) for line in chaos.launches.read_text().splitlines())
    twice = {m: n for m, n in launched.items() if n > 1}
    assert not twice, f"launched more than once: {twice}"
    assert set(launched) <= set(tasks.values())

    # At most one result per task (a second launch would have sent a second one), and a
    # 'succeeded' verdict only with the evidence: the result and the acknowledgement.
    results = Counter(r[0] for r in sql(db, "SELECT reply_to FROM messages WHERE kind = 'result' AND sender != 'kimi'"))
    assert max(results.values(), default=0) <= 1
    acked = {r[0] for r in sql(db, "SELECT id FROM messages WHERE acknowledged_at IS NOT NULL")}
    for message_id, (_, outcome) in attempts.items():
        if outcome == "succeeded":
            assert results[message_id] == 1 and message_id in acked and launched[message_id] == 1

    # Exactly one failure notice to the sender for each failed attempt, none for any other.
    notices = Counter(
        r[0] for r in sql(db, "SELECT reply_to FROM messages WHERE kind = 'notice' AND origin = 'system'")
    )
    for message_id, (_, outcome) in attempts.items():
        assert notices[message_id] == (1 if outcome in FAILURE_OUTCOMES else 0), (message_id, outcome)
    assert set(notices) <= set(attempts), "a notice about a message that had no attempt"

    outcomes = Counter(outcome for _, outcome in attempts.values())
    print(f"[chaos] outcomes {dict(outcomes)}; launched {len(launched)} of {len(tasks)}")
    assert outcomes["succeeded"] > 0
    assert integrity(db) == "ok"
    # Nothing of ours keeps running besides the listeners, and they stop cleanly.
    wait_until(lambda: not marked_processes(chaos.marker, "scripted_worker.py"), 30, "no worker left running")
    for agent, proc in chaos.listeners.items():
        assert stop(proc) == 0, f"the {agent} listener did not stop cleanly"
        chaos.listeners[agent] = None
    status = json.loads((chaos.root / "runtime" / "claude.progress.json").read_text())
    assert status["stage"] == "stopped"
