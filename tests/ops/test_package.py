"""The wheel, installed into a fresh venv and run outside the checkout: --version, init, serve, demo;
and the README's quick start, run as written from the wheel installed with `uv tool install`."""

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import psutil
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
        "print(INSTALLED, os.access(PROJECT_DIR / 'launchers/agent_headless.sh', os.X_OK),"
        " os.access(PROJECT_DIR / 'launchers/claude_headless.sh', os.X_OK),"
        " (PROJECT_DIR / 'systemd/agent-bridge-listener@.service').is_file(), (PROJECT_DIR / 'server.py').is_file())"
    )
    done = _run([installed / "python", "-c", probe], {"PATH": "/usr/bin:/bin"}, installed)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True", "True", "True"]


def test_init_then_serve(installed: Path, home) -> None:
    env, work = home
    done = _run(["agent-bridge", "init"], env, work)
    assert done.returncode == 0, done.stderr
    path = Path(env["XDG_CONFIG_HOME"]) / "agent-bridge" / "config.json"
    config = json.loads(path.read_text())
    assert config["agents"] == {
        "claude": {
            "auto": True,
            "cli": "claude",
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

    same = _run(["agent-bridge", "init"], env, work)
    assert same.returncode == 0 and "already declares this; nothing changed." in same.stdout, same.stderr
    path.write_text(path.read_text().replace('"worker_timeout_seconds": 1800', '"worker_timeout_seconds": 900'))
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
    assert "agent-bridge[metrics,otel,postgres,top]" in done.stderr


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


# --- the README's quick start, as written -----------------------------------------------------

QUICK_START = "### Quick start on your machine"
CLONE = "./agent-bridge[top]"  # what the install line installs: the wheel stands in for the clone


def quick_start_commands() -> list[str]:
    """The commands of the README's quick start block, without their comments."""
    text = (PROJECT / "README.md").read_text(encoding="utf-8")
    block = text[text.index(QUICK_START) :].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        command = re.split(r"\s+#\s", line, maxsplit=1)[0].strip()
        assert shlex.split(command) == shlex.split(line, comments=True), line  # the cut was outside quotes
        commands.append(command)
    return commands


class Shell:
    """One shell session, a command at a time: each runs in bash, and the directory and the
    environment it leaves (`cd`, `export`) are those the next command starts with."""

    def __init__(self, env: dict, cwd: Path, state: Path) -> None:
        self.env, self.cwd, self.state = env, cwd, state
        state.mkdir()

    def run(self, command: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
        cwd, env = self.state / "cwd", self.state / "env"
        script = f"{command}\nrc=$?\npwd > {shlex.quote(str(cwd))}\nenv -0 > {shlex.quote(str(env))}\nexit $rc\n"
        done = _run(["bash", "-c", script], self.env, self.cwd, timeout)
        self.cwd = Path(cwd.read_text().strip())
        self.env = dict(item.split("=", 1) for item in env.read_text().split("\0") if "=" in item)
        return done


def _fresh_home(tmp_path: Path) -> tuple[dict, Path]:
    """HOME, PATH and the uv settings only: no XDG variable, no agent CLI, uv's own cache (offline)."""
    uv = shutil.which("uv")
    assert uv is not None, "uv is not on PATH; it installs the wheel"
    fake = tmp_path / "uvbin"
    fake.mkdir()
    (fake / "uv").symlink_to(uv)  # uv alone, not what else lives in its directory
    home = tmp_path / "home"
    home.mkdir()
    cache = _run(["uv", "cache", "dir"], _uv_env(), tmp_path).stdout.strip()
    env = {
        "HOME": str(home),
        "PATH": os.pathsep.join([str(home / ".local" / "bin"), str(fake), "/usr/bin", "/bin"]),
        "LANG": "C.UTF-8",
        "COLUMNS": "160",
        "UV_CACHE_DIR": cache,
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_OFFLINE": "1",
        # the network fallback below trusts what this machine trusts (a proxy's own CA, say)
        **{name: os.environ[name] for name in ("SSL_CERT_FILE", "SSL_CERT_DIR") if os.environ.get(name)},
    }
    return env, home


def _left_behind(home: Path) -> list[str]:
    """What of the bridge is still configured, installed or stored under ``home``."""
    left = []
    claude = home / ".claude.json"
    if claude.exists() and "agent_bridge" in json.loads(claude.read_text()).get("mcpServers", {}):
        left.append("claude's MCP registration")
    settings = home / ".claude" / "settings.json"
    if settings.exists():
        doc = json.loads(settings.read_text())
        if doc.get("statusLine"):
            left.append("claude's status line")
        if "agent-bridge" in json.dumps(doc.get("hooks", {})):
            left.append("claude's hooks")
    units = home / ".config" / "systemd" / "user"
    left += [f"unit {path.name}" for path in units.glob("agent-bridge*")] if units.is_dir() else []
    if (home / ".local" / "state" / "agent-bridge").exists():
        left.append("the store")
    return left


def _processes_under(root: Path) -> list[int]:
    """Live processes started from anything under ``root`` (the tool's venv, the workspace ...)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        seen = " ".join(proc.info["cmdline"] or []) + " " + (proc.info["cwd"] or "")
        if str(root) in seen:
            found.append(proc.pid)
    return found


def test_the_readme_quick_start_from_the_wheel(wheel: Path, tmp_path: Path) -> None:
    """The Done-when of issue 16: the quick start from the installed wheel in a fresh HOME, outside
    the checkout: a task sent, a scripted worker dispatched, `show` with the result, `doctor` exit 0
    with no warning, and `uninstall --purge` leaving no registration, unit, hook, store or process."""
    env, home = _fresh_home(tmp_path)
    start = tmp_path / "start"
    start.mkdir()
    shell = Shell(env, start, tmp_path / "shell")
    commands = quick_start_commands()
    assert commands[0].startswith("git clone ") and CLONE in commands[1], commands[:2]
    listener_pid = None
    try:
        for command in commands[1:]:
            if CLONE in command:
                command = command.replace(CLONE, f"{wheel}[top]")
                done = shell.run(command)
                if done.returncode != 0:  # a dependency missing from uv's cache: fetch it from the index
                    done = shell.run(f"UV_OFFLINE=0 UV_SYSTEM_CERTS=1 {command}")
            elif command == "agent-bridge top":
                done = shell.run(f"{command} --once")  # no terminal here: one frame
            else:
                done = shell.run(command, timeout=300)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            out = done.stdout
            if command.startswith("agent-bridge init"):
                assert shell.cwd == home / "my-project" and "scripted worker" in out and "export" not in out, out
            elif command.startswith("agent-bridge listener enable"):
                status = json.loads(out)
                assert status["running"] is True and status["started"] == "detached", status
                listener_pid = status["pid"]
            elif command.startswith("agent-bridge send"):
                assert "task #1: succeeded" in out and "done: read your 6-word task (message #1)" in out, out
            elif command.startswith("agent-bridge top"):
                assert "claude" in out and "succeeded" in out and "Count the words" not in out, out
            elif command.startswith("agent-bridge show"):
                assert "dispatch: succeeded" in out and "reply #2 result from claude: done:" in out, out
            elif command == "agent-bridge doctor":
                assert out.rstrip().endswith("0 error(s), 0 warning(s)") and "WARN" not in out, out
            elif command.startswith("agent-bridge uninstall"):
                assert _left_behind(home) == [], (out, _left_behind(home))
                assert not psutil.pid_exists(listener_pid) or psutil.Process(listener_pid).status() == "zombie"
        assert shutil.which("agent-bridge", path=shell.env["PATH"]) is None  # `uv tool uninstall` ran
        assert _processes_under(tmp_path) == []
    finally:
        if listener_pid is not None and psutil.pid_exists(listener_pid):
            os.kill(listener_pid, signal.SIGTERM)


NOT_LOGGED_IN = PROJECT / "tests" / "fixtures" / "cli_results" / "claude" / "captured-2.1.332-not-logged-in.json"


def _stand_in_claude(directory: Path) -> Path:
    """Claude Code 2.1.332 as a user who never logged in meets it: its version, `auth status`
    exit 1, and a headless run that prints the result it captured then (exit 1)."""
    directory.mkdir()
    result = directory / "not-logged-in.json"
    result.write_text(NOT_LOGGED_IN.read_text())
    claude = directory / "claude"
    claude.write_text(
        "#!/bin/sh\n"
        'case "$1" in --version) echo "2.1.332 (Claude Code)"; exit 0;; auth) echo "Not logged in" >&2; exit 1;; esac\n'
        f"cat {shlex.quote(str(result))}\nexit 1\n"
    )
    claude.chmod(0o755)
    return directory


def _ours_left(home: Path) -> list[str]:
    """Files under ``home`` that are neither the user's config.json (kept by design, with init's
    backups of it) nor uv's own."""
    allowed = (home / ".config" / "agent-bridge", home / ".local" / "share" / "uv", home / ".cache", home / "cli-bin")
    return sorted(
        str(path.relative_to(home))
        for path in home.rglob("*")
        if path.is_file() and not any(base == path or base in path.parents for base in allowed)
    )


def test_the_first_day_from_the_wheel(wheel: Path, tmp_path: Path, new_postgres_store) -> None:
    """Issue 30's Done-when: after the quick start, the real CLI path with a stand-in `claude` that is
    not logged in, a PostgreSQL store, a new shell without the exported variables, and `uninstall
    --purge`: each step gives its one-line answer, and nothing we made is left running or on disk."""
    env, home = _fresh_home(tmp_path)
    url = new_postgres_store()
    first = Shell(env, tmp_path, tmp_path / "shell-1")
    try:
        install = f"uv tool install --compile-bytecode '{wheel}[postgres,top]'"
        done = first.run(install, timeout=300)
        if done.returncode != 0:  # a dependency missing from uv's cache: fetch it from the index
            done = first.run(f"UV_OFFLINE=0 UV_SYSTEM_CERTS=1 {install}", timeout=300)
        assert done.returncode == 0, done.stderr
        for command in (
            "mkdir -p ~/my-project && cd ~/my-project",
            "agent-bridge init --scripted",
            "agent-bridge register claude --agent claude --hooks --statusline",
            "agent-bridge listener enable --agent claude",
        ):
            done = first.run(command)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
        sent = first.run(
            'agent-bridge send --from me --to claude --task "Count the words in this request." --wait', 300
        )
        assert "task #1: succeeded" in sent.stdout, sent.stdout + sent.stderr

        # A new terminal, with claude installed since: the listener still has the old PATH.
        second = Shell(
            {**env, "PATH": f"{_stand_in_claude(home / 'cli-bin')}:{env['PATH']}"},
            home / "my-project",
            tmp_path / "shell-2",
        )
        forced = second.run("agent-bridge init --force")
        assert forced.returncode == 0 and "Kept me from the previous file" in forced.stdout, forced.stdout
        doctor = second.run("agent-bridge doctor")
        assert "ERROR listener_cli_missing: [claude] the listener of claude" in doctor.stdout, doctor.stdout
        assert "WARN  cli_not_authenticated: [claude]" in doctor.stdout, doctor.stdout
        restarted = second.run("agent-bridge listener restart --agent claude")
        assert restarted.returncode == 0 and json.loads(restarted.stdout)["running"], restarted.stderr
        failed = second.run('agent-bridge send --from me --to claude --task "Say hello." --wait', 300)
        assert failed.returncode == 4, failed.stdout + failed.stderr
        assert failed.stdout.splitlines()[1] == "task #3: failed (auth_error); error_kind no_evidence", failed.stdout

        # The same project on a PostgreSQL store.
        third = Shell({**second.env, "AGENT_BRIDGE_DB": url}, home / "my-project", tmp_path / "shell-3")
        # (the stand-in has no `claude mcp`: register writes Claude's files itself when no claude is found)
        registered = third.run(
            f"PATH={shlex.quote(env['PATH'])} agent-bridge register claude --agent claude --hooks --statusline --force"
        )
        assert registered.returncode == 0, registered.stderr
        assert not (home / "my-project" / "postgresql:").exists()
        assert third.run("agent-bridge listener enable --agent claude").returncode == 0
        checked = third.run("agent-bridge doctor")
        assert "registrations_ok" in checked.stdout and "registration_elsewhere" not in checked.stdout, checked.stdout
        line = third.run("agent-bridge-statusline").stdout
        assert line.startswith("[claude] idle"), line

        # Undo it all from a shell that names no store.
        fourth = Shell(second.env, home / "my-project", tmp_path / "shell-4")
        gone = fourth.run(
            f"PATH={shlex.quote(env['PATH'])} agent-bridge uninstall --purge", timeout=300
        )  # (no `claude mcp`)
        assert gone.returncode == 0, gone.stderr
        assert "listener claude: stopped." in gone.stdout and "listener claude (another store's" in gone.stdout, (
            gone.stdout
        )
        assert fourth.run("uv tool uninstall agent-bridge").returncode == 0
        assert _left_behind(home) == [] and _ours_left(home) == [], _ours_left(home)
        assert _processes_under(tmp_path) == []
    finally:
        for pid in _processes_under(tmp_path):
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
