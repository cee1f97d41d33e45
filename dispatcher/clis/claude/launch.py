"""Claude Code's launch plan (2.1.332): ``claude -p`` with the task on stdin, the bridge as its
only MCP server, the permission flags and settings of the profile's level.

Why each flag:
  -p                          non-interactive; the prompt is read from stdin (no positional).
  --output-format stream-json one JSON event a line as the run goes (--verbose is required with
                              -p): each assistant message's usage, which the supervisor follows
                              for max_tokens_per_task, then the result object at the end.
  --mcp-config FILE           load the bridge server from the generated file ...
  --strict-mcp-config         ... and ignore every other MCP configuration.
  --no-session-persistence    no transcript (task text included) under $CLAUDE_CONFIG_DIR/projects/.
  the profile's flags         --tools, --allowedTools, --disallowedTools, --setting-sources user,
                              --add-dir, --settings FILE, --permission-mode dontAsk,
                              --permission-prompts none (profile.py; docs/launchers.md per level).
  --max-turns N               AGENT_BRIDGE_MAX_TURNS, when set.
  --max-budget-usd X          AGENT_BRIDGE_MAX_COST_USD, when set.
Not used: acceptEdits, bypassPermissions / --dangerously-skip-permissions. The variadic flags
are each followed by another option, and there is no positional prompt for them to swallow.
Environment: ENABLE_TOOL_SEARCH=false (2.1.332 otherwise hides MCP tools behind ToolSearch),
CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 (no telemetry, feature-flag or preflight calls; it
does not silence the OpenTelemetry export below, seen in a run). With the bridge's tracing on
(docs/traces.md) its own tracing goes to the same collector (``otel_environment``); its switches
that export content (``CONTENT_SWITCHES``) are always taken out of the environment.

Read from the listener's environment (the worker launcher's contract, launchers/agent_headless.sh):
CLAUDE_BIN (the binary, default ``claude`` on PATH), CLAUDE_CONFIG_DIR (the user's Claude home),
AGENT_BRIDGE_MAX_TURNS, and the supervisor's AGENT_BRIDGE_MAX_COST_USD (``max_cost_usd_per_task``).
Exit: Claude's own; 2 for a bad invocation (an invalid profile included); 127 when the CLI is
missing; 78 when the profile cannot be enforced here (no working sandbox). Run end to end with the
2.1.332 binary, the listener and a scripted model: tests/agent_clis/test_claude.py.
"""

import json
import re

from dispatcher.clis import claude
from dispatcher.clis.claude import profile as profiles
from dispatcher.clis.launch import Attempt, File, LaunchPlan
from dispatcher.core import trace_rules
from dispatcher.core.protected import protected_from_env

MCP_CONFIG = "claude-mcp-config.json"
# Claude Code 2.1.332's switches that put prompts, responses, tool input or API bodies into its
# OpenTelemetry export: never inherited by a worker, whether or not the bridge traces.
CONTENT_SWITCHES = (
    "OTEL_LOG_USER_PROMPTS",
    "OTEL_LOG_ASSISTANT_RESPONSES",
    "OTEL_LOG_RAW_API_BODIES",
    "OTEL_LOG_TOOL_CONTENT",
    "OTEL_LOG_TOOL_DETAILS",
)
_COST = re.compile(r"[0-9]*\.?[0-9]+")


def max_cost(raw: str | None) -> str | None:
    """AGENT_BRIDGE_MAX_COST_USD as given, when it is a number greater than 0; ValueError otherwise."""
    if not raw:
        return None
    if not _COST.fullmatch(raw) or set(raw) <= {"0", "."}:
        raise ValueError(f"AGENT_BRIDGE_MAX_COST_USD must be a number greater than 0, got: {raw}")
    return raw


def otel_environment(endpoint: str | None) -> dict[str, str]:
    """With the bridge's tracing on (``endpoint``, trace_rules.traces_endpoint): Claude Code's own
    tracing (a beta, which continues the ``TRACEPARENT`` it is given) to the same collector over
    OTLP/HTTP protobuf, and its metrics and log events off. Nothing with tracing off."""
    if endpoint is None:
        return {}
    return {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
    }


def plan(attempt: Attempt) -> LaunchPlan:
    """The run (pure): given the attempt and its profile, this argv, env and these files."""
    cost = max_cost(attempt.env.get("AGENT_BRIDGE_MAX_COST_USD"))
    mcp_config = attempt.attempt_dir / MCP_CONFIG
    server = {"type": "stdio", **attempt.server}
    files, profile_args = profiles.permission_plan(
        attempt.profile, attempt.attempt_dir, attempt.cwd, protected_from_env(attempt.env), attempt.server["env"]
    )
    argv = [
        attempt.binary,
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--mcp-config",
        str(mcp_config),
        "--strict-mcp-config",
        "--no-session-persistence",
        *profile_args,
    ]
    if attempt.max_turns is not None:
        argv += ["--max-turns", str(attempt.max_turns)]
    if cost is not None:
        argv += ["--max-budget-usd", cost]
    return LaunchPlan(
        argv=tuple(argv),
        env={
            "ENABLE_TOOL_SEARCH": "false",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            **otel_environment(trace_rules.traces_endpoint(attempt.env)),
        },
        unset=CONTENT_SWITCHES,
        steps=(File(mcp_config, json.dumps({"mcpServers": {"agent_bridge": server}}, indent=2) + "\n"), *files),
        stdin=attempt.request_file,
        stdout=attempt.attempt_dir / claude.OUTPUT_FILE,
    )


def check(attempt: Attempt, plan: LaunchPlan) -> str | None:
    """The host check: the level's sandbox (bubblewrap and socat, namespaces) works here."""
    return profiles.sandbox_problem(attempt.profile)
