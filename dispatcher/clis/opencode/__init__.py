"""opencode (`opencode run`), tested with 1.18.33. Everything the bridge knows about it; see dispatcher/clis/base.py."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dispatcher.clis.base import SILENT, Discovery, HookAnswer, Login, Packaged

OUTPUT_FILE = "opencode-events.jsonl"  # where its launch leaves its output in the attempt directory


class Opencode(Packaged):
    name = "opencode"
    # Level read, as for Gemini and Kimi: no OS sandbox backs its rules (edit is the user's choice;
    # shell is refused, see profile.py).
    discovery = Discovery(
        "opencode",
        "OPENCODE_BIN",
        "opencode",
        "1.18.33",
        True,
        "read",
        r"(\d+\.\d+\.\d+)",
        display="opencode",
        install="install opencode-ai, or set OPENCODE_BIN to its path",
    )
    login = Login(
        variables=(),  # a provider's key is named in its own config ({env:NAME}): credential_variables
        status_command=(),
        fix="run `opencode auth login` as this user, or give the worker a provider of its own "
        "(AGENT_BRIDGE_OPENCODE_BASE_URL, see docs/opencode.md)",
        home_variable="XDG_DATA_HOME",
        home_default=".local/share",
        credentials_file="opencode/auth.json",
    )
    output_file = OUTPUT_FILE
    statusline = False
    hook_events: tuple[str, ...] = ()  # its hooks are JavaScript plugins: none written
    wait_events: tuple[str, ...] = ()
    reports_cost = True  # when its model configuration has a price (else 0, read as unknown)
    launch_variables: tuple[str, ...] = (
        "OPENCODE_BIN",
        "AGENT_BRIDGE_OPENCODE_MODEL",
        "AGENT_BRIDGE_OPENCODE_BASE_URL",
        "AGENT_BRIDGE_OPENCODE_ENV_KEY",
        "AGENT_BRIDGE_OPENCODE_PRICE",
    )

    def hook_answer(self, event: str, line: str, block: bool) -> HookAnswer:
        return SILENT  # no hook of ours runs in opencode

    def credential_variables(self, environ: Mapping[str, str]) -> tuple[str, ...]:
        from dispatcher.clis.opencode import login  # here: only doctor asks

        return (*self.login.variables, *login.named_variables(environ))

    def diagnostics(self, attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
        from dispatcher.clis.opencode import results  # here: only the supervisor reads results
        from dispatcher.clis.results import read

        return results.diagnostics(read(attempt_dir, OUTPUT_FILE), exit_code)


CLI = Opencode()
