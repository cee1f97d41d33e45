"""Idle send → Claude's own next model request: the waiting Stop hook (``hook claude Stop --wait``).

One real Claude Code 2.1.332 session kept open by streaming input
(``claude -p --input-format stream-json --output-format stream-json --verbose``), hooks written
by ``agent-bridge register claude --hooks`` into a private config dir, the scripted Anthropic
model of tests/models on 127.0.0.1. Each run: wait until the session is idle and its waiting Stop
hook holds the slot, commit one message for ``claude``, and time from the committed send to the
moment the model server receives Claude's new request carrying that message's id (no input is
given to the session). Runs are spaced by the rule's 10 s gap between notices. The bridge's own
share is timed in the same runs: from the committed send to the waiting hook's exit (a pidfd of
the waiter, opened before the send); the rest is Claude Code starting its turn.

    uv run python -m bench.rewake [--runs 10] [--json]

Printed: p50/p99/min/max in milliseconds (both spans), the 1-minute load average before and after, the CPUs.
Needs the pinned CLI (tests/clis/install.sh).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.hooks import latency_cli
from bench.stats import summarize

PROJECT = Path(__file__).resolve().parent.parent
AGENTS = frozenset({"claude", "kimi"})
SECRET = "bench-secret-text"
GAP_SECONDS = 10.5  # hook_rules.MIN_GAP_SECONDS between two notices, plus a little


def _wait(predicate, deadline: float = 120.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if value := predicate():
            return value
        time.sleep(0.01)
    raise TimeoutError("benchmark wait timed out")


def measure(runs: int) -> dict:
    sys.path.insert(0, str(PROJECT / "tests"))
    from cli_harness import BINARIES
    from models import script
    from models.anthropic import AnthropicModel

    from dispatcher.bridge.messages import send_message
    from dispatcher.store import open_store

    claude = BINARIES["claude"]
    if not os.access(claude, os.X_OK):
        raise SystemExit(f"the pinned claude CLI is not installed at {claude}: run `bash tests/clis/install.sh`")

    arrivals: list[tuple[float, str]] = []

    class Model(AnthropicModel):
        def step_for(self, body: dict) -> script.Step:
            if body.get("tools"):
                arrivals.append((time.perf_counter(), json.dumps(body.get("messages"))))
            return script.Final("ok")

    with tempfile.TemporaryDirectory(prefix="bench-rewake-") as tmp:
        root = Path(tmp)
        db = root / "bridge.db"
        conn = open_store(db)
        config_dir = root / "home" / ".claude"
        config_dir.mkdir(parents=True)
        (config_dir / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
        (root / "config.json").write_text(
            json.dumps(
                {"agents": {a: {"auto": False, "launcher": f"launchers/{a}_headless.sh"} for a in sorted(AGENTS)}}
            )
        )
        inherited = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "AGENT_"))}
        env = {
            **inherited,
            "AGENT_BRIDGE_DB": str(db),
            "AGENT_BRIDGE_CONFIG": str(root / "config.json"),
            "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
            "CLAUDE_CONFIG_DIR": str(config_dir),
            "HOME": str(root / "home"),
            "TMPDIR": str(root),
        }
        done = subprocess.run(
            [sys.executable, "-m", "dispatcher", "register", "claude", "--agent", "claude", "--hooks"],
            cwd=PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        with Model(root / "requests.jsonl") as model:
            env.update(
                {
                    "ANTHROPIC_BASE_URL": model.base_url,
                    "ANTHROPIC_API_KEY": "dummy",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                    "CLAUDE_CODE_MAX_RETRIES": "0",
                }
            )
            proc = subprocess.Popen(
                [
                    str(claude),
                    "-p",
                    "--input-format",
                    "stream-json",
                    "--output-format",
                    "stream-json",
                    "--verbose",
                    "--no-session-persistence",
                ],
                cwd=root,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            results = []
            reader = threading.Thread(
                target=lambda: [
                    results.append(1) for line in proc.stdout if '"type":"result"' in line.replace(" ", "")
                ],
                daemon=True,
            )
            reader.start()
            proc.stdin.write(json.dumps({"type": "user", "message": {"role": "user", "content": "hello"}}) + "\n")
            proc.stdin.flush()
            load_before = os.getloadavg()[0]
            samples, hook_samples = [], []
            try:
                for n in range(runs + 1):  # the first run warms up and is not counted
                    _wait(lambda: len(results) >= n + 1)  # noqa: B023 - the closure runs at once, inside this iteration
                    _wait(lambda: _waiter(root))
                    time.sleep(GAP_SECONDS)
                    waiter = os.pidfd_open(_wait(lambda: _waiter(root)))
                    seen = len(arrivals)
                    message = send_message(
                        conn,
                        sender="kimi",
                        recipient="claude",
                        text=f"{SECRET} {n}",
                        agents=AGENTS,
                        max_body_bytes=65536,
                        kind="task",
                    )["id"]
                    start = time.perf_counter()
                    if not select.select([waiter], [], [], 120)[0]:
                        raise SystemExit(f"run {n}: the waiting hook did not end within 120 s")
                    hook_exit = time.perf_counter()
                    os.close(waiter)
                    at, text = _wait(lambda: len(arrivals) > seen and arrivals[seen])  # noqa: B023 - the closure runs at once, inside this iteration
                    if f"#{message} from kimi" not in text or SECRET in text:
                        raise SystemExit(f"run {n}: the woken request does not carry the notice for #{message}")
                    if n:
                        samples.append(at - start)
                        hook_samples.append(hook_exit - start)
                    conn.execute("UPDATE messages SET acknowledged_at = ? WHERE id = ?", (time.time(), message))
            finally:
                load_after = os.getloadavg()[0]
                proc.terminate()
                proc.stdin.close()
                proc.wait(timeout=60)
                reader.join(timeout=10)
                proc.stdout.close()
        conn.close()
    return {
        "what": "idle Claude session: committed send -> Claude's own next model request carrying the notice",
        "runs": runs,
        "ms": _ms(samples),
        "bridge_share": "committed send -> the waiting Stop hook has exited (its notice given)",
        "bridge_ms": _ms(hook_samples),
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(load_after, 2),
        "cpus": os.cpu_count(),
    }


def _ms(samples: list[float]) -> dict:
    return {k: (round(v * 1000, 1) if isinstance(v, float) else v) for k, v in summarize(samples).items()}


def _waiter(root: Path) -> int | None:
    """The pid of the hook that holds the session's waiting slot, if one does."""
    directory = root / "runtime" / "hooks" / "claude"
    for path in directory.glob("*.json") if directory.exists() else []:
        try:
            token = json.loads(path.read_text()).get("waiter")
        except ValueError:
            continue
        if token and os.path.exists(f"/proc/{token.split('-')[0]}"):
            return int(token.split("-")[0])
    return None


def main(argv: list[str] | None = None) -> None:
    latency_cli(measure, 10, __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    main()
