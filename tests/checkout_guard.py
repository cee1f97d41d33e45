"""A pytest plugin (loaded by conftest.py): the run fails when its tests changed the checkout.

A test that writes into the checkout (a relative path resolved against the project directory,
a URL taken for a path) leaves files a later commit picks up: ``git status`` of the checkout is
read when the run starts and again when it ends, and any entry that is new or changed fails the
run and is named. Only the controller compares (under xdist the workers share its checkout)."""

import subprocess
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
# What running the tests rightly writes: the interpreter's and the tools' caches.
CACHES = ("__pycache__/", ".pytest_cache/", ".venv/", ".ruff_cache/", ".mypy_cache/", ".hypothesis/")
_BEFORE = pytest.StashKey[set[str]]()


def checkout_state(checkout: Path = CHECKOUT) -> set[str]:
    """Every changed, untracked and ignored entry of the checkout but the caches, as ``git status``
    names it (a changed file's entry carries its modification time, so a rewrite shows too)."""
    done = subprocess.run(
        ["git", "-C", str(checkout), "status", "--porcelain", "--ignored", "--untracked-files=all", "-z"],
        capture_output=True,
        text=True,
        check=True,
    )
    entries = {entry for entry in done.stdout.split("\0") if entry and not any(c in entry for c in CACHES)}
    return {f"{entry} {_mtime(checkout / entry[3:])}" for entry in entries}


def _mtime(path: Path) -> int:
    try:
        return path.lstat().st_mtime_ns
    except OSError:
        return 0


def written(before: set[str], after: set[str]) -> list[str]:
    """The entries the run added or changed, by path."""
    return sorted(entry.rsplit(" ", 1)[0] for entry in after - before)


def _controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if _controller(config):
        config.stash[_BEFORE] = checkout_state()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _controller(session.config) or _BEFORE not in session.config.stash:
        return
    changed = written(session.config.stash[_BEFORE], checkout_state())
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"the tests wrote into the checkout {CHECKOUT}: {', '.join(changed)}; write under tmp_path instead"
        if reporter is not None:
            reporter.write_line(f"ERROR {message}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
