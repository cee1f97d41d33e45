"""The scripted Anthropic server as Kimi Code 2.1.0 needs it (``KIMI_MODEL_PROVIDER_TYPE=anthropic``).

Kimi takes its prompt only from argv, so the launcher's argv names the request file and the
model first reads it with Kimi's ``Read`` tool; ``KimiModel`` adds that step in front of the
API-neutral script (tests/agent_clis/test_kimi.py, tests/agent_clis/test_kimi_permissions.py).
"""

import re

from . import script
from .anthropic import AnthropicModel, to_turn

_REQUEST_FILE = re.compile(r"from the file (/\S+) with the Read tool")
_LINE_NUMBER = re.compile(r"^\s*\d+\t", re.MULTILINE)
_MODEL_STATUS = re.compile(r"^MODEL_STATUS=(\d{3})\s*$", re.MULTILINE)
_READ_STATUS = re.compile(r"\n?<system>.*?</system>\s*$", re.DOTALL)


class KimiModel(AnthropicModel):
    """The scripted Anthropic server, plus the step Kimi needs first: Read the request file.

    Kimi's prompt names the request file instead of holding the task; the first step reads
    it with ``Read``, and from then on the script sees the file's text (Kimi's line-number
    prefixes and trailing status block removed) as the prompt, and only the later tool
    results. A task with a line ``MODEL_STATUS=<code>`` is answered with that HTTP error
    once the file has been read (a failing model, for the fail-fast case)."""

    @staticmethod
    def read_task(turn: script.Turn) -> tuple[str | None, tuple[str, ...]]:
        """(the request file's text once Read returned it, the tool results after it)."""
        if not turn.tool_results or _REQUEST_FILE.search(turn.prompt) is None:
            return None, turn.tool_results
        return _LINE_NUMBER.sub("", _READ_STATUS.sub("", turn.tool_results[0])), turn.tool_results[1:]

    def step_for(self, body: dict) -> script.Step:
        turn = to_turn(body)
        found = _REQUEST_FILE.search(turn.prompt)
        if found is None or "Read" not in turn.tools:
            return super().step_for(body)
        task, results = self.read_task(turn)
        if task is None:
            return script.ToolCall("Read", {"path": found.group(1)})
        return script.next_step(script.Turn(prompt=task, tools=turn.tools, tool_results=results))

    def extra_usage(self, body: dict) -> int:
        task, _ = self.read_task(to_turn(body))
        return script.extra_usage(task or "")

    def _messages(self, handler, body: dict) -> None:
        task, _ = self.read_task(to_turn(body))
        failing = _MODEL_STATUS.search(task or "")
        if failing:
            self._send_json(
                handler,
                int(failing.group(1)),
                {"type": "error", "error": {"type": "api_error", "message": "scripted model failure"}},
            )
            return
        super()._messages(handler, body)
