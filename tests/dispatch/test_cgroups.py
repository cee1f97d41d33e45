"""A worker's own cgroup (``dispatcher.dispatch.cgroups``): the pure rules (where our cgroup is,
whether it is delegated to us) case by case, and real cgroups on a machine that delegates one:
a tree that daemonises, forks on TERM and forks in a loop is ended at once and its cgroup removed;
a process that moves itself out of its cgroup is still ended by the supervisor's descendants."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from harness import PROJECT

from dispatcher.core.processes import start_time
from dispatcher.dispatch import cgroups
from dispatcher.dispatch.faults import NO_CGROUP_ENV

V2_ONLY = "29 1 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
HYBRID = (
    "35 25 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)
SYSTEMD_USER = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/agent-bridge-listener@claude.service\n"

DIRECTORY_CASES = [
    ("v2 only, at the root", "0::/\n", V2_ONLY, Path("/sys/fs/cgroup")),
    (
        "v2 only, a user service",
        SYSTEMD_USER,
        V2_ONLY,
        Path(
            "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/agent-bridge-listener@claude.service"
        ),
    ),
    ("hybrid: the unified mount", "4:memory:/x\n0::/a\n", HYBRID, Path("/sys/fs/cgroup/unified/a")),
    ("v1 only: no 0:: line", "4:memory:/x\n1:name=systemd:/\n", HYBRID, None),
    ("no cgroup2 mount", "0::/a\n", "35 25 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", None),
    ("a mount of a sub-tree", "0::/a/b\n", "41 31 0:38 /a /mnt/cg rw - cgroup2 cgroup2 rw\n", Path("/mnt/cg/b")),
    ("our cgroup outside the mounted sub-tree", "0::/other\n", "41 31 0:38 /a /mnt/cg rw - cgroup2 cgroup2 rw\n", None),
    (
        "an escaped space in the mount point",
        "0::/\n",
        "41 31 0:38 / /mnt/c\\040g rw - cgroup2 cgroup2 rw\n",
        Path("/mnt/c g"),
    ),
    ("a relative path is no path", "0::a\n", V2_ONLY, None),
]


@pytest.mark.parametrize(
    ("name", "cgroup", "mountinfo", "expected"), DIRECTORY_CASES, ids=[c[0] for c in DIRECTORY_CASES]
)
def test_v2_directory(name, cgroup, mountinfo, expected):
    assert cgroups.v2_directory(cgroup, mountinfo) == expected


REFUSAL_CASES = [
    ("ours and writable: delegated", Path("/cg"), 1000, 1000, True, None),
    ("no v2 hierarchy", None, None, 1000, False, "no cgroup v2 hierarchy"),
    ("unreadable", Path("/cg"), None, 1000, False, "cannot be read"),
    ("owned by root, we are a user", Path("/cg"), 0, 1000, True, "belongs to uid 0, not to us (not delegated)"),
    ("ours but read-only", Path("/cg"), 1000, 1000, False, "is not writable"),
    ("root's own, as root", Path("/cg"), 0, 0, True, None),
]


@pytest.mark.parametrize(
    ("name", "directory", "owner", "uid", "writable", "why"), REFUSAL_CASES, ids=[c[0] for c in REFUSAL_CASES]
)
def test_refusal(name, directory, owner, uid, writable, why):
    said = cgroups.refusal(directory, owner, uid, writable)
    assert said is None if why is None else why in said


def test_switched_off_means_no_cgroup_and_says_why(monkeypatch):
    monkeypatch.setenv(NO_CGROUP_ENV, "1")
    assert cgroups.make("cafe") == (None, "cgroups switched off for a test")


def test_find_never_takes_a_token_as_a_path():
    assert cgroups.find("../../x") is None and cgroups.find("") is None and cgroups.find(None) is None


HERE, WHY_NOT = cgroups.delegated_directory()
delegated = pytest.mark.skipif(HERE is None, reason=f"no delegated cgroup here: {WHY_NOT}")

# Run in a process of its own (it becomes a subreaper and reaps its children): make a worker
# cgroup, start the gated tree in it, let it run, then contain it and report.
SUPERVISOR = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    from dispatcher.dispatch import cgroups
    from dispatcher.dispatch.procs import WorkerTree, become_subreaper, contain

    token, tree_code = sys.argv[1], sys.argv[2]
    below_us = become_subreaper()
    cgroup, why = cgroups.make(token)
    assert cgroup is not None, why
    gate = subprocess.Popen([sys.executable, "-c", tree_code], stdin=subprocess.PIPE)
    assert cgroup.adopt(gate.pid)
    gate.stdin.write(b"go\\n"); gate.stdin.close(); gate.wait()
    sys.stdin.readline()  # the test saw the tree running
    found, left = contain(WorkerTree(token, cgroup, below_us=below_us), 1.0)
    print(json.dumps({"found": found, "left": left, "dir_left": cgroup.path.exists()}), flush=True)
    """
)

# Daemonises (double fork, setsid), then one process forks on every TERM and another forks in a loop.
TREE = textwrap.dedent(
    """
    import os, signal, sys, time
    sys.stdin.readline()
    if os.fork(): os._exit(0)
    os.setsid()
    if os.fork(): os._exit(0)
    if os.fork():
        signal.signal(signal.SIGTERM, lambda *_: os.fork() and os._exit(0))
    else:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:  # a new pid every 50 ms, the old one gone
            if os.fork(): os._exit(0)
            time.sleep(0.05)
    print(os.getpid(), flush=True)
    while True: time.sleep(0.1)
    """
)

# Moves itself out of its cgroup (into the parent: ours, which it may write), then daemonises.
ESCAPE = textwrap.dedent(
    """
    import os, sys, time
    sys.stdin.readline()
    if os.fork(): os._exit(0)
    os.setsid()
    with open(os.environ["ESCAPE_TO"], "w") as f: f.write(str(os.getpid()))
    print(os.getpid(), flush=True)
    while True: time.sleep(0.1)
    """
)


def _token_tree(token: str) -> list[int]:
    """Processes whose cgroup is this worker's (read from /proc here, independently)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and f"/{cgroups.PREFIX}{token}" in (entry / "cgroup").read_text():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _run(tree_code: str, env: dict | None = None) -> tuple[dict, list[int], str]:
    token = os.urandom(8).hex()
    proc = subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, token, tree_code],
        cwd=PROJECT,
        env={**os.environ, **(env or {})},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        first = proc.stdout.readline()  # the tree's long-lived process is up
        seen = [int(first)] if first.strip() else []
        proc.stdin.write(json.dumps(seen) + "\n")
        proc.stdin.flush()
        report = json.loads(proc.stdout.readline())
    finally:
        proc.kill()
        proc.communicate()
    return report, seen, token


@delegated
def test_a_tree_that_daemonises_forks_on_term_and_forks_in_a_loop_is_ended_with_its_cgroup():
    report, seen, token = _run(TREE)
    assert seen and report["left"] == 0 and report["found"] >= 2
    assert not report["dir_left"] and not (HERE / f"{cgroups.PREFIX}{token}").exists()
    assert _token_tree(token) == []
    assert start_time(seen[0]) is None  # gone (or a zombie: exited)


@delegated
def test_a_process_that_leaves_its_cgroup_is_still_ended_as_a_descendant():
    report, seen, _ = _run(ESCAPE, {"ESCAPE_TO": str(HERE / "cgroup.procs")})
    assert seen and report["left"] == 0 and not report["dir_left"]
    assert start_time(seen[0]) is None


# --- the sweep of worker cgroups whose attempt no longer runs ---------------------------------

TOKEN = "0123456789abcdef0123456789abcdef"
OLD = cgroups.SWEEP_MIN_AGE_SECONDS + 1
SWEEP_CASES = [
    ("empty, old, its attempt gone: removed", cgroups.PREFIX + TOKEN, True, OLD, False, False, cgroups.REMOVE),
    ("its attempt runs", cgroups.PREFIX + TOKEN, True, OLD, False, True, cgroups.LIVE),
    ("a process inside", cgroups.PREFIX + TOKEN, True, OLD, True, False, cgroups.POPULATED),
    ("made a moment ago: its worker not in yet", cgroups.PREFIX + TOKEN, True, 1.0, False, False, cgroups.YOUNG),
    ("a link", cgroups.PREFIX + TOKEN, False, OLD, None, False, cgroups.FOREIGN),
    ("no cgroup.events: no cgroup", cgroups.PREFIX + TOKEN, True, OLD, None, False, cgroups.FOREIGN),
    ("another program's name", "someone-else", True, OLD, False, False, cgroups.FOREIGN),
    ("our prefix, no token", cgroups.PREFIX, True, OLD, False, False, cgroups.FOREIGN),
    ("our prefix, a path for a token", cgroups.PREFIX + "..", True, OLD, False, False, cgroups.FOREIGN),
    ("our prefix, not a token", cgroups.PREFIX + "x-y", True, OLD, False, False, cgroups.FOREIGN),
]


@pytest.mark.parametrize(
    ("case", "name", "directory", "age", "populated", "live", "verdict"), SWEEP_CASES, ids=[c[0] for c in SWEEP_CASES]
)
def test_sweep_verdict(case, name, directory, age, populated, live, verdict):
    assert cgroups.sweep_verdict(name, directory=directory, age=age, populated=populated, live=live) == verdict


@pytest.fixture
def private_cgroup():
    """A real cgroup of the test's own below ours (the sweep takes its parent), with its processes
    ended and its cgroups removed after."""
    parent = HERE / f"agent-bridge-test-sweep-{os.urandom(6).hex()}"
    parent.mkdir()
    started: list[subprocess.Popen] = []
    yield parent, started
    for proc in started:
        proc.kill()
        proc.wait()
    cgroups.WorkerCgroup(parent).remove()


def _worker_cgroup(parent: Path, token: str, *, age: float = OLD, inside: list[subprocess.Popen] | None = None):
    path = parent / f"{cgroups.PREFIX}{token}"
    path.mkdir()
    if inside is not None:
        inside.append(subprocess.Popen(["sleep", "600"]))
        (path / "cgroup.procs").write_text(str(inside[-1].pid))
    os.utime(path, (time.time() - age, time.time() - age))
    return path


@delegated
def test_the_sweep_removes_only_empty_old_worker_cgroups_whose_attempt_is_gone(private_cgroup, tmp_path):
    parent, started = private_cgroup
    gone, gone_deep, live, busy, young = (os.urandom(16).hex() for _ in range(5))
    _worker_cgroup(parent, gone)
    deep = _worker_cgroup(parent, gone_deep)
    (deep / "made-by-the-worker").mkdir()  # a sub-cgroup, empty (its making is a change: the age starts again)
    os.utime(deep, (time.time() - OLD, time.time() - OLD))
    _worker_cgroup(parent, live)
    _worker_cgroup(parent, busy, inside=started)
    _worker_cgroup(parent, young, age=0)
    foreign = [parent / "someone-else", parent / f"{cgroups.PREFIX}not-a-token"]
    for path in foreign:
        path.mkdir()
        os.utime(path, (time.time() - OLD, time.time() - OLD))
    asked = []

    def running() -> set[str]:
        asked.append(True)
        return {live}

    verdicts = cgroups.sweep(parent, running, time.time())
    names = {n: sorted(v) for n, v in verdicts.items()}
    assert names == {
        cgroups.REMOVE: sorted(f"{cgroups.PREFIX}{t}" for t in (gone, gone_deep)),
        cgroups.LIVE: [f"{cgroups.PREFIX}{live}"],
        cgroups.POPULATED: [f"{cgroups.PREFIX}{busy}"],
        cgroups.YOUNG: [f"{cgroups.PREFIX}{young}"],
        cgroups.FOREIGN: [f"{cgroups.PREFIX}not-a-token"],
    }
    left = sorted(p.name for p in parent.iterdir() if p.is_dir())
    assert left == sorted([*(f"{cgroups.PREFIX}{t}" for t in (live, busy, young)), *(p.name for p in foreign)])
    assert started[0].poll() is None  # the process inside was left alone
    assert asked == [True]  # the store read once, and only because something might go


@delegated
def test_the_sweep_never_follows_a_link_to_a_cgroup(private_cgroup, tmp_path):
    """cgroupfs refuses links; a parent elsewhere holding one must still not lead the sweep into
    the cgroup it names (nor into its sub-cgroups)."""
    parent, _ = private_cgroup
    target = _worker_cgroup(parent, os.urandom(16).hex())
    (target / "inner").mkdir()
    elsewhere = tmp_path / "parent"
    elsewhere.mkdir()
    link = elsewhere / f"{cgroups.PREFIX}{os.urandom(16).hex()}"
    link.symlink_to(target, target_is_directory=True)
    os.utime(link, (time.time() - OLD, time.time() - OLD), follow_symlinks=False)
    assert cgroups.sweep(elsewhere, set, time.time()) == {cgroups.FOREIGN: [link.name]}
    assert (target / "inner").is_dir() and link.is_symlink()


@delegated
def test_a_cgroup_a_process_enters_before_removal_is_kept(private_cgroup):
    """The kernel refuses to remove a populated cgroup: one a process entered after its look is
    reported populated, never lost."""
    parent, started = private_cgroup
    path = _worker_cgroup(parent, os.urandom(16).hex())

    def enter_while_asked() -> set[str]:
        started.append(subprocess.Popen(["sleep", "600"]))
        (path / "cgroup.procs").write_text(str(started[-1].pid))
        return set()

    assert cgroups.sweep(parent, enter_while_asked, time.time()) == {cgroups.POPULATED: [path.name]}
    assert path.is_dir() and started[0].poll() is None


@delegated
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_reconciliation_sweeps_a_cgroup_whose_attempt_is_gone_and_keeps_a_running_attempts(
    tmp_path, backend, request, monkeypatch
):
    """The listener's reconciliation, on a store where one attempt runs (its supervisor: this test).
    Its verdicts are read from the sweep it made: a reconciliation of another test's store, running
    meanwhile below the same cgroup, rightly removes an empty old cgroup it has no attempt for."""
    from dispatcher.bridge import messages
    from dispatcher.core.config import AgentConfig, BridgeConfig
    from dispatcher.dispatch.attempts import begin_attempt
    from dispatcher.dispatch.paths import AgentPaths
    from dispatcher.dispatch.reconcile import reconcile
    from dispatcher.store import open_store

    conn = open_store(tmp_path / "bridge.db" if backend == "sqlite" else request.getfixturevalue("postgres_url"))
    running, gone = os.urandom(16).hex(), os.urandom(16).hex()
    paths = []
    try:
        task = messages.send_message(
            conn, sender="kimi", recipient="claude", text="t", agents={"claude", "kimi"}, kind="task"
        )
        config = BridgeConfig(agents={a: AgentConfig(launcher="launchers/x.sh") for a in ("claude", "kimi")})
        begin_attempt(
            conn,
            message_id=task["id"],
            config=config,
            now=time.time(),
            manual=True,
            supervisor_pid=os.getpid(),
            supervisor_start=start_time(os.getpid()),
            worker_token=running,
        )
        paths = [_worker_cgroup(HERE, token) for token in (running, gone)]
        verdicts: list[dict[str, list[str]]] = []
        sweep = cgroups.sweep
        monkeypatch.setattr(cgroups, "sweep", lambda *args: verdicts.append(sweep(*args)) or verdicts[-1])
        assert len(reconcile(conn, AgentPaths(tmp_path / "runtime", "claude"))) == 1  # (its attempt runs)
        (ours,) = verdicts  # one sweep, by this reconciliation
        assert cgroups.PREFIX + running in ours[cgroups.LIVE] and cgroups.PREFIX + gone in ours[cgroups.REMOVE]
        assert not paths[1].exists()
    finally:
        conn.close()
        for path in paths:
            cgroups.WorkerCgroup(path).remove()
