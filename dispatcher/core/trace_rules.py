"""The rules of traces (docs/traces.md), pure: when a process traces, what a stored traceparent
may be, what a span's attributes and name are, and what the worker's environment keeps.
``dispatcher.core.traces`` is the runtime that applies them."""

import re
from collections.abc import Mapping
from typing import NamedTuple

# Tracing is on when one of these is set (non-empty): where the spans go, over OTLP/HTTP.
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
# ... and neither of these turns it off (the SDK's own switches).
SDK_DISABLED = "OTEL_SDK_DISABLED"
TRACES_EXPORTER = "OTEL_TRACES_EXPORTER"

SYSTEM = "agent_bridge"  # messaging.system
# messaging.operation.type -> the span's kind (the conventions' pairing).
OPERATIONS = {"send": "PRODUCER", "receive": "CLIENT", "process": "CONSUMER", "settle": "CLIENT"}

# The worker's environment: the trace context it is given (never an inherited one), and what it
# never inherits from the listener's: OTLP headers, which carry a collector's credentials.
CONTEXT_VARIABLES = ("TRACEPARENT", "TRACESTATE")
_SECRET_VARIABLE = re.compile(r"OTEL_EXPORTER_OTLP_(?:[A-Z]+_)?HEADERS")

SAMPLED = 0x01  # the one trace flag of W3C trace context level 1
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_TOKEN = re.compile(r"[A-Za-z0-9_.:@/-]{1,128}")


class TraceParent(NamedTuple):
    trace_id: int
    span_id: int
    flags: int


def wanted(environ: Mapping[str, str]) -> bool:
    """Whether this process traces: an OTLP endpoint is set, the SDK is not disabled and the traces
    exporter is OTLP (the default; ``none`` or another exporter: off)."""
    if environ.get(SDK_DISABLED, "").strip().lower() == "true":
        return False
    if environ.get(TRACES_EXPORTER, "otlp").strip().lower() not in ("otlp", ""):
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def traces_endpoint(environ: Mapping[str, str]) -> str | None:
    """Where this environment's spans go, as the full OTLP/HTTP URL (for an agent CLI whose own
    config wants one): the traces endpoint as it is, else the generic one with ``/v1/traces``
    appended as the SDK does; None when tracing is off (``wanted``)."""
    if not wanted(environ):
        return None
    if traces := environ.get(ENDPOINT_VARIABLES[0], "").strip():
        return traces
    generic = environ[ENDPOINT_VARIABLES[1]].strip()
    return generic + ("v1/traces" if generic.endswith("/") else "/v1/traces")


def parse_traceparent(value: object) -> TraceParent | None:
    """A W3C ``traceparent`` (version 00) as its parts; None for anything else: a stored value is
    untrusted (on PostgreSQL an agent's role writes its own messages), so a malformed one, an
    all-zero id or a value of another type starts a new trace instead of failing."""
    if not isinstance(value, str) or (found := _TRACEPARENT.fullmatch(value)) is None:
        return None
    trace_id, span_id, flags = (int(part, 16) for part in found.groups())
    if trace_id == 0 or span_id == 0:
        return None
    return TraceParent(trace_id, span_id, flags)


def format_traceparent(parent: TraceParent) -> str:
    return f"00-{parent.trace_id:032x}-{parent.span_id:016x}-{parent.flags & 0xFF:02x}"


def environment_traceparent(parent: TraceParent) -> str:
    """The ``TRACEPARENT`` a worker is given: ``parent`` with only the sampled flag (01) of W3C
    trace context level 1 kept. The Python SDK also sets level 2's random-id flag (02), and a
    version-00 value with flags above 02 is refused by OpenTelemetry Rust 0.31's propagator:
    Codex 0.171.0 then starts a trace of its own (seen in a run, docs/traces.md)."""
    return format_traceparent(parent._replace(flags=parent.flags & SAMPLED))


def attribute_value(value: object) -> str | int | float | bool | None:
    """What an attribute may hold: a number, a flag, or one id-like token (letters, digits and
    ``_.:@/-``, at most 128); anything else (free text) is left out (None)."""
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str) and _TOKEN.fullmatch(value):
        return value
    return None


def messaging_attributes(
    operation: str, agent: str | None, message_id: int | None = None, **extra: object
) -> dict[str, str | int | float | bool]:
    """The span's attributes: the messaging conventions' (system, operation, destination = the
    agent, message id) and ``agent_bridge.<name>`` for each of ``extra`` that is an id, an enum
    or a number; the rest, and every None, is left out."""
    if operation not in OPERATIONS:
        raise ValueError(f"unknown messaging operation {operation!r}: one of {', '.join(OPERATIONS)}")
    named: dict[str, object] = {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": agent,
        "messaging.message.id": str(message_id) if message_id is not None else None,
        **{f"{SYSTEM}.{key}": value for key, value in extra.items()},
    }
    return kept_attributes(named)


def kept_attributes(named: Mapping[str, object]) -> dict[str, str | int | float | bool]:
    """``named`` without what an attribute may not hold (``attribute_value``) and without None."""
    return {key: kept for key, value in named.items() if (kept := attribute_value(value)) is not None}


def span_name(operation: str, agent: str | None) -> str:
    """``{operation} {destination}`` (the conventions' name), the destination being an agent id."""
    return f"{operation} {agent}" if agent and attribute_value(agent) is not None else operation


def worker_environment(inherited: Mapping[str, str], context: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment from the listener's: never an inherited ``TRACEPARENT`` or
    ``TRACESTATE`` (it would put the worker in someone else's trace) nor an OTLP headers variable
    (a collector's credentials, which the model's shell could print); then ``context``, the
    attempt's own trace context (empty with tracing off)."""
    kept = {
        name: value
        for name, value in inherited.items()
        if name not in CONTEXT_VARIABLES and not _SECRET_VARIABLE.fullmatch(name)
    }
    return {**kept, **context}
