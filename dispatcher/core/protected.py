"""What no worker may write: the bridge's own files and the git directories of its repositories.

A worker that could write config.json could raise its own permission level or name another
launcher; one that could write a launcher, the store, the runtime directory or the installed
code would run its code outside every sandbox at the next attempt; one that could write a
repository's ``.git/config`` or ``.git/hooks`` would make the next ``git status`` run anything.

Two rules, each written once here and applied by every caller:

- ``workspace_problem``: a workspace (or a writable ``extra_dirs`` entry) may neither contain nor
  lie inside one of the bridge's places (``bridge_places``), and may neither be nor contain the
  user's home directory. ``init``, config validation, ``doctor``, the listener and the
  supervisor's pre-launch check refuse such a directory (``workspace_unsafe``);
- ``write_refused``: a path a worker's file tool may not write, at any level: inside one of the
  protected paths (the bridge's places and the workspace's git directories, ``PROTECTED_ENV``),
  or with a ``.git`` component anywhere (a repository nested in the workspace, or one the worker
  would create). Every permission hook (Claude's deny rules, Codex's, Gemini's and Kimi's
  PreToolUse hooks) asks it.

Pure apart from reading the filesystem to resolve links and to find a repository's git
directory (``git_dirs``: the files git itself reads, never a git command, so no hook or
fsmonitor of the repository runs).
"""

import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dispatcher.core.locations import (
    CHECKOUT_DIR,
    PROJECT_DIR,
    LocationsLike,
    StoreUrl,
    default_db,
    user_config_dir,
)

CODE = "workspace_unsafe"
# The protected paths as the supervisor hands them to the launcher (a JSON list of real paths).
PROTECTED_ENV = "AGENT_BRIDGE_PROTECTED"
GIT = ".git"
_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # dispatcher/


@dataclass(frozen=True)
class Place:
    """One of the bridge's own places: what it is (for the message) and where."""

    what: str
    path: Path


def real(path: str | os.PathLike[str]) -> Path:
    """The path with ``~`` expanded and every link resolved (it need not exist)."""
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


def bridge_places(locations: LocationsLike, launchers: Iterable[Path]) -> tuple[Place, ...]:
    """The bridge's config, its directories, the store, the runtime directory, the launchers and
    the installed code, as real paths."""
    places = [
        Place("the bridge's config", locations.config_path()),
        Place("the bridge's config directory", user_config_dir()),
        Place("the bridge's state directory", default_db().parent),
        Place("the runtime directory", locations.private_dir()),
        Place("the installed code", PROJECT_DIR),
        Place("the installed code", _PACKAGE_DIR),
    ]
    if not isinstance(locations.db, StoreUrl):
        places.append(Place("the store", Path(locations.db)))
    if CHECKOUT_DIR != PROJECT_DIR:
        places.append(Place("the installed code", CHECKOUT_DIR))
    if sys.prefix != sys.base_prefix:  # a virtual environment: its interpreter runs every hook
        places.append(Place("the installed code", Path(sys.prefix)))
    places.extend(Place("a launcher", launcher) for launcher in launchers)
    return tuple(Place(p.what, real(p.path)) for p in places)


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def workspace_problem(
    directory: str | os.PathLike[str], places: Sequence[Place], home: Path | None = None
) -> str | None:
    """Why a worker may not get ``directory`` as its workspace (or a writable extra directory):
    it holds or lies inside one of ``places``, or is (or holds) the home directory. None when fine."""
    where, home = real(directory), real(home or Path.home())
    if _inside(home, where):
        return (
            f"{where} is the home directory {home}" if where == home else f"{where} contains the home directory {home}"
        )
    for place in places:
        if _inside(place.path, where):
            return f"{where} contains {place.what} {place.path}"
        if _inside(where, place.path):
            return f"{where} is inside {place.what} {place.path}"
    return None


def unsafe_reason(agent: str, why: str) -> str:
    """What is wrong with an unsafe workspace (``why``: ``workspace_problem``'s answer)."""
    return (
        f"the workspace of agent {agent!r} is unsafe: {why}, so its workers could rewrite the bridge's own files "
        "(their permissions, a launcher) and the next attempt would run that outside every sandbox"
    )


def unsafe_fix(agent: str, config_path: Path | str) -> str:
    from dispatcher.core.findings import CODES

    return CODES["workspace_unsafe"].fix_text(agent=agent, config=config_path)


def git_dirs(directory: str | os.PathLike[str]) -> tuple[Path, ...]:
    """The git directory of the repository ``directory`` is in, and its common directory (a linked
    worktree's or a ``.git`` file's), as git would find them: the nearest ``.git`` above, a
    directory or a ``gitdir: PATH`` file, then ``commondir`` inside it. Read-only; runs nothing."""
    here = real(directory)
    for candidate in (here, *here.parents):
        dot_git = candidate / GIT
        if dot_git.is_dir():
            git_dir = dot_git
        elif dot_git.is_file():
            try:
                line = dot_git.read_text(encoding="utf-8", errors="replace").splitlines()[0]
            except (OSError, IndexError):
                return ()
            if not line.startswith("gitdir:"):
                return ()
            git_dir = candidate / line.removeprefix("gitdir:").strip()
        else:
            continue
        git_dir = real(git_dir)
        found = [git_dir]
        try:
            common = (git_dir / "commondir").read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            common = ""
        if common:
            found.append(real(git_dir / common))
        return tuple(dict.fromkeys(found))
    return ()


def protected_paths(places: Sequence[Place], writable: Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
    """What no worker may write: the bridge's places and the git directories of the repositories
    its writable directories (workspace, ``extra_dirs``) are in."""
    inner = [real(directory) for directory in writable]
    found = [entry for p in places for entry in _beside(real(p.path), inner)]
    for directory in writable:
        found.extend(str(d) for d in git_dirs(directory))
    return tuple(dict.fromkeys(found))


def _beside(place: Path, writable: Sequence[Path]) -> list[str]:
    """``place``; or, where it holds a writable directory (an attempt's worktree lies in the
    runtime directory), every entry beside the way down to it, as it is at launch: the worktree
    stays writable and nothing else there is."""
    if not any(w != place and _inside(w, place) for w in writable):
        return [] if place in writable else [str(place)]
    try:
        entries = sorted(place.iterdir())
    except OSError:
        return [str(place)]
    found: list[str] = []
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            found.extend(_beside(entry, writable))
        else:
            found.append(str(entry))
    return found


def write_refused(path: str | os.PathLike[str], protected: Sequence[str]) -> str | None:
    """Why a worker's file tool may not write ``path`` (already absolute), or None. Links are
    resolved, so a link into a protected place is refused too."""
    given = Path(os.path.abspath(os.fspath(path)))
    resolved = real(given)
    if GIT in given.parts or GIT in resolved.parts:
        return "a repository's git directory (.git) is read-only to workers"
    for root in protected:
        if _inside(resolved, Path(root)):
            return "the bridge's own files and the repository's git directory are read-only to workers"
    return None


def protected_from_env(env: Mapping[str, str]) -> tuple[str, ...]:
    """The protected paths the supervisor handed the launcher; none when it handed none (a
    launcher run by hand; the ``.git`` rule holds anyway)."""
    raw = env.get(PROTECTED_ENV)
    if not raw:
        return ()
    value = json.loads(raw)
    if not isinstance(value, list) or not all(isinstance(p, str) and Path(p).is_absolute() for p in value):
        raise ValueError(f"{PROTECTED_ENV} is not a JSON list of absolute paths")
    return tuple(value)


# The git configuration every worker's git runs with (``git_environment``): given as
# GIT_CONFIG_COUNT/KEY/VALUE, it outranks every config file, the repository's included, so a
# planted fsmonitor, hooks directory or pager does not run, and a directory the worker made
# to look like a bare repository is not taken for one.
GIT_SAFE_CONFIG = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("safe.bareRepository", "explicit"),
)


def git_environment() -> dict[str, str]:
    """The variables that give every git a worker runs ``GIT_SAFE_CONFIG`` and no system config."""
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_COUNT": str(len(GIT_SAFE_CONFIG))}
    for i, (key, value) in enumerate(GIT_SAFE_CONFIG):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env
