#!/usr/bin/env bash
# Agent Bridge worker launcher: opencode, one non-interactive run (opencode run).
#
# Checked against opencode 1.18.33 (npm opencode-ai; `opencode --version` -> "1.18.33"); the
# whole launcher runs end to end in tests/agent_clis/test_opencode.py (the real binary against
# a scripted OpenAI-compatible model on 127.0.0.1).
#
# Contract (fixed by the dispatcher):  opencode_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
#   REQUEST_FILE's content goes to opencode on stdin only (opencode appends stdin after the
#   argv text); argv carries a FIXED instruction, never the task text.
# Environment: AGENT_ID, AGENT_BRIDGE_MESSAGE_ID, AGENT_BRIDGE_DB, AGENT_BRIDGE_CONFIG,
#   AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON, AGENT_BRIDGE_ATTEMPT_DIR (required);
#   AGENT_BRIDGE_RUNTIME_DIR, AGENT_BRIDGE_MAX_BODY_BYTES, AGENT_BRIDGE_LOG_LEVEL,
#   AGENT_BRIDGE_WORKER_TOKEN (optional: passed on to the worker's bridge server);
#   OPENCODE_BIN (optional, default `opencode` on PATH);
#   AGENT_BRIDGE_OPENCODE_BASE_URL (optional: an OpenAI-compatible base URL such as
#     http://127.0.0.1:8080/v1; the run then uses a provider of its own with that URL, and
#     AGENT_BRIDGE_OPENCODE_MODEL names the model id it serves);
#   AGENT_BRIDGE_OPENCODE_ENV_KEY (optional, with the base URL: the NAME of the environment
#     variable that holds that endpoint's API key; without it no key is sent);
#   AGENT_BRIDGE_OPENCODE_PRICE (optional, with the base URL: "<input>,<output>" USD per
#     million tokens, so opencode reports a cost);
#   AGENT_BRIDGE_OPENCODE_MODEL (optional without a base URL: `provider/model` -> --model;
#     otherwise the user's own global opencode.json decides);
#   AGENT_BRIDGE_PERMISSIONS (optional: the permission profile as JSON, default level bridge;
#     dispatcher/clis/opencode/profile.py turns it into opencode's permission rules).
# Everything else (the private home, the generated config, the permission rules, argv and
# environment) is decided in Python: dispatcher/clis/opencode/launch.py (plan, unit-tested as a
# pure function, with the rules of dispatcher/clis/opencode/profile.py), carried out by
# dispatcher/dispatch/launch.py, which execs opencode: the worker's process-group leader is
# opencode itself. The --format json events go to opencode-events.jsonl in the attempt dir.
# Exit code: opencode's own (0, or 1 for a failed session); 2 for a bad invocation (an
# invalid AGENT_BRIDGE_PERMISSIONS included); 127 if the CLI is missing; 78 when the profile
# cannot be enforced (level shell: opencode has no OS sandbox).
set -euo pipefail

prog=opencode_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

launch_cli opencode "$@"
