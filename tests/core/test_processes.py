"""``dispatcher.core.processes`` is the one reader of /proc and of psutil, and ``liveness`` its one
rule of process identity: each case of the rule, the facts it reads from real processes (this
one, a finished child, a zombie, a recycled pid), and a syntax-tree check that no other module
reads /proc or imports psutil."""

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import PROJECT, dispatcher_modules

from dispatcher.core import processes

PROCESSES_MODULE = "dispatcher/core/processes.py"
HERE = "host-a"

NOW, LEASE = 1000.0, 60.0
#   case                                            host      recorded  observed  renewed  verdict
LIVENESS_CASES = [
    ("alive: the same process", HERE, "boot-1:100", "boot-1:100", None, "alive"),
    ("pid reused: another start", HERE, "boot-1:100", "boot-1:250", None, "dead"),
    ("pid reused: one tick later", HERE, "boot-1:100", "boot-1:101", None, "dead"),
    ("an earlier boot: the same ticks", HERE, "boot-0:100", "boot-1:100", None, "dead"),
    ("recorded before start times were ticks", HERE, 1764600000.25, "boot-1:100", None, "dead"),
    ("zombie: it has exited (start_time reads none)", HERE, "boot-1:100", None, None, "dead"),
    ("gone: no process under the pid", HERE, "boot-1:100", None, None, "dead"),
    ("no recorded start time", HERE, None, "boot-1:100", None, "dead"),
    ("this host: a fresh renewal does not outweigh /proc", HERE, "boot-1:100", None, NOW, "dead"),
    ("another host: its pid runs here", "host-b", "boot-1:100", "boot-1:100", None, "unknown"),
    ("another host: its pid runs nowhere here", "host-b", "boot-1:100", None, None, "unknown"),
    ("another host: renewed just now", "host-b", "boot-1:100", None, NOW, "alive"),
    ("another host: renewed within the lease", "host-b", "boot-1:100", None, NOW - LEASE + 0.5, "alive"),
    ("another host: the lease ran out", "host-b", "boot-1:100", None, NOW - LEASE, "unknown"),
    ("another host: renewed ahead of this clock", "host-b", "boot-1:100", None, NOW + 5, "alive"),
]


@pytest.mark.parametrize(
    "case,host,recorded,observed,renewed,verdict", LIVENESS_CASES, ids=[c[0] for c in LIVENESS_CASES]
)
def test_liveness(case, host, recorded, observed, renewed, verdict):
    got = processes.liveness(
        host, recorded, here=HERE, observed_start=observed, renewed_at=renewed, now=NOW, lease=LEASE
    )
    assert got == verdict


def test_this_process_is_itself_and_not_a_recycled_pid():
    me = os.getpid()
    started = processes.start_time(me)
    assert started is not None
    assert processes.is_same_process(me, started)
    assert not processes.is_same_process(me, earlier(started))  # a pid recycled after the recorded process
    assert not processes.is_same_process(me, None)


def test_a_zombie_has_no_start_time_and_is_not_the_recorded_process():
    """The one zombie rule: a process that has exited is gone, reaped or not (the waiting Stop
    hook used to count a zombie Claude as alive until it was reaped)."""
    import psutil

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    recorded = processes.start_time(child.pid)
    assert recorded is not None and processes.is_same_process(child.pid, recorded)
    child.stdin.close()  # it exits; nobody reaps it yet
    deadline = time.monotonic() + 30
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert processes.start_time(child.pid) is None
        assert not processes.is_same_process(child.pid, recorded)
    finally:
        child.wait()
    assert processes.start_time(child.pid) is None  # reaped: gone


@pytest.mark.parametrize("nonsense", [0, -1, True, 2**70, "1", None])
def test_no_pid_has_no_start_time(nonsense):
    assert processes.start_time(nonsense) is None
    assert not processes.is_same_process(nonsense, "boot-1:100")


def earlier(start: str) -> str:
    """The start time of a process that started 30 s (of 100 Hz ticks) before ``start``, same boot."""
    boot, ticks = start.rsplit(":", 1)
    return f"{boot}:{int(ticks) - 3000}"


def test_the_start_time_is_the_kernels_boot_id_and_start_ticks():
    """Read from /proc/PID/stat and the kernel's boot_id: not from psutil's create_time, which adds
    /proc/stat's btime, a value that moves when the wall clock is stepped."""
    me = os.getpid()
    stat = Path(f"/proc/{me}/stat").read_text()
    ticks = stat[stat.rfind(")") + 2 :].split()[19]
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert processes.start_time(me) == f"{boot}:{ticks}"


def test_a_stepped_btime_leaves_a_live_process_alive(tmp_path, monkeypatch):
    """/proc as it reads after a wall-clock step of one hour (``btime`` in /proc/stat moved): the
    recorded start time still matches, so sessions, leases and supervisors still read as alive."""
    import shutil

    me = os.getpid()
    recorded = processes.start_time(me)
    fake = tmp_path / "proc"
    (fake / str(me)).mkdir(parents=True)
    shutil.copy(f"/proc/{me}/stat", fake / str(me) / "stat")
    (fake / "sys" / "kernel" / "random").mkdir(parents=True)
    shutil.copy("/proc/sys/kernel/random/boot_id", fake / "sys" / "kernel" / "random" / "boot_id")
    lines = Path("/proc/stat").read_text().splitlines()
    (fake / "stat").write_text(
        "\n".join(f"btime {int(line.split()[1]) + 3600}" if line.startswith("btime ") else line for line in lines)
    )
    monkeypatch.setattr(processes, "_PROC", fake)
    monkeypatch.setattr(processes, "_BOOT_ID", fake / "sys" / "kernel" / "random" / "boot_id")
    assert processes.is_same_process(me, recorded)


def test_ancestry_command_line_and_environment_of_a_child():
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "marker-arg"],
        env={**os.environ, "AGENT_BRIDGE_TEST_MARK": "m-1"},
        stdout=subprocess.DEVNULL,
    )
    try:
        assert processes.ancestors(child.pid)[0] == os.getpid()
        assert os.getppid() in processes.ancestors()
        assert processes.nearest_ancestor(child.pid, skipping=frozenset()) == os.getpid()
        assert processes.command_line(child.pid)[-2:] == ["marker-arg", ""]
        assert processes.stdout_is_terminal(child.pid) is False  # /dev/null
        assert processes.with_environment("AGENT_BRIDGE_TEST_MARK", "m-1") == [child.pid]
    finally:
        child.kill()
        child.wait()
    assert processes.command_line(child.pid) is None
    assert processes.ancestors(2**22 + 12345) == []


def test_lock_holders_names_the_process_holding_a_flock(tmp_path):
    import fcntl

    path = tmp_path / "lock"
    with path.open("w") as fh:
        assert processes.lock_holders(os.stat(path)) == []
        fcntl.flock(fh, fcntl.LOCK_EX)
        assert processes.lock_holders(os.stat(path), "FLOCK") == [os.getpid()]
        assert processes.lock_holders(os.stat(path), "POSIX") == []


# -- no other reader -------------------------------------------------------------------------
def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring constants: a docstring may name /proc, it reads nothing."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def process_reads(tree: ast.Module) -> list[str]:
    """Each place in ``tree`` that reads /proc (a string naming a path below it) or imports psutil."""
    docstrings, found = _docstrings(tree), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if "/proc/" in node.value:
                found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] == "psutil"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "psutil":
            found.append(f"{node.lineno}: from {node.module} import")
    return found


def test_only_the_processes_module_reads_proc_or_uses_psutil():
    offenders = {
        path: reads
        for path, tree in dispatcher_modules()
        if path != PROCESSES_MODULE and (reads := process_reads(tree))
    }
    assert offenders == {}, f"ask dispatcher.core.processes instead: {offenders}"


def test_the_check_sees_each_way_of_reading_proc():
    source = '''
"""A docstring may say /proc/locks."""
import psutil
from psutil import Process
import os
def f(pid):
    """Reads nothing: /proc/<pid>/stat."""
    os.readlink(f"/proc/{pid}/fd/1")
    return open("/proc/locks").read()
'''
    assert len(process_reads(ast.parse(source))) == 4


# -- ending a tree that fights back ------------------------------------------------------------
ESCAPERS = {
    # On TERM: fork, and let only the child go on (each child does the same on the next TERM).
    "forks_on_term": (
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: os.fork() and os._exit(0))\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(0.5)\n"
    ),
    # Hops to a new pid every 0.1 s (faster than one TERM-grace-KILL pass): fork, and the parent exits.
    "forks_in_a_loop": (
        "import os, time\nprint('ready', flush=True)\nwhile True:\n    time.sleep(0.1)\n    if os.fork(): os._exit(0)\n"
    ),
}


@pytest.mark.parametrize("kind", sorted(ESCAPERS))
def test_ending_processes_leaves_none_that_forked_on_term_or_in_a_loop(kind):
    """A process that forks when it receives TERM, or forks in a loop, leaves no process behind
    that was never listed: ``end_processes`` freezes and kills until nothing it finds is left."""
    mark = f"end-{kind}-{os.getpid()}"
    child = subprocess.Popen(
        [sys.executable, "-c", ESCAPERS[kind]],
        env={**os.environ, "AGENT_BRIDGE_TEST_MARK": mark},
        stdout=subprocess.PIPE,
        start_new_session=True,
    )

    def marked() -> list[int]:
        return processes.with_environment("AGENT_BRIDGE_TEST_MARK", mark)

    def found_as_scanned():
        return processes.iter_with_environment("AGENT_BRIDGE_TEST_MARK", mark)

    try:
        assert child.stdout.readline() == b"ready\n"
        found, left = processes.end_processes(found_as_scanned, grace_seconds=1.0)
        assert found >= 1 and left == 0
        assert marked() == []
    finally:
        processes.end_processes(found_as_scanned, grace_seconds=0)
        child.kill()
        child.wait()
        child.stdout.close()


CHILDREN = """
import os, subprocess, sys
from dispatcher.core.processes import descendants, has_children, reap_exited_children
said = [has_children(), descendants()]
child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
said += [has_children(), descendants() == [child.pid]]
child.stdin.close()
os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie child
said += [has_children()]
reap_exited_children()
said += [has_children(), descendants()]
print(said)
"""


def test_no_child_means_no_descendant_and_no_look_at_proc():
    """The supervisor's cheap look: with no child at all (a zombie is still a child, until reaped)
    ``descendants`` is empty without reading /proc. Run in a process of its own (it reaps)."""
    done = subprocess.run([sys.executable, "-c", CHILDREN], capture_output=True, text=True, timeout=60, cwd=PROJECT)
    assert done.stdout.strip() == "[False, [], True, True, True, False, []]", done.stderr
