"""Where an agent's launcher is and what keeps it from running: the one rule doctor, the status
line and ``top`` judge it by (the status line reads config.json unvalidated, so both take the
launcher as written)."""

import os
from pathlib import Path

from dispatcher.core.locations import PACKAGE_DATA
from dispatcher.core.private_files import writable_by_others


def launcher_path(launcher: str, project_dir: Path) -> Path:
    """Absolute as written; relative: ``project_dir`` first (the checkout), then the
    installed package's launchers; when neither exists, the project-relative path."""
    path = Path(launcher).expanduser()
    if path.is_absolute():
        return path
    for base in (project_dir, PACKAGE_DATA):
        if (base / path).is_file():
            return base / path
    return project_dir / path


def launcher_problem(path: Path) -> tuple[str, str] | None:
    """The finding code of what keeps ``path`` from running, with why when the code needs it; None: it can run."""
    if not path.is_file():
        return "launcher_missing", ""
    if not os.access(path, os.X_OK):
        return "launcher_not_executable", ""
    if (why := writable_by_others(path)) is not None:  # the rule the supervisor refuses it by
        return "launcher_writable_by_others", why
    return None
