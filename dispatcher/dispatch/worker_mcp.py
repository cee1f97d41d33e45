"""The worker's bridge server, as every launcher writes it into its CLI's MCP config.

The launchers call this from their inline Python (``$AGENT_BRIDGE_PYTHON``), so the
entry is defined once: the supervisor's resolved store, config and limits, the worker
role, and the attempt (its message id and tree token, to which the worker's server is bound),
each passed explicitly (some CLIs filter the environment of
the MCP servers they start).
"""

import os
from collections.abc import Mapping

# Passed on when the supervisor set them (it always does; a launcher run by hand may not).
OPTIONAL = (
    "AGENT_BRIDGE_RUNTIME_DIR",
    "AGENT_BRIDGE_MAX_BODY_BYTES",
    "AGENT_BRIDGE_LOG_LEVEL",
    "AGENT_BRIDGE_WORKER_TOKEN",
    "AGENT_BRIDGE_MESSAGE_ID",
    # Traces (docs/traces.md): the worker's server continues the attempt's trace. Never the OTLP
    # headers (credentials), which the supervisor does not pass to the worker either.
    "TRACEPARENT",
    "TRACESTATE",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SDK_DISABLED",
    "OTEL_SERVICE_NAME",
)


def bridge_server(env: Mapping[str, str]) -> dict:
    """``{"command", "args", "env"}`` of the stdio server a worker's CLI starts."""
    server_env = {
        "AGENT_ID": env["AGENT_ID"],
        "AGENT_BRIDGE_DB": env["AGENT_BRIDGE_DB"],
        "AGENT_BRIDGE_CONFIG": env["AGENT_BRIDGE_CONFIG"],
        "AGENT_BRIDGE_ROLE": "worker",
        **{name: env[name] for name in OPTIONAL if env.get(name)},
    }
    return {
        "command": env["AGENT_BRIDGE_PYTHON"],
        "args": [os.path.join(env["AGENT_BRIDGE_PROJECT"], "server.py")],  # noqa: PTH118 - the str as given
        "env": server_env,
    }
