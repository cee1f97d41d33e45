"""What runs on this host: the one module that reads ``/proc`` (directly, or through psutil).

A recorded process is (host, pid, start time), the start time as the kernel keeps it:
``<boot_id>:<start ticks>`` (``start_time``), never derived from the wall clock or from
``/proc/stat``'s ``btime``, which moves when the wall clock is stepped. ``liveness`` is the one
rule that says whether it still runs (a zombie has exited: gone); the other functions are the facts it and the rest of the bridge need: start
times, ancestors, command lines, environments, lock holders, and ending a process tree.
psutil is imported inside the functions: the status line's path must not pay for it.
A test (``tests/core/test_processes.py``) fails when another module reads /proc or imports psutil.
"""

import contextlib
import functools
import os
import re
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from dispatcher.core import clock
from dispatcher.core.host_lease import renewed_within
from dispatcher.core.locations import InvalidSetting

if TYPE_CHECKING:
    import psutil

LIVENESS = ("alive", "dead", "unknown")
_PROC = Path("/proc")
_BOOT_ID = _PROC / "sys" / "kernel" / "random" / "boot_id"


# -- the rule (pure) -------------------------------------------------------------------------
def children_cpu_seconds() -> float:
    """CPU time (user + system) used so far by this process's ended and waited-for children."""
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def liveness(
    host: str,
    start_time: str | None,
    *,
    here: str,
    observed_start: str | None,
    renewed_at: float | None = None,
    now: float = 0.0,
    lease: float = 0.0,
) -> str:
    """``alive`` iff the recorded process is of this host and its pid runs with the recorded start time.

    ``observed_start``: ``start_time`` of the row's pid now (None: no such process, or a
    zombie: it has exited). ``dead`` also for no recorded start time, or another one (a
    recycled pid, a pid of an earlier boot, or a value recorded before start times were kernel
    ticks). A process of another host is ``alive`` while its row was renewed within ``lease``
    of ``now`` (``host_lease.renewed_within``), else ``unknown``, never dead: this host cannot
    see it, and a host cut off from the store may still run it.
    """
    if host != here:
        return "alive" if renewed_within(renewed_at, now, lease) else "unknown"
    if start_time is None or observed_start is None:
        return "dead"
    return "alive" if observed_start == start_time else "dead"


# -- identity --------------------------------------------------------------------------------
HOST_ID_ENV = "AGENT_BRIDGE_HOST_ID"
_HOST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
HOST_ID_RULE = "it must be 1 to 64 letters, digits, '.', '_', ':' or '-'"
_MACHINE_ID = Path("/etc/machine-id")


def this_host() -> str:
    """This host's id in the store: ``AGENT_BRIDGE_HOST_ID``, else ``/etc/machine-id`` (unique per
    installation, unlike a host name), else the host name. Raises ``InvalidSetting`` for a value
    that is not a short word."""
    configured = os.environ.get(HOST_ID_ENV, "")
    if not configured:
        return _machine_id()
    if not is_host_id(configured):
        raise InvalidSetting(HOST_ID_ENV, configured, HOST_ID_RULE)
    return configured


def is_host_id(value: str) -> bool:
    return _HOST_ID.fullmatch(value) is not None


@functools.cache
def _machine_id() -> str:
    try:
        found = _MACHINE_ID.read_text().strip()
    except OSError:
        found = ""
    return found if is_host_id(found) else os.uname().nodename  # gethostname(2), without the socket module


def _stat_fields(pid: object) -> list[str] | None:
    """``/proc/PID/stat`` from field 3 (state) on; None for no such process or no pid at all."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    # "PID (COMM) STATE ...": COMM may hold spaces and parentheses, so split after the last ')'.
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields if len(fields) > 19 and fields[19].isdigit() else None


def start_time(pid: object) -> str | None:
    """The start time of the process running under ``pid`` now, as ``<boot_id>:<ticks>``: the
    kernel's boot id and the start in clock ticks since that boot (field 22 of /proc/PID/stat).
    No clock step moves it, and a pid of an earlier boot never matches. None when there is no
    such process, it is a zombie (it has exited), it cannot be read, or ``pid`` is no pid."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    try:
        boot = _BOOT_ID.read_text().strip()
    except OSError:
        return None
    return f"{boot}:{fields[19]}"


def age_seconds(pid: object) -> float | None:
    """How long ago the process under ``pid`` started (from its start ticks and the uptime: no
    wall clock involved); None when it cannot be told."""
    fields = _stat_fields(pid)
    try:
        uptime = float((_PROC / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return None if fields is None else max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))


def is_same_process(pid: object, recorded_start: str | None) -> bool:
    """Whether the process recorded on this host as ``pid`` started at ``recorded_start`` still runs."""
    here = this_host()
    return liveness(here, recorded_start, here=here, observed_start=start_time(pid)) == "alive"


def process_handle(pid: int, recorded_start: str | None) -> int | None:
    """A pidfd of the recorded process (readable once it has ended: a wait can sleep on it), or
    None when it is gone or pidfds are unavailable. Checked after opening: a pidfd names one
    process for good, so a recycled pid cannot slip in later."""
    try:
        fd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None
    if not is_same_process(pid, recorded_start):
        os.close(fd)
        return None
    return fd


# -- ancestry and what a process looks like -------------------------------------------------
def ancestors(pid: int | None = None) -> list[int]:
    """The pids above ``pid`` (default: this process), its parent first; empty when unreadable."""
    import psutil

    try:
        return [p.pid for p in psutil.Process(os.getpid() if pid is None else pid).parents()]
    except psutil.Error:
        return []


def nearest_ancestor(pid: int, *, skipping: frozenset[str]) -> int | None:
    """The pid of the nearest process above ``pid`` whose name is not in ``skipping`` (wrappers)."""
    import psutil

    try:
        parent = psutil.Process(pid).parent()
        while parent is not None and parent.name() in skipping:
            parent = parent.parent()
        return None if parent is None else parent.pid
    except psutil.Error:
        return None


def command_line(pid: int) -> list[str] | None:
    """The argv of ``pid`` (``argv[0]`` the program); None when it cannot be read."""
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0")]


def stdout_is_terminal(pid: int) -> bool | None:
    """Whether ``pid``'s stdout is a terminal; None when it cannot be read."""
    try:
        return os.readlink(_PROC / str(pid) / "fd" / "1").startswith(("/dev/pts/", "/dev/tty"))
    except OSError:
        return None


def with_environment(name: str, value: str) -> list[int]:
    """Pids of this user's live processes whose environment carries ``name=value`` (a zombie's
    environ reads empty, so finished processes never match)."""
    return list(iter_with_environment(name, value))


def iter_with_environment(name: str, value: str) -> Iterator[int]:
    """``with_environment``, one pid at a time as the scan finds it: a caller can act on a process
    (stop it) before the scan has gone through every other one."""
    needle, uid = f"{name}={value}".encode(), os.getuid()
    # Newest pids first: a process that hops to a new pid in a loop is always among the newest.
    for pid in sorted((int(e.name) for e in _PROC.iterdir() if e.name.isdigit()), reverse=True):
        entry = _PROC / str(pid)
        try:
            if entry.stat().st_uid != uid:
                continue
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            yield pid


def own_cgroup_facts() -> tuple[str, str] | None:
    """``/proc/self/cgroup`` and ``/proc/self/mountinfo`` as text: where this process sits in the
    cgroup hierarchies, and where they are mounted (``cgroups.v2_directory`` reads them); None
    when unreadable."""
    try:
        return (_PROC / "self" / "cgroup").read_text(), (_PROC / "self" / "mountinfo").read_text()
    except OSError:
        return None


def lock_holders(st: os.stat_result, kind: str | None = None) -> list[int] | None:
    """Pids holding (not waiting for) a lock of ``kind`` (FLOCK, POSIX, OFDLCK; any if None)
    on the file ``st`` describes, read from /proc/locks (takes no lock); None when unreadable."""
    try:
        with (_PROC / "locks").open() as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = []
    for line in lines:
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; blocked waiters carry "->".
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[5] != wanted:
            continue
        if kind is None or fields[1] == kind:
            holders.append(int(fields[4]))
    return holders


def flock_holder(path: str | os.PathLike[str]) -> int | None:
    """The pid holding a flock on ``path`` (read-only: takes no lock)."""
    try:
        holders = lock_holders(os.stat(path), "FLOCK")
    except OSError:
        return None
    return holders[0] if holders else None


# -- ending processes ------------------------------------------------------------------------


def has_children() -> bool:
    """Whether this process has a child at all, live or exited (one syscall, no look at /proc).
    As a child subreaper, no child means no descendant: an orphan below us is re-parented to us."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def reap_exited_children() -> None:
    """Reap every child of ours that has exited (orphans adopted as a subreaper that ended by
    themselves). Only once every child whose status matters (a Popen's) has been waited for."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def descendants() -> list[int]:
    """Pids of every process below this one (with a child subreaper: daemonised ones too); with
    no child at all, no scan of /proc."""
    import psutil

    if not has_children():
        return []
    try:
        return [p.pid for p in psutil.Process().children(recursive=True)]
    except psutil.Error:
        return []


MAX_KILL_ROUNDS = 50  # freeze-and-kill rounds before giving up on a tree that keeps growing
STOP_WAIT_SECONDS = 1.0  # how long one freeze waits for its processes to show as stopped
# Looks in a row that must find nothing: a process hopping to a new pid can be missed by one
# look on a loaded machine (caught once, its whole group is frozen with it).
EMPTY_LOOKS = 2


def end_processes(find: Callable[[], Iterable[int]], grace_seconds: float) -> tuple[int, int]:
    """End every process ``find`` names, those it starts while being ended included.

    TERM them all and wait up to ``grace_seconds``; then, until ``EMPTY_LOOKS`` looks in a row find
    no live process:
    freeze them (SIGSTOP, looking again after each freeze until a look finds no newcomer, so a
    process that forks on TERM or forks in a loop has no running process left to fork from) and
    KILL the frozen set. Our own children among them are reaped. Returns (how many processes it
    found, how many were still alive after ``MAX_KILL_ROUNDS``: normally none).
    """
    import psutil

    first = _signal_found(find(), signal.SIGTERM, set())
    seen = {p.pid for p in first}
    psutil.wait_procs(first, timeout=grace_seconds)
    empty_looks = 0
    for _ in range(MAX_KILL_ROUNDS):
        frozen = _freeze(find)
        if not frozen:
            empty_looks += 1
            if empty_looks == EMPTY_LOOKS:
                return len(seen), 0
            continue
        empty_looks = 0
        seen |= {p.pid for p in frozen}
        for proc in frozen:
            with contextlib.suppress(psutil.Error):  # (psutil checks it is still the same process)
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(frozen, timeout=5.0)
    return len(seen), len(_signal_found(find(), 0, set()))


def _signal_found(pids: Iterable[int], sig: int, skip: set[int]) -> "list[psutil.Process]":
    """Signal each live process (not a zombie, not us, not in ``skip``) the moment ``pids`` yields
    it, and its whole process group with it (a group outside our own: a live member proves it is
    the tree's), so a process that hops to a new pid in a loop is caught where it is found."""
    import psutil

    found, groups = [], {os.getpgrp()}
    for pid in pids:
        if pid in skip or pid == os.getpid():
            continue
        skip.add(pid)
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if sig:
                proc.send_signal(sig)
                if (group := os.getpgid(pid)) not in groups:
                    groups.add(group)
                    os.killpg(group, sig)
        except (psutil.Error, OSError):
            continue
        found.append(proc)
    return found


def _freeze(find: Callable[[], Iterable[int]]) -> "list[psutil.Process]":
    """SIGSTOP every live process ``find`` names, and every newcomer, until a look finds none."""
    frozen: list[psutil.Process] = []
    stopped: set[int] = set()
    while newcomers := _signal_found(find(), signal.SIGSTOP, stopped):
        _until_stopped(newcomers)
        frozen += newcomers
    return frozen


def _until_stopped(procs: "list[psutil.Process]") -> None:
    """Wait (bounded) until each process shows as stopped or gone: a signal is delivered later."""
    import psutil

    done = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    deadline = clock.monotonic() + STOP_WAIT_SECONDS
    while procs and clock.monotonic() < deadline:
        still = []
        for proc in procs:
            with contextlib.suppress(psutil.Error):  # gone: not waited for
                if proc.status() not in done:
                    still.append(proc)
        procs = still
        if procs:
            time.sleep(0.001)
