"""The CLI output a worker leaves behind is read as untrusted input: payload-free, never stuck, never raising."""

import json
import os

from dispatcher.dispatch.cli_results import CLAUDE_OUTPUT, KIMI_OUTPUT, cli_diagnostics

SECRET = "MODEL-TEXT-SECRET"


def claude_result(**fields) -> str:
    return json.dumps({"type": "result", "is_error": False, "num_turns": 2, "result": SECRET, **fields})


def test_no_known_output_means_no_cli_diagnostics(tmp_path):
    assert cli_diagnostics(tmp_path, 0) is None


def test_claude_result_among_other_lines(tmp_path):
    (tmp_path / CLAUDE_OUTPUT).write_text("noise\n" + claude_result(subtype="success") + "\n")
    diag = cli_diagnostics(tmp_path, 0)
    assert (diag["result_json"], diag["is_error"], diag["num_turns"], diag["subtype"]) == ("ok", False, 2, "success")
    assert SECRET not in json.dumps(diag)


def test_empty_output_is_missing(tmp_path):
    (tmp_path / CLAUDE_OUTPUT).write_text("")
    assert cli_diagnostics(tmp_path, -9)["result_json"] == "missing"


def test_hostile_output_is_invalid_not_an_exception(tmp_path):
    (tmp_path / CLAUDE_OUTPUT).write_text("[" * 100_000 + "\n" + '{"type": "result", "num_turns": ' + "9" * 5000 + "}")
    assert cli_diagnostics(tmp_path, 1)["result_json"] == "invalid"


def test_a_linked_output_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text(claude_result())
    (tmp_path / CLAUDE_OUTPUT).symlink_to(target)
    assert cli_diagnostics(tmp_path, 0)["result_json"] == "missing"


def test_a_fifo_output_does_not_block(tmp_path):
    os.mkfifo(tmp_path / KIMI_OUTPUT)
    diag = cli_diagnostics(tmp_path, 3)
    assert (diag["stream_json"], diag["exit_code"]) == ("missing", 3)


def test_kimi_takes_the_last_turn_of_the_newest_wire(tmp_path):
    (tmp_path / KIMI_OUTPUT).write_text(json.dumps({"role": "assistant", "content": SECRET}) + "\nnot json\n")
    older = tmp_path / "kimi-code-home/sessions/a/s1/agents/main/wire.jsonl"
    newer = tmp_path / "kimi-code-home/sessions/b/s2/agents/main/wire.jsonl"
    for path, reason in ((older, "old"), (newer, "failed")):
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"type": "turn.ended", "reason": reason, "error": {"code": "x.y", "name": SECRET * 9}}))
    os.utime(older, (1, 1))
    diag = cli_diagnostics(tmp_path, 1)
    assert (diag["stream_json"], diag["assistant_messages"], diag["unparsed_lines"]) == ("ok", 1, 1)
    assert (diag["turn_reason"], diag["turn_error_code"], diag["turn_error_name"]) == ("failed", "x.y", None)
    assert SECRET not in json.dumps(diag)
