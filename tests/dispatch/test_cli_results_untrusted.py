"""The CLI output a worker leaves behind is read as untrusted input: payload-free, never stuck, never raising."""

import json
import os

from dispatcher.clis.claude import OUTPUT_FILE as CLAUDE_OUTPUT
from dispatcher.clis.kimi import OUTPUT_FILE as KIMI_OUTPUT
from dispatcher.clis.kimi.results import kimi_diagnostics
from dispatcher.dispatch.cli_results import cli_diagnostics

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
        path.write_text(
            json.dumps({"type": "turn.ended", "reason": reason, "error": {"code": "x.y", "name": SECRET * 9}})
        )
    os.utime(older, (1, 1))
    diag = cli_diagnostics(tmp_path, 1)
    assert (diag["stream_json"], diag["assistant_messages"], diag["unparsed_lines"]) == ("ok", 1, 1)
    assert (diag["turn_reason"], diag["turn_error_code"], diag["turn_error_name"]) == ("failed", "x.y", None)
    assert SECRET not in json.dumps(diag)


# Verbatim wire lines of Kimi Code 2.1.0 (a scripted model on loopback): a call of a tool the
# agent file does not list, Kimi's own refusal of a write through a symlink out of the working
# directory, and a Read that went through. The permission hook's refusals are in the corpus
# (tests/fixtures/cli_results/kimi/captured-permissions-shell.*).
KIMI_REFUSALS = r"""
{"type":"context.append_loop_event","agentId":"main","event":{"type":"tool.call","uuid":"83a4c02c-40de-43b5-aa5a-d5815d9c9ff9","turnId":"0","step":1,"stepUuid":"30bce640-9504-4cdf-ace6-e8d161654744","toolCallId":"toolu_scripted_0001","name":"Read","args":{"path":"/tmp/kexp/r1/ws/a.txt"},"display":{"kind":"file_io","operation":"read","path":"/tmp/kexp/r1/ws/a.txt"}},"time":1796152929546}
{"type":"context.append_loop_event","agentId":"main","event":{"type":"tool.result","parentUuid":"83a4c02c-40de-43b5-aa5a-d5815d9c9ff9","toolCallId":"toolu_scripted_0001","result":{"output":"1\thello","note":"<system>1 line read from file starting from line 1. Total lines in file: 1. Requested range complete. Effective max_chars: 100000. End of file reached.</system>","durationMs":9}},"time":1796152929559}
{"type":"context.append_loop_event","agentId":"main","event":{"type":"tool.call","uuid":"cfe0ce3c-24f2-4151-85d3-c6ca8c8fe58e","turnId":"0","step":6,"stepUuid":"16ad66bd-7fd2-46f3-9327-0b6dff28697d","toolCallId":"toolu_scripted_0006","name":"WebFetch","args":{"url":"http://x"}},"time":1796152929832}
{"type":"context.append_loop_event","agentId":"main","event":{"type":"tool.result","parentUuid":"cfe0ce3c-24f2-4151-85d3-c6ca8c8fe58e","toolCallId":"toolu_scripted_0006","result":{"output":"Tool \"WebFetch\" not found","isError":true,"durationMs":0}},"time":1796152929832}
{"type":"context.append_loop_event","agentId":"main","event":{"type":"tool.call","uuid":"d2e8c20a-01c1-4fc8-8abf-edbf171f684e","turnId":"0","step":1,"stepUuid":"7c4067d6-3af2-476c-8d32-955bcaf74723","toolCallId":"toolu_scripted_0007","name":"Write","args":{"path":"/tmp/kexp/r3/ws/link/x.txt","content":"escaped"},"display":{"kind":"file_io","operation":"write","path":"/tmp/kexp/r3/ws/link/x.txt","content":"escaped"}},"time":1796153263397}
{"type":"context.append_loop_event","agentId":"main","event":{"type":"tool.result","parentUuid":"d2e8c20a-01c1-4fc8-8abf-edbf171f684e","toolCallId":"toolu_scripted_0007","result":{"output":"\"/tmp/kexp/r3/ws/link/x.txt\" resolves to \"/tmp/kexp/r3/outside/x.txt\" through a symbolic link that points outside the working directory. Access is blocked; use the real path directly or add the target directory to the workspace.","isError":true,"durationMs":1}},"time":1796153263404}
"""


def test_kimi_reports_the_tools_it_refused_by_name_only():
    diag = kimi_diagnostics("", KIMI_REFUSALS, 0)
    assert diag["denied_tools"] == ["WebFetch", "Write"]  # not Read, which went through
    assert "kexp" not in json.dumps(diag) and "http://x" not in json.dumps(diag)
    # A result that merely says the words, without isError, is no refusal.
    quiet = KIMI_REFUSALS.replace('"isError":true,', "")
    assert kimi_diagnostics("", quiet, 0)["denied_tools"] == []
