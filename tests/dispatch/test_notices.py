"""Issue 33, item 4: ``notify_command`` run by a real listener on a real failed attempt: once per
event, payload-free (a canary task text never reaches it), in the background (a hanging command
delays no dispatch and is ended at its limit), and a failing one logged once."""

import json
import os
import time
from pathlib import Path

import pytest
from dispatch_harness import make_launcher, post_task, start_listener, status, wait_finished, wait_until

CANARY = "canary-7f3e-task-text-must-not-leak"


def _config(config_path: Path, launcher: Path, command: list[str], timeout: int = 60) -> None:
    doc = {
        "agents": {
            "claude": {"auto": True, "launcher": str(launcher), "worker_timeout_seconds": 60},
            "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
        },
        "notify_command": command,
        "notify_timeout_seconds": timeout,
    }
    tmp = config_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, config_path)


def _script(directory: Path, name: str, body: str) -> str:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _notices_counted(db_path) -> dict:
    """The store's counter of notices: (agent, event, outcome) -> count."""
    from dispatcher.store import open_store
    from dispatcher.store.metrics import counter_totals

    conn = open_store(db_path)
    try:
        return counter_totals(conn, "notices", None)
    finally:
        conn.close()


def _log(env) -> str:
    path = Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "dispatcher.log"
    return path.read_text() if path.exists() else ""


def _log_lines(env, event: str) -> list[dict]:
    return [line for line in map(json.loads, _log(env).splitlines()) if line.get("event") == event]


@pytest.mark.both_backends
def test_a_failed_attempt_gives_one_payload_free_notice(env, db_path, config_path, launchers, tmp_path):
    record = tmp_path / "notices"
    record.mkdir()
    # Each call writes its arguments and its whole environment to a file of its own.
    command = _script(tmp_path, "record.sh", f'f={record}/$$; printf "%s\\n" "$@" > $f.args; env > $f.env\n')
    _config(config_path, make_launcher(launchers, "noop"), [command, "{event}", "{message_id}", "{summary}"])
    key = ("claude", "attempt_failed", "started")
    counted = _notices_counted(db_path).get(key, 0)
    message_id = post_task(db_path, CANARY)
    listener = start_listener(env)
    done = wait_finished(db_path, message_id)
    assert done["outcome"] == "failed"
    wait_until(lambda: len(list(record.glob("*.env"))) == 1 and _log_lines(env, "notice_sent"), what="the notice")
    wait_until(lambda: status(env)["stage"] == "idle", what="listener idle")
    listener.terminate()
    listener.communicate(timeout=60)
    (args,) = record.glob("*.args")
    (environment,) = record.glob("*.env")
    argv = args.read_text().splitlines()
    assert argv[:2] == ["attempt_failed", str(message_id)]
    assert f"agent-bridge show {message_id}" in argv[2]
    seen = environment.read_text()
    assert f"AGENT_BRIDGE_NOTICE_MESSAGE_ID={message_id}" in seen
    assert "AGENT_BRIDGE_NOTICE_AGENT=claude" in seen
    assert "AGENT_BRIDGE_NOTICE_OUTCOME=failed" in seen
    assert "AGENT_BRIDGE_NOTICE_ERROR_KIND=no_evidence" in seen
    assert CANARY not in args.read_text() + seen
    assert CANARY not in _log(env)
    assert len(list(record.glob("*.args"))) == 1  # once per event
    # Counted where it started, once (docs/metrics.md).
    assert _notices_counted(db_path).get(key, 0) == counted + 1


def test_a_hanging_command_delays_no_dispatch_and_is_ended_at_its_limit(env, db_path, config_path, launchers, tmp_path):
    pids = tmp_path / "hanging"
    pids.mkdir()
    # It records its pid, then waits for a file that never comes.
    command = _script(tmp_path, "hang.sh", f"echo $$ > {pids}/$$; while [ ! -e {tmp_path}/never ]; do sleep 1; done\n")
    _config(config_path, make_launcher(launchers, "noop"), [command], timeout=20)
    listener = start_listener(env)
    first = post_task(db_path, "first")
    wait_finished(db_path, first)
    (pid_file,) = wait_until(lambda: list(pids.iterdir()), what="the first notice to run")
    pid = int(pid_file.read_text())
    second = post_task(db_path, "second")
    assert wait_finished(db_path, second)["outcome"] == "failed"
    assert Path(f"/proc/{pid}").exists()  # the first notice still hangs: the dispatch did not wait
    # Both are ended at the limit, each logged once as such.
    wait_until(lambda: len(_log_lines(env, "notice_failed")) >= 2, what="both notices ended at their limit")
    assert not Path(f"/proc/{pid}").exists()
    failed = _log_lines(env, "notice_failed")
    assert len(failed) == 2
    assert all("notify_timeout_seconds" in line["reason"] for line in failed)
    listener.terminate()
    listener.communicate(timeout=60)


def test_a_failing_command_is_logged_once_per_notice(env, db_path, config_path, launchers, tmp_path):
    before = len(_log_lines(env, "notice_failed"))
    _config(config_path, make_launcher(launchers, "noop"), [_script(tmp_path, "fail.sh", "exit 3\n")])
    listener = start_listener(env)
    message_id = post_task(db_path, "fails")
    wait_finished(db_path, message_id)
    wait_until(lambda: len(_log_lines(env, "notice_failed")) > before, what="the failed notice's line")
    wait_until(lambda: status(env)["stage"] == "idle", what="listener idle")
    listener.terminate()
    listener.communicate(timeout=60)
    (line,) = _log_lines(env, "notice_failed")[before:]
    assert line["reason"] == "exited 3" and line["message_id"] == str(message_id)
    assert line["notice_event"] == "attempt_failed"


def test_a_succeeded_attempt_gives_no_notice(env, db_path, config_path, launchers, tmp_path):
    marker = tmp_path / "called"
    _config(config_path, make_launcher(launchers, "succeed"), [_script(tmp_path, "mark.sh", f"touch {marker}\n")])
    listener = start_listener(env)
    message_id = post_task(db_path, "fine")
    assert wait_finished(db_path, message_id)["outcome"] == "succeeded"
    wait_until(lambda: status(env)["stage"] == "idle", what="listener idle")
    listener.terminate()
    listener.communicate(timeout=60)
    assert not marker.exists()
    assert not [line for line in _log_lines(env, "notice") if line.get("message_id") == message_id]


def test_a_daily_budget_hold_gives_one_notice_a_day(env, db_path, config_path, launchers, tmp_path):
    """A listener whose agent reached its daily budget today, with a task waiting, sends one
    ``budget_held`` notice; another task held the same day sends none. A listener that crashed
    after recording the day and before starting the notice loses no notice: the next one tells
    (the listener's order, ``_next_candidate``). (Last in the module: the spend it records stays,
    harmless once the next config has no cap.)"""
    from dispatch_harness import cli, record_attempt

    from dispatcher.core.config import load_config
    from dispatcher.dispatch.outcome import settle
    from dispatcher.store import open_store

    record = tmp_path / "held"
    record.mkdir()
    command = _script(tmp_path, "record.sh", f'f={record}/$$; printf "%s\\n" "$@" > $f.args\n')
    _config(config_path, make_launcher(launchers, "succeed"), [command, "{event}", "{summary}"])
    doc = json.loads(config_path.read_text())
    doc["agents"]["claude"]["max_tokens_per_day"] = 100
    doc["budget_time_zone"] = "UTC"
    config_path.write_text(json.dumps(doc))
    spent = post_task(db_path, "spent today")
    conn = open_store(db_path)
    try:
        record_attempt(conn, spent, load_config(config_path), "t" * 32)
        settle(conn, spent, fallback="failed", diagnostics={"cli": "claude", "input_tokens": 400}, now=time.time())
    finally:
        conn.close()
    first = post_task(db_path, CANARY)
    # A listener that crashed between recording today's hold and starting its notice left the day
    # recorded and no notice: the one started now still tells (and the day still counts once).
    from dispatcher.core.config_view import budget_day_start
    from dispatcher.store.metrics import record_budget_hold

    conn = open_store(db_path)
    try:
        record_budget_hold(conn, "claude", budget_day_start(load_config(config_path), time.time()))
    finally:
        conn.close()
    counted = _notices_counted(db_path).get(("claude", "budget_held", "started"), 0)
    listener = start_listener(env)
    try:
        wait_until(lambda: list(record.glob("*.args")), what="the budget_held notice")
        second = post_task(db_path, "another")

        def held() -> list[int]:
            pending = json.loads(cli(env, "listener", "pending", "--agent", "claude").stdout)
            return sorted(h["id"] for h in pending["held_budget"])

        wait_until(lambda: held() == [first, second], what="both tasks held")
        wait_until(lambda: status(env)["stage"] == "idle", what="listener idle")
    finally:
        listener.terminate()
        listener.communicate(timeout=60)
    started = [line for line in _log_lines(env, "notice") if line.get("notice_event") == "budget_held"]
    assert len(started) == 1  # once for the day, not once per task or per scan (logged before it starts)
    (args,) = record.glob("*.args")
    argv = args.read_text().splitlines()
    assert argv[0] == "budget_held" and "reached its daily budget" in argv[1]
    assert CANARY not in args.read_text()
    # The metrics' budget holds counter: the day, recorded once in the store (docs/metrics.md).
    from dispatcher.store.metrics import budget_hold_days

    conn = open_store(db_path)
    try:
        assert budget_hold_days(conn, None) == {"claude": 1}
    finally:
        conn.close()
    assert _notices_counted(db_path).get(("claude", "budget_held", "started"), 0) == counted + 1
