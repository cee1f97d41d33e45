"""Where the bridge's files live, resolved from the environment without pydantic.

``BridgeSettings`` (pydantic-settings) is the documented settings object; it uses these
functions for its defaults and its path rule. The status line reads the same three
variables through ``Locations.from_env`` because it must answer well within 200 ms, and
importing pydantic-settings alone costs a good part of that.

Path settings must be absolute (``~`` is expanded): the same variables are read by
servers that MCP clients start in any working directory, by the systemd unit and by the
CLI, and a relative path would quietly name a different file in each.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dispatcher.core.errors import BridgeError

# The installed wheel carries server.py, launchers/, systemd/, docs/systemd.md and a default
# config.json here (pyproject's force-include); a checkout has them at its root.
_PACKAGE = Path(__file__).resolve().parents[1]  # dispatcher/ (this module is dispatcher/core/locations.py)
PACKAGE_DATA = _PACKAGE / "_data"
CHECKOUT_DIR = _PACKAGE.parent


def _project_dir() -> Path:
    """The checkout when running from one (its files win), else the installed package's data."""
    if (CHECKOUT_DIR / "server.py").is_file() and (CHECKOUT_DIR / "launchers").is_dir():
        return CHECKOUT_DIR
    return PACKAGE_DATA if PACKAGE_DATA.is_dir() else CHECKOUT_DIR


PROJECT_DIR = _project_dir()
INSTALLED = PROJECT_DIR == PACKAGE_DATA


def default_workspace() -> Path:
    """Where workers run when neither config.json nor AGENT_BRIDGE_WORKSPACE says: the checkout's
    parent (the old rule); installed, the home directory (``agent-bridge init`` writes it explicitly)."""
    return Path.home() if INSTALLED else CHECKOUT_DIR.parent


class InvalidSetting(BridgeError):
    """An environment setting is unusable; ``variable`` names it (e.g. AGENT_BRIDGE_LOG_LEVEL)."""

    def __init__(self, variable: str, value: object, reason: str, more: str = "") -> None:
        shown = repr(value)[:80]
        super().__init__("invalid_setting", f"{variable}={shown} is invalid: {reason}{more}; fix or unset it.")
        self.variable = variable


POSTGRES_URL_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(location: object) -> bool:
    """The backend rule: a ``postgresql://`` (or ``postgres://``) URL names a PostgreSQL store,
    anything else a SQLite file."""
    return isinstance(location, str) and location.startswith(POSTGRES_URL_SCHEMES)


class StoreUrl(str):
    """``AGENT_BRIDGE_DB`` naming a PostgreSQL server's database (a libpq URL), not a file."""

    __slots__ = ()

    def key(self) -> str:
        """A short name for this store that holds no password: its runtime directory's name."""
        import hashlib  # here: OpenSSL is 3.5 MiB of the resident memory of a process that never hashes

        return "pg-" + hashlib.sha256(self.encode()).hexdigest()[:12]


# Where the store is: a SQLite file (its real path) or a PostgreSQL URL.
StoreLocation = Path | StoreUrl


def redacted(url: str) -> str:
    """The URL without its password."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def shown(db: StoreLocation) -> str:
    """The store as messages, logs and views name it: a path, or a URL without its password."""
    return redacted(db) if isinstance(db, StoreUrl) else str(db)


def store_location(value: str | os.PathLike[str]) -> StoreLocation:
    """The rule for ``AGENT_BRIDGE_DB``: a PostgreSQL URL as it is, else an absolute path
    (``ValueError`` otherwise) with links resolved (``store_path``)."""
    if is_postgres_url(value):
        return StoreUrl(value)
    return store_path(absolute_path(value))


def absolute_setting(value: str) -> str:
    """A store or path setting as a process started in another folder must get it (what
    ``register`` writes into a CLI's files): a PostgreSQL URL as it is, a path with ``~``
    expanded and made absolute against this process's working directory."""
    return value if is_postgres_url(value) else os.path.abspath(os.path.expanduser(value))


def absolute_path(value: str | os.PathLike[str]) -> Path:
    """The rule for every path setting: ``~`` expanded, then absolute, else ``ValueError``."""
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise ValueError(
            "it must be an absolute path (~ is expanded): a relative one would be resolved against each process's "
            "working directory, so sessions started in different folders would use different files"
        )
    return path


def _env_path(variable: str) -> Path | None:
    value = os.environ.get(variable)
    if not value:
        return None
    try:
        return absolute_path(value)
    except ValueError as exc:
        raise InvalidSetting(variable, value, str(exc)) from None


def _env_store(variable: str) -> StoreLocation | None:
    value = os.environ.get(variable)
    if not value:
        return None
    try:
        return store_location(value)
    except ValueError as exc:
        raise InvalidSetting(variable, value, str(exc)) from None


def store_path(path: Path) -> Path:
    """The store as the file SQLite opens: its real path, links resolved, once, at start. SQLite
    keeps ``-wal`` and ``-shm`` next to the real file, so the sidecar checks, the default runtime
    directory and with it the listener's lock are keyed on it: a store reached through a link
    (to the file or to a directory above it) is the same store, with the same lock."""
    return Path(os.path.realpath(path))


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    # The XDG spec says relative values are invalid and must be ignored.
    return Path(value) if value and Path(value).is_absolute() else Path.home() / fallback


def default_db() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state") / "agent-bridge" / "bridge.db"


def user_config_dir() -> Path:
    """The bridge's directory in the user's configuration (config.json, the listeners' env files)."""
    return _xdg("XDG_CONFIG_HOME", ".config") / "agent-bridge"


def resolve_config(explicit: Path | None) -> Path:
    """Explicit AGENT_BRIDGE_CONFIG, then the user's config, then the project's own."""
    if explicit is not None:
        return explicit
    user = user_config_dir() / "config.json"
    return user if user.exists() else PROJECT_DIR / "config.json"


def private_dir(db: StoreLocation, explicit: Path | None) -> Path:
    """The runtime directory: next to a SQLite file, or in the state directory under a name of
    the PostgreSQL store's own (two stores never share a listener's lock)."""
    if explicit:
        return explicit
    if isinstance(db, StoreUrl):
        return default_db().parent / db.key() / "runtime"
    return db.parent / "runtime"


@dataclass(frozen=True)
class Locations:
    db: StoreLocation
    config: Path | None = None
    runtime_dir: Path | None = None

    @classmethod
    def from_env(cls) -> "Locations":
        """Raises ``InvalidSetting`` for a relative path, like ``BridgeSettings``."""
        return cls(
            db=_env_store("AGENT_BRIDGE_DB") or store_path(default_db()),
            config=_env_path("AGENT_BRIDGE_CONFIG"),
            runtime_dir=_env_path("AGENT_BRIDGE_RUNTIME_DIR"),
        )

    def private_dir(self) -> Path:
        return private_dir(self.db, self.runtime_dir)

    def config_path(self) -> Path:
        return resolve_config(self.config)


class LocationsLike(Protocol):
    """What ``Locations`` and ``BridgeSettings`` both answer: the store, the runtime directory
    and config.json. Code that needs only these takes either."""

    @property
    def db(self) -> StoreLocation: ...

    def private_dir(self) -> Path: ...

    def config_path(self) -> Path: ...
