"""Format, lint and types are part of the suite: `ruff format --check`, `ruff check` and `mypy`
(configured in pyproject.toml) must all be clean, so `uv run pytest` fails on a regression of any.

Both run from this venv (the `dev` group pins them), in the checkout, exactly as the README's
"Development" section runs them alone.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
TIMEOUT = 600  # a cold mypy cache on a loaded machine


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed in this venv: run `uv sync` (it is in the dev group)")
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=TIMEOUT,
    )


def _clean(done: subprocess.CompletedProcess[str], command: str) -> None:
    assert done.returncode == 0, f"`{command}` is not clean (exit {done.returncode}):\n{done.stdout}{done.stderr}"


def test_the_tree_is_formatted():
    _clean(_run("ruff", "format", "--check", "--no-cache"), "uv run ruff format --check")


def test_ruff_check_is_clean():
    _clean(_run("ruff", "check", "--no-cache", "--output-format", "concise"), "uv run ruff check")


def test_mypy_is_clean():
    # The files and the strict modules come from [tool.mypy].
    _clean(_run("mypy"), "uv run mypy")
