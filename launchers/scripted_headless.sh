#!/usr/bin/env bash
# Agent Bridge worker launcher for the quick start: the scripted demo worker, no model.
#
# `agent-bridge init --scripted` names this launcher in config.json, so the listener finds the
# worker from the config alone, whichever shell started it (no variable to export).
# Contract (fixed by the dispatcher):  scripted_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
# The worker (dispatcher/ops/demo_worker.py) acknowledges the task and answers it through the
# bridge's own MCP server, as a worker of a real CLI would.
set -euo pipefail

prog=scripted_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

take_request_file "$@"
require_bridge_env

exec "$AGENT_BRIDGE_PYTHON" -m dispatcher.ops.demo_worker "$request_file"
