"""OpenAI Codex CLI (`codex exec`), tested with 0.171.0. Everything the bridge knows about it; see dispatcher/clis/base.py."""

from pathlib import Path
from typing import Any

from dispatcher.clis.base import Discovery, Login, Packaged

OUTPUT_FILE = "codex-events.jsonl"  # where its launch leaves its output in the attempt directory


class Codex(Packaged):
    name = "codex"
    discovery = Discovery("codex", "CODEX_BIN", "codex", "0.171.0", True, "edit", r"codex-cli (\d+\.\d+\.\d+)")
    login = Login(
        variables=("CODEX_API_KEY", "OPENAI_API_KEY"),
        status_command=("login", "status"),  # exits 1 when not logged in
        fix="run `codex login` as this user, or set CODEX_API_KEY where the listener runs",
        home_variable="CODEX_HOME",
        home_default=".codex",
        credentials_file="auth.json",
    )
    output_file = OUTPUT_FILE
    launcher = "codex_headless.sh"
    statusline = False

    def diagnostics(self, attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
        from dispatcher.clis.codex import results  # here: only the supervisor reads results
        from dispatcher.clis.results import WORKER_LOG, read

        return results.codex_diagnostics(read(attempt_dir, OUTPUT_FILE), exit_code, read(attempt_dir, WORKER_LOG))


CLI = Codex()
