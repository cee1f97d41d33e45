#!/usr/bin/env bash
# Agent Bridge worker launcher: one non-interactive run of the agent CLI the agent's config.json
# entry names (`"cli": "codex"`, or an object declaring a CLI of your own). The supervisor says
# which in AGENT_BRIDGE_CLI; an agent with a `cli` and no `launcher` runs this one.
#
# The launch plan (argv, environment, the files written into the attempt dir, how the task
# reaches the CLI) is computed in Python by the CLI's module, dispatcher/clis/<cli>/launch.py
# (a declared CLI's: dispatcher/clis/declared.py), tested as a pure function; each module's
# docstring says which variables it reads; docs/launchers.md has the tables per level.
#
# Contract (fixed by the dispatcher):  agent_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
#   REQUEST_FILE is a 0600 file with the complete worker prompt: never in argv or the environment.
# Environment: the supervisor's (AGENT_BRIDGE_CLI, AGENT_ID, AGENT_BRIDGE_MESSAGE_ID,
#   AGENT_BRIDGE_DB, AGENT_BRIDGE_CONFIG, AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON,
#   AGENT_BRIDGE_ATTEMPT_DIR, AGENT_BRIDGE_PERMISSIONS ...) and the CLI's own.
# Exit code: the CLI's own; 2 for a bad invocation (AGENT_BRIDGE_CLI unset or naming no CLI, an
# invalid profile); 127 if the CLI is missing; 78 if the profile cannot be enforced here.
set -euo pipefail

prog=agent_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

[[ -n ${AGENT_BRIDGE_CLI:-} ]] || fail 2 "AGENT_BRIDGE_CLI is not set: the supervisor sets it from the agent's \"cli\" in config.json (add \"cli\", such as \"claude\")"
launch_cli "$AGENT_BRIDGE_CLI" "$@"
