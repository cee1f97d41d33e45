"""A test run that is killed mid-way leaves nothing running (detached_guard.py): a pytest run whose
test started a detached listener (`listener enable`, its own session) is sent SIGTERM; the
listener ends with it. Before, it kept running with nobody to stop it."""

import json
import signal
from pathlib import Path

from child_pytest import start_child_pytest
from detached_guard import RUN_MARKER, marked
from dispatch_harness import wait_until
from harness import PROJECT

CHILD_TEST = """
import json, os, subprocess, sys, time
from pathlib import Path

def test_starts_a_detached_listener(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"agents": {"claude": {"auto": True, "launcher": "launchers/scripted_headless.sh"}}}))
    env = {**os.environ, "AGENT_BRIDGE_DB": str(tmp_path / "bridge.db"), "AGENT_BRIDGE_CONFIG": str(config),
           "AGENT_BRIDGE_RUNTIME_DIR": str(tmp_path / "runtime"), "AGENT_BRIDGE_WORKSPACE": str(tmp_path),
           "XDG_RUNTIME_DIR": str(tmp_path / "xdg"), "PYTHONPATH": PROJECT}
    done = subprocess.run([sys.executable, "-m", "dispatcher", "listener", "enable", "--agent", "claude"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=PROJECT)
    started = json.loads(done.stdout)
    READY.write_text(json.dumps({"pid": started["pid"], "marker": os.environ[MARKER]}))
    time.sleep(600)  # until the run is stopped from outside
"""


def test_sigterm_to_a_test_run_ends_the_detached_listener_it_started(tmp_path):
    ready = tmp_path / "ready.json"
    body = (
        f"PROJECT = {str(PROJECT)!r}\nREADY = __import__('pathlib').Path({str(ready)!r})\nMARKER = {RUN_MARKER!r}\n"
        + CHILD_TEST
    )
    child = start_child_pytest("detached_guard", tmp_path, body)
    try:
        wait_until(ready.exists, deadline=120, what="the child run's listener")
        started = json.loads(ready.read_text())
        assert started["pid"] in marked(started["marker"])  # the listener carries the run's marker
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode != 0, out
    assert marked(started["marker"]) == [], out  # the listener and anything else the run started
    assert (
        not Path(f"/proc/{started['pid']}").exists()
        or "Z" in Path(f"/proc/{started['pid']}/stat").read_text().split()[2]
    )
