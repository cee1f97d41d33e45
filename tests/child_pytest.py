"""A pytest run of one test file under ``tmp_path``, with one of our plugins alone (no project
config, no xdist): how the plugins' own tests watch a run from outside."""

import os
import subprocess
import sys
from pathlib import Path


def child_pytest_command(plugin: str, tmp_path: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        os.devnull,
        "-p",
        "no:cacheprovider",
        "-p",
        plugin,
        "-q",
        "--rootdir",
        str(tmp_path),
        "--basetemp",
        str(tmp_path / "base"),
        str(tmp_path / "test_child.py"),
    ]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}


def start_child_pytest(plugin: str, tmp_path: Path, body: str) -> subprocess.Popen:
    """Write ``body`` as ``tmp_path/test_child.py`` and start pytest on it (output on stdout)."""
    (tmp_path / "test_child.py").write_text(body)
    return subprocess.Popen(
        child_pytest_command(plugin, tmp_path),
        env=child_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
