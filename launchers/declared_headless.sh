#!/usr/bin/env bash
# Agent Bridge worker launcher: the agent CLI the agent declares in config.json (its `cli` block:
# argv template, how the prompt is passed, its MCP config template, the highest level it enforces).
#
# The launch plan is computed in Python from the declaration: dispatcher/clis/declared.py; what
# such a CLI gets and what it does not: docs/agent-clis.md, "Add your own CLI".
# Contract (fixed by the dispatcher):  declared_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
# Exit code: the CLI's own; 2 for a bad invocation (no cli block, an invalid profile); 127 if the
# declared program is missing; 78 when the agent's level is above the declared max_level.
set -euo pipefail

prog=declared_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

launch_cli declared "$@"
