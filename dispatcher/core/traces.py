"""OpenTelemetry traces (docs/traces.md): the one tracer of a process, and its spans.

Off unless this process's environment names an OTLP endpoint (``wanted``): then, and only then,
the first span loads the SDK and its OTLP/HTTP exporter (the ``[otel]`` extra). Off, every
function here returns at once and imports nothing: the server, the listener and the supervisor
load no module of the SDK (``opentelemetry-api`` is the MCP SDK's own dependency; the server
imports it with or without this).

The spans follow OpenTelemetry's messaging conventions: ``send`` and ``receive`` in the MCP
server, ``process`` per attempt in the supervisor, ``settle`` for its verdict. A message carries
its sender's trace context in its ``traceparent`` column (W3C trace-context), so the process span
of its attempt is a child of its send span, and the worker gets the process span's as
``TRACEPARENT``. Attributes are ids, enums and numbers (``attribute_value``): never a message's
text, a goal or a tool's input. The rules are ``trace_rules``'s. Our spans go to a tracer provider of our own, never the global
one, so the MCP SDK's own spans (whose error descriptions are exception texts) are never exported.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from dispatcher.core.trace_rules import (
    OPERATIONS,
    SYSTEM,
    TraceParent,
    attribute_value,
    environment_traceparent,
    format_traceparent,
    kept_attributes,
    messaging_attributes,
    parse_traceparent,
    span_name,
    wanted,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

SERVICE_NAME = "agent-bridge"  # service.name, unless OTEL_SERVICE_NAME says otherwise
# How long a process waits for its last spans to leave at its end: a collector that is down or
# slow costs an exiting server or supervisor at most this.
SHUTDOWN_MILLIS = 2000
EXPORT_DELAY_MILLIS = 1000  # how often the batch of ended spans is sent
_TRACESTATE_MAX = 512


class _Tracing(NamedTuple):
    provider: "TracerProvider"
    tracer: "Tracer"
    pid: int


_state: _Tracing | None = None
_checked_pid: int | None = None  # the process that last looked at its environment (a fork looks again)


def _tracing() -> _Tracing | None:
    """This process's tracer, set up at the first span when ``wanted``; None when off."""
    global _state, _checked_pid  # noqa: PLW0603 - the one tracer of this process
    pid = os.getpid()
    if _checked_pid == pid:
        return _state
    _checked_pid, _state = pid, None
    if wanted(os.environ):
        try:
            _state = _set_up(pid)
        except Exception as exc:  # noqa: BLE001 - no extra, or a setting the SDK refuses: traces off, never a failed send
            from dispatcher.core.logs import get_logger  # noqa: PLC0415 - only on this path

            get_logger("agent_bridge.traces").warning(
                "traces_unavailable",
                error=type(exc).__name__,
                missing=getattr(exc, "name", None),
                fix="install the otel extra (uv sync --extra otel in a checkout; docs/traces.md), "
                "or unset OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            )
    return _state


def _set_up(pid: int) -> _Tracing:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415 - on only
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME})
    # Not the global provider (the module docstring), and no exit hook of its own: ``flush`` bounds it.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    processor = BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=EXPORT_DELAY_MILLIS)
    provider.add_span_processor(processor)
    import atexit  # noqa: PLC0415

    atexit.register(flush)
    return _Tracing(provider, provider.get_tracer("agent_bridge"), pid)


def flush() -> None:
    """Send the ended spans and stop, waiting at most ``SHUTDOWN_MILLIS``: at a process's end (the
    server's exit hook, the supervisor before its ``os._exit``). Nothing when tracing is off."""
    global _state  # noqa: PLW0603
    state = _state
    if state is None or state.pid != os.getpid():
        return
    _state = None
    import threading  # noqa: PLC0415 - loaded with the SDK already

    # The SDK's own shutdown waits up to 30 s on a collector that does not answer: in a thread
    # of its own, given SHUTDOWN_MILLIS (a daemon thread, so the exit does not wait for it).
    stopping = threading.Thread(target=state.provider.shutdown, name="traces-flush", daemon=True)
    stopping.start()
    stopping.join(SHUTDOWN_MILLIS / 1000)


def _parent_context(parent: str | None) -> Any:
    """The context a new span starts in: the current span's when there is one (a span of ours),
    else ``parent`` when it is a well-formed traceparent, else a new trace."""
    from opentelemetry import trace  # noqa: PLC0415 - only with tracing on
    from opentelemetry.context import Context  # noqa: PLC0415

    if trace.get_current_span().get_span_context().is_valid:
        return None
    found = parse_traceparent(parent)
    if found is None:
        return Context()
    remote = trace.SpanContext(found.trace_id, found.span_id, is_remote=True, trace_flags=trace.TraceFlags(found.flags))
    return trace.set_span_in_context(trace.NonRecordingSpan(remote), Context())


@contextmanager
def span(
    operation: str, agent: str | None, message_id: int | None = None, *, parent: str | None = None, **extra: object
) -> "Iterator[Span | None]":
    """A span of ``operation`` (``OPERATIONS``) around the block, current inside it; None (and
    nothing loaded) with tracing off. ``parent``: a traceparent to continue when no span is
    current (the message's, or the server's ``TRACEPARENT``). An exception marks the span an
    error by its class (its text is never recorded) and goes on."""
    state = _tracing()
    if state is None:
        yield None
        return
    with _started(state, operation, agent, message_id, _parent_context(parent), extra) as current:
        yield current


@contextmanager
def child_span(
    operation: str, agent: str | None, message_id: int | None = None, **extra: object
) -> "Iterator[Span | None]":
    """A span under the current one, only where this process traces and a span is current (the
    supervisor's settle, inside its process span); None elsewhere, and nothing set up for it."""
    state = _state if _checked_pid == os.getpid() else None
    if state is None:
        yield None
        return
    from opentelemetry import trace  # noqa: PLC0415

    if not trace.get_current_span().get_span_context().is_valid:
        yield None
        return
    with _started(state, operation, agent, message_id, None, extra) as current:
        yield current


@contextmanager
def _started(
    state: _Tracing, operation: str, agent: str | None, message_id: int | None, context: Any, extra: dict[str, object]
) -> "Iterator[Span]":
    from opentelemetry.trace import SpanKind, StatusCode  # noqa: PLC0415

    with state.tracer.start_as_current_span(
        span_name(operation, agent),
        context=context,
        kind=SpanKind[OPERATIONS[operation]],
        attributes=messaging_attributes(operation, agent, message_id, **extra),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_attribute("error.type", attribute_value(getattr(exc, "code", None)) or type(exc).__name__)
            current.set_status(StatusCode.ERROR)
            raise


def annotate(
    current: "Span | None",
    *,
    agent: str | None = None,
    message_id: object = None,
    batch_message_count: int | None = None,
    **extra: object,
) -> None:
    """Add what became known inside the span: its destination, the message's id, how many messages
    a receive returned, and ``agent_bridge.<name>`` ids, enums and numbers (the outcome, say)."""
    if current is None:
        return
    named = {
        "messaging.destination.name": agent,
        "messaging.message.id": str(message_id) if isinstance(message_id, int) else None,
        "messaging.batch.message_count": batch_message_count,
        **{f"{SYSTEM}.{key}": value for key, value in extra.items()},
    }
    current.set_attributes(kept_attributes(named))


def annotate_current(**found: Any) -> None:
    """``annotate`` the current span, where this process traces (nothing loaded where it does not)."""
    if _state is None or _checked_pid != os.getpid():
        return
    from opentelemetry import trace  # noqa: PLC0415

    annotate(trace.get_current_span(), **found)


def current_traceparent() -> str | None:
    """The current span's traceparent, to store with a message; None with tracing off or no span."""
    if _tracing() is None:
        return None
    from opentelemetry import trace  # noqa: PLC0415

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format_traceparent(TraceParent(context.trace_id, context.span_id, int(context.trace_flags)))


def current_context_variables() -> dict[str, str]:
    """``TRACEPARENT`` (and ``TRACESTATE`` when there is one) of the current span, for a worker's
    environment, in the form every W3C parser takes (``environment_traceparent``); empty with
    tracing off or no span."""
    traceparent = parse_traceparent(current_traceparent())
    if traceparent is None:
        return {}
    from opentelemetry import trace  # noqa: PLC0415

    tracestate = trace.get_current_span().get_span_context().trace_state.to_header()
    return {
        "TRACEPARENT": environment_traceparent(traceparent),
        **({"TRACESTATE": tracestate} if 0 < len(tracestate) <= _TRACESTATE_MAX else {}),
    }
