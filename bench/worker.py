"""One client process of the throughput benchmark (``python -m bench.worker JOB_JSON``).

It spawns its own server, says READY, waits for GO on stdin, sends as fast as it can
for the job's seconds (or max_sends calls), then prints ``RESULT {json}``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anyio

from .session import open_session
from .targets import Store, target_from_spec


async def run(job: dict) -> dict:
    target = target_from_spec(job["target"])
    s = job["store"]
    db = s["db"] if s["db"].startswith("postgresql://") else Path(s["db"])
    store = Store(dir=Path(s["dir"]), db=db, config=Path(s["config"]) if s["config"] else None)
    agent, recipient = job["agent"], job["recipient"]
    async with open_session(target, store, agent) as session:
        print("READY", flush=True)
        go = await anyio.to_thread.run_sync(sys.stdin.readline)
        if go.strip() != "GO":
            return {
                "agent": agent,
                "ok": 0,
                "errors": 0,
                "ids": [],
                "latencies": [],
                "error_samples": [],
                "start": time.monotonic(),
                "end": time.monotonic(),
            }
        ok, errors, ids, lat, samples = 0, 0, [], [], []
        start = time.monotonic()
        deadline = start + job["seconds"]
        for n in range(job["max_sends"]):
            if time.monotonic() >= deadline:
                break
            t0 = time.perf_counter()
            out = await session.send(recipient, f"throughput {agent} #{n}")
            lat.append(round(time.perf_counter() - t0, 7))
            if out.ok:
                ok += 1
                if out.value is not None:
                    ids.append(out.value)
            else:
                errors += 1
                if len(samples) < 3:
                    samples.append(out.error)
        end = time.monotonic()
    return {
        "agent": agent,
        "ok": ok,
        "errors": errors,
        "ids": ids,
        "latencies": lat,
        "error_samples": samples,
        "start": start,
        "end": end,
    }


def main() -> None:
    job = json.loads(sys.argv[1])
    try:
        result = anyio.run(run, job)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which counts it as an error
        print(
            "FAILED " + json.dumps({"agent": job.get("agent"), "error": f"{type(exc).__name__}: {exc}"[:400]}),
            flush=True,
        )
        sys.exit(1)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
