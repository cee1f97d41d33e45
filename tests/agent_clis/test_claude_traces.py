"""A dispatch and Claude Code's own work as one trace (docs/traces.md): the real listener with
tracing on, the pinned Claude Code 2.1.332 against the scripted Anthropic model, and the in-test
OTLP/HTTP receiver as the one collector. Claude's spans, and its bridge server's, (its tracing beta, turned on by its launch
plan) must continue the attempt's ``process`` span, under its plan's
CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1; its exports must carry none of the listener's OTLP
headers, and the task's text must be in nothing any process sent, though the listener's
environment asks for prompts in the export (``OTEL_LOG_USER_PROMPTS=1``, which the plan unsets).
One real run."""

import json
import os
from pathlib import Path

import pytest
from cli_harness import claude_worker_env, without_cli_settings
from dispatch_harness import end_listeners, start_listener, wait_finished, wait_until
from harness import McpAgent, bridge_env
from models.anthropic import AnthropicModel
from otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.cli

CANARY = "claude-trace-canary-90c2-the-task-text-must-never-reach-a-span"
CLAUDE_SERVICE = "claude-code"  # the service.name Claude Code 2.1.332 gives its resource
DEADLINE = 150.0


def test_claude_s_own_spans_nest_under_the_attempt_and_carry_no_task_text(tmp_path, claude_bin):
    receiver = OtlpReceiver()
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"agents": {"claude": {"cli": "claude", "auto": True}, "kimi": {"cli": "kimi", "auto": False}}})
    )
    with AnthropicModel(tmp_path / "model-requests.jsonl") as model:
        env = {
            **claude_worker_env(bridge_env(tmp_path, config), tmp_path, model.base_url, claude_bin),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer not-for-workers",
            "OTEL_LOG_USER_PROMPTS": "1",
            "OTEL_LOG_TOOL_DETAILS": "1",
        }
        sender = McpAgent("kimi", env, tmp_path / "kimi.err").wait_ready()
        listener = start_listener(env, agent="claude", inherited=without_cli_settings(dict(os.environ)))
        try:
            task = sender.ok("send_message", recipient="claude", kind="task", text=f"Say hello.\n{CANARY}\n")["id"]
            done = wait_finished(Path(env["AGENT_BRIDGE_DB"]), task, deadline=DEADLINE)
            assert (done["outcome"], done["error_kind"]) == ("succeeded", None), done
            # The worker's bridge server exports its spans when it ends, after the attempt's own.
            wait_until(
                lambda: (
                    {"process", "settle"} <= {s["attributes"].get("messaging.operation.type") for s in receiver.spans()}
                    and {"receive claude", "send kimi"} <= {s["name"] for s in receiver.spans()}
                    and any(s["resource"].get("service.name") == CLAUDE_SERVICE for s in receiver.spans())
                ),
                DEADLINE,
                what="the attempt's spans, its worker server's and Claude's at the receiver",
            )
        finally:
            sender.close()
            end_listeners([listener])
            receiver.close()

    spans = receiver.spans()
    (process,) = [s for s in spans if s["attributes"].get("messaging.operation.type") == "process"]
    claude = [s for s in spans if s["resource"].get("service.name") == CLAUDE_SERVICE]
    assert all(s["trace_id"] == process["trace_id"] for s in claude), sorted({s["name"] for s in claude})
    (interaction,) = [s for s in claude if s["parent_span_id"] == process["span_id"]]
    assert interaction["name"] == "claude_code.interaction"
    below = {s["name"] for s in claude if s["parent_span_id"] == interaction["span_id"]}
    assert {"claude_code.llm_request", "claude_code.tool"} <= below, below
    # The worker's bridge server (its MCP server) continues the attempt too: its receive, and the
    # worker's result going back to kimi.
    server = {s["name"] for s in spans if s["parent_span_id"] == process["span_id"] and s not in claude}
    assert {"receive claude", "send kimi", "settle"} <= server, server

    from_claude = [r for r in receiver.requests() if CLAUDE_SERVICE in r["services"]]
    assert from_claude and all(r["path"] == "/v1/traces" for r in from_claude)
    assert not [r for r in from_claude if "authorization" in r["headers"]]

    assert CANARY.encode() not in receiver.raw()
    assert all(CANARY not in json.dumps(span, default=str) for span in spans)
