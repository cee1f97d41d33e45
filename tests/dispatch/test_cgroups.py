"""A worker's own cgroup (``dispatcher.dispatch.cgroups``): the pure rules (where our cgroup is,
whether it is delegated to us) case by case, and real cgroups on a machine that delegates one:
a tree that daemonises, forks on TERM and forks in a loop is ended at once and its cgroup removed;
a process that moves itself out of its cgroup is still ended by the supervisor's descendants."""

import json
import os
import subprocess
import sys
import textwrap
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
