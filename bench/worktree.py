"""What a worktree adds to send -> worker start, as a user sees it: the supervisor's steps before the
gate opens, on a repository of ``--files`` files (10,000 by default), with a clean and with a dirty
checkout, three ways side by side:

- ``pool``: the worktree taken from a ready one (``worktree_pool.take``: rename, ``git worktree
  repair``, the check with ``git status``, then ``git checkout -b`` of the files that differ, or
  only the branch made where it stands when the start is the ready worktree's commit);
- ``fresh``: ``git worktree add -b`` (the checkout of every file), the fallback when the pool is
  empty or off;
- ``plain``: a plain ``git worktree add`` run by hand (the user's git, no setting of ours), for
  comparison.

Each also times ``find_repo`` (rev-parse, symbolic-ref, HEAD) and ``snapshot`` (a copy of the
user's index, ``add -A`` through it, ``write-tree``, and ``commit-tree`` when something differs).
Nothing is removed while setup is measured: on some filesystems (ext4 mounted with ``discard``)
freeing 10,000 deleted files is charged to the next file creation, which no attempt pays (a
worktree is removed after its verdict, not before the next one is made). Every worktree is
removed at the end, and that is timed on its own (``remove``). The pool's entries are made before
the timing (``pool_fill``, one entry each: off the path, beside a running worker).

``uv run python -m bench.worktree [--runs N] [--files K]``. Milliseconds, p50 / p99 (nearest
rank: with 10 runs the p99 is the slowest), and the machine's load before and after.
"""

import argparse
import json
import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from dispatcher.core.logs import configure_logging
from dispatcher.dispatch import git_worktree as g
from dispatcher.dispatch import worktree_pool as pool

from .stats import summarize

PLAIN_ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, "GIT_CONFIG_GLOBAL": "/dev/null"}
WAYS = ("pool", "fresh", "plain")


def make_repo(root: Path, files: int) -> Path:
    repo = root / "repo"
    for i in range(files):
        path = repo / f"d{i // 100:03d}" / f"f{i:05d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"value = {i}\n" * 20)
    ident = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=PLAIN_ENV)  # noqa: S607
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=PLAIN_ENV)  # noqa: S607
    subprocess.run(["git", *ident, "-C", str(repo), "commit", "-qm", "start"], check=True, env=PLAIN_ENV)  # noqa: S607
    subprocess.run(["git", "-C", str(repo), "status", "-s"], check=True, env=PLAIN_ENV, capture_output=True)  # noqa: S607
    return repo


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class _Timed:
    """Wraps git_worktree's functions the pool's take calls, to say which of its steps costs what."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.seconds: dict[str, float] = {}
        self._names = names
        self._saved: dict[str, Callable] = {}

    def __enter__(self) -> "_Timed":
        for name in self._names:
            original = self._saved[name] = getattr(g, name)

            def timed(*args, _original=original, _name=name, **kwargs):
                t0 = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.seconds[_name] = self.seconds.get(_name, 0.0) + time.perf_counter() - t0

            setattr(g, name, timed)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self._saved.items():
            setattr(g, name, original)


def one_setup(way: str, repo: Path, runtime: Path, name: str) -> dict[str, float]:
    path = runtime / "worktrees" / "bench" / name
    if way == "plain":
        t0 = time.perf_counter()
        cpu = _children_cpu()
        subprocess.run(  # noqa: S603
            ["git", "-C", str(repo), "worktree", "add", "-q", "-b", f"plain/{name}", str(path), "HEAD"],  # noqa: S607
            check=True,
            env=PLAIN_ENV,
            capture_output=True,
        )
        seconds = time.perf_counter() - t0
        return {"worktree": seconds, "worktree_cpu": _children_cpu() - cpu, "setup": seconds}
    t0 = time.perf_counter()
    found = g.find_repo(repo)
    t1 = time.perf_counter()
    assert found is not None
    start = g.snapshot(found, 1)
    t2, cpu = time.perf_counter(), _children_cpu()
    branch = f"bench/{name}"
    parts: dict[str, float] = {}
    if way == "pool":
        with _Timed(("repair_worktree", "worktree_status", "branch_here", "checkout_branch")) as timed:
            taken = pool.take(runtime, found.common_dir, path, branch, start, new_branch=True)
        if taken is None:
            raise SystemExit(f"the pool had no usable entry for {name}: see the log above")
        parts = {f"take.{step}": seconds for step, seconds in timed.seconds.items()}
    else:
        g.add_worktree(found.common_dir, path, branch, start, new_branch=True)
    t3 = time.perf_counter()
    return {
        "find_repo": t1 - t0,
        "snapshot": t2 - t1,
        "worktree": t3 - t2,
        **parts,
        "worktree_cpu": _children_cpu() - cpu,  # git's user + system CPU for the take or the checkout
        "setup": t3 - t0,
    }


def measure(files: int, runs: int) -> dict:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-worktree-") as tmp:
        repo = make_repo(Path(tmp), files)
        runtime = Path(tmp) / "runtime"
        (runtime / "worktrees" / "bench").mkdir(parents=True)
        results: dict[str, dict] = {}
        fills: list[float] = []
        made: list[Path] = []
        for state in ("clean", "dirty"):
            if state == "dirty":
                (repo / "d000" / "f00000.py").write_text("changed = True\n")
                (repo / "untracked.py").write_text("new = 1\n")
            for size in range(1, runs + 1):  # the pool, made off the clock (as beside a worker)
                t0 = time.perf_counter()
                assert pool.fill(runtime, repo, size) == 1
                fills.append(time.perf_counter() - t0)
            os.sync()  # (the fill's writes are not charged to the first measured setup)
            samples: dict[str, dict[str, list[float]]] = {way: {} for way in WAYS}
            for run in range(runs):
                for way in WAYS:  # interleaved: each way sees the same moments of the machine
                    name = f"{way}-{state}-{run}"
                    for step, seconds in one_setup(way, repo, runtime, name).items():
                        samples[way].setdefault(step, []).append(seconds * 1000)
                    made.append(runtime / "worktrees" / "bench" / name)
            results[state] = {
                way: {step: summarize(values) for step, values in steps.items()} for way, steps in samples.items()
            }
        common = Path(tmp) / "repo" / ".git"
        removals = []
        for path in made:  # only now: removing is measured on its own
            t0 = time.perf_counter()
            g.remove_worktree(common, path, g.expected_git_dir(path))
            removals.append((time.perf_counter() - t0) * 1000)
    return {
        "files": files,
        "runs": runs,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "ms": results,
        "remove_ms": summarize(removals),
        "pool_fill_ms": summarize([s * 1000 for s in fills]),
    }


def table(result: dict) -> str:
    """The figures side by side: p50 / p99 per step, pool vs fresh vs plain, clean and dirty."""

    def cell(state: str, way: str, step: str) -> str:
        got = result["ms"][state][way].get(step)
        return "" if not got or got["median"] is None else f"{got['median']:,.0f} / {got['p99']:,.0f}"

    steps = ("find_repo", "snapshot", "worktree", "take.repair_worktree", "take.worktree_status",
             "take.branch_here", "take.checkout_branch", "worktree_cpu", "setup")  # fmt: skip
    head = "| step (ms, p50 / p99) | " + " | ".join(f"{s} {w}" for s in ("clean", "dirty") for w in WAYS) + " |"
    rows = [head, "|" + "---|" * (1 + 2 * len(WAYS))]
    for step in steps:
        cells = [cell(s, w, step) for s in ("clean", "dirty") for w in WAYS]
        rows.append(f"| {step} | " + " | ".join(cells) + " |")
    fill, remove = result["pool_fill_ms"], result["remove_ms"]
    rows.append(f"\npool_fill (one entry, off the path): {fill['median']:,.0f} / {fill['p99']:,.0f}")
    rows.append(f"remove (after all were made): {remove['median']:,.0f} / {remove['p99']:,.0f}")
    rows.append(
        f"files {result['files']}, runs {result['runs']}, load {result['load_before']} -> {result['load_after']}"
    )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = parser.parse_args()
    configure_logging()  # warnings only, on stderr: stdout is the figures
    result = measure(args.files, args.runs)
    print(json.dumps(result, indent=2) if args.json else table(result))


if __name__ == "__main__":
    main()
