"""Payload-free diagnostics from an agent CLI's raw output, read after the worker is gone.

Each CLI's reader lives in its own module (``dispatcher/clis/<cli>/results.py``); the shared
words and rules in ``dispatcher/clis/results.py``. This is the supervisor's one entry: the
registry finds the CLI whose output file the launch left in the attempt directory.
"""

from pathlib import Path
from typing import Any

from dispatcher.clis import registry


def cli_diagnostics(attempt_dir: Path, exit_code: int | None) -> dict[str, Any] | None:
    """The diagnostics of the CLI whose output file the launch named, or None (no known CLI ran)."""
    return registry.diagnostics(attempt_dir, exit_code)
