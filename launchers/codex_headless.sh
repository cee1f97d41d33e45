#!/usr/bin/env bash
# Agent Bridge worker launcher: OpenAI Codex CLI, one non-interactive run (`codex exec`).
#
# The launch plan (argv, environment, the private CODEX_HOME and its config.toml, the hook and
# its policy written into the attempt dir, the sandbox probe) is computed in Python:
# dispatcher/clis/codex/launch.py says why each flag, and is tested as a pure function.
# Checked against codex-cli 0.171.0 (npm @openai/codex; `codex --version` -> "codex-cli 0.171.0"):
# every flag it passes appears in `codex exec --help` of that version, and the whole launcher
# was run end to end against a scripted Responses API server (tests/agent_clis/test_codex.py).
#
# Contract (fixed by the dispatcher):  codex_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
#   REQUEST_FILE is a 0600 file with the complete worker prompt. Its content is handed to
#   Codex on stdin only (`codex exec -`): never in argv, never in the environment.
# Environment: AGENT_ID, AGENT_BRIDGE_MESSAGE_ID, AGENT_BRIDGE_DB, AGENT_BRIDGE_CONFIG,
#   AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON, AGENT_BRIDGE_ATTEMPT_DIR (required);
#   AGENT_BRIDGE_RUNTIME_DIR, AGENT_BRIDGE_MAX_BODY_BYTES, AGENT_BRIDGE_LOG_LEVEL,
#   AGENT_BRIDGE_WORKER_TOKEN (optional: passed on to the worker's bridge server);
#   CODEX_BIN (optional, default `codex` on PATH);
#   CODEX_HOME (optional: the user's real Codex home, default ~/.codex; only its auth.json
#     is used, see below; the worker itself gets a private home);
#   AGENT_BRIDGE_CODEX_MODEL (optional -> `-m`);
#   AGENT_BRIDGE_CODEX_BASE_URL (optional: a Responses API base URL such as
#     http://127.0.0.1:8080/v1; the run then uses a provider of its own with that URL,
#     plain HTTP(S) server-sent events, no WebSocket);
#   AGENT_BRIDGE_CODEX_ENV_KEY (optional, with the base URL: the NAME of the environment
#     variable that holds that endpoint's API key; without it no key is sent);
#   AGENT_BRIDGE_CODEX_MAX_RETRIES (optional, with the base URL: request and stream retries,
#     default 2; 0 makes a failing endpoint end the run within seconds);
#   AGENT_BRIDGE_CODEX_OVERRIDES (optional: newline-separated `key=value` lines, each passed
#     as one `-c key=value`, which wins over the generated config.toml; for settings of your
#     own such as model_reasoning_effort="low". It can also undo this launcher's choices, so
#     treat it as local policy).
#   AGENT_BRIDGE_WORKSPACE (the workspace, also the cwd) and AGENT_BRIDGE_PERMISSIONS (the
#     agent's permission profile as JSON; absent: level `bridge`), see "Permission profile" below.
# AGENT_BRIDGE_MAX_TURNS is not used: codex-cli 0.171.0 has no turn cap (`exec` runs one turn
# until the model stops; the dispatcher's worker timeout bounds it).
# The launcher ends by exec-ing Codex: its --json event stream goes to codex-events.jsonl
# in the attempt dir, and the supervisor derives the diagnostics from it afterwards.
# Exit code: Codex's own exit code; 2 for a bad invocation (an invalid AGENT_BRIDGE_PERMISSIONS
# included); 127 if the CLI is missing; 78 if the profile's sandbox does not work here.
set -euo pipefail

prog=codex_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

launch_cli codex "$@"
