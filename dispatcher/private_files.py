"""Private (0700 / 0600) directories and files for the runtime directory and the store.

Every file holding ids, logs or task text is created here, so the rules about modes,
ownership and planted links live in one place.
"""

import os
from pathlib import Path


def ensure_private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def create_private_file(path: Path, text: str = "") -> Path:
    """Create ``path`` as a new 0600 file holding ``text``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def open_private_append(path: Path) -> int:
    """A write-only, append-mode descriptor on a 0600 file (created if missing)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
