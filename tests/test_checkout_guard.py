"""The run fails when a test writes into the checkout (checkout_guard.py), and names the file."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

from checkout_guard import CHECKOUT, written


def run_child(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_child.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            os.devnull,
            "-p",
            "no:cacheprovider",
            "-p",
            "checkout_guard",
            "-q",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_child.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )


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
