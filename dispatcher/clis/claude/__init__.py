"""Claude Code (`claude -p`), tested with 2.1.332. Everything the bridge knows about it; see dispatcher/clis/base.py."""

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dispatcher.clis.base import SILENT, Channel, Discovery, HookAnswer, Login, Packaged, context_answer

OUTPUT_FILE = "claude-result.json"  # where its launch leaves its output in the attempt directory

# The events whose hook may wait for mail (the waiting Stop hook, dispatcher/wake/hook_wait.py, asks
# ``background_process``: its wake.py),
# and how much longer than the wait the hook's timeout is, so that the hook always ends first.
WAIT_EVENTS = ("Stop", "SessionStart")
WAIT_TIMEOUT_MARGIN_SECONDS = 30


class Claude(Packaged):
    name = "claude"
    discovery = Discovery(
        "claude",
        "CLAUDE_BIN",
        "claude",
        "2.1.332",
        True,
        "edit",
        r"(\d+\.\d+\.\d+) \(Claude Code\)",
        display="Claude Code CLI",
        install="install it, or set CLAUDE_BIN to its path",
    )
    login = Login(
        variables=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK"),
        status_command=("auth", "status"),  # exits 1 when not logged in
        fix="run `claude` as this user and /login, or set ANTHROPIC_API_KEY where the listener runs",
        home_variable="CLAUDE_CONFIG_DIR",
        home_default=".claude",
        credentials_file=".credentials.json",
    )
    output_file = OUTPUT_FILE
    statusline = True
    hook_events: tuple[str, ...] = ("UserPromptSubmit", "PostToolUse", "Stop", "SessionStart")
    wait_events: tuple[str, ...] = WAIT_EVENTS
    reports_cost = True
    # Its channel: shown only in sessions started with
    # `--dangerously-load-development-channels server:agent_bridge` (AGENT_BRIDGE_CLAUDE_CHANNEL=1).
    channel = Channel("claude/channel", "notifications/claude/channel", "claude_channel")
    launch_variables: tuple[str, ...] = ("CLAUDE_BIN", "CLAUDE_CONFIG_DIR")

    def hook_answer(self, event: str, line: str, block: bool) -> HookAnswer:
        """Stop: the line on stderr with exit 2 (the turn goes on); the others: additionalContext."""
        if event == "Stop":
            return HookAnswer(stderr=line + "\n", exit_code=2) if block else SILENT
        return context_answer(event, line)

    def background_process(self, environ: Mapping[str, str]) -> tuple[int, str] | None:
        from dispatcher.clis.claude import wake  # here: only the waiting hook asks

        return wake.background_process(environ)

    def diagnostics(self, attempt_dir: Path, exit_code: int | None) -> dict[str, Any]:
        from dispatcher.clis.claude import results  # here: only the supervisor reads results
        from dispatcher.clis.results import read

        return results.claude_diagnostics(read(attempt_dir, OUTPUT_FILE))


CLI = Claude()
