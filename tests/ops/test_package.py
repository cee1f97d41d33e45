"""The wheel, installed into a fresh venv and run outside the checkout: --version, init, serve, demo."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

pytestmark = pytest.mark.slow

from harness import PROJECT

TIMEOUT = 120


def _run(args: list, env: dict, cwd: Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from this checkout (once per module)."""
    if shutil.which("uv") is None:
        pytest.fail("uv is not on PATH; it builds and installs the wheel")
    root = tmp_path_factory.mktemp("pkg")
    built = _run(["uv", "build", "--wheel", "-o", root / "dist"], _uv_env(), PROJECT)
    assert built.returncode == 0, built.stderr
    (path,) = (root / "dist").glob("agent_bridge-*.whl")
    return path


def _uv_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}


def _venv(wheel: Path, name: str, extra: str = "") -> Path:
    """A fresh venv next to the wheel with it installed (``extra``: e.g. ``[top]``); its bin directory."""
    root, env = wheel.parent.parent, _uv_env()
    venv = root / name
    made = _run(["uv", "venv", "--python", sys.executable, venv], env, root)
    assert made.returncode == 0, made.stderr
    install = ["uv", "pip", "install", "--python", venv / "bin" / "python", f"{wheel}{extra}"]
    done = _run(install + ["--offline"], env, root)
    if done.returncode != 0:  # a dependency missing from the uv cache: fetch it from the index
        done = _run(install, env, root)
    assert done.returncode == 0, done.stderr
    return venv / "bin"


@pytest.fixture(scope="module")
def installed(wheel: Path) -> Path:
    """The venv's bin directory, with the wheel built from this checkout installed into it."""
    return _venv(wheel, "venv")


@pytest.fixture
def home(installed: Path, tmp_path: Path) -> tuple[dict, Path]:
    """A clean environment (no checkout on any path) and a working directory outside the checkout."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    claude = fake / "claude"
    claude.write_text('#!/bin/sh\necho "2.1.332 (Claude Code)"\n')
    claude.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": os.pathsep.join([str(fake), str(installed), "/usr/bin", "/bin"]),
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "LANG": "C.UTF-8",
    }
    (tmp_path / "home").mkdir()
    return env, work


def test_version(installed: Path, home) -> None:
    env, work = home
    done = _run(["agent-bridge", "--version"], env, work)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "agent-bridge, version 0.1.0"


def test_wheel_carries_package_data(installed: Path) -> None:
    probe = (
        "from dispatcher.core.locations import INSTALLED, PROJECT_DIR; import os;"
        "print(INSTALLED, os.access(PROJECT_DIR / 'launchers/claude_headless.sh', os.X_OK),"
        " (PROJECT_DIR / 'systemd/agent-bridge-listener@.service').is_file(), (PROJECT_DIR / 'server.py').is_file())"
    )
    done = _run([installed / "python", "-c", probe], {"PATH": "/usr/bin:/bin"}, installed)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True", "True"]


def test_init_then_serve(installed: Path, home) -> None:
    env, work = home
    done = _run(["agent-bridge", "init"], env, work)
    assert done.returncode == 0, done.stderr
    path = Path(env["XDG_CONFIG_HOME"]) / "agent-bridge" / "config.json"
    config = json.loads(path.read_text())
    assert config["agents"] == {
        "claude": {
            "auto": True,
            "launcher": "launchers/claude_headless.sh",
            "workspace": str(work),
            "worker_timeout_seconds": 1800,
            "permissions": {"level": "edit"},
        }
    }
    assert "2.1.332 (tested)" in done.stdout and f"Workers run in {work}" in done.stdout
    assert (
        "workers may: read, search, list, create and edit files inside the workspace (permissions level edit)"
        in done.stdout
    )

    again = _run(["agent-bridge", "init"], env, work)
    assert again.returncode == 2
    assert again.stderr.startswith("agent-bridge: config_exists: ")

    async def tools() -> list[str]:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=str(installed / "agent-bridge"), args=["serve"], env={**env, "AGENT_ID": "claude"}, cwd=str(work)
        )
        with anyio.fail_after(60), open(work / "serve.stderr", "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                return sorted(tool.name for tool in (await client.list_tools()).tools)

    names = anyio.run(tools)
    assert {"send_message", "receive_messages", "mark_read", "get_message", "listener"} <= set(names)


def test_systemd_unit_from_the_package(installed: Path, home) -> None:
    env, work = home
    assert _run(["agent-bridge", "init"], env, work).returncode == 0
    done = _run(["agent-bridge", "systemd", "install", "--agent", "claude"], env, work)
    assert done.returncode == 0, done.stderr
    unit = (Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user" / "agent-bridge-listener@.service").read_text()
    data = _run(
        [installed / "python", "-c", "from dispatcher.core.locations import PACKAGE_DATA; print(PACKAGE_DATA)"],
        env,
        work,
    ).stdout.strip()
    assert f"WorkingDirectory={data}\n" in unit
    assert f"ExecStart={installed / 'python'} -m dispatcher listener run --agent %i" in unit
    assert str(PROJECT) not in unit


def test_init_without_any_cli(installed: Path, home) -> None:
    env, work = home
    env = {**env, "PATH": os.pathsep.join([str(installed), "/nonexistent"])}
    done = _run([installed / "agent-bridge", "init", "--workspace", work], env, work)
    assert done.returncode == 0, done.stderr
    config = json.loads((Path(env["XDG_CONFIG_HOME"]) / "agent-bridge" / "config.json").read_text())
    assert config["agents"]["claude"]["auto"] is False
    assert config["agents"]["claude"]["permissions"] == {"level": "edit"}
    assert "No agent CLI found" in done.stdout


def test_demo(installed: Path, home) -> None:
    env, work = home
    done = _run(["agent-bridge", "demo"], env, work)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dispatch=succeeded" in done.stdout


def test_doctor_outside_the_checkout(installed: Path, home) -> None:
    """After init, doctor finds the installed launchers and the fake CLI, and reports no error
    (the listener not running and no systemd unit are warnings)."""
    env, work = home
    assert _run(["agent-bridge", "init"], env, work).returncode == 0
    done = _run(["agent-bridge", "doctor", "--json"], env, work)
    report = json.loads(done.stdout)
    errors = [f for f in report["findings"] if f["level"] == "error"]
    assert done.returncode == 0 and report["ok"] and not errors, (errors, done.stderr)
    codes = {f["code"] for f in report["findings"]}
    assert {"config_ok", "launcher_ok", "cli_ok"} <= codes


def test_top_without_the_extra_names_it(installed: Path, home) -> None:
    """The plain wheel has no `rich`: `top` says how to install the extra, in one line."""
    env, work = home
    done = _run(["agent-bridge", "top", "--once"], env, work)
    assert done.returncode == 1
    assert done.stderr.startswith("agent-bridge: missing_extra: ") and done.stderr.count("\n") == 1
    assert "agent-bridge[top]" in done.stderr


def test_the_readme_quick_start_outside_the_checkout(installed: Path, home) -> None:
    """The README's first steps from an installed package: init, register with Claude Code and
    Kimi Code, a listener started detached (no user manager here), and doctor with no error
    and that listener running."""
    env, work = home
    env = {**env, "KIMI_BIN": str(Path(env["PATH"].split(os.pathsep)[0]) / "claude")}  # a CLI that answers
    assert _run(["agent-bridge", "init"], env, work).returncode == 0
    config = Path(env["XDG_CONFIG_HOME"]) / "agent-bridge" / "config.json"
    doc = json.loads(config.read_text())
    doc["agents"].setdefault("kimi", {"auto": False, "launcher": "launchers/kimi_headless.sh"})
    config.write_text(json.dumps(doc))
    no_claude = {**env, "PATH": os.pathsep.join(env["PATH"].split(os.pathsep)[1:])}  # settings file, not the binary
    claude = _run(["agent-bridge", "register", "claude", "--agent", "claude", "--hooks"], no_claude, work)
    assert claude.returncode == 0, claude.stderr
    kimi = _run(["agent-bridge", "register", "kimi", "--agent", "kimi"], env, work)
    assert kimi.returncode == 0, kimi.stderr
    home_dir = Path(env["HOME"])
    claude_entry = json.loads((home_dir / ".claude.json").read_text())["mcpServers"]["agent_bridge"]
    kimi_entry = json.loads((home_dir / ".kimi-code" / "mcp.json").read_text())["mcpServers"]["agent_bridge"]
    for entry, agent in ((claude_entry, "claude"), (kimi_entry, "kimi")):
        assert entry["command"] == str(installed / "python") and entry["env"]["AGENT_ID"] == agent
    hooks = json.loads((home_dir / ".claude" / "settings.json").read_text())["hooks"]
    for event in ("UserPromptSubmit", "PostToolUse", "Stop"):
        command = hooks[event][0]["hooks"][0]["command"]
        assert f"{installed / 'agent-bridge'} hook claude {event} --agent claude" in command, command
    enabled = _run(["agent-bridge", "listener", "enable", "--agent", "claude"], env, work)
    try:
        assert enabled.returncode == 0, enabled.stderr
        assert json.loads(enabled.stdout)["running"] is True
        report = json.loads(_run(["agent-bridge", "doctor", "--json"], env, work).stdout)
        assert report["ok"], [f for f in report["findings"] if f["level"] == "error"]
        assert any(f["code"] == "listener_ok" and f.get("agent") == "claude" for f in report["findings"])
        who = json.loads(_run(["agent-bridge", "who", "--json"], env, work).stdout)
        claude_row = next(a for a in who["agents"] if a["agent"] == "claude")
        assert claude_row["listener"]["running"] is True and claude_row["unread"] == 0
    finally:
        _run(["agent-bridge", "listener", "disable", "--agent", "claude"], env, work)
        status = {}
        for _ in range(600):  # the disabled listener exits within a poll or two
            status = json.loads(_run(["agent-bridge", "listener", "status", "--agent", "claude"], env, work).stdout)
            if not status["running"]:
                break
        assert not status["running"]


def test_top_with_the_extra_outside_the_checkout(wheel: Path, home) -> None:
    """The wheel with its `top` extra in its own venv (the plain one must stay without `rich`):
    `top --once` draws one payload-free frame of a real store, whole and filtered."""
    bin_dir = _venv(wheel, "venv-top", "[top]")
    env, work = home
    env = {
        **env,
        "PATH": env["PATH"].replace(str(wheel.parent.parent / "venv" / "bin"), str(bin_dir)),
        "COLUMNS": "160",
    }
    assert _run(["agent-bridge", "init"], env, work).returncode == 0
    before = _run(["agent-bridge", "top", "--once"], env, work)
    assert before.returncode == 0, before.stderr
    assert "error: no store yet" in before.stdout
    send = (
        "from dispatcher.bridge import messages; from dispatcher.core.settings import BridgeSettings;"
        "from dispatcher.store import open_store; conn = open_store(BridgeSettings().db);"
        "messages.send_message(conn, sender='kimi', recipient='claude', kind='notice', text='SECRET-PAYLOAD',"
        " agents={'claude', 'kimi'}); conn.close()"
    )
    sent = _run([bin_dir / "python", "-c", send], env, work)
    assert sent.returncode == 0, sent.stderr
    for args, shown in ((["top", "--once"], "filter: all"), (["top", "--once", "--agent", "claude"], "filter: claude")):
        done = _run(["agent-bridge", *args], env, work)
        assert done.returncode == 0, done.stderr
        out = done.stdout
        assert "agent-bridge top" in out and shown in out and "error:" not in out, out
        for title in ("Agents", "In flight", "Recent outcomes", "Active conversations"):
            assert title in out, out
        header = next(line for line in out.splitlines() if line.strip("┃ ").startswith("agent "))
        (row,) = [line for line in out.splitlines() if line.strip("│ ").startswith("claude ")]
        cells = dict(
            zip(
                [c.strip() for c in header.strip("┃ ").split("┃")],
                [c.strip() for c in row.strip("│ ").split("│")],
                strict=True,
            )
        )
        assert cells["agent"] == "claude" and cells["unread"] == "1", row  # the one message, by number only
        assert "SECRET-PAYLOAD" not in out and str(PROJECT) not in out
