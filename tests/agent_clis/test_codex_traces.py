"""A dispatch and Codex's own work as one trace (docs/traces.md): the real listener with tracing
on, the pinned Codex 0.171.0 against the scripted Responses model, and the in-test OTLP/HTTP
receiver as the one collector. The sender's server, the supervisor and Codex all export there;
Codex's spans must continue the attempt's ``process`` span (the ``TRACEPARENT`` it is given), its
exports must carry none of the listener's OTLP headers, and the task's text must be in nothing
any of them sent. One real run."""

import json
from pathlib import Path

import pytest
from dispatch_harness import end_listeners, start_listener, wait_finished, wait_until
from harness import McpAgent, bridge_env
from models.openai_responses import ResponsesServer
from otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.cli

CANARY = "codex-trace-canary-5e1d-the-task-text-must-never-reach-a-span"
CODEX_SERVICE = "codex_exec"  # the service.name Codex 0.171.0 gives its resource
# Codex's own work in the task's trace: its model turn, the model call and a bridge tool call.
CODEX_WORK = {"run_turn", "codex.sampling", "mcp.tools.call"}
DEADLINE = 120.0


def _ancestors(span: dict, by_id: dict[str, dict]) -> list[str]:
    """The span ids above ``span``, nearest first, as far as the received spans reach."""
    found, parent = [], span["parent_span_id"]
    while parent and parent not in found:
        found.append(parent)
        parent = by_id[parent]["parent_span_id"] if parent in by_id else ""
    return found


def test_codex_s_own_spans_nest_under_the_attempt_and_carry_no_task_text(tmp_path, codex_bin):
    receiver = OtlpReceiver()
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"agents": {"codex": {"cli": "codex", "auto": True}, "kimi": {"cli": "kimi", "auto": False}}})
    )
    (tmp_path / "home" / ".codex").mkdir(parents=True)
    (tmp_path / "home" / ".codex" / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": "sk-not-a-real-key"}))
    with ResponsesServer(tmp_path / "model-requests.jsonl") as model:
        env = {
            **bridge_env(tmp_path, config),
            "HOME": str(tmp_path / "home"),
            "CODEX_HOME": str(tmp_path / "home" / ".codex"),
            "CODEX_BIN": str(codex_bin),
            "AGENT_BRIDGE_CODEX_BASE_URL": model.base_url,
            "AGENT_BRIDGE_CODEX_MODEL": "scripted-model",
            "AGENT_BRIDGE_CODEX_MAX_RETRIES": "0",
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer not-for-workers",
        }
        sender = McpAgent("kimi", env, tmp_path / "kimi.err").wait_ready()
        listener = start_listener(env, agent="codex")
        try:
            task = sender.ok("send_message", recipient="codex", kind="task", text=f"Say hello.\n{CANARY}\n")["id"]
            done = wait_finished(Path(env["AGENT_BRIDGE_DB"]), task, deadline=DEADLINE)
            assert (done["outcome"], done["error_kind"]) == ("succeeded", None), done
            wait_until(
                lambda: (
                    {"process", "settle"} <= {s["attributes"].get("messaging.operation.type") for s in receiver.spans()}
                    and {s["name"] for s in receiver.spans() if s["resource"].get("service.name") == CODEX_SERVICE}
                    >= CODEX_WORK
                ),
                DEADLINE,
                what="the attempt's spans and Codex's at the receiver",
            )
        finally:
            sender.close()
            end_listeners([listener])
            receiver.close()

    spans = receiver.spans()
    by_id = {s["span_id"]: s for s in spans}
    (process,) = [s for s in spans if s["attributes"].get("messaging.operation.type") == "process"]
    (send,) = [s for s in spans if s["name"] == "send codex"]  # the task's, from kimi's server
    assert process["parent_span_id"] == send["span_id"] and process["trace_id"] == send["trace_id"]

    # Codex's spans are in the task's trace, under the attempt: its roots continue the process span,
    # and its model turn and tool calls hang below them.
    codex = [s for s in spans if s["resource"].get("service.name") == CODEX_SERVICE]
    in_trace = [s for s in codex if s["trace_id"] == process["trace_id"]]
    roots = {s["name"] for s in in_trace if s["parent_span_id"] == process["span_id"]}
    assert {"codex.exec", "turn/start"} <= roots, roots
    assert {s["name"] for s in in_trace} >= CODEX_WORK
    # Which of them hang from the process span through exported spans depends on which of Codex's
    # spans had ended when it exported at its exit (a loaded machine moves that line).
    under = [s for s in in_trace if process["span_id"] in _ancestors(s, by_id)]
    assert under
    # The rest hang from spans Codex had not ended at its exit (never exported), none from elsewhere.
    loose = [s for s in in_trace if s not in under]
    assert all(_ancestors(s, by_id)[-1] not in by_id for s in loose), [s["name"] for s in loose]

    # Codex's exports carry none of the listener's OTLP headers.
    from_codex = [r for r in receiver.requests() if CODEX_SERVICE in r["services"]]
    assert from_codex and all(r["path"] == "/v1/traces" for r in from_codex)
    assert not [r for r in from_codex if "authorization" in r["headers"]]

    # Payload-free on both sides: the task's text is in no span, attribute or event that arrived.
    assert CANARY.encode() not in receiver.raw()
    assert all(CANARY not in json.dumps(span, default=str) for span in spans)
