"""A stand-in for a headless Claude/Kimi worker, driving the real bridge over MCP stdio (``stdio_tools``).

Usage (from a launcher): fake_worker.py REQUEST_FILE, with FAKE_WORKER_MODE one of
succeed, slow (succeeds after FAKE_WORKER_DELAY seconds), block, crash, hang, noop,
ignore_term, late_noop (exits 0 after FAKE_WORKER_DELAY seconds, answering nothing),
claim_and_wait (claims with the shortest lease, writes the lease's end to FAKE_WORKER_CLAIM_FILE
when set, waits until FAKE_WORKER_RELEASE_FILE exists or FAKE_WORKER_DELAY seconds passed, then succeeds), stop_supervisor (SIGSTOPs its supervisor, its parent, then hangs), daemonize (exits at once, leaving a setsid'd grandchild that forks on TERM and posts a result
after FAKE_WORKER_DELAY seconds and notes that in FAKE_WORKER_LATE_FILE; with
FAKE_WORKER_LEADER=hang the leader then hangs); the
supervisor's environment tells it which message and store. The
well-behaved path is the package's scripted worker; the rest misbehave on purpose.
With FAKE_WORKER_LAUNCHES set, it appends its message id to that file first; with
FAKE_WORKER_DIAGNOSTICS set, it writes that JSON to the diagnostics file, as a launcher would.
With FAKE_WORKER_FIFOS set (comma-separated names), it replaces those files of its attempt
directory by FIFOs that nothing ever writes to, as a hostile worker could.
With FAKE_WORKER_ENV_FILE set, it writes its AGENT_BRIDGE_GIT_COMMON_DIR there ("-" when unset).
With FAKE_WORKER_WRITE set (``name=text``), it writes that file in its workspace first; with
FAKE_WORKER_TAMPER set (comma-separated: git_file, symlink, fifo, rm_workspace), it does that to
its workspace, as a hostile worker in a worktree could.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
from stdio_tools import bridge_tools

from dispatcher.ops.demo_worker import answer

MODE = os.environ.get("FAKE_WORKER_MODE", "succeed")
MESSAGE_ID = int(os.environ["AGENT_BRIDGE_MESSAGE_ID"])
DELAY = float(os.environ.get("FAKE_WORKER_DELAY", "3"))


async def misbehave() -> None:
    async with bridge_tools() as call:
        message = await call("get_message", message_id=MESSAGE_ID)
        await call("claim_message", message_id=MESSAGE_ID)
        if MODE == "crash":
            os._exit(3)  # dies holding the claim, without a word
        await call(
            "send_message",
            recipient=message["sender"],
            kind="result",
            reply_to=MESSAGE_ID,
            text="blocked: the fake worker may not do this",
        )
        await call("release_message", message_id=MESSAGE_ID)


async def claim_and_wait() -> None:
    async with bridge_tools() as call:
        claim = await call("claim_message", message_id=MESSAGE_ID, lease_seconds=30)
        claim_file = os.environ.get("FAKE_WORKER_CLAIM_FILE")
        if claim_file:  # the claim as granted: a reader of the row may only ever see its renewal
            Path(claim_file + ".tmp").write_text(claim["claim_expires_at"])
            os.replace(claim_file + ".tmp", claim_file)
        release = os.environ.get("FAKE_WORKER_RELEASE_FILE")
        deadline = time.monotonic() + DELAY
        while time.monotonic() < deadline and not (release and os.path.exists(release)):
            await anyio.sleep(0.1)
        await answer(call, MESSAGE_ID, lambda m: f"done: handled message {m['id']} slowly")


def daemonize() -> None:
    """Double fork + setsid: the grandchild leaves the worker's process group and session."""
    if os.fork():
        return
    os.setsid()
    if os.fork():
        os._exit(0)
    # On TERM it forks, and only the child goes on (and does the same on the next TERM): a
    # supervisor that lists the tree once and then signals it leaves that child running.
    signal.signal(signal.SIGTERM, lambda *_: os.fork() and os._exit(0))
    time.sleep(DELAY)
    with open(os.environ["FAKE_WORKER_LATE_FILE"], "a") as fh:
        fh.write(f"{MESSAGE_ID}\n")
    from dispatcher.bridge.messages import send_message
    from dispatcher.store import open_store

    conn = open_store(os.environ["AGENT_BRIDGE_DB"])
    message = conn.execute("SELECT sender FROM messages WHERE id = ?", (MESSAGE_ID,)).fetchone()
    send_message(
        conn,
        sender=os.environ["AGENT_ID"],
        recipient=message["sender"],
        kind="result",
        reply_to=MESSAGE_ID,
        text="done: a late answer from an escaped grandchild",
        agents={os.environ["AGENT_ID"], message["sender"]},
    )
    os._exit(0)


async def behave() -> None:
    async with bridge_tools() as call:
        await answer(call, MESSAGE_ID, lambda m: f"done: handled message {m['id']}")


def tamper(what: set[str]) -> None:
    """Planted in the worktree: a .git file pointing at a repository whose fsmonitor and clean
    filter would run (they write a marker), a symlink out of the tree (to its attempt directory), a FIFO; or the workspace deleted."""
    here = Path.cwd()
    if "git_file" in what:
        evil = Path(os.environ["AGENT_BRIDGE_ATTEMPT_DIR"]) / "evil"
        subprocess.run(["git", "init", "-q", str(evil)], check=True)  # noqa: S607 - a test's git
        marker = evil / "fsmonitor-ran"
        hook = evil / "fsmonitor.sh"
        hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
        hook.chmod(0o755)
        subprocess.run(["git", "-C", str(evil), "config", "core.fsmonitor", str(hook)], check=True)  # noqa: S607
        # A clean filter the planted config defines, for every file: any git that reads that config runs it.
        subprocess.run(["git", "-C", str(evil), "config", "filter.evil.clean", f"{hook}; cat"], check=True)  # noqa: S607
        (here / ".gitattributes").write_text("* filter=evil\n")
        (here / ".git").write_text(f"gitdir: {evil / '.git'}\n")
    if "symlink" in what:
        (here / "escape").symlink_to(os.environ["AGENT_BRIDGE_ATTEMPT_DIR"], target_is_directory=True)
    if "fifo" in what:
        os.mkfifo(here / "pipe", 0o600)
    if "rm_workspace" in what:
        shutil.rmtree(here)


def main() -> int:
    if launches := os.environ.get("FAKE_WORKER_LAUNCHES"):
        with open(launches, "a") as fh:
            fh.write(f"{MESSAGE_ID}\n")
    assert f"#{MESSAGE_ID}" in Path(sys.argv[1]).read_text(), "request file does not name the message"
    if diagnostics := os.environ.get("FAKE_WORKER_DIAGNOSTICS"):  # what a CLI's result JSON yields
        Path(os.environ["AGENT_BRIDGE_DIAGNOSTICS_FILE"]).write_text(diagnostics)
    for name in filter(None, os.environ.get("FAKE_WORKER_FIFOS", "").split(",")):
        planted = Path(os.environ["AGENT_BRIDGE_ATTEMPT_DIR"]) / name
        planted.unlink(missing_ok=True)
        os.mkfifo(planted, 0o600)
    if seen := os.environ.get("FAKE_WORKER_ENV_FILE"):  # what the supervisor told it about git
        Path(seen).write_text(os.environ.get("AGENT_BRIDGE_GIT_COMMON_DIR", "-"))
    if write := os.environ.get("FAKE_WORKER_WRITE"):
        name, _, text = write.partition("=")
        Path(name).write_text(text)
    tamper(set(filter(None, os.environ.get("FAKE_WORKER_TAMPER", "").split(","))))
    if MODE == "noop":
        return 0
    if MODE == "late_noop":
        time.sleep(DELAY)
        return 0
    if MODE == "daemonize":
        daemonize()
        if os.environ.get("FAKE_WORKER_LEADER") == "hang":
            time.sleep(3600)
        return 0
    if MODE == "claim_and_wait":
        anyio.run(claim_and_wait)
        return 0
    if MODE == "stop_supervisor":
        os.kill(os.getppid(), signal.SIGSTOP)
        time.sleep(3600)
    if MODE == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if MODE in ("hang", "ignore_term"):
        time.sleep(3600)
    if MODE == "slow":
        time.sleep(DELAY)
    anyio.run(misbehave if MODE in ("crash", "block") else behave)
    return 0


if __name__ == "__main__":
    sys.exit(main())
