"""The idle listener sleeps on file events (inotify) and still wakes for everything it waited
for by polling: a send, a config change, a stop. The same run with the fallback forced
(``AGENT_BRIDGE_FILE_EVENTS=poll``, as on a file system without inotify)."""

from pathlib import Path

import pytest
from dispatch_harness import DEADLINE, post_task, start_listener, status, wait_finished, wait_until, write_config_atomic
from harness import bridge_env, inotify_descriptors, write_config

from dispatcher.core.file_events import MODE_VARIABLE


@pytest.mark.parametrize("mode", ["inotify", "poll"])
def test_an_idle_listener_wakes_on_a_send_a_config_change_and_a_stop(tmp_path, mode):
    launcher = tmp_path / "instant.sh"
    launcher.write_text("#!/bin/sh\nexit 0\n")
    launcher.chmod(0o755)
    env = {**bridge_env(tmp_path, write_config(tmp_path / "config.json")), MODE_VARIABLE: mode}
    config = Path(env["AGENT_BRIDGE_CONFIG"])
    write_config_atomic(config, launcher)
    proc = start_listener(env)
    wait_until(lambda: (status(env)["progress"] or {}).get("stage") == "idle", what="listener idle")
    assert inotify_descriptors(proc.pid) == (1 if mode == "inotify" else 0)

    task = post_task(Path(env["AGENT_BRIDGE_DB"]), "wake up")
    assert wait_finished(Path(env["AGENT_BRIDGE_DB"]), task)["state"] == "finished"

    write_config_atomic(config, launcher, auto=False)
    wait_until(lambda: status(env)["progress"]["auto"] is False, what="the config change seen")

    proc.terminate()  # a SIGTERM ends the sleeping wait at once (interrupt), not at its timeout
    out, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, err
    assert status(env)["progress"]["stage"] == "stopped"
