"""Traces end to end (docs/traces.md): a real server.py sends a task over real stdio, a real
listener's supervisor runs a fake worker for it, and an OTLP/HTTP receiver in this test collects
the spans: send -> process -> settle in one trace, each the parent of the next, the worker's
TRACEPARENT the process span's, and the task's text nowhere in a span. A collector that never
answers neither breaks a send nor holds an exiting server past its bound. With tracing off, the
server, the listener and the supervisor load no module of the OpenTelemetry SDK."""

import json
import socket
import time
from pathlib import Path

import pytest
from dispatch_harness import DEADLINE, FAKE_WORKER, start_listener, stop_listener, wait_finished, wait_until
from dispatch_harness import write_config_atomic as write_config_file
from harness import McpAgent, bridge_env, on_backend, write_config
from otlp_receiver import OtlpReceiver
from raw_jsonrpc import RawServer

from dispatcher.core.locations import store_location

CANARY = "CANARY-7f3a-the-task-text-must-never-reach-a-span"


def _launcher(tmp_path: Path) -> Path:
    """The fake worker (it answers the task over its own MCP server), writing first the trace
    context its environment carries."""
    path = tmp_path / "traced_worker.sh"
    path.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n%s\\n" "${{TRACEPARENT:--}}" "${{OTEL_EXPORTER_OTLP_HEADERS:--}}" > {tmp_path / "worker-env"}\n'
        f'FAKE_WORKER_MODE=succeed exec "$AGENT_BRIDGE_PYTHON" {FAKE_WORKER} "$@"\n'
    )
    path.chmod(0o755)
    return path


def _one(spans: list[dict], operation: str) -> dict:
    found = [s for s in spans if s["attributes"].get("messaging.operation.type") == operation]
    assert len(found) == 1, (operation, spans)
    return found[0]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_dispatch_is_one_trace_send_process_settle_and_the_worker_continues_it(tmp_path, backend, request):
    receiver = OtlpReceiver()
    env = on_backend(bridge_env(tmp_path, write_config(tmp_path / "config.json")), backend, request)
    write_config_file(Path(env["AGENT_BRIDGE_CONFIG"]), _launcher(tmp_path))
    traced = {
        **env,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer not-for-workers",
    }
    listener = start_listener(traced)
    sender = McpAgent("kimi", traced, tmp_path / "kimi.err")
    try:
        sent = sender.ok("send_message", recipient="claude", text=CANARY, kind="task")
        assert sender.ok("receive_messages")["messages"] == []  # a receive span too
        assert wait_finished(store_location(env["AGENT_BRIDGE_DB"]), sent["id"])["outcome"] == "succeeded"
        wanted = {"send", "receive", "process", "settle"}
        wait_until(
            lambda: wanted <= {s["attributes"].get("messaging.operation.type") for s in receiver.spans()},
            what="the send, receive, process and settle spans at the receiver",
        )
    finally:
        sender.close()
        stop_listener(listener)
        receiver.close()

    spans = receiver.spans()
    send, process, settle = (_one(spans, op) for op in ("send", "process", "settle"))
    assert send["trace_id"] == process["trace_id"] == settle["trace_id"]
    assert process["parent_span_id"] == send["span_id"]
    assert settle["parent_span_id"] == process["span_id"]
    assert send["parent_span_id"] == ""  # the sender's server had no TRACEPARENT: a new trace
    assert (send["name"], send["kind"]) == ("send claude", "SPAN_KIND_PRODUCER")
    assert (process["name"], process["kind"]) == ("process claude", "SPAN_KIND_CONSUMER")
    assert (settle["name"], settle["kind"]) == ("settle", "SPAN_KIND_CLIENT")
    for span in (send, process, settle):
        assert span["attributes"]["messaging.system"] == "agent_bridge"
        assert span["attributes"]["messaging.message.id"] == str(sent["id"])
        assert span["attributes"]["messaging.destination.name"] == "claude"
        assert span["resource"]["service.name"] == "agent-bridge"
    assert process["attributes"]["agent_bridge.outcome"] == settle["attributes"]["agent_bridge.outcome"] == "succeeded"
    receive = _one(spans, "receive")
    assert receive["attributes"]["messaging.destination.name"] == "kimi"
    assert receive["attributes"]["messaging.batch.message_count"] == 0

    # The worker ran under the attempt's span, and without the listener's OTLP headers.
    traceparent, headers = (tmp_path / "worker-env").read_text().splitlines()
    assert traceparent.rsplit("-", 1)[0] == f"00-{process['trace_id']}-{process['span_id']}"
    # Sampled, and level 1's flags only: the SDK's random-id flag (02) makes Rust OTel refuse it.
    assert traceparent.rsplit("-", 1)[1] == "01"
    assert headers == "-"

    # Payload-free: the task's text is in no span's name or attribute, nor anywhere in what was sent.
    assert CANARY.encode() not in receiver.raw()
    assert all(CANARY not in json.dumps(span) for span in spans)


def test_a_forged_traceparent_in_the_store_starts_a_new_trace_and_the_task_still_runs(tmp_path):
    """An agent's role writes its own messages' columns on PostgreSQL: a forged value must not
    break the attempt (nor be continued)."""
    from dispatcher.bridge import messages
    from dispatcher.store import open_store

    receiver = OtlpReceiver()
    env = bridge_env(tmp_path, write_config(tmp_path / "config.json"))
    write_config_file(Path(env["AGENT_BRIDGE_CONFIG"]), _launcher(tmp_path))
    db = store_location(env["AGENT_BRIDGE_DB"])
    conn = open_store(db)
    try:
        forged = "00-" + "f" * 32 + "-" + "0" * 16 + "-01\n" + CANARY
        task = messages.send_message(
            conn,
            sender="kimi",
            recipient="claude",
            text="x",
            kind="task",
            agents={"kimi", "claude"},
            traceparent=forged,
        )["id"]
    finally:
        conn.close()
    listener = start_listener({**env, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url})
    try:
        assert wait_finished(db, task)["outcome"] == "succeeded"
        wait_until(lambda: any(s["name"].startswith("settle") for s in receiver.spans()), what="the settle span")
    finally:
        stop_listener(listener)
        receiver.close()
    process = _one(receiver.spans(), "process")
    assert process["parent_span_id"] == ""
    assert process["trace_id"] != "f" * 32
    assert CANARY.encode() not in receiver.raw()


def _blackhole() -> socket.socket:
    """A port that accepts connections into its backlog and never answers: a hung collector."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


def test_a_collector_that_never_answers_neither_breaks_a_send_nor_holds_the_exit(tmp_path):
    hole = _blackhole()
    env = {
        **bridge_env(tmp_path, write_config(tmp_path / "config.json")),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{hole.getsockname()[1]}",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "120",  # the exporter itself would wait this long
    }
    server = RawServer(env, tmp_path / "server.err")
    try:
        _initialize(server)
        for n in range(3):
            assert _send(server, "kimi", f"note {n}")["id"] > 0
        server.proc.stdin.close()
        started = time.monotonic()
        assert server.proc.wait(DEADLINE) == 0
        # Bounded: the flush gives up after 2 s; without it the SDK waits 30 s, the exporter 120 s.
        assert time.monotonic() - started < 25
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
        server.proc.wait()
        server.proc.stdout.close()
        server._stderr.close()
        hole.close()
    assert "Traceback" not in (tmp_path / "server.err").read_text()


def test_a_refused_export_is_said_on_stderr_and_stdout_stays_the_protocol(tmp_path):
    """The exporter's complaints are Python log records: the server's stderr (JSON lines), never
    stdout, where every line the reader thread takes must still be a JSON-RPC message."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: every export is refused
    env = {
        **bridge_env(tmp_path, write_config(tmp_path / "config.json")),
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}/v1/traces",
    }
    stderr = tmp_path / "server.err"
    server = RawServer(env, stderr)
    try:
        _initialize(server)
        _send(server, "kimi", "a note")
        wait_until(lambda: "exporting spans batch" in stderr.read_text(), what="the exporter's complaint on stderr")
        server.ping_ok()  # the protocol stream is intact after it
        complaint = next(line for line in stderr.read_text().splitlines() if "exporting spans batch" in line)
        assert json.loads(complaint)["level"] == "warning"  # one of our JSON log lines
    finally:
        server.close()


def test_a_send_continues_the_client_s_trace_context_else_the_server_s_traceparent(tmp_path):
    """A call's ``_meta.traceparent`` (the MCP client's trace) parents its send span; without one,
    the server's TRACEPARENT does; a malformed one in ``_meta`` falls back to it too."""
    receiver = OtlpReceiver()
    client_trace, client_span = "1" * 32, "2" * 16
    env_trace, env_span = "3" * 32, "4" * 16
    env = {
        **bridge_env(tmp_path, write_config(tmp_path / "config.json")),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "TRACEPARENT": f"00-{env_trace}-{env_span}-01",
    }
    server = RawServer(env, tmp_path / "server.err")
    try:
        _initialize(server)
        metas = [{"traceparent": f"00-{client_trace}-{client_span}-01"}, None, {"traceparent": "00-zz-forged"}]
        for n, meta in enumerate(metas):
            params = {"name": "send_message", "arguments": {"recipient": "kimi", "text": f"note {n}"}}
            reply = server.request("tools/call", {**params, **({"_meta": meta} if meta else {})})
            assert reply["result"].get("isError") is not True, reply
        wait_until(lambda: len(receiver.spans()) >= 3, what="three send spans")
    finally:
        server.close()
        receiver.close()
    parents = sorted((s["trace_id"], s["parent_span_id"]) for s in receiver.spans())
    assert parents == sorted([(client_trace, client_span), (env_trace, env_span), (env_trace, env_span)])


def _initialize(server: RawServer) -> None:
    server.request(
        "initialize",
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    )
    server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


def _send(server: RawServer, recipient: str, text: str) -> dict:
    reply = server.request("tools/call", {"name": "send_message", "arguments": {"recipient": recipient, "text": text}})
    assert reply["result"].get("isError") is not True, reply
    return reply["result"]["structuredContent"]


# What tracing loads, which nothing may load with it off. opentelemetry-api itself comes with the
# MCP SDK (its own spans), so the server has it either way; the listener has not.
SDK = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto", "google.protobuf", "requests")
TELL = """
import atexit, os, sys

def _tell(who):
    loaded = sorted(m for m in sys.modules if m.startswith({sdk!r}) or m == "opentelemetry")
    with open(os.path.join({out!r}, f"{{who}}-{{os.getpid()}}"), "w") as f:
        f.write(" ".join(loaded))

atexit.register(lambda: _tell("main"))
_exit = os._exit

def _telling_exit(code):
    if "dispatcher.dispatch.supervisor" in sys.modules:
        _tell("supervisor")
    _exit(code)

os.register_at_fork(after_in_child=lambda: setattr(os, "_exit", _telling_exit))
"""


def test_with_tracing_off_no_process_loads_the_sdk(tmp_path):
    out = tmp_path / "told"
    out.mkdir()
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(TELL.format(sdk=SDK, out=str(out)))
    env = bridge_env(tmp_path, write_config(tmp_path / "config.json"))
    write_config_file(Path(env["AGENT_BRIDGE_CONFIG"]), _launcher(tmp_path))
    telling = {**env, "PYTHONPATH": str(site)}
    listener = start_listener(telling)
    sender = McpAgent("kimi", telling, tmp_path / "kimi.err", fresh_interpreter=True)  # its own sitecustomize
    try:
        sent = sender.ok("send_message", recipient="claude", text="off", kind="task")
        assert wait_finished(store_location(env["AGENT_BRIDGE_DB"]), sent["id"])["outcome"] == "succeeded"
    finally:
        sender.close()
        stop_listener(listener)
    told = {path.name: path.read_text() for path in out.iterdir()}
    # The listener and its supervisor: nothing of OpenTelemetry at all; nor a TRACEPARENT for the worker.
    assert told.pop(f"main-{listener.pid}") == "", told
    assert [told.pop(name) for name in list(told) if name.startswith("supervisor-")] == [""], told
    assert (tmp_path / "worker-env").read_text().splitlines()[0] == "-"
    # The server and the worker: at most the API, which the MCP SDK imports for its own spans.
    assert len(told) >= 2, told
    assert set(told.values()) <= {"", "opentelemetry"}, told
