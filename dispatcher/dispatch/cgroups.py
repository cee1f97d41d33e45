"""A cgroup (v2) of its own for each worker, where the machine delegates one to us.

The supervisor makes ``agent-bridge-worker-<token>`` below its own cgroup and moves the gated
worker into it before the gate opens, so everything the worker ever starts is born inside (a
fork cannot race a look at ``/proc``). Ending it is ``cgroup.kill``: the kernel kills every
process of the cgroup and its sub-cgroups at once, one that forks on TERM or in a loop
included; then the directory is removed. A later listener finds it by the token after a
supervisor crash.

Delegated means: a cgroup v2 hierarchy is mounted, this process's cgroup in it is a directory
owned by this user that it may write, and a cgroup made there has ``cgroup.kill`` (Linux 5.14).
Whatever fails (no v2 hierarchy, a read-only ``/sys/fs/cgroup`` in a container, a cgroup owned by
root for an ordinary user, a kernel without ``cgroup.kill``) means no cgroup, and the worker is
contained as before: the supervisor is a child subreaper and freezes and kills its descendants,
and reconciliation sweeps ``/proc`` for the worker's token.

A worker cgroup left behind by a supervisor that died unreconciled (its attempt since pruned, its
store replaced) is swept by reconciliation (``sweep``): only an empty one, named as ours, older
than a minute, whose attempt is not running in the store, never through a link.

A cgroup is no wall against the worker: it runs as the same user, so it may move itself to
another cgroup it can write (our own). The descendant sweep and the token sweep stay behind it.
"""

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dispatcher.core import clock
from dispatcher.core.processes import is_same_process, own_cgroup_facts, start_time
from dispatcher.dispatch import faults

PREFIX = "agent-bridge-worker-"
SWEEP_MIN_AGE_SECONDS = 60.0  # a younger worker cgroup may still be waiting for its worker (make, then adopt)
EMPTY_WAIT_SECONDS = 10.0  # how long a killed cgroup may take to empty (the kernel is quick)
POLL_SECONDS = 0.01


def v2_directory(cgroup_text: str, mountinfo_text: str) -> Path | None:
    """The directory of our cgroup in the v2 hierarchy: the ``0::<path>`` line of
    ``/proc/self/cgroup`` under the mount point of the ``cgroup2`` filesystem in
    ``/proc/self/mountinfo`` (a hybrid machine mounts it at ``/sys/fs/cgroup/unified``, a v2-only
    one at ``/sys/fs/cgroup``). None when either is missing, or our path is not below the
    mount's root (a cgroup namespace we cannot see out of)."""
    own = next((line[3:] for line in cgroup_text.splitlines() if line.startswith("0::")), None)
    if own is None or not own.startswith("/"):
        return None
    for line in mountinfo_text.splitlines():
        # "36 25 0:31 <root> <mount point> <options> [optional fields] - <fs type> <source> <options>"
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split() or right.split()[0] != "cgroup2":
            continue
        root, mount = _unescape(fields[3]), _unescape(fields[4])
        if root != "/" and own != root and not own.startswith(root.rstrip("/") + "/"):
            return None
        inside = own[len(root) :] if root != "/" else own
        return Path(mount) / inside.lstrip("/")
    return None


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline and backslash in a path as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def refusal(directory: Path | None, owner_uid: int | None, uid: int, writable: bool) -> str | None:
    """Why we may not make worker cgroups in ``directory`` (our own cgroup's), None when we may:
    it must exist in a v2 hierarchy, belong to us and be writable by us."""
    if directory is None:
        return "no cgroup v2 hierarchy holds this process"
    if owner_uid is None:
        return f"{directory} cannot be read"
    if owner_uid != uid:
        return f"{directory} belongs to uid {owner_uid}, not to us (not delegated)"
    if not writable:
        return f"{directory} is not writable"
    return None


def delegated_directory() -> tuple[Path | None, str | None]:
    """(our cgroup's directory, None) when it is delegated to us, else (None, why not)."""
    if not faults.cgroups_allowed():
        return None, "cgroups switched off for a test"
    facts = own_cgroup_facts()
    directory = v2_directory(*facts) if facts is not None else None
    try:
        owner = os.stat(directory / "cgroup.procs").st_uid if directory is not None else None
    except OSError:
        owner = None
    writable = directory is not None and owner is not None and os.access(directory, os.W_OK)
    why = refusal(directory, owner, os.getuid(), writable)
    return (directory, None) if why is None else (None, why)


@dataclass(frozen=True)
class WorkerCgroup:
    path: Path

    def adopt(self, pid: int) -> bool:
        """Move ``pid`` (the gated worker, which has not started anything yet) in; on failure the
        cgroup is removed and False returned."""
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
            return True
        except OSError:
            self.remove()
            return False

    def pids(self) -> list[int]:
        """Every process in the cgroup and its sub-cgroups (a worker may make some)."""
        found: list[int] = []
        for directory, _, _ in os.walk(self.path):
            with contextlib.suppress(OSError, ValueError):
                found += [int(p) for p in (Path(directory) / "cgroup.procs").read_text().split()]
        return found

    def populated(self) -> bool:
        """Whether a live process is in it (or below it); a zombie does not count."""
        try:
            return "populated 1" in (self.path / "cgroup.events").read_text().splitlines()
        except OSError:
            return False

    def end(self, grace_seconds: float) -> tuple[int, bool]:
        """TERM everything in it and wait up to ``grace_seconds`` for those to exit; then
        ``cgroup.kill`` whatever is left or new (a process that forked on TERM), wait until it is
        empty, and remove it. Returns (how many processes it found, whether some outlived it)."""
        termed = {pid: start_time(pid) for pid in self.pids()}
        for pid in termed:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        self._until(lambda: not any(is_same_process(p, t) for p, t in termed.items()), grace_seconds)
        found = set(termed) | set(self.pids())
        if self.populated():
            with contextlib.suppress(OSError):
                (self.path / "cgroup.kill").write_text("1")
            self._until(lambda: not self.populated(), EMPTY_WAIT_SECONDS)
        left = self.populated()
        self.remove()
        return len(found), left

    @staticmethod
    def _until(done: Callable[[], bool], seconds: float) -> None:
        deadline = clock.monotonic() + seconds
        while not done() and clock.monotonic() < deadline:
            time.sleep(POLL_SECONDS)

    def remove(self) -> None:
        """Remove it and any sub-cgroup, deepest first (an emptied cgroup only; else it stays)."""
        for directory, _, _ in os.walk(self.path, topdown=False):
            with contextlib.suppress(OSError):
                Path(directory).rmdir()


def make(token: str) -> tuple[WorkerCgroup | None, str | None]:
    """A new cgroup for the worker ``token`` below our own, or (None, why not)."""
    parent, why = delegated_directory()
    if parent is None:
        return None, why
    path = parent / f"{PREFIX}{token}"
    try:
        os.mkdir(path)
    except OSError as exc:
        return None, f"cannot make {path}: {exc.strerror}"
    if not (path / "cgroup.kill").exists():
        WorkerCgroup(path).remove()
        return None, "the kernel has no cgroup.kill (Linux 5.14 or later)"
    return WorkerCgroup(path), None


def _is_token(token: str | None) -> bool:
    """A worker token is hex (letters and digits only): never a path, never another's name."""
    return token is not None and token.isascii() and token.isalnum()  # ("".isalnum() is False)


def find(token: str | None) -> WorkerCgroup | None:
    """The cgroup the supervisor of worker ``token`` made below our own cgroup, if it is still there
    (reconciliation, after a supervisor crash: the listener shares its supervisors' cgroup)."""
    if not _is_token(token):
        return None
    parent, _ = delegated_directory()
    path = parent / f"{PREFIX}{token}" if parent is not None else None
    return WorkerCgroup(path) if path is not None and path.is_dir() else None


REMOVE, LIVE, FOREIGN, YOUNG, POPULATED = "remove", "live", "foreign", "young", "populated"


def sweep_verdict(name: str, *, directory: bool, age: float, populated: bool | None, live: bool) -> str:
    """Whether the entry ``name`` below our cgroup is a worker cgroup to remove (pure). Kept: a name
    or an entry not ours (a link is never followed; no readable ``cgroup.events``: no cgroup), a
    young one (made, its worker not moved in yet), one with a process inside (perhaps another
    store's running worker: a shared cgroup holds every listener started outside systemd), and one
    whose attempt is running."""
    if not name.startswith(PREFIX) or not _is_token(name[len(PREFIX) :]) or not directory or populated is None:
        return FOREIGN
    if age < SWEEP_MIN_AGE_SECONDS:
        return YOUNG
    if populated:
        return POPULATED
    return LIVE if live else REMOVE


def sweep(parent: Path, running_tokens: Callable[[], set[str]], now: float) -> dict[str, list[str]]:
    """Remove the worker cgroups below ``parent`` that ``sweep_verdict`` gives up (the store is read,
    through ``running_tokens``, only when one might be). Returns the names by verdict. An emptied
    cgroup only goes: the kernel refuses to remove one a process has entered since."""
    found: dict[str, tuple[bool, float, bool | None]] = {}  # name: (a directory, its age, populated)
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return {}
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        try:
            directory = entry.is_dir(follow_symlinks=False)
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except OSError:  # gone meanwhile
            continue
        found[entry.name] = (directory, age, _populated(Path(entry.path)) if directory else None)
    running = running_tokens() if any(populated is False for _, _, populated in found.values()) else set()
    verdicts: dict[str, list[str]] = {}
    for name, (directory, age, populated) in found.items():
        live = name[len(PREFIX) :] in running
        verdict = sweep_verdict(name, directory=directory, age=age, populated=populated, live=live)
        if verdict == REMOVE:
            WorkerCgroup(parent / name).remove()
            if (parent / name).exists():  # a process entered it meanwhile: the kernel kept it
                verdict = POPULATED
        verdicts.setdefault(verdict, []).append(name)
    return verdicts


def _populated(path: Path) -> bool | None:
    """Whether a process is inside the cgroup ``path`` or below it; None when it is no cgroup we can read."""
    try:
        return "populated 1" in (path / "cgroup.events").read_text().splitlines()
    except OSError:
        return None
