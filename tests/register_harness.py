"""`agent-bridge register` run for real under a temporary HOME, and where each CLI keeps what it wrote."""

import json
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

from harness import PROJECT, command_here, write_config


def register_env(tmp_path: Path) -> dict[str, str]:
    """`agent-bridge register` under a temporary HOME: every CLI's config directory inside
    ``tmp_path``, no agent CLI on PATH (Claude's files are then written directly)."""
    config = write_config(
        tmp_path / "config.json", {a: {"launcher": "launchers/x.sh"} for a in ("claude", "kimi", "codex", "gemini")}
    )
    (tmp_path / "home").mkdir()
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AGENT_BRIDGE_", "CLAUDE", "KIMI", "CODEX", "GEMINI")) and k != "AGENT_ID"
    }
    return {
        **base,
        "HOME": str(tmp_path / "home"),
        "PATH": str(Path(sys.executable).parent),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "KIMI_CODE_HOME": str(tmp_path / "kimi"),
        "CODEX_HOME": str(tmp_path / "codex"),
        "GEMINI_CLI_HOME": str(tmp_path / "gemini"),
        "AGENT_BRIDGE_CONFIG": str(config),
        "AGENT_BRIDGE_DB": str(tmp_path / "state" / "bridge.db"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def register_here(env: dict, *args: str) -> subprocess.CompletedProcess:
    """`agent-bridge register ARGS` run in this process (``harness.command_here``). For the cases that
    differ in files and flags; ``register`` runs the real command end to end."""
    return command_here(env, "register", *args)


def register(env: dict, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dispatcher", "register", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd or PROJECT,
    )


def target(env: dict, cli: str) -> Path:
    return {
        "claude": Path(env["CLAUDE_CONFIG_DIR"]) / ".claude.json",
        "kimi": Path(env["KIMI_CODE_HOME"]) / "mcp.json",
        "codex": Path(env["CODEX_HOME"]) / "config.toml",
        "gemini": Path(env["GEMINI_CLI_HOME"]) / ".gemini" / "settings.json",
    }[cli]


def parse(cli: str, path: Path) -> dict:
    return tomllib.loads(path.read_text()) if cli == "codex" else json.loads(path.read_text())


def entry(cli: str, path: Path) -> dict:
    doc = parse(cli, path)
    return (doc["mcp_servers"] if cli == "codex" else doc["mcpServers"])["agent_bridge"]


def backups(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".bak-*"))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)
