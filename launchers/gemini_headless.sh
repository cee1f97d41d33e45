#!/usr/bin/env bash
# Agent Bridge worker launcher: Gemini CLI, one non-interactive run (gemini -p).
#
# The launch plan (argv, environment, the private GEMINI_CLI_HOME and its settings.json written
# into the attempt dir, the sandbox check) is computed in Python: dispatcher/clis/gemini/launch.py,
# tested as a pure function.
# Checked against Gemini CLI 0.61.0 (npm @google/gemini-cli; `gemini --version` -> "0.61.0"):
# every flag it passes appears in `gemini --help` of that version, and the whole launcher runs
# end to end in tests/agent_clis/test_gemini.py (the real binary against a scripted model server).
#
# Contract (fixed by the dispatcher):  gemini_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
#   REQUEST_FILE's content goes to Gemini on stdin only (Gemini puts stdin before the -p
#   text); argv carries a FIXED instruction, never the task text.
# Environment: AGENT_ID, AGENT_BRIDGE_MESSAGE_ID, AGENT_BRIDGE_DB, AGENT_BRIDGE_CONFIG,
#   AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON, AGENT_BRIDGE_ATTEMPT_DIR (required);
#   AGENT_BRIDGE_RUNTIME_DIR, AGENT_BRIDGE_MAX_BODY_BYTES, AGENT_BRIDGE_LOG_LEVEL,
#   AGENT_BRIDGE_WORKER_TOKEN (optional: passed on to the worker's bridge server);
#   GEMINI_BIN (optional, default `gemini` on PATH);
#   GEMINI_CLI_HOME (optional: where the user's own .gemini lives, default $HOME; the
#     worker itself gets a private home, see dispatcher/clis/gemini/launch.py);
#   AGENT_BRIDGE_GEMINI_AUTH_TYPE (optional: Gemini's security.auth.selectedType for the
#     worker, e.g. gemini-api-key, oauth-personal, vertex-ai; see docs/launchers.md);
#   AGENT_BRIDGE_MAX_TURNS (optional positive integer -> model.maxSessionTurns);
#   AGENT_BRIDGE_PERMISSIONS (optional: the agent's permission profile as JSON, default level
#     bridge; dispatcher/clis/gemini/profile.py turns it into Gemini's terms, see
#     "Permission profile" below); AGENT_BRIDGE_WORKSPACE (the workspace, also the cwd).
# The CLI's -o json output goes to gemini-result.json in the attempt dir (on an error
# Gemini 0.61.0 writes its JSON to stderr instead, i.e. into the attempt's worker.log).
# Exit code: Gemini's own exit code; 2 for a bad invocation (an invalid AGENT_BRIDGE_PERMISSIONS
# included); 127 if the CLI is missing; 78 when the profile cannot be enforced here (level shell
# without a working bubblewrap for Gemini's tool sandbox).
set -euo pipefail

prog=gemini_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

launch_cli gemini "$@"
