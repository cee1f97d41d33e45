"""Install the listener's systemd user unit template (``systemd/agent-bridge-listener@.service``).

Stdlib only, no MCP SDK, no systemctl calls: this module writes one file and tells the
caller which commands to print. ``listener enable`` uses :func:`unit_installed` and
:func:`user_manager_available` to choose between ``systemctl --user start`` and a
detached start.
"""

import getpass
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from dispatcher.core.private_files import ensure_private_dir, write_atomically

TEMPLATE_NAME = "agent-bridge-listener@.service"
TEMPLATE_RELPATH = Path("systemd") / TEMPLATE_NAME
PLACEHOLDERS = ("@PYTHON@", "@PROJECT@")

AGENT_ID_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")

# Characters systemd would read as something other than a literal path character in
# ExecStart= / WorkingDirectory= / Documentation=: whitespace splits words, quotes and
# backslashes are unquoted/unescaped, "%" starts a specifier and "$" an environment
# variable (ExecStart only). Refusing them is simpler and safer than escaping each one
# per directive, and real interpreter and checkout paths do not contain them.
_UNSAFE_PATH_CHARS = frozenset("%$\\\"'`;")


@dataclass(frozen=True)
class Step:
    command: str
    optional: bool
    why: str


@dataclass(frozen=True)
class InstallResult:
    path: Path
    unit: str
    changed: bool
    steps: tuple[Step, ...]

    @property
    def commands(self) -> list[str]:
        return [step.command for step in self.steps]

    def instructions(self) -> str:
        """Human-readable text for the CLI to print after installing."""
        verb = "Installed" if self.changed else "Already up to date:"
        lines = [f"{verb} {self.path}", "", "Next, run:"]
        for step in self.steps:
            prefix = "  (optional) " if step.optional else "  "
            lines.append(f"{prefix}{step.command}")
            lines.append(f"      # {step.why}")
        return "\n".join(lines)


def validate_agent(agent: str) -> str:
    if not isinstance(agent, str) or not AGENT_ID_RE.fullmatch(agent):
        raise ValueError(
            f"invalid agent id {agent!r}: expected [a-z0-9][a-z0-9_-]{{0,31}} "
            "(lowercase letters, digits, '_' and '-', at most 32 characters)"
        )
    return agent


def unit_name(agent: str) -> str:
    """``agent-bridge-listener@<agent>.service``; valid agent ids never need systemd-escape."""
    return TEMPLATE_NAME.replace("@.", f"@{validate_agent(agent)}.", 1)


def unit_dir() -> Path:
    """The user unit directory: ``$XDG_CONFIG_HOME/systemd/user``, default ``~/.config/systemd/user``."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base / "systemd" / "user"


def env_file_paths(agent: str) -> tuple[Path, Path]:
    """The optional environment files the unit reads (shared, then per-agent, which wins).

    The unit spells them ``%E/agent-bridge/...``; %E is the user manager's
    $XDG_CONFIG_HOME, which is normally the same as this process's.
    """
    validate_agent(agent)
    base = unit_dir().parent.parent / "agent-bridge"
    return base / "listener.env", base / f"listener-{agent}.env"


def _checked_path(kind: str, path: Path | str) -> str:
    text = os.fspath(path)
    if not text:
        raise ValueError(f"{kind} path is empty")
    bad = sorted({ch for ch in text if ch.isspace() or not ch.isprintable() or ch in _UNSAFE_PATH_CHARS})
    if bad:
        raise ValueError(
            f"{kind} path {text!r} contains {', '.join(repr(ch) for ch in bad)}, which systemd "
            "would misparse in a unit file; move or symlink it to a path without whitespace, "
            "control characters or any of % $ \\ \" ' ` ;"
        )
    # abspath, not resolve(): the venv's python is a symlink to the base interpreter,
    # and resolving it would lose the virtualenv (and with it the project's packages).
    return os.path.abspath(text)


def template_path(project: Path, name: str = TEMPLATE_NAME) -> Path:
    return Path(project) / "systemd" / name


def render_unit(
    python: Path, project: Path, name: str = TEMPLATE_NAME, placeholders: tuple[str, ...] = PLACEHOLDERS
) -> str:
    """The template ``name`` from ``<project>/systemd/`` with @PYTHON@ and @PROJECT@ filled in."""
    python_s = _checked_path("python", python)
    project_s = _checked_path("project", project)
    template = template_path(Path(project_s), name)
    try:
        text = template.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"unit template not found: {template} (is {project_s} the Agent Bridge project?)") from None
    missing = [p for p in placeholders if p not in text]
    if missing:
        raise ValueError(f"unit template {template} lacks placeholder(s) {', '.join(missing)}")
    rendered = text.replace("@PYTHON@", python_s).replace("@PROJECT@", project_s)
    leftover = re.findall(r"@[A-Z_]+@", rendered)
    if leftover:
        names = ", ".join(sorted(set(leftover)))
        raise ValueError(f"unit template {template} has unknown placeholder(s) {names}")
    return rendered


def _write_unit(path: Path, text: str) -> None:
    ensure_private_dir(path.parent, "systemd unit directory", tighten=False)  # what it creates: 0700
    write_atomically(path, text, 0o644)


def install_steps(agent: str) -> tuple[Step, ...]:
    name = unit_name(agent)
    return (
        Step("systemctl --user daemon-reload", False, "make systemd read the new or changed unit file"),
        Step(
            f"systemctl --user enable --now {name}",
            False,
            f"start the listener for {agent} now and at every login",
        ),
        Step(
            f"loginctl enable-linger {shlex.quote(getpass.getuser())}",
            True,
            "keep user units running without a login session (after logout and from boot)",
        ),
    )


def install_unit(agent: str, python: Path, project: Path, target_dir: Path | None = None) -> InstallResult:
    """Write the rendered template to the user unit directory (atomic, 0644, idempotent).

    One template file serves every agent; ``agent`` only picks the unit to enable in
    the printed commands. Nothing is run: the caller prints ``result.instructions()``.
    """
    validate_agent(agent)
    text = render_unit(python, project)
    python_s = _checked_path("python", python)
    if not (os.path.isfile(python_s) and os.access(python_s, os.X_OK)):
        raise ValueError(f"python {python_s} is not an executable file")
    path = Path(target_dir if target_dir is not None else unit_dir()) / TEMPLATE_NAME
    try:
        current = path.read_text(encoding="utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        current = None
    changed = current != text
    if changed:
        _write_unit(path, text)
    elif (path.stat().st_mode & 0o777) != 0o644:
        os.chmod(path, 0o644)
    return InstallResult(path=path, unit=unit_name(agent), changed=changed, steps=install_steps(agent))


PRUNE_UNITS = (("agent-bridge-prune.service", PLACEHOLDERS), ("agent-bridge-prune.timer", ("@PROJECT@",)))
PRUNE_TIMER = "agent-bridge-prune.timer"


def install_prune_timer(python: Path, project: Path, target_dir: Path | None = None) -> InstallResult:
    """Write the daily retention service and timer (``agent-bridge prune --older-than 30d``)
    next to the listener's unit; atomic, 0644, idempotent. Enabling it is left to the user."""
    texts = [(name, render_unit(python, project, name, placeholders)) for name, placeholders in PRUNE_UNITS]
    target = Path(target_dir if target_dir is not None else unit_dir())
    changed = False
    for name, text in texts:
        path = target / name
        try:
            current = path.read_text(encoding="utf-8")
        except (FileNotFoundError, UnicodeDecodeError):
            current = None
        if current != text:
            _write_unit(path, text)
            changed = True
        elif (path.stat().st_mode & 0o777) != 0o644:
            os.chmod(path, 0o644)
    step = Step(
        f"systemctl --user enable --now {PRUNE_TIMER}",
        True,
        "daily: prune acknowledged messages, finished attempts and terminal conversations older than 30 days",
    )
    return InstallResult(path=target / PRUNE_TIMER, unit=PRUNE_TIMER, changed=changed, steps=(step,))


def unit_installed(target_dir: Path | None = None) -> bool:
    return (Path(target_dir if target_dir is not None else unit_dir()) / TEMPLATE_NAME).is_file()


def user_manager_available() -> bool:
    """A systemd user manager is running for this user (cheap check: no subprocess)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime:
        return False
    return os.path.exists(os.path.join(runtime, "systemd", "private"))  # noqa: PTH118 - a str for os.path.exists (PTH110)


def remove_steps(agent: str) -> tuple[Step, ...]:
    """Commands to stop and disable one agent's listener (run before :func:`uninstall_unit`)."""
    return (
        Step(
            f"systemctl --user disable --now {unit_name(agent)}",
            False,
            f"stop {agent}'s listener and no longer start it at login",
        ),
    )


def uninstall_unit(target_dir: Path | None = None) -> bool:
    """Delete the installed template; True when a file was removed. Then run daemon-reload."""
    path = Path(target_dir if target_dir is not None else unit_dir()) / TEMPLATE_NAME
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
