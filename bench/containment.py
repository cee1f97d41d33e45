"""What containment costs once a worker is done: CPU per look at the worker's tree, and per
whole ``contain`` call (what a supervisor pays twice per attempt: at the end, and the recheck
after the verdict). ``uv run python -m bench.containment [--runs N] [--extra K]``.

The worker has ended and left nothing (the normal case), so every figure is the price of
proving an absence. Compared:

- before: each look swept every ``/proc/*/environ`` for the token and listed the descendants
  from every ``/proc/*/stat`` (the supervisor's containment until the cgroup change);
- after, normal path: the worker's cgroup (made, emptied and removed each run) and the
  descendants, which cost one ``waitid`` when the supervisor has no child left;
- after, fallback (no cgroup): the descendants alone;
- reconciliation after a supervisor crash: the token sweep alone (unchanged).

``--extra K`` starts K idle processes first, to show how the sweeps grow with the process table.
The figures are CPU seconds of this process (user + system), as the supervisor would pay them.
"""

import argparse
import contextlib
import json
import os
import secrets
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from dispatcher.core.processes import descendants, end_processes, iter_with_environment
from dispatcher.dispatch import cgroups
from dispatcher.dispatch.procs import TOKEN_ENV, WorkerTree, contain


def _old_members(token: str) -> Callable[[], Iterator[int]]:
    """The supervisor's look before: the token sweep plus psutil's descendants (a full scan)."""
    import psutil

    def members() -> Iterator[int]:
        yield from iter_with_environment(TOKEN_ENV, token)
        yield from (p.pid for p in psutil.Process().children(recursive=True))

    return members


def _cpu_ms(run: Callable[[], object], runs: int) -> dict:
    samples = []
    for _ in range(runs):
        started = time.process_time()
        run()
        samples.append((time.process_time() - started) * 1000)
    return {"median_ms": round(statistics.median(samples), 3), "p90_ms": round(sorted(samples)[int(runs * 0.9)], 3)}


def measure(runs: int) -> dict:
    token = secrets.token_hex(16)
    old = _old_members(token)
    new_tree = WorkerTree(token, None, below_us=True)
    sweep_tree = WorkerTree(token, None, below_us=False)

    def with_cgroup() -> None:
        cgroup, why = cgroups.make(token)
        assert cgroup is not None, why
        contain(WorkerTree(token, cgroup, below_us=True), 0)

    figures = {
        "processes": sum(1 for e in Path("/proc").iterdir() if e.name.isdigit()),
        "look_before": _cpu_ms(lambda: list(old()), runs),
        "look_after": _cpu_ms(descendants, runs),
        "contain_before": _cpu_ms(lambda: end_processes(old, 0), runs),
        "contain_after_fallback": _cpu_ms(lambda: contain(new_tree, 0), runs),
        "contain_reconciliation": _cpu_ms(lambda: contain(sweep_tree, 0), runs),
    }
    if cgroups.delegated_directory()[0] is not None:
        figures["contain_after_cgroup"] = _cpu_ms(with_cgroup, runs)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--extra", type=int, default=0, help="idle processes to start first")
    args = parser.parse_args()
    # Orphans of a shell that exits at once (not our children: containment must not end them).
    started = subprocess.run(
        [
            "sh",
            "-c",
            'i=0; while [ "$i" -lt "$0" ]; do sleep 600 >/dev/null 2>&1 & echo $!; i=$((i+1)); done',
            str(args.extra),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    extra = [int(pid) for pid in started.stdout.split()]
    try:
        print(json.dumps({"load": os.getloadavg()[0], "extra": args.extra, **measure(args.runs)}, indent=1))
    finally:
        for pid in extra:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


if __name__ == "__main__":
    main()
