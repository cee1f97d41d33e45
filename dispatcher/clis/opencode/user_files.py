"""The user's own opencode directories (XDG, else under HOME) and global config, as the launch plan
and doctor's login check read them."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def user_dirs(env: Any) -> tuple[Path, Path]:
    """The user's opencode config and data directories (XDG, else under HOME)."""
    home = Path(env.get("HOME") or "/nonexistent")
    config = Path(env.get("XDG_CONFIG_HOME") or home / ".config") / "opencode"
    data = Path(env.get("XDG_DATA_HOME") or home / ".local" / "share") / "opencode"
    return config, data


def user_config(read: Callable[[Path], str | None], config_dir: Path) -> Any:
    """The user's global opencode config (plain JSON) as ``read`` gives it, or None."""
    for name in ("opencode.json", "config.json"):
        try:
            return json.loads(read(config_dir / name) or "")
        except ValueError:
            continue
    return None
