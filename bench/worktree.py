"""What a worktree adds to send -> worker start: the supervisor's steps before the gate opens, on a
repository of ``--files`` files (10,000 by default), each timed on its own, and what removing the
worktree costs after the verdict. ``uv run python -m bench.worktree [--runs N] [--files K]``.

Steps, as ``dispatch.isolation.open_worktree`` runs them: ``find_repo`` (rev-parse, symbolic-ref,
HEAD), ``snapshot`` (a copy of the user's index, ``add -A`` through it, ``write-tree``, and
``commit-tree`` when something differs) and ``add_worktree`` (``git worktree add -b``: the
checkout of every file; ``add_worktree_cpu`` is git's own CPU time for it). Run with a clean
checkout and with a dirty one (one file changed, one untracked). Milliseconds; the machine's load
is printed with them.
"""

import argparse
import json
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from dispatcher.dispatch import git_worktree as g

from .stats import summarize


def make_repo(root: Path, files: int) -> Path:
    repo = root / "repo"
    for i in range(files):
        path = repo / f"d{i // 100:03d}" / f"f{i:05d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"value = {i}\n" * 20)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, "GIT_CONFIG_GLOBAL": "/dev/null"}
    ident = ["-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True, env=env)  # noqa: S607
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=env)  # noqa: S607
    subprocess.run(["git", *ident, "-C", str(repo), "commit", "-qm", "start"], check=True, env=env)  # noqa: S607
    subprocess.run(["git", "-C", str(repo), "status", "-s"], check=True, env=env, capture_output=True)  # noqa: S607
    return repo


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_setup(repo: Path, where: Path, run: int) -> dict[str, float]:
    t0 = time.perf_counter()
    found = g.find_repo(repo)
    t1 = time.perf_counter()
    assert found is not None
    start = g.snapshot(found, run)
    t2, cpu = time.perf_counter(), _children_cpu()
    g.add_worktree(found.common_dir, where / str(run), f"bench/{run}", start, new_branch=True)
    t3, add_cpu = time.perf_counter(), _children_cpu() - cpu
    g.remove_worktree(found.common_dir, where / str(run), g.expected_git_dir(where / str(run)))
    t4 = time.perf_counter()
    g.delete_branch(found.common_dir, f"bench/{run}")
    return {
        "find_repo": t1 - t0,
        "snapshot": t2 - t1,
        "add_worktree": t3 - t2,
        "add_worktree_cpu": add_cpu,  # git's user + system CPU for the checkout
        "setup": t3 - t0,
        "remove": t4 - t3,
    }


def measure(files: int, runs: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-worktree-") as tmp:
        repo = make_repo(Path(tmp), files)
        where = Path(tmp) / "worktrees"
        where.mkdir()
        results = {}
        for state in ("clean", "dirty"):
            if state == "dirty":
                (repo / "d000" / "f00000.py").write_text("changed = True\n")
                (repo / "untracked.py").write_text("new = 1\n")
            samples: dict[str, list[float]] = {}
            for run in range(runs):
                for step, seconds in one_setup(repo, where, run).items():
                    samples.setdefault(step, []).append(seconds * 1000)
            results[state] = {step: summarize(values) for step, values in samples.items()}
    return {"files": files, "runs": runs, "load": os.getloadavg(), "ms": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    print(json.dumps(measure(args.files, args.runs), indent=2))


if __name__ == "__main__":
    main()
