"""A listener says which launcher environment it took (names only, never values), `listener enable`
warns when the caller's differs, and in the foreground it prints one payload-free line per dispatch
and per verdict at the default log level.

Before, a detached listener kept the environment of whichever shell started it, silently: a worker
command exported later never reached its workers, and `listener run` printed nothing per task."""

import json
import os
from pathlib import Path

import pytest
from dispatch_harness import (
    cli,
    make_launcher,
    post_task,
    start_listener,
    wait_finished,
    wait_until,
    write_config_atomic,
)

from dispatcher.dispatch.environment import LAUNCHER_VARIABLES, difference, fingerprint, record, taken

SECRET_VALUE = "/opt/SECRET-VALUE/claude"


def test_taken_lists_only_set_launcher_variables_sorted():
    environ = {"CLAUDE_BIN": "/x", "AGENT_BRIDGE_WORKER_COMMAND": "w", "KIMI_NODE": "", "HOME": "/h"}
    assert taken(environ) == [
        "AGENT_BRIDGE_WORKER_COMMAND",
        "CLAUDE_BIN",
    ]  # empty counts as unset; HOME is no launcher's
    assert "ANTHROPIC_API_KEY" in LAUNCHER_VARIABLES  # the credentials doctor checks


def test_a_record_holds_names_and_a_salted_fingerprint_never_a_value():
    environ = {"CLAUDE_BIN": SECRET_VALUE}
    first, second = record(environ), record(environ)
    assert first["names"] == ["CLAUDE_BIN"] and SECRET_VALUE not in json.dumps(first)
    assert first["fingerprint"] != second["fingerprint"]  # salted: equal values do not look equal across listeners
    assert fingerprint(environ, first["salt"]) == first["fingerprint"]


@pytest.mark.parametrize(
    ("here", "said"),
    [
        ({"CLAUDE_BIN": SECRET_VALUE, "KIMI_NODE": "/n"}, None),
        ({"KIMI_NODE": "/n"}, "it has CLAUDE_BIN, which this shell has not"),
        (
            {"CLAUDE_BIN": SECRET_VALUE, "KIMI_NODE": "/n", "CODEX_HOME": "/c"},
            "this shell has CODEX_HOME, which it has not",
        ),
        ({"CLAUDE_BIN": "/other", "KIMI_NODE": "/n"}, "a value differs (of CLAUDE_BIN, KIMI_NODE)"),
    ],
)
def test_difference_names_what_differs(here, said):
    recorded = record({"CLAUDE_BIN": SECRET_VALUE, "KIMI_NODE": "/n"})
    assert difference(recorded, here) == said


@pytest.mark.parametrize("recorded", [None, {}, {"names": "x", "salt": "s"}, {"salt": 3}, "text"])
def test_no_record_means_nothing_to_compare(recorded):
    assert difference(recorded, {"CLAUDE_BIN": "/x"}) is None


def test_the_listener_says_its_environment_and_each_dispatch_and_verdict(env, db_path, config_path, launchers):
    write_config_atomic(config_path, make_launcher(launchers, "succeed"))
    took = {"AGENT_BRIDGE_WORKER_COMMAND": "unused here", "CLAUDE_BIN": SECRET_VALUE}
    listener = start_listener({**env, **took})  # in the foreground, at the default log level
    names = taken({**os.environ, **took})
    try:
        task = post_task(db_path, "PAYLOAD-TEXT count these words")
        assert wait_finished(db_path, task)["outcome"] == "succeeded"
        status = wait_until(
            lambda: (
                (s := json.loads(cli(env, "listener", "status", "--agent", "claude").stdout))["stage"] == "idle" and s
            ),
            what="idle after the verdict",
        )
        assert status["environment"] == names and SECRET_VALUE not in json.dumps(status)

        same = cli({**env, **took}, "listener", "enable", "--agent", "claude")
        assert json.loads(same.stdout)["warnings"] == [] and same.stderr == "", same.stderr
        without = {k: v for k, v in {**os.environ, **env}.items() if k != "CLAUDE_BIN"}
        other = cli(
            {**without, "AGENT_BRIDGE_WORKER_COMMAND": "unused here"}, "listener", "enable", "--agent", "claude"
        )
        (warning,) = json.loads(other.stdout)["warnings"]
        assert warning.startswith(f"environment_differs: the running listener of claude (pid {listener.pid})"), warning
        assert "it has CLAUDE_BIN, which this shell has not" in warning and "listener disable" in warning
        assert other.stderr == f"agent-bridge: warning: {warning}\n"
        changed = cli({**env, **took, "CLAUDE_BIN": "/elsewhere"}, "listener", "enable", "--agent", "claude")
        assert "a value differs" in json.loads(changed.stdout)["warnings"][0]
    finally:
        listener.terminate()
        _, stderr = listener.communicate(timeout=60)
    lines = stderr.splitlines()
    assert lines[0].endswith(f"launcher environment: {', '.join(names)}"), lines[0]
    dispatched = [line for line in lines if line.startswith(f"agent-bridge: [claude] supervising msg#{task} ")]
    verdicts = [line for line in lines if line.startswith(f"agent-bridge: [claude] finished | last msg#{task} ")]
    assert len(dispatched) == 1 and len(verdicts) == 1, lines
    assert "sender=kimi" in dispatched[0] and "result=succeeded" in verdicts[0], lines
    log = (Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "dispatcher.log").read_text()
    (started,) = [
        event
        for event in map(json.loads, log.splitlines())
        if event["event"] == "listener_started" and event["pid"] == listener.pid
    ]
    assert started["environment"] == names
    assert "PAYLOAD-TEXT" not in stderr + log and SECRET_VALUE not in stderr + log
