"""dispatcher/clis/opencode/results.py on hostile event streams: the worker wrote them, so nothing
in them may raise, pass a payload into the ledger, or be followed through a link."""

import json

from dispatcher.clis.opencode import CLI, OUTPUT_FILE
from dispatcher.clis.opencode.results import diagnostics
from dispatcher.dispatch.attempts import clean_diagnostics

SECRET = "task text: the launch codes"


def _line(kind: str, **fields) -> str:
    return json.dumps({"type": kind, "sessionID": "s", **fields})


def test_absurd_nesting_huge_numbers_and_wrong_types_never_raise():
    text = "\n".join(
        [
            "[" * 100_000,
            _line("step_finish", part={"tokens": {"input": 10**400, "output": "9", "cache": []}, "cost": 1e308 * 10}),
            _line("step_finish", part=["not", "a", "dict"]),
            _line("tool_use", part={"tool": {"x": 1}, "state": "error"}),
            _line("error", error="just a string"),
            '{"type": "step_finish", "part": {"tokens": {"input": 12}, "cost": NaN}}',
        ]
    )
    diag = diagnostics(text, 0)
    assert diag["steps"] == 3 and diag["error_events"] == 1 and diag["unparsed_lines"] == 1
    assert diag["input_tokens"] == 12  # only the one plain count; 10**400 is not a token count we keep
    assert diag["cost_usd"] is None  # neither an infinite cost nor NaN
    assert clean_diagnostics(diag) == diag


def test_a_denial_keeps_only_the_tool_name_never_its_input_or_the_rule_text():
    error = f"The user has specified a rule which prevents you from using this specific tool call. [{SECRET}]"
    text = "\n".join(
        [
            _line(
                "tool_use", part={"tool": "write", "state": {"status": "error", "input": {"c": SECRET}, "error": error}}
            ),
            _line("tool_use", part={"tool": SECRET, "state": {"status": "error", "error": error}}),  # not a tool name
            _line("text", part={"text": SECRET}),
        ]
    )
    diag = diagnostics(text, 0)
    assert diag["denied_tools"] == ["write"]
    assert SECRET not in json.dumps(diag)


def test_a_linked_events_file_is_not_read(tmp_path):
    target = tmp_path / "elsewhere.jsonl"
    target.write_text(_line("error", error={"name": "ProviderAuthError", "data": {}}) + "\n")
    attempt = tmp_path / "attempt"
    attempt.mkdir(mode=0o700)
    (attempt / OUTPUT_FILE).symlink_to(target)
    diag = CLI.diagnostics(attempt, 1)
    assert (diag["events_json"], diag["cli_status"]) == ("missing", "no_result")
