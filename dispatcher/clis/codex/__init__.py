"""OpenAI Codex CLI (`codex exec`), tested with 0.171.0. Everything the bridge knows about it; see dispatcher/clis/base.py."""

from pathlib import Path
from typing import Any

from dispatcher.clis.base import SILENT, Discovery, HookAnswer, Login, Packaged, context_answer

OUTPUT_FILE = "codex-events.jsonl"  # where its launch leaves its output in the attempt directory


class Codex(Packaged):
    name = "codex"
    discovery = Discovery(
        "codex",
        "CODEX_BIN",
        "codex",
        "0.171.0",
        True,
        "edit",
        r"codex-cli (\d+\.\d+\.\d+)",
        display="Codex CLI",
        install="install @openai/codex, or set CODEX_BIN to its path",
    )
    login = Login(
        variables=("CODEX_API_KEY", "OPENAI_API_KEY"),
        status_command=("login", "status"),  # exits 1 when not logged in
        fix="run `codex login` as this user, or set CODEX_API_KEY where the listener runs",
        home_variable="CODEX_HOME",
        home_default=".codex",
        credentials_file="auth.json",
    )
    output_file = OUTPUT_FILE
    statusline = False
    hook_events: tuple[str, ...] = ("UserPromptSubmit", "Stop")
    wait_events: tuple[str, ...] = ()
    reports_cost = False
    launch_variables: tuple[str, ...] = (
        "CODEX_BIN",
        "CODEX_HOME",
        "AGENT_BRIDGE_CODEX_MODEL",
        "AGENT_BRIDGE_CODEX_BASE_URL",
        "AGENT_BRIDGE_CODEX_ENV_KEY",
        "AGENT_BRIDGE_CODEX_MAX_RETRIES",
        "AGENT_BRIDGE_CODEX_OVERRIDES",
    )

    def hook_answer(self, event: str, line: str, block: bool) -> HookAnswer:
        """Stop: the line on stderr with exit 2 (the turn goes on); UserPromptSubmit: additionalContext."""
        if event == "Stop":
            return HookAnswer(stderr=line + "\n", exit_code=2) if block else SILENT
        return context_answer(event, line)

    def diagnostics(self, attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
        from dispatcher.clis.codex import results  # here: only the supervisor reads results
        from dispatcher.clis.results import WORKER_LOG, read

        return results.codex_diagnostics(read(attempt_dir, OUTPUT_FILE), exit_code, read(attempt_dir, WORKER_LOG))


CLI = Codex()
