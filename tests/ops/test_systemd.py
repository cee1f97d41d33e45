"""The listener's systemd user unit: template, rendering, installation, systemd-analyze, ExecStart."""

import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from harness import PROJECT, bridge_env, write_config

from dispatcher.dispatch import systemd_unit as su

# Not resolved: .venv/bin/python is a symlink, and the unit must keep the venv path.
PYTHON = Path(sys.executable)
TEMPLATE = PROJECT / "systemd" / su.TEMPLATE_NAME


def directives(text: str) -> dict[str, list[str]]:
    """``Key=value`` lines of a unit file, in order, comments and sections dropped."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;[":
            continue
        key, _, value = line.partition("=")
        found.setdefault(key.strip(), []).append(value.strip())
    return found


def exec_start_argv(rendered: str, agent: str) -> list[str]:
    (line,) = directives(rendered)["ExecStart"]
    # The rendered paths contain no quotes, whitespace, "%" or "$" (render_unit refuses
    # them), so shlex splits exactly as systemd does; %i is the only specifier used.
    assert "%" not in line.replace("%i", "")
    return shlex.split(line.replace("%i", agent))


def isolated_env(root: Path) -> dict[str, str]:
    """Roughly what a user manager gives a unit: a bare environment plus the env-file settings."""
    config = write_config(root / "config.json", {"claude": {"auto": True, "launcher": "launchers/claude_headless.sh"}})
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(root / "home"),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        **bridge_env(root, config),
    }


# --- template and rendering -------------------------------------------------------------


def test_template_in_repo_has_placeholders_and_policy():
    raw = TEMPLATE.read_text()
    d = directives(raw)
    assert d["ExecStart"] == ["@PYTHON@ -m dispatcher listener run --agent %i"]
    assert d["WorkingDirectory"] == ["@PROJECT@"]
    assert d["KillMode"] == ["process"]
    assert d["Delegate"] == ["yes"]  # the supervisor makes worker cgroups below the listener's
    assert d["Restart"] == ["on-failure"]
    assert d["RestartSec"] and d["StartLimitIntervalSec"] and d["StartLimitBurst"]
    assert d["EnvironmentFile"] == ["-%E/agent-bridge/listener.env", "-%E/agent-bridge/listener-%i.env"]
    assert d["WantedBy"] == ["default.target"]
    # Sandboxing that would break workers stays out (see the comments in the template).
    for key in ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "MemoryMax", "TasksMax", "UMask"):
        assert key not in d


def test_render_substitutes_absolute_paths():
    rendered = su.render_unit(PYTHON, PROJECT)
    assert not re.search(r"@[A-Z_]+@", rendered)
    # The paths land in the directives only, never in the explanatory comments.
    assert all(str(PYTHON) not in line for line in rendered.splitlines() if line.startswith("#"))
    d = directives(rendered)
    assert d["ExecStart"] == [f"{PYTHON} -m dispatcher listener run --agent %i"]
    assert d["WorkingDirectory"] == [str(PROJECT)]
    assert d["Documentation"] == [f"file://{PROJECT}/docs/systemd.md"]
    assert Path(d["ExecStart"][0].split()[0]).is_absolute()


def test_render_makes_relative_paths_absolute_without_resolving_symlinks(tmp_path, monkeypatch):
    link = tmp_path / "bin" / "python"
    link.parent.mkdir()
    link.symlink_to(PYTHON)
    monkeypatch.chdir(tmp_path)
    d = directives(su.render_unit(Path("bin/python"), PROJECT))
    assert d["ExecStart"][0].split()[0] == str(link)


@pytest.mark.parametrize(
    "bad",
    [
        "/opt/my env/python",
        "/opt/x\n[Service]\nExecStart=/bin/sh",
        "/opt/100%/python",
        "/opt/$HOME/python",
        "/opt/tab\tpython",
        "/opt/back\\slash",
        '/opt/"q"/python',
        "",
    ],
)
@pytest.mark.parametrize("which", ["python", "project"])
def test_render_refuses_paths_systemd_would_misparse(bad, which, tmp_path):
    kwargs = {"python": PYTHON, "project": PROJECT, which: Path(bad) if bad else ""}
    with pytest.raises(ValueError, match=which):
        su.render_unit(**kwargs)
    with pytest.raises(ValueError):
        su.install_unit("claude", target_dir=tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())


def test_render_refuses_a_directory_without_the_template(tmp_path):
    with pytest.raises(ValueError, match="template not found"):
        su.render_unit(PYTHON, tmp_path)


# --- agent ids and locations --------------------------------------------------------------


@pytest.mark.parametrize("agent", ["claude", "kimi", "a", "0", "my-agent_2", "a" * 32])
def test_unit_name_for_valid_agents(agent):
    assert su.unit_name(agent) == f"agent-bridge-listener@{agent}.service"


@pytest.mark.parametrize("agent", ["", "Claude", "-x", "_x", "a" * 33, "a b", "a/b", "a.b", "a\\x2d", "é", "a\n"])
def test_invalid_agent_ids_are_refused(agent, tmp_path):
    with pytest.raises(ValueError, match="invalid agent id"):
        su.unit_name(agent)
    with pytest.raises(ValueError, match="invalid agent id"):
        su.install_unit(agent, PYTHON, PROJECT, target_dir=tmp_path)
    assert not list(tmp_path.iterdir())


def test_unit_dir_follows_xdg_config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert su.unit_dir() == tmp_path / "cfg" / "systemd" / "user"
    assert su.env_file_paths("claude") == (
        tmp_path / "cfg" / "agent-bridge" / "listener.env",
        tmp_path / "cfg" / "agent-bridge" / "listener-claude.env",
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert su.unit_dir() == tmp_path / "home" / ".config" / "systemd" / "user"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert su.unit_dir() == tmp_path / "home" / ".config" / "systemd" / "user"


# --- installation ----------------------------------------------------------------------------


def test_install_writes_the_rendered_unit_atomically_and_idempotently(tmp_path):
    target = tmp_path / "systemd" / "user"  # created on demand
    assert not su.unit_installed(target)

    first = su.install_unit("claude", PYTHON, PROJECT, target_dir=target)
    path = target / su.TEMPLATE_NAME
    assert first.path == path and first.changed and first.unit == "agent-bridge-listener@claude.service"
    assert path.read_text() == su.render_unit(PYTHON, PROJECT)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert su.unit_installed(target)
    assert sorted(p.name for p in target.iterdir()) == [su.TEMPLATE_NAME]  # no temp file left

    assert first.commands[:2] == [
        "systemctl --user daemon-reload",
        "systemctl --user enable --now agent-bridge-listener@claude.service",
    ]
    assert first.commands[2].startswith("loginctl enable-linger ")
    assert [s.optional for s in first.steps] == [False, False, True]
    assert "(optional) loginctl enable-linger" in first.instructions()

    before = path.stat()
    again = su.install_unit("claude", PYTHON, PROJECT, target_dir=target)
    assert not again.changed and again.path == path
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)

    # One template serves every agent: installing for another agent changes nothing on disk.
    other = su.install_unit("kimi", PYTHON, PROJECT, target_dir=target)
    assert not other.changed and other.commands[1].endswith("agent-bridge-listener@kimi.service")

    # A stale or hand-edited copy is replaced (new inode: rename, not rewrite in place).
    path.write_text("[Service]\nExecStart=/old/python\n")
    path.chmod(0o600)
    stale = path.stat().st_ino
    fixed = su.install_unit("claude", PYTHON, PROJECT, target_dir=target)
    assert fixed.changed and path.read_text() == su.render_unit(PYTHON, PROJECT)
    assert path.stat().st_ino != stale and stat.S_IMODE(path.stat().st_mode) == 0o644

    assert su.uninstall_unit(target) and not su.unit_installed(target)
    assert not su.uninstall_unit(target)


def test_install_refuses_a_python_that_is_not_executable(tmp_path):
    not_exec = tmp_path / "python"
    not_exec.write_text("")
    for python in (not_exec, tmp_path / "missing"):
        with pytest.raises(ValueError, match="not an executable"):
            su.install_unit("claude", python, PROJECT, target_dir=tmp_path / "units")
    assert not (tmp_path / "units").exists()


def test_install_defaults_to_the_user_unit_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    result = su.install_unit("claude", PYTHON, PROJECT)
    assert result.path == tmp_path / "systemd" / "user" / su.TEMPLATE_NAME
    assert su.unit_installed()


# --- systemd's own parser --------------------------------------------------------------------


def analyze_verify(units: Path, instance: str, root: Path) -> subprocess.CompletedProcess:
    # A template can only be verified as an instance: the file is named
    # agent-bridge-listener@.service and we name agent-bridge-listener@<agent>.service,
    # whose directory systemd-analyze adds to the unit search path.
    #
    # --user needs no running user manager, only an XDG_RUNTIME_DIR to compute its paths
    # (without one it fails with "Failed to lookup RuntimeDirectory path"), so point it
    # at a private temp dir; XDG_CONFIG_HOME keeps the caller's own user units out (and
    # is what %E expands to). This works as root, too. --man=no: the unit has no man: links.
    #
    # The runtime dir is a short path of its own: the user units installed on the host name
    # sockets below it, and a socket path longer than 108 bytes (a deep pytest temp dir under
    # xdist) makes systemd-analyze refuse those units.
    with tempfile.TemporaryDirectory(prefix="xdg-") as run_dir:
        env = {**os.environ, "XDG_RUNTIME_DIR": run_dir, "XDG_CONFIG_HOME": str(root / "xdg-config")}
        argv = ["systemd-analyze", "--user", "--man=no", "verify", str(units / instance)]
        proc = subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=60)
        if proc.returncode and "Failed to initialize manager" in proc.stderr:
            # Fallback for hosts where even that cannot start a user-mode manager: system
            # mode parses the same directives (only %E/%h resolve to system paths).
            argv.remove("--user")
            proc = subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=60)
        return proc


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize("agent", ["claude", "my-agent_2"])
def test_systemd_analyze_verify_accepts_the_rendered_unit(agent, tmp_path):
    units = tmp_path / "units"
    su.install_unit(agent, PYTHON, PROJECT, target_dir=units)
    proc = analyze_verify(units, su.unit_name(agent), tmp_path)
    # Empty stderr too: systemd only *warns* about unknown keys or bad values.
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_is_a_real_check(tmp_path):
    units = tmp_path / "units"
    units.mkdir()
    broken = su.render_unit(PYTHON, PROJECT).replace(f"ExecStart={PYTHON} ", f"ExecStart={tmp_path}/no-such-python ")
    assert "no-such-python" in broken
    (units / su.TEMPLATE_NAME).write_text(broken)
    proc = analyze_verify(units, su.unit_name("claude"), tmp_path)
    assert proc.returncode != 0 and "no-such-python" in proc.stderr


# --- the ExecStart line itself -----------------------------------------------------------------


def test_exec_start_resolves_interpreter_and_module(tmp_path):
    rendered = su.render_unit(PYTHON, PROJECT)
    argv = exec_start_argv(rendered, "claude")
    assert argv == [str(PYTHON), "-m", "dispatcher", "listener", "run", "--agent", "claude"]
    assert os.access(argv[0], os.X_OK)
    (cwd,) = directives(rendered)["WorkingDirectory"]
    env = isolated_env(tmp_path)  # no VIRTUAL_ENV, no PYTHONPATH: the interpreter path alone must do
    check = [argv[0], "-m", "dispatcher", "--help"]
    proc = subprocess.run(check, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


def test_exec_start_runs_the_listener(tmp_path):
    # The real end-to-end check of ExecStart: the unit's exact command line runs the
    # listener, which comes up (progress document says idle) and stops cleanly on TERM.
    rendered = su.render_unit(PYTHON, PROJECT)
    argv = exec_start_argv(rendered, "claude")
    (cwd,) = directives(rendered)["WorkingDirectory"]
    env = isolated_env(tmp_path)
    progress = Path(env["AGENT_BRIDGE_RUNTIME_DIR"]) / "claude.progress.json"

    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (progress.exists() and json.loads(progress.read_text())["stage"] == "idle"):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "listener did not reach idle"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # what `systemctl --user stop` sends (KillMode=process)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert json.loads(progress.read_text())["stage"] == "stopped"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_accepts_the_prune_timer(tmp_path):
    units = tmp_path / "units"
    su.install_prune_timer(Path(sys.executable), PROJECT, target_dir=units)
    for name in ("agent-bridge-prune.timer", "agent-bridge-prune.service"):
        proc = analyze_verify(units, name, tmp_path)
        assert (proc.returncode, proc.stderr) == (0, ""), (name, proc.stderr)
    # A real check: a service whose interpreter is missing is refused.
    service = units / "agent-bridge-prune.service"
    service.write_text(service.read_text().replace(os.path.abspath(sys.executable), str(tmp_path / "no-python")))
    bad = analyze_verify(units, "agent-bridge-prune.service", tmp_path)
    assert bad.returncode != 0 and "no-python" in bad.stderr


def test_install_creates_a_missing_unit_directory_0700(tmp_path):
    """Before, ~/.config/systemd/user was created 0755, against the README's every-directory-0700."""
    target = tmp_path / "cfg" / "systemd" / "user"
    su.install_unit("claude", Path(sys.executable), PROJECT, target_dir=target)
    for directory in (target, target.parent, target.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


def test_enable_with_an_installed_unit_but_no_user_manager_starts_it_detached(tmp_path):
    """`listener enable` goes through systemd only where a user manager runs: with the unit
    installed and none, it starts the listener detached (and says so), never a failing systemctl."""
    env = isolated_env(tmp_path)
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "xdg-runtime")  # no systemd/private in it: no user manager
    su.install_unit("claude", PYTHON, PROJECT, Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user")
    stub = tmp_path / "stub-bin"
    stub.mkdir()
    (stub / "systemctl").write_text(f"#!/bin/sh\ntouch {tmp_path / 'systemctl-ran'}\nexit 1\n")
    (stub / "systemctl").chmod(0o755)
    env["PATH"] = f"{stub}{os.pathsep}{env['PATH']}"

    def cli(*args: str) -> dict:
        done = subprocess.run(
            [str(PYTHON), "-m", "dispatcher", "listener", *args, "--agent", "claude"],
            cwd=PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    started = cli("enable")
    try:
        assert started["started"] == "detached" and started["running"] is True, started
        assert not (tmp_path / "systemctl-ran").exists()
    finally:
        cli("disable")
        deadline = time.monotonic() + 60
        while cli("status")["running"]:
            assert time.monotonic() < deadline, "the disabled listener did not exit"
            time.sleep(0.1)
