"""Gemini CLI (`gemini -p`), tested with 0.61.0. Everything the bridge knows about it; see dispatcher/clis/base.py."""

from pathlib import Path
from typing import Any

from dispatcher.clis.base import Discovery, Login, Packaged

OUTPUT_FILE = "gemini-result.json"  # where its launch leaves its output in the attempt directory


class Gemini(Packaged):
    name = "gemini"
    discovery = Discovery("gemini", "GEMINI_BIN", "gemini", "0.61.0", True, "read", r"(\d+\.\d+\.\d+)")
    login = Login(
        variables=("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA"),
        status_command=(),
        fix="run `gemini` as this user and choose a login, or set GEMINI_API_KEY where the listener runs",
        home_variable="",
        home_default=".gemini",
        credentials_file="oauth_creds.json",
    )
    output_file = OUTPUT_FILE
    launcher = "gemini_headless.sh"
    statusline = False

    def diagnostics(self, attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
        from dispatcher.clis.gemini import results  # here: only the supervisor reads results
        from dispatcher.clis.results import WORKER_LOG, read

        # On an error Gemini leaves stdout empty and prints its error object on stderr (worker.log).
        text = read(attempt_dir, OUTPUT_FILE)
        if not (text or "").strip():
            text = read(attempt_dir, WORKER_LOG)
        return results.gemini_diagnostics(text, exit_code)


CLI = Gemini()
