"""A tiny OTLP/HTTP trace receiver on 127.0.0.1 for tests: it decodes each ExportTraceServiceRequest
(protobuf, as the SDK's OTLP/HTTP exporter posts it to /v1/traces) with opentelemetry-proto and keeps
its spans as plain dicts, and each request's path, headers and senders' service names."""

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def span_record(span: Any, resource: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": span.name,
        "kind": Span.SpanKind.Name(span.kind),
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex(),
        "attributes": {a.key: _value(a.value) for a in span.attributes},
        "status": span.status.code,
        "resource": resource,
    }


class OtlpReceiver:
    """``url`` is the base endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``); ``spans()`` what arrived so far;
    ``raw()`` every request body as received (decompressed), for a search of the bytes; ``requests()``
    each request's path, headers (lower-cased names) and the ``service.name`` of its resources."""

    def __init__(self) -> None:
        self._spans: list[dict[str, Any]] = []
        self._bodies: list[bytes] = []
        self._requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                found = [
                    span_record(span, {a.key: _value(a.value) for a in resource_spans.resource.attributes})
                    for resource_spans in request.resource_spans
                    for scope_spans in resource_spans.scope_spans
                    for span in scope_spans.spans
                ]
                services = {
                    _value(a.value)
                    for resource_spans in request.resource_spans
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                }
                seen = {
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "services": services,
                }
                with receiver._lock:
                    receiver._bodies.append(body)
                    receiver._requests.append(seen)
                    receiver._spans.extend(found)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server signature
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def spans(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._spans)

    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._requests)

    def raw(self) -> bytes:
        with self._lock:
            return b"".join(self._bodies)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
