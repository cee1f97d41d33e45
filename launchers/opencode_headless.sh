#!/usr/bin/env bash
# Agent Bridge worker launcher for the configs that name it ("launcher": "launchers/opencode_headless.sh",
# as config.json had it before agents named their CLI): the same run as launchers/agent_headless.sh
# for an agent with "cli": "opencode". What the run reads and does: dispatcher/clis/opencode/launch.py.
# Contract (fixed by the dispatcher):  opencode_headless.sh REQUEST_FILE; cwd = workspace.
set -euo pipefail

prog=opencode_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

launch_cli opencode "$@"
