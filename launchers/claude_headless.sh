#!/usr/bin/env bash
# Agent Bridge worker launcher: Claude Code, one non-interactive run (`claude -p`).
#
# The launch plan (argv, environment, the files written into the attempt dir, the task on stdin)
# is computed in Python: dispatcher/clis/claude/launch.py says why each flag, and is tested as a
# pure function (tests/clis/); docs/launchers.md has the table per permission level.
# Checked against Claude Code 2.1.332; run end to end with that binary, the listener and a
# scripted model: tests/agent_clis/test_claude.py.
#
# Contract (fixed by the dispatcher):  claude_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
#   REQUEST_FILE is a 0600 file with the complete worker prompt, handed to Claude on stdin only.
# Environment: the supervisor's (AGENT_ID, AGENT_BRIDGE_MESSAGE_ID, AGENT_BRIDGE_DB,
#   AGENT_BRIDGE_CONFIG, AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON, AGENT_BRIDGE_ATTEMPT_DIR,
#   AGENT_BRIDGE_PERMISSIONS ...); CLAUDE_BIN, AGENT_BRIDGE_MAX_TURNS, AGENT_BRIDGE_MAX_COST_USD.
# Exit code: Claude's own; 2 for a bad invocation (an invalid profile included); 127 if the CLI
# is missing; 78 if the profile cannot be enforced here (no working sandbox).
set -euo pipefail

prog=claude_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

launch_cli claude "$@"
