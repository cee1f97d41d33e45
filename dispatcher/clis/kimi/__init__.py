"""Kimi Code (`kimi --print`), tested with 2.1.0. Everything the bridge knows about it; see dispatcher/clis/base.py."""

import contextlib
import json
from pathlib import Path
from typing import Any

from dispatcher.clis.base import Discovery, HookAnswer, Login, Packaged

OUTPUT_FILE = "kimi-stream.jsonl"  # where its launch leaves its output in the attempt directory

KIMI_HOME = "kimi-code-home"  # the worker's private Kimi home in the attempt directory


def last_wire(attempt_dir: Path) -> str | None:
    """The newest ``sessions/*/*/agents/main/wire.jsonl`` under the Kimi home, walked without links."""
    from dispatcher.clis.results import read, subdirs

    wires = []
    for a in subdirs(attempt_dir, f"{KIMI_HOME}/sessions"):
        for b in subdirs(attempt_dir, f"{KIMI_HOME}/sessions/{a}"):
            wire = f"{KIMI_HOME}/sessions/{a}/{b}/agents/main/wire.jsonl"
            with contextlib.suppress(OSError):
                wires.append(((attempt_dir / wire).lstat().st_mtime, wire))
    return read(attempt_dir, max(wires)[1]) if wires else None


class Kimi(Packaged):
    name = "kimi"
    discovery = Discovery(
        "kimi",
        "KIMI_BIN",
        "kimi",
        "2.1.0",
        False,
        "read",
        r"(?:kimi,? (?:version )?)?(\d+\.\d+\.\d+)",
        "Kimi Code needs Node >= 22.19: set KIMI_NODE to such a node binary",
        display="Kimi Code CLI",
        install="install @moonshot-ai/kimi-code, or set KIMI_BIN to its path",
        runner_env="KIMI_NODE",
    )
    login = Login(
        variables=(),
        status_command=(),
        fix="run `kimi` as this user and /login (it writes ~/.kimi-code/credentials and config.toml)",
        home_variable="KIMI_CODE_HOME",
        home_default=".kimi-code",
        credentials_file="credentials",
    )
    output_file = OUTPUT_FILE
    statusline = False
    hook_events: tuple[str, ...] = ("UserPromptSubmit",)
    wait_events: tuple[str, ...] = ()
    reports_cost = False
    launch_variables: tuple[str, ...] = ("KIMI_BIN", "KIMI_NODE", "KIMI_LOOP_MAX_STEPS_PER_TURN", "KIMI_CODE_HOME")

    def hook_answer(self, event: str, line: str, block: bool) -> HookAnswer:
        """UserPromptSubmit: ``{"message": line}`` (Kimi puts it before the prompt)."""
        return HookAnswer(stdout=json.dumps({"message": line}) + "\n")

    def diagnostics(self, attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
        from dispatcher.clis.kimi import results  # here: only the supervisor reads results
        from dispatcher.clis.results import WORKER_LOG, read

        return results.kimi_diagnostics(
            read(attempt_dir, OUTPUT_FILE), last_wire(attempt_dir), exit_code, read(attempt_dir, WORKER_LOG)
        )


CLI = Kimi()
