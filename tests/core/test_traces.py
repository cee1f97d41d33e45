"""The rules of traces (dispatcher.core.trace_rules) and the runtime off or without the extra (traces), one case each: when tracing is on, what a stored
traceparent may be, what an attribute may hold, what the worker's environment keeps. In process."""

import sys

import pytest
import structlog.testing

from dispatcher.core import trace_rules as rules
from dispatcher.core import traces
from dispatcher.core.trace_rules import TraceParent

GOOD = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_RESOURCE_ATTRIBUTES": "a=b"}, False),  # no endpoint: off
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h", "OTEL_SDK_DISABLED": "TRUE"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h", "OTEL_SDK_DISABLED": "false"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h", "OTEL_TRACES_EXPORTER": "console"}, False),  # stdout: never
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h", "OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, False),  # the exporter named, but nowhere to send
    ],
)
def test_tracing_is_on_only_with_an_otlp_endpoint(environ, on):
    assert rules.wanted(environ) is on


@pytest.mark.parametrize(
    ("environ", "endpoint"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, "http://h:4318/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": " http://h:4318/ "}, "http://h:4318/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h/base"}, "http://h/base/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/spans"}, "http://t/spans"),  # as it is
        (
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/spans", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h"},
            "http://t/spans",
        ),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": " ", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h"}, "http://h/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h", "OTEL_SDK_DISABLED": "true"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h", "OTEL_TRACES_EXPORTER": "none"}, None),
    ],
)
def test_the_traces_endpoint_is_the_sdk_s_full_url_and_none_when_off(environ, endpoint):
    assert rules.traces_endpoint(environ) == endpoint


@pytest.mark.parametrize(("flags", "kept"), [("00", "00"), ("01", "01"), ("03", "01"), ("02", "00"), ("ff", "01")])
def test_a_worker_s_traceparent_keeps_only_the_sampled_flag(flags, kept):
    """Level 2's random flag (02, set by the Python SDK) makes OpenTelemetry Rust (Codex) refuse it."""
    parent = rules.parse_traceparent(GOOD[:-2] + flags)
    assert rules.environment_traceparent(parent) == GOOD[:-2] + kept


def test_a_well_formed_traceparent_parses_and_formats_back():
    parsed = rules.parse_traceparent(GOOD)
    assert parsed == TraceParent(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, 1)
    assert rules.format_traceparent(parsed) == GOOD


@pytest.mark.parametrize(
    "forged",
    [
        None,
        "",
        42,
        b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero span id
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # version ff is invalid
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # a version we never write
        "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",  # upper case
        GOOD + "-extra",
        GOOD + "\n",
        " " + GOOD,
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",  # a digit short
        "00-zzf7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "x" * 100_000,
        "00-" + "1" * 32 + "-" + "2" * 16 + "-01; DROP TABLE messages",
    ],
)
def test_a_malformed_or_forged_stored_traceparent_is_refused_never_raised(forged):
    assert rules.parse_traceparent(forged) is None


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (3, 3),
        (0.5, 0.5),
        (True, True),
        ("succeeded", "succeeded"),
        ("spawn:FileNotFoundError", "spawn:FileNotFoundError"),
        ("claude-12-ab12", "claude-12-ab12"),
        ("two words", None),
        ("a\nb", None),
        ("", None),
        ("x" * 129, None),
        (None, None),
        (["a"], None),
        ({"text": "a"}, None),
    ],
)
def test_an_attribute_holds_only_a_number_a_flag_or_one_id_like_token(value, kept):
    assert rules.attribute_value(value) == kept


def test_messaging_attributes_follow_the_conventions_and_drop_free_text():
    found = rules.messaging_attributes("process", "claude", 7, outcome="succeeded", note="free text here")
    assert found == {
        "messaging.system": "agent_bridge",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "claude",
        "messaging.message.id": "7",
        "agent_bridge.outcome": "succeeded",
    }


def test_a_receive_has_no_message_id_and_an_unknown_operation_is_a_bug():
    assert "messaging.message.id" not in rules.messaging_attributes("receive", "kimi")
    with pytest.raises(ValueError, match="unknown messaging operation"):
        rules.messaging_attributes("publish", "kimi")


@pytest.mark.parametrize(
    ("operation", "agent", "name"),
    [("send", "claude", "send claude"), ("settle", None, "settle"), ("send", "not an id", "send")],
)
def test_a_span_is_named_operation_and_destination(operation, agent, name):
    assert rules.span_name(operation, agent) == name


def test_the_worker_never_inherits_a_trace_context_or_otlp_headers():
    inherited = {
        "PATH": "/bin",
        "TRACEPARENT": GOOD,
        "TRACESTATE": "vendor=stale",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer secret",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-api-key=secret",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
    }
    assert rules.worker_environment(inherited, {}) == {
        "PATH": "/bin",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
    }
    assert rules.worker_environment(inherited, {"TRACEPARENT": "00-new"})["TRACEPARENT"] == "00-new"


def test_with_tracing_off_every_entry_point_does_nothing(monkeypatch):
    for name in (*rules.ENDPOINT_VARIABLES, "TRACEPARENT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(traces, "_checked_pid", None)
    with traces.span("send", "claude", parent=GOOD) as span:
        assert span is None
        assert traces.current_traceparent() is None
        assert traces.current_context_variables() == {}
    with traces.child_span("settle", None, 1) as child:
        assert child is None
    traces.annotate(None, outcome="succeeded")
    traces.annotate_current(outcome="succeeded")
    traces.flush()


def test_wanted_without_the_extra_is_off_with_one_warning_and_nothing_fails(monkeypatch):
    """An endpoint set where the [otel] extra is not installed: no span, no failure, one log line
    that says what to do."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    monkeypatch.setattr(traces, "_checked_pid", None)
    with structlog.testing.capture_logs() as logged:
        with traces.span("send", "claude") as span:
            assert span is None
            assert traces.current_traceparent() is None
        with traces.span("send", "claude") as again:  # decided once per process: no second warning
            assert again is None
    assert [e["event"] for e in logged] == ["traces_unavailable"], logged
    assert "otel extra" in logged[0]["fix"]
    monkeypatch.setattr(traces, "_checked_pid", None)


def test_the_worker_s_bridge_server_continues_the_trace_without_the_otlp_headers():
    from dispatcher.dispatch.worker_mcp import bridge_server

    env = {
        "AGENT_ID": "claude",
        "AGENT_BRIDGE_DB": "/s/bridge.db",
        "AGENT_BRIDGE_CONFIG": "/c.json",
        "AGENT_BRIDGE_PYTHON": "/py",
        "AGENT_BRIDGE_PROJECT": "/p",
        "TRACEPARENT": GOOD,
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer secret",
    }
    server_env = bridge_server(env)["env"]
    assert server_env["TRACEPARENT"] == GOOD
    assert server_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:4318"
    assert "OTEL_EXPORTER_OTLP_HEADERS" not in server_env
