#!/usr/bin/env bash
# Agent Bridge worker launcher for the configs that name it ("launcher": "launchers/gemini_headless.sh",
# as config.json had it before agents named their CLI): the same run as launchers/agent_headless.sh
# for an agent with "cli": "gemini". What the run reads and does: dispatcher/clis/gemini/launch.py.
# Contract (fixed by the dispatcher):  gemini_headless.sh REQUEST_FILE; cwd = workspace.
set -euo pipefail

prog=gemini_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

launch_cli gemini "$@"
