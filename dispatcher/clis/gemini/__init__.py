"""Gemini CLI (`gemini -p`), tested with 0.61.0. Everything the bridge knows about it; see dispatcher/clis/base.py."""

import json
from pathlib import Path
from typing import Any

from dispatcher.clis.base import SILENT, Discovery, HookAnswer, Login, Packaged, context_answer

OUTPUT_FILE = "gemini-result.json"  # where its launch leaves its output in the attempt directory


class Gemini(Packaged):
    name = "gemini"
    discovery = Discovery(
        "gemini",
        "GEMINI_BIN",
        "gemini",
        "0.61.0",
        True,
        "read",
        r"(\d+\.\d+\.\d+)",
        display="Gemini CLI",
        install="install @google/gemini-cli, or set GEMINI_BIN to its path",
    )
    login = Login(
        variables=("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA"),
        status_command=(),
        fix="run `gemini` as this user and choose a login, or set GEMINI_API_KEY where the listener runs",
        home_variable="",
        home_default=".gemini",
        credentials_file="oauth_creds.json",
    )
    output_file = OUTPUT_FILE
    statusline = False
    hook_events: tuple[str, ...] = ("BeforeAgent", "AfterAgent")
    wait_events: tuple[str, ...] = ()
    reports_cost = False
    launch_variables: tuple[str, ...] = ("GEMINI_BIN", "GEMINI_CLI_HOME")

    def hook_answer(self, event: str, line: str, block: bool) -> HookAnswer:
        """AfterAgent: ``decision: block`` with the line as the reason (the next prompt); BeforeAgent:
        additionalContext."""
        if event == "AfterAgent":
            return HookAnswer(stdout=json.dumps({"decision": "block", "reason": line}) + "\n") if block else SILENT
        return context_answer(event, line)

    def rule_event(self, event: str) -> str:
        return {"BeforeAgent": "UserPromptSubmit", "AfterAgent": "Stop"}.get(event, event)  # the same moments

    def diagnostics(self, attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
        from dispatcher.clis.gemini import results  # here: only the supervisor reads results
        from dispatcher.clis.results import WORKER_LOG, read

        # On an error Gemini leaves stdout empty and prints its error object on stderr (worker.log).
        text = read(attempt_dir, OUTPUT_FILE)
        if not (text or "").strip():
            text = read(attempt_dir, WORKER_LOG)
        return results.gemini_diagnostics(text, exit_code)


CLI = Gemini()
