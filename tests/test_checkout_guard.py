"""The run fails when a test writes into the checkout (checkout_guard.py), and names the file."""

import subprocess
import uuid
from pathlib import Path

from checkout_guard import CHECKOUT, written
from child_pytest import start_child_pytest


def run_child(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    child = start_child_pytest("checkout_guard", tmp_path, body)
    out, _ = child.communicate(timeout=120)
    return subprocess.CompletedProcess(child.args, child.returncode, out, "")


def test_a_test_that_writes_into_the_checkout_fails_the_run(tmp_path):
    leak = CHECKOUT / f"postgresql:-leak-{uuid.uuid4().hex[:8]}"
    try:
        done = run_child(
            tmp_path, f"from pathlib import Path\n\ndef test_x():\n    Path({str(leak)!r}).write_text('x')\n"
        )
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"the tests wrote into the checkout {CHECKOUT}: ?? {leak.name}" in done.stdout
    finally:
        leak.unlink(missing_ok=True)


def test_a_run_that_writes_only_under_tmp_path_passes(tmp_path):
    done = run_child(tmp_path, "def test_x(tmp_path):\n    (tmp_path / 'f').write_text('x')\n")
    assert done.returncode == 0, done.stdout + done.stderr


def test_only_new_or_changed_entries_count():
    before = {"?? a 1", " M b 2"}
    assert written(before, {"?? a 1", " M b 3", "?? c 4"}) == [" M b", "?? c"]
    assert written(before, {"?? a 1"}) == []
