"""`agent-bridge unregister CLI --agent ID` and `agent-bridge uninstall [--purge]`: undo what
`register`, `systemd install` and `listener enable` did.

Each CLI's module takes out what its ``register`` wrote (``dispatcher/clis/<cli>/registration.py``),
through the same ``config_files.apply_edit`` (backup first, atomic replace, a file left alone when
nothing of ours is in it): the ``agent_bridge`` MCP server entry, this installation's hooks
(``agent-bridge hook <cli>`` commands) and the status line (``agent-bridge-statusline``); every
other byte the user wrote stays. TOML files are edited with tomlkit and parsed back: the result
must equal the old document without our entries, or nothing is written. A setting the user's CLI
needs for hooks (Codex's ``[features] hooks = true``) is the user's once written, and is kept.

``uninstall`` also stops every listener (the disable marker, then SIGTERM to the lock holder if it
has not exited within a grace period), disables and deletes the systemd units, and with ``purge``
deletes the store and the runtime directory. config.json is kept: it is the user's file.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import tomllib
from pathlib import Path

from dispatcher.clis import registry
from dispatcher.core import clock
from dispatcher.core.errors import BridgeError
from dispatcher.core.locations import Locations, LocationsLike, StoreUrl, shown
from dispatcher.core.settings import BridgeSettings

LISTENER_EXIT_SECONDS = 10.0  # after the disable marker: a listener between tasks exits at once
LISTENER_TERM_SECONDS = 20.0  # after SIGTERM: the listener stops its worker and exits


def unregister(cli: str, agent: str | None) -> list[str]:
    """Take ``cli``'s registration, hooks (and status line) out of its config files; ``agent``
    None: whichever agent they name. Lines to print."""
    return registry.BY_NAME[cli].unregister(agent)


# --- uninstall: listeners, units, registrations, and with purge the store -------------------


def _wait_for_exit(lock: Path, seconds: float) -> int | None:
    """The lock holder still there after ``seconds`` (None: it exited)."""
    from dispatcher.core.processes import flock_holder

    deadline = clock.monotonic() + seconds
    while (holder := flock_holder(lock)) is not None and clock.monotonic() < deadline:
        time.sleep(0.05)
    return holder


def stop_listener(settings: LocationsLike, agent: str, where: str = "") -> str | None:
    """Disable ``agent``'s listener (of the runtime directory ``settings`` names) and wait for it to
    exit; SIGTERM it after a grace period. A line to print when one was running."""
    from dispatcher.dispatch import control
    from dispatcher.dispatch.paths import AgentPaths

    lock = AgentPaths.of(settings, agent).lock
    if not lock.exists():
        return None
    if not control.disable(settings, agent)["running"]:
        return None
    holder = _wait_for_exit(lock, LISTENER_EXIT_SECONDS)
    if holder is None:
        return f"listener {agent}{where}: stopped."
    os.kill(holder, signal.SIGTERM)
    if _wait_for_exit(lock, LISTENER_TERM_SECONDS) is None:
        return f"listener {agent}{where}: stopped (SIGTERM to pid {holder} after {LISTENER_EXIT_SECONDS:g} s)."
    raise BridgeError(
        "listener_still_running",
        f"{agent}'s listener{where} (pid {holder}) did not exit after the disable marker and SIGTERM; "
        f"stop it with `kill {holder}`, then rerun `agent-bridge uninstall`.",
    )


def listener_runtimes(settings: BridgeSettings) -> list[Path]:
    """Every runtime directory a listener of ours may run from: the store in use's, the default
    SQLite store's and each PostgreSQL store's under the state directory (``pg-<key>/runtime``),
    whichever store this shell names."""
    from dispatcher.core.locations import default_db

    state = default_db().parent
    found = {settings.private_dir(), state / "runtime", *state.glob("pg-*/runtime")}
    return sorted(path for path in found if path.is_dir() and not path.is_symlink())


def stop_everything(settings: BridgeSettings, agents: set[str]) -> list[str]:
    """Stop the listeners and running workers of every runtime directory (``listener_runtimes``),
    naming each that is not the store in use's; then settle what a stopped supervisor left."""
    from dispatcher.dispatch.stop import end_workers, listener_locks

    lines = []
    for runtime in listener_runtimes(settings):
        ours = runtime == settings.private_dir()
        where = "" if ours else f" (another store's, runtime {runtime})"
        at = Locations(db=settings.db, runtime_dir=runtime)
        names = {lock.name.removesuffix(".lock") for lock in listener_locks(runtime)} | (agents if ours else set())
        lines += [line for agent in sorted(names) if (line := stop_listener(at, agent, where))]
        lines += end_workers(runtime, LISTENER_EXIT_SECONDS, LISTENER_TERM_SECONDS)
    return lines + settle_left(settings, agents)


def settle_left(settings: BridgeSettings, agents: set[str]) -> list[str]:
    """Settle the attempts of the store in use whose supervisor was stopped (``reconcile``)."""
    from dispatcher.dispatch.paths import AgentPaths
    from dispatcher.dispatch.reconcile import reconcile
    from dispatcher.store import STORE_ERRORS, open_store
    from dispatcher.store.attempts import unsettled_attempts

    if isinstance(settings.db, Path) and not settings.db.is_file():
        return []
    try:
        conn = open_store(settings.db)
    except STORE_ERRORS:
        return []
    try:
        before = {a["message_id"] for a in unsettled_attempts(conn)}
        for agent in sorted(agents):
            reconcile(conn, AgentPaths.of(settings, agent))
        left = {a["message_id"] for a in unsettled_attempts(conn)}
    except STORE_ERRORS:
        return []
    finally:
        conn.close()
    settled = sorted(before - left)
    return [f"settled the attempt(s) of message(s) {', '.join(f'#{m}' for m in settled)}."] if settled else []


def _systemctl(*args: str) -> bool:
    try:
        done = subprocess.run(["systemctl", "--user", *args], capture_output=True, timeout=60)  # noqa: S603, S607 - a fixed argv; systemctl from PATH, as the user runs it
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def remove_units(agents: list[str]) -> list[str]:
    """Disable and stop the units (where a user manager runs), then delete the unit files."""
    from dispatcher.dispatch import systemd_unit as su

    names = [su.TEMPLATE_NAME, *(name for name, _ in su.PRUNE_UNITS)]
    present = [su.unit_dir() / name for name in names if (su.unit_dir() / name).is_file()]
    if not present:
        return ["systemd: no agent-bridge unit installed; nothing changed."]
    manager = su.user_manager_available()
    if manager:
        for agent in agents:
            _systemctl("disable", "--now", su.unit_name(agent))
        _systemctl("disable", "--now", su.PRUNE_TIMER)
    for path in present:
        path.unlink(missing_ok=True)
    if manager:
        _systemctl("daemon-reload")
    return [f"systemd: removed {', '.join(str(p) for p in present)}."]


def purge(settings: BridgeSettings) -> list[str]:
    """Delete the store (with its WAL and shared-memory files) and the runtime directory. A
    PostgreSQL store is the server's: it is kept, and the lines say so."""
    db, runtime = settings.db, settings.private_dir()
    removed, said = [], []
    if isinstance(db, StoreUrl):
        said.append(f"kept the PostgreSQL store {shown(db)}: drop its database on the server to delete it.")
    else:
        for path in (db, *(db.with_name(db.name + suffix) for suffix in ("-wal", "-shm", "-journal"))):
            if path.is_file() and not path.is_symlink():
                path.unlink()
                removed.append(str(path))
    if runtime.is_dir() and not runtime.is_symlink():
        shutil.rmtree(runtime)
        removed.append(str(runtime))
    from dispatcher.core.locations import default_db

    state = default_db().parent
    # Other PostgreSQL stores' runtime directories (their listeners were stopped): their data is
    # on their servers; what is here is the listeners' locks, progress, logs and attempt files.
    for other in sorted(state.glob("pg-*/runtime")):
        if other != runtime and other.is_dir() and not other.is_symlink():
            shutil.rmtree(other)
            removed.append(str(other))
    for directory in sorted({*state.glob("pg-*"), runtime.parent} | ({db.parent} if isinstance(db, Path) else set())):
        _remove_empty(directory, up_to=state)
    removed += registration_leftovers()
    said.insert(
        0, f"purged {', '.join(removed)}." if removed else "purge: no store or runtime directory; nothing removed."
    )
    return said


def _remove_empty(directory: Path, up_to: Path) -> None:
    """Remove ``directory`` when it is empty, then each empty parent up to ``up_to`` (our state
    directory, ``agent-bridge``), which goes too when empty; nothing outside it."""
    inside = directory == up_to or up_to in directory.parents
    while inside and directory.is_dir() and not directory.is_symlink() and not any(directory.iterdir()):
        directory.rmdir()
        if directory == up_to:
            return
        directory = directory.parent
        inside = directory == up_to or up_to in directory.parents


def _hollow(value: object) -> bool:
    """Nothing but empty tables and lists (``{"mcpServers": {}}`` once our entry is out)."""
    if isinstance(value, dict):
        return all(_hollow(item) for item in value.values())
    return isinstance(value, list) and all(_hollow(item) for item in value)


def _empty_document(path: Path) -> bool:
    """Whether a CLI file holds nothing once our entries are out: blank, or hollow JSON or TOML."""
    try:
        text = path.read_text(encoding="utf-8")
        if not text.strip():
            return True
        return _hollow(tomllib.loads(text) if path.suffix == ".toml" else json.loads(text))
    except (OSError, UnicodeDecodeError, ValueError):
        return False


def registration_leftovers() -> list[str]:
    """What ``register`` and ``unregister`` left in each CLI's files: their ``.bak-<timestamp>``
    backups, a file that holds nothing any more, and its folder when that is then empty. Any file
    with content is the user's and stays."""
    from dispatcher.ops.store_pointers import registration_files

    removed = []
    for path in registration_files():
        for backup in sorted(path.parent.glob(f"{path.name}.bak-*")):
            if backup.is_file() and not backup.is_symlink():
                backup.unlink()
                removed.append(str(backup))
        if path.is_file() and not path.is_symlink() and _empty_document(path):
            path.unlink()
            removed.append(str(path))
    home = Path.home()
    for directory in dict.fromkeys(path.parent for path in registration_files()):
        with contextlib.suppress(OSError):  # not empty, or not ours to remove
            if directory not in (home, *home.parents) and directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
                removed.append(f"{directory}/")
    return removed


def uninstall(settings: BridgeSettings, *, purge_store: bool) -> list[str]:
    """Stop the listeners, remove the units, every CLI's registration, hooks and status line, and with
    ``purge_store`` the store and runtime directory. Lines to print."""
    from dispatcher.core.config import ConfigError, load_config

    runtime = settings.private_dir()
    from dispatcher.dispatch.systemd_unit import AGENT_ID_RE

    locks = runtime.glob("*.lock") if runtime.is_dir() else []
    agents = {name for lock in locks if AGENT_ID_RE.fullmatch(name := lock.name.removesuffix(".lock"))}
    with contextlib.suppress(ConfigError):  # no readable config: the runtime directory's locks name the listeners
        agents |= set(load_config(settings.config_path()).agents)
    workspaces = []
    with contextlib.suppress(ConfigError):
        config = load_config(settings.config_path())
        workspaces = [config.workspace(agent, settings.workspace) for agent in config.agents]
    lines = stop_everything(settings, agents)
    lines += remove_units(sorted(agents))
    for cli in registry.CLIS:
        lines += cli.unregister(None)
    if purge_store:
        from dispatcher.ops.branches import purge_branches  # (git loads only for a purge)

        lines += purge_branches(settings, workspaces)  # before the store that knows them goes
        lines += purge(settings)
    else:
        lines.append(f"kept the store {shown(settings.db)} and runtime {runtime}; `--purge` deletes them.")
    lines.append(f"kept {settings.config_path()} (yours). To remove the program: `uv tool uninstall agent-bridge`.")
    return lines
