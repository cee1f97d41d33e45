"""Each CLI module's launch plan, one row per level (issue 32 item 2): given a profile and an
attempt, this argv, this environment, these files in the attempt directory, this stdin and
stdout. Pure: no process runs, nothing is written. A CLI upgrade (a new flag, another file)
shows up as a diff of this table; what the real pinned CLIs do with it is tests/agent_clis/."""

import dataclasses
import tomllib
from pathlib import Path

import pytest

from dispatcher.clis import registry
from dispatcher.clis.claude import launch as claude_launch
from dispatcher.clis.codex import launch as codex_launch
from dispatcher.clis.launch import File, Unenforceable

LEVELS = ("bridge", "read", "edit", "shell", "project")
ATTEMPT_DIR = Path("/attempt")


def attempt(level: str):
    from dispatcher.clis.launch import Attempt
    from dispatcher.core.permissions import BRIDGE_ONLY, PermissionProfile

    extra = {"allow_commands": ["git status"]} if level == "shell" else {}
    profile = BRIDGE_ONLY if level == "bridge" else PermissionProfile.from_json({"level": level, **extra})
    env = {
        "AGENT_ID": "w",
        "AGENT_BRIDGE_MESSAGE_ID": "7",
        "HOME": "/home/u",
        "AGENT_BRIDGE_PYTHON": "/py",
        "AGENT_BRIDGE_PROJECT": "/proj",
    }
    return Attempt(
        env=env,
        attempt_dir=ATTEMPT_DIR,
        request_file=ATTEMPT_DIR / "request",
        workspace=Path("/ws"),
        cwd=Path("/ws"),
        profile=profile,
        server={"command": "/py", "args": ["/proj/server.py"], "env": {"AGENT_ID": "w"}},
        binary="/bin/cli",
        exists=lambda path: False,
        read=lambda path: None,
    )


def shown(plan) -> dict:
    """The plan as a table row: argv after the binary (a long word cut to its start), env, unset,
    the steps (kind and path in the attempt dir), where stdin comes from and stdout goes."""
    return {
        "argv": [word if len(word) <= 60 else word[:24] + "..." for word in plan.argv[1:]],
        "env": {k: v.replace(str(ATTEMPT_DIR), "$A") for k, v in plan.env.items()},
        "unset": list(plan.unset),
        "steps": [f"{type(step).__name__} {step.path.relative_to(ATTEMPT_DIR)}" for step in plan.steps],
        "stdin": None if plan.stdin is None else plan.stdin.name,
        "stdout": None if plan.stdout is None else plan.stdout.name,
    }


TABLE = [
    (
        "claude",
        "bridge",
        {
            "argv": [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--mcp-config",
                "/attempt/claude-mcp-config.json",
                "--strict-mcp-config",
                "--no-session-persistence",
                "--tools",
                "",
                "--allowedTools",
                "mcp__agent_bridge__send_...",
                "--disallowedTools",
                "mcp__agent_bridge__start...",
                "--setting-sources",
                "user",
                "--permission-mode",
                "dontAsk",
                "--permission-prompts",
                "none",
            ],
            "env": {"ENABLE_TOOL_SEARCH": "false", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
            "unset": [
                "OTEL_LOG_USER_PROMPTS",
                "OTEL_LOG_ASSISTANT_RESPONSES",
                "OTEL_LOG_RAW_API_BODIES",
                "OTEL_LOG_TOOL_CONTENT",
                "OTEL_LOG_TOOL_DETAILS",
            ],
            "steps": ["File claude-mcp-config.json"],
            "stdin": "request",
            "stdout": "claude-result.json",
        },
    ),
    (
        "claude",
        "read",
        {
            "argv": [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--mcp-config",
                "/attempt/claude-mcp-config.json",
                "--strict-mcp-config",
                "--no-session-persistence",
                "--tools",
                "Read,Grep,Glob,Edit,Write",
                "--allowedTools",
                "mcp__agent_bridge__send_...",
                "--disallowedTools",
                "mcp__agent_bridge__start...",
                "--setting-sources",
                "user",
                "--settings",
                "/attempt/claude-settings.json",
                "--permission-mode",
                "dontAsk",
                "--permission-prompts",
                "none",
            ],
            "env": {"ENABLE_TOOL_SEARCH": "false", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
            "unset": [
                "OTEL_LOG_USER_PROMPTS",
                "OTEL_LOG_ASSISTANT_RESPONSES",
                "OTEL_LOG_RAW_API_BODIES",
                "OTEL_LOG_TOOL_CONTENT",
                "OTEL_LOG_TOOL_DETAILS",
            ],
            "steps": ["File claude-mcp-config.json", "File claude-settings.json"],
            "stdin": "request",
            "stdout": "claude-result.json",
        },
    ),
    (
        "claude",
        "edit",
        {
            "argv": [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--mcp-config",
                "/attempt/claude-mcp-config.json",
                "--strict-mcp-config",
                "--no-session-persistence",
                "--tools",
                "Read,Grep,Glob,Edit,Write",
                "--allowedTools",
                "mcp__agent_bridge__send_...",
                "--disallowedTools",
                "mcp__agent_bridge__start...",
                "--setting-sources",
                "user",
                "--settings",
                "/attempt/claude-settings.json",
                "--permission-mode",
                "dontAsk",
                "--permission-prompts",
                "none",
            ],
            "env": {"ENABLE_TOOL_SEARCH": "false", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
            "unset": [
                "OTEL_LOG_USER_PROMPTS",
                "OTEL_LOG_ASSISTANT_RESPONSES",
                "OTEL_LOG_RAW_API_BODIES",
                "OTEL_LOG_TOOL_CONTENT",
                "OTEL_LOG_TOOL_DETAILS",
            ],
            "steps": ["File claude-mcp-config.json", "File claude-settings.json"],
            "stdin": "request",
            "stdout": "claude-result.json",
        },
    ),
    (
        "claude",
        "shell",
        {
            "argv": [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--mcp-config",
                "/attempt/claude-mcp-config.json",
                "--strict-mcp-config",
                "--no-session-persistence",
                "--tools",
                "Read,Grep,Glob,Edit,Write,Bash",
                "--allowedTools",
                "mcp__agent_bridge__send_...",
                "--disallowedTools",
                "mcp__agent_bridge__start...",
                "--setting-sources",
                "user",
                "--settings",
                "/attempt/claude-settings.json",
                "--permission-mode",
                "dontAsk",
                "--permission-prompts",
                "none",
            ],
            "env": {"ENABLE_TOOL_SEARCH": "false", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
            "unset": [
                "OTEL_LOG_USER_PROMPTS",
                "OTEL_LOG_ASSISTANT_RESPONSES",
                "OTEL_LOG_RAW_API_BODIES",
                "OTEL_LOG_TOOL_CONTENT",
                "OTEL_LOG_TOOL_DETAILS",
            ],
            "steps": ["File claude-mcp-config.json", "File claude-permissions.json", "File claude-settings.json"],
            "stdin": "request",
            "stdout": "claude-result.json",
        },
    ),
    (
        "claude",
        "project",
        {
            "argv": [
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--mcp-config",
                "/attempt/claude-mcp-config.json",
                "--strict-mcp-config",
                "--no-session-persistence",
                "--allowedTools",
                "mcp__agent_bridge__send_...",
                "--disallowedTools",
                "mcp__agent_bridge__start...",
                "--settings",
                "/attempt/claude-settings.json",
                "--permission-mode",
                "dontAsk",
                "--permission-prompts",
                "none",
            ],
            "env": {"ENABLE_TOOL_SEARCH": "false", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
            "unset": [
                "OTEL_LOG_USER_PROMPTS",
                "OTEL_LOG_ASSISTANT_RESPONSES",
                "OTEL_LOG_RAW_API_BODIES",
                "OTEL_LOG_TOOL_CONTENT",
                "OTEL_LOG_TOOL_DETAILS",
            ],
            "steps": ["File claude-mcp-config.json", "File claude-settings.json"],
            "stdin": "request",
            "stdout": "claude-result.json",
        },
    ),
    (
        "kimi",
        "bridge",
        {
            "argv": [
                "--agent-file",
                "/attempt/kimi-agent-bridge-worker.md",
                "--output-format",
                "stream-json",
                "-p",
                "You are the Agent Bridge...",
            ],
            "env": {
                "KIMI_CODE_HOME": "$A/kimi-code-home",
                "KIMI_DISABLE_TELEMETRY": "1",
                "KIMI_CODE_NO_AUTO_UPDATE": "1",
            },
            "unset": [],
            "steps": ["Dir kimi-code-home", "File kimi-agent-bridge-worker.md", "File kimi-code-home/mcp.json"],
            "stdin": None,
            "stdout": "kimi-stream.jsonl",
        },
    ),
    (
        "kimi",
        "read",
        {
            "argv": [
                "--agent-file",
                "/attempt/kimi-agent-bridge-worker.md",
                "--output-format",
                "stream-json",
                "-p",
                "You are the Agent Bridge...",
            ],
            "env": {
                "KIMI_CODE_HOME": "$A/kimi-code-home",
                "KIMI_DISABLE_TELEMETRY": "1",
                "KIMI_CODE_NO_AUTO_UPDATE": "1",
            },
            "unset": [],
            "steps": [
                "Dir kimi-code-home",
                "File kimi-agent-bridge-worker.md",
                "File kimi-code-home/config.toml",
                "File kimi-code-home/mcp.json",
            ],
            "stdin": None,
            "stdout": "kimi-stream.jsonl",
        },
    ),
    (
        "kimi",
        "edit",
        {
            "argv": [
                "--agent-file",
                "/attempt/kimi-agent-bridge-worker.md",
                "--output-format",
                "stream-json",
                "-p",
                "You are the Agent Bridge...",
            ],
            "env": {
                "KIMI_CODE_HOME": "$A/kimi-code-home",
                "KIMI_DISABLE_TELEMETRY": "1",
                "KIMI_CODE_NO_AUTO_UPDATE": "1",
            },
            "unset": [],
            "steps": [
                "Dir kimi-code-home",
                "File kimi-agent-bridge-worker.md",
                "File kimi-code-home/config.toml",
                "File kimi-code-home/mcp.json",
            ],
            "stdin": None,
            "stdout": "kimi-stream.jsonl",
        },
    ),
    (
        "kimi",
        "shell",
        {
            "argv": [
                "--agent-file",
                "/attempt/kimi-agent-bridge-worker.md",
                "--output-format",
                "stream-json",
                "-p",
                "You are the Agent Bridge...",
            ],
            "env": {
                "KIMI_CODE_HOME": "$A/kimi-code-home",
                "KIMI_DISABLE_TELEMETRY": "1",
                "KIMI_CODE_NO_AUTO_UPDATE": "1",
            },
            "unset": [],
            "steps": [
                "Dir kimi-code-home",
                "File kimi-agent-bridge-worker.md",
                "File kimi-code-home/config.toml",
                "File kimi-code-home/mcp.json",
            ],
            "stdin": None,
            "stdout": "kimi-stream.jsonl",
        },
    ),
    ("kimi", "project", None),
    (
        "codex",
        "bridge",
        {
            "argv": ["exec", "--json", "--ephemeral", "--skip-git-repo-check", "--ignore-rules", "-"],
            "env": {"CODEX_HOME": "$A/codex-home"},
            "unset": [],
            "steps": ["Dir codex-home", "File codex-home/config.toml"],
            "stdin": "request",
            "stdout": "codex-events.jsonl",
        },
    ),
    (
        "codex",
        "read",
        {
            "argv": [
                "exec",
                "--json",
                "--ephemeral",
                "--skip-git-repo-check",
                "--ignore-rules",
                "--sandbox",
                "read-only",
                "--dangerously-bypass-hook-trust",
                "-",
            ],
            "env": {"CODEX_HOME": "$A/codex-home", "TMPDIR": "$A/tmp"},
            "unset": [],
            "steps": [
                "Dir codex-home",
                "File codex-home/config.toml",
                "File codex-permissions.json",
                "File codex-home/hooks.json",
                "Dir tmp",
            ],
            "stdin": "request",
            "stdout": "codex-events.jsonl",
        },
    ),
    (
        "codex",
        "edit",
        {
            "argv": [
                "exec",
                "--json",
                "--ephemeral",
                "--skip-git-repo-check",
                "--ignore-rules",
                "--sandbox",
                "workspace-write",
                "--dangerously-bypass-hook-trust",
                "-",
            ],
            "env": {"CODEX_HOME": "$A/codex-home", "TMPDIR": "$A/tmp"},
            "unset": [],
            "steps": [
                "Dir codex-home",
                "File codex-home/config.toml",
                "File codex-permissions.json",
                "File codex-home/hooks.json",
                "Dir tmp",
            ],
            "stdin": "request",
            "stdout": "codex-events.jsonl",
        },
    ),
    (
        "codex",
        "shell",
        {
            "argv": [
                "exec",
                "--json",
                "--ephemeral",
                "--skip-git-repo-check",
                "--ignore-rules",
                "--sandbox",
                "workspace-write",
                "--dangerously-bypass-hook-trust",
                "-",
            ],
            "env": {"CODEX_HOME": "$A/codex-home", "TMPDIR": "$A/tmp"},
            "unset": [],
            "steps": [
                "Dir codex-home",
                "File codex-home/config.toml",
                "File codex-permissions.json",
                "File codex-home/hooks.json",
                "Dir tmp",
            ],
            "stdin": "request",
            "stdout": "codex-events.jsonl",
        },
    ),
    (
        "codex",
        "project",
        {
            "argv": ["exec", "--json", "--ephemeral", "--skip-git-repo-check", "-"],
            "env": {"CODEX_HOME": "$A/codex-home", "TMPDIR": "$A/tmp"},
            "unset": [],
            "steps": ["Dir codex-home", "File codex-home/config.toml", "Dir tmp"],
            "stdin": "request",
            "stdout": "codex-events.jsonl",
        },
    ),
    (
        "gemini",
        "bridge",
        {
            "argv": [
                "--skip-trust",
                "--allowed-mcp-server-names",
                "agent_bridge",
                "-o",
                "json",
                "-p",
                "You are the Agent Bridge...",
            ],
            "env": {"GEMINI_CLI_HOME": "$A/gemini-home", "TMPDIR": "$A/tmp", "GEMINI_CLI_NO_RELAUNCH": "true"},
            "unset": ["GEMINI_CLI_TRUST_WORKSPACE"],
            "steps": [
                "Dir gemini-home",
                "Dir gemini-home/.gemini",
                "File gemini-mcp-config.json",
                "Dir tmp",
                "File gemini-home/.gemini/settings.json",
            ],
            "stdin": "request",
            "stdout": "gemini-result.json",
        },
    ),
    (
        "gemini",
        "read",
        {
            "argv": [
                "--skip-trust",
                "--allowed-mcp-server-names",
                "agent_bridge",
                "--approval-mode",
                "default",
                "-o",
                "json",
                "-p",
                "You are the Agent Bridge...",
            ],
            "env": {"GEMINI_CLI_HOME": "$A/gemini-home", "TMPDIR": "$A/tmp", "GEMINI_CLI_NO_RELAUNCH": "true"},
            "unset": ["GEMINI_CLI_TRUST_WORKSPACE"],
            "steps": [
                "Dir gemini-home",
                "Dir gemini-home/.gemini",
                "File gemini-mcp-config.json",
                "Dir tmp",
                "File gemini-home/.gemini/settings.json",
            ],
            "stdin": "request",
            "stdout": "gemini-result.json",
        },
    ),
    (
        "gemini",
        "edit",
        {
            "argv": [
                "--skip-trust",
                "--allowed-mcp-server-names",
                "agent_bridge",
                "--approval-mode",
                "auto_edit",
                "-o",
                "json",
                "-p",
                "You are the Agent Bridge...",
            ],
            "env": {"GEMINI_CLI_HOME": "$A/gemini-home", "TMPDIR": "$A/tmp", "GEMINI_CLI_NO_RELAUNCH": "true"},
            "unset": ["GEMINI_CLI_TRUST_WORKSPACE"],
            "steps": [
                "Dir gemini-home",
                "Dir gemini-home/.gemini",
                "File gemini-mcp-config.json",
                "Dir tmp",
                "File gemini-home/.gemini/settings.json",
            ],
            "stdin": "request",
            "stdout": "gemini-result.json",
        },
    ),
    (
        "gemini",
        "shell",
        {
            "argv": [
                "--skip-trust",
                "--allowed-mcp-server-names",
                "agent_bridge",
                "--approval-mode",
                "auto_edit",
                "-o",
                "json",
                "-p",
                "You are the Agent Bridge...",
            ],
            "env": {"GEMINI_CLI_HOME": "$A/gemini-home", "TMPDIR": "$A/tmp", "GEMINI_CLI_NO_RELAUNCH": "true"},
            "unset": ["GEMINI_CLI_TRUST_WORKSPACE"],
            "steps": [
                "Dir gemini-home",
                "Dir gemini-home/.gemini",
                "File gemini-mcp-config.json",
                "Dir tmp",
                "File gemini-home/.gemini/settings.json",
            ],
            "stdin": "request",
            "stdout": "gemini-result.json",
        },
    ),
    (
        "gemini",
        "project",
        {
            "argv": [
                "--skip-trust",
                "--allowed-mcp-server-names",
                "agent_bridge",
                "-o",
                "json",
                "-p",
                "You are the Agent Bridge...",
            ],
            "env": {
                "GEMINI_CLI_HOME": "$A/gemini-home",
                "TMPDIR": "$A/tmp",
                "GEMINI_CLI_NO_RELAUNCH": "true",
                "GEMINI_CLI_TRUST_WORKSPACE": "true",
            },
            "unset": [],
            "steps": [
                "Dir gemini-home",
                "Dir gemini-home/.gemini",
                "File gemini-mcp-config.json",
                "Dir tmp",
                "File gemini-home/.gemini/settings.json",
            ],
            "stdin": "request",
            "stdout": "gemini-result.json",
        },
    ),
    (
        "opencode",
        "bridge",
        {
            "argv": [
                "run",
                "--pure",
                "--format",
                "json",
                "--title",
                "agent-bridge-worker",
                "You are the Agent Bridge...",
            ],
            "env": {
                "HOME": "$A/opencode-home",
                "XDG_CONFIG_HOME": "$A/opencode-home/.config",
                "XDG_DATA_HOME": "$A/opencode-home/.local/share",
                "XDG_STATE_HOME": "$A/opencode-home/.local/state",
                "XDG_CACHE_HOME": "$A/opencode-home/.cache",
                "TMPDIR": "$A/tmp",
                "OPENCODE_PERMISSION": '{"*": "deny", "agent_bridge_send_message": "allow", "agent_bridge_receive_messages": "allow", "agent_bridge_claim_message": "allow", "agent_bridge_release_message": "allow", "agent_bridge_mark_read": "allow", "agent_bridge_get_message": "allow", "agent_bridge_conversation": "allow", "agent_bridge_start_conversation": "deny", "agent_bridge_listener": "deny"}',
                "OPENCODE_DB": ":memory:",
                "OPENCODE_DISABLE_MODELS_FETCH": "1",
                "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "OPENCODE_DISABLE_CLAUDE_CODE": "1",
                "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
            },
            "unset": ["OPENCODE_CONFIG", "OPENCODE_CONFIG_CONTENT", "OPENCODE_CONFIG_DIR", "OPENCODE_AUTH_CONTENT"],
            "steps": [
                "Dir opencode-home",
                "Dir opencode-home/.config",
                "Dir opencode-home/.config/opencode",
                "File opencode-home/.config/opencode/opencode.json",
                "File opencode-home/.config/opencode/package.json",
                "File opencode-home/.config/opencode/package-lock.json",
                "Dir opencode-home/.config/opencode/node_modules",
                "Dir opencode-home/.local",
                "Dir opencode-home/.local/share",
                "Dir tmp",
            ],
            "stdin": "request",
            "stdout": "opencode-events.jsonl",
        },
    ),
    (
        "opencode",
        "read",
        {
            "argv": [
                "run",
                "--pure",
                "--format",
                "json",
                "--title",
                "agent-bridge-worker",
                "You are the Agent Bridge...",
            ],
            "env": {
                "HOME": "$A/opencode-home",
                "XDG_CONFIG_HOME": "$A/opencode-home/.config",
                "XDG_DATA_HOME": "$A/opencode-home/.local/share",
                "XDG_STATE_HOME": "$A/opencode-home/.local/state",
                "XDG_CACHE_HOME": "$A/opencode-home/.cache",
                "TMPDIR": "$A/tmp",
                "OPENCODE_PERMISSION": '{"*": "deny", "agent_bridge_send_message": "allow", "agent_bridge_receive_messages": "allow", "agent_bridge_claim_message": "allow", "agent_bridge_release_message": "allow", "agent_bridge_mark_read": "allow", "agent_bridge_get_message": "allow", "agent_bridge_conversation": "allow", "read": {"*": "allow", "*.env": "deny", "*.env.*": "deny", "*.env.example": "allow", "mcp:*": "deny"}, "external_directory": "deny", "agent_bridge_start_conversation": "deny", "agent_bridge_listener": "deny"}',
                "OPENCODE_DB": ":memory:",
                "OPENCODE_DISABLE_MODELS_FETCH": "1",
                "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "OPENCODE_DISABLE_CLAUDE_CODE": "1",
                "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
            },
            "unset": ["OPENCODE_CONFIG", "OPENCODE_CONFIG_CONTENT", "OPENCODE_CONFIG_DIR", "OPENCODE_AUTH_CONTENT"],
            "steps": [
                "Dir opencode-home",
                "Dir opencode-home/.config",
                "Dir opencode-home/.config/opencode",
                "File opencode-home/.config/opencode/opencode.json",
                "File opencode-home/.config/opencode/package.json",
                "File opencode-home/.config/opencode/package-lock.json",
                "Dir opencode-home/.config/opencode/node_modules",
                "Dir opencode-home/.local",
                "Dir opencode-home/.local/share",
                "Dir tmp",
            ],
            "stdin": "request",
            "stdout": "opencode-events.jsonl",
        },
    ),
    (
        "opencode",
        "edit",
        {
            "argv": [
                "run",
                "--pure",
                "--format",
                "json",
                "--title",
                "agent-bridge-worker",
                "You are the Agent Bridge...",
            ],
            "env": {
                "HOME": "$A/opencode-home",
                "XDG_CONFIG_HOME": "$A/opencode-home/.config",
                "XDG_DATA_HOME": "$A/opencode-home/.local/share",
                "XDG_STATE_HOME": "$A/opencode-home/.local/state",
                "XDG_CACHE_HOME": "$A/opencode-home/.cache",
                "TMPDIR": "$A/tmp",
                "OPENCODE_PERMISSION": '{"*": "deny", "agent_bridge_send_message": "allow", "agent_bridge_receive_messages": "allow", "agent_bridge_claim_message": "allow", "agent_bridge_release_message": "allow", "agent_bridge_mark_read": "allow", "agent_bridge_get_message": "allow", "agent_bridge_conversation": "allow", "read": {"*": "allow", "*.env": "deny", "*.env.*": "deny", "*.env.example": "allow", "mcp:*": "deny"}, "external_directory": "deny", "edit": {"*": "allow", ".git": "deny", ".git/*": "deny", "*/.git": "deny", "*/.git/*": "deny"}, "agent_bridge_start_conversation": "deny", "agent_bridge_listener": "deny"}',
                "OPENCODE_DB": ":memory:",
                "OPENCODE_DISABLE_MODELS_FETCH": "1",
                "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "OPENCODE_DISABLE_CLAUDE_CODE": "1",
                "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
            },
            "unset": ["OPENCODE_CONFIG", "OPENCODE_CONFIG_CONTENT", "OPENCODE_CONFIG_DIR", "OPENCODE_AUTH_CONTENT"],
            "steps": [
                "Dir opencode-home",
                "Dir opencode-home/.config",
                "Dir opencode-home/.config/opencode",
                "File opencode-home/.config/opencode/opencode.json",
                "File opencode-home/.config/opencode/package.json",
                "File opencode-home/.config/opencode/package-lock.json",
                "Dir opencode-home/.config/opencode/node_modules",
                "Dir opencode-home/.local",
                "Dir opencode-home/.local/share",
                "Dir tmp",
            ],
            "stdin": "request",
            "stdout": "opencode-events.jsonl",
        },
    ),
    ("opencode", "shell", None),
    (
        "opencode",
        "project",
        {
            "argv": [
                "run",
                "--pure",
                "--format",
                "json",
                "--title",
                "agent-bridge-worker",
                "You are the Agent Bridge...",
            ],
            "env": {
                "HOME": "$A/opencode-home",
                "XDG_CONFIG_HOME": "$A/opencode-home/.config",
                "XDG_DATA_HOME": "$A/opencode-home/.local/share",
                "XDG_STATE_HOME": "$A/opencode-home/.local/state",
                "XDG_CACHE_HOME": "$A/opencode-home/.cache",
                "TMPDIR": "$A/tmp",
                "OPENCODE_PERMISSION": '{"agent_bridge_start_conversation": "deny", "agent_bridge_listener": "deny"}',
                "OPENCODE_DB": ":memory:",
                "OPENCODE_DISABLE_MODELS_FETCH": "1",
                "OPENCODE_DISABLE_AUTOUPDATE": "1",
                "OPENCODE_DISABLE_CLAUDE_CODE": "1",
            },
            "unset": [
                "OPENCODE_CONFIG",
                "OPENCODE_CONFIG_CONTENT",
                "OPENCODE_CONFIG_DIR",
                "OPENCODE_AUTH_CONTENT",
                "OPENCODE_DISABLE_PROJECT_CONFIG",
            ],
            "steps": [
                "Dir opencode-home",
                "Dir opencode-home/.config",
                "Dir opencode-home/.config/opencode",
                "File opencode-home/.config/opencode/opencode.json",
                "File opencode-home/.config/opencode/package.json",
                "File opencode-home/.config/opencode/package-lock.json",
                "Dir opencode-home/.config/opencode/node_modules",
                "Dir opencode-home/.local",
                "Dir opencode-home/.local/share",
                "Dir tmp",
            ],
            "stdin": "request",
            "stdout": "opencode-events.jsonl",
        },
    ),
]


@pytest.mark.parametrize(("cli", "level", "expected"), TABLE, ids=[f"{c}-{lvl}" for c, lvl, _ in TABLE])
def test_the_launch_plan_per_cli_and_level(cli, level, expected):
    if expected is None:
        with pytest.raises(Unenforceable):
            registry.BY_NAME[cli].launch_plan(attempt(level))
        return
    assert shown(registry.BY_NAME[cli].launch_plan(attempt(level))) == expected


def test_every_cli_has_a_row_per_level():
    assert {(cli, level) for cli, level, _ in TABLE} == {(c, lvl) for c in registry.NAMES for lvl in LEVELS}


@pytest.mark.parametrize("cli", registry.NAMES)
def test_the_task_text_is_never_in_argv_or_env(cli):
    """The request file's path may be named; its text is never read into the plan."""
    plan = registry.BY_NAME[cli].launch_plan(attempt("bridge"))
    assert plan.stdin in (None, ATTEMPT_DIR / "request")
    assert plan.stdout == ATTEMPT_DIR / registry.BY_NAME[cli].output_file
    assert all(step.path.is_relative_to(ATTEMPT_DIR) for step in plan.steps)


def test_the_users_files_are_linked_when_there_and_never_copied():
    there = attempt("read")
    from dataclasses import replace

    linked = replace(there, exists=lambda path: path.name in ("auth.json", "credentials", "oauth_creds.json"))
    for cli, name in (
        ("codex", "auth.json"),
        ("kimi", "credentials"),
        ("gemini", "oauth_creds.json"),
        ("opencode", "auth.json"),
    ):
        plan = registry.BY_NAME[cli].launch_plan(linked)
        links = [step for step in plan.steps if type(step).__name__ == "Link"]
        assert [link.target.name for link in links] == [name], cli
        assert not any(type(step).__name__ == "File" and step.path.name == name for step in plan.steps)


@pytest.mark.parametrize(
    ("cli", "variable", "value", "said"),
    [
        ("claude", "AGENT_BRIDGE_MAX_COST_USD", "0", "greater than 0"),
        ("codex", "AGENT_BRIDGE_CODEX_MAX_RETRIES", "many", "small non-negative integer"),
        ("codex", "AGENT_BRIDGE_CODEX_ENV_KEY", "no key", "environment variable name"),
        ("codex", "AGENT_BRIDGE_CODEX_OVERRIDES", "not an override", "key=value"),
    ],
)
def test_a_malformed_setting_is_one_clear_error(cli, variable, value, said):
    from dataclasses import replace

    bad = replace(attempt("bridge"), env={**attempt("bridge").env, variable: value})
    with pytest.raises(ValueError, match=said):
        registry.BY_NAME[cli].launch_plan(bad)


@pytest.mark.parametrize(
    ("tracing", "otel"),
    [
        ({}, None),  # tracing off: no [otel] table, Codex's defaults export no traces
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h", "OTEL_SDK_DISABLED": "true"}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h", "OTEL_TRACES_EXPORTER": "none"}, None),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
                "OTEL_EXPORTER_OTLP_HEADERS": "authorization=s3cret",
            },
            "http://127.0.0.1:4318/v1/traces",
        ),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": 'https://c/x"\n[evil]'}, 'https://c/x"\n[evil]'),  # one string
    ],
)
def test_codex_exports_its_own_spans_where_the_bridge_s_go_and_nothing_else(tracing, otel):
    """Codex's config.toml: with the bridge's tracing on, a trace exporter to the same collector
    (its spans continue the worker's TRACEPARENT), never the listener's OTLP headers, no log
    events and every prompt or response switch off; nothing with tracing off."""
    for level in LEVELS:
        base = attempt(level)
        run = dataclasses.replace(base, env={**base.env, **tracing})
        config_file = next(
            s for s in codex_launch.plan(run).steps if isinstance(s, File) and s.path.name == "config.toml"
        )
        config = tomllib.loads(config_file.text)
        assert "s3cret" not in config_file.text
        if otel is None:
            assert "otel" not in config, level
            continue
        assert config["otel"] == {
            "exporter": "none",
            "log_user_prompt": False,
            "log_agent_responses": False,
            "log_sse_deltas": False,
            "log_guardian_assessments": False,
            "trace_exporter": {"otlp-http": {"endpoint": otel, "protocol": "binary"}},
        }, level


CLAUDE_OTEL = (
    "CLAUDE_CODE_ENABLE_TELEMETRY",
    "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_LOGS_EXPORTER",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


@pytest.mark.parametrize(
    ("tracing", "endpoint"),
    [
        ({}, None),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h", "OTEL_SDK_DISABLED": "true"}, None),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/", "OTEL_LOG_USER_PROMPTS": "1"},
            "http://127.0.0.1:4318/v1/traces",
        ),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/t"}, "http://c/t"),
    ],
)
def test_claude_traces_to_the_bridge_s_collector_and_never_exports_content(tracing, endpoint):
    """Claude Code's environment: with the bridge's tracing on, its own (beta) tracing to the same
    collector, metrics and log events off; its content switches are always unset."""
    for level in LEVELS:
        base = attempt(level)
        run = claude_launch.plan(dataclasses.replace(base, env={**base.env, **tracing}))
        assert set(claude_launch.CONTENT_SWITCHES) <= set(run.unset), level
        if endpoint is None:
            assert not set(CLAUDE_OTEL) & set(run.env), level
            continue
        assert {name: run.env[name] for name in CLAUDE_OTEL} == {
            "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
            "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
        }, level
