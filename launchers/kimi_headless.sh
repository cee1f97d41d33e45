#!/usr/bin/env bash
# Agent Bridge worker launcher: Kimi Code, one non-interactive run (prompt mode).
#
# The launch plan (argv, environment, the private Kimi home and agent file written into the
# attempt dir) is computed in Python: dispatcher/clis/kimi/launch.py, tested as a pure function.
# Checked against Kimi Code 2.1.0 (npm @moonshot-ai/kimi-code; `kimi --version` -> "2.1.0"):
# every flag it passes appears in `kimi --help` of that version, and tests/agent_clis/test_kimi.py runs
# this launcher end to end (the real listener, the 2.1.0 binary on Node 22, the real bridge
# server, a scripted Anthropic-style model on 127.0.0.1).
#
# Kimi automation is OFF by default in config.json ("kimi": {"auto": false}). In prompt
# mode (-p) Kimi Code 2.1.0 runs under its automatic permission policy: every tool the
# agent can see is approved without asking, and -p cannot be combined with
# --yolo/--auto/--plan. [[permission.rules]] in config.toml are parsed but not applied in
# 2.1.0 (a deny rule for Read did not stop a Read): what the model can *see* is the only
# control. Turning it on is a deliberate local decision; see docs/launchers.md.
#
# Contract (fixed by the dispatcher):  kimi_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
#   Kimi takes its prompt only from argv, so argv carries a FIXED instruction naming the
#   message id and the request file path; the task text itself never reaches argv/env.
# Environment: AGENT_ID, AGENT_BRIDGE_MESSAGE_ID, AGENT_BRIDGE_DB, AGENT_BRIDGE_CONFIG,
#   AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON, AGENT_BRIDGE_ATTEMPT_DIR (required);
#   AGENT_BRIDGE_RUNTIME_DIR, AGENT_BRIDGE_MAX_BODY_BYTES, AGENT_BRIDGE_LOG_LEVEL,
#   AGENT_BRIDGE_WORKER_TOKEN (optional: passed on to the worker's bridge server);
#   KIMI_BIN (optional, default `kimi` on PATH);
#   KIMI_NODE (optional: a Node >= 22.19 binary used to run KIMI_BIN, for npm installs
#     whose `kimi` script would otherwise pick up an older `node` from PATH);
#   KIMI_CODE_HOME (optional: the user's real Kimi home, default ~/.kimi-code; the
#     worker itself gets a private home, see below);
#   AGENT_BRIDGE_MAX_TURNS (optional positive integer -> KIMI_LOOP_MAX_STEPS_PER_TURN,
#     unless that is already set; Kimi counts steps, not turns, so this is approximate).
#   AGENT_BRIDGE_PERMISSIONS (optional: the agent's permission profile as JSON, set by the
#     supervisor; absent = level bridge), AGENT_BRIDGE_WORKSPACE (the workspace, also the cwd).
# Exit code: Kimi's own exit code; 2 for a bad invocation (an invalid profile included);
#   78 if the profile cannot be enforced by Kimi (level project); 127 if the CLI is missing.
set -euo pipefail

prog=kimi_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

launch_cli kimi "$@"
