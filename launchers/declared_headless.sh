#!/usr/bin/env bash
# Agent Bridge worker launcher for the configs that name it ("launcher": "launchers/declared_headless.sh"
# beside a `cli` block): the same run as launchers/agent_headless.sh for an agent that declares its
# CLI (argv template, how the prompt is passed, its MCP config template, the highest level it
# enforces). What the run does: dispatcher/clis/declared.py; docs/agent-clis.md, "Add your own CLI".
# Contract (fixed by the dispatcher):  declared_headless.sh REQUEST_FILE; cwd = workspace.
# Exit code: the CLI's own; 2 for a bad invocation (no cli block, an invalid profile); 127 if the
# declared program is missing; 78 when the agent's level is above the declared max_level.
set -euo pipefail

prog=declared_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

launch_cli declared "$@"
