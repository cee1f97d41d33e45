# shellcheck shell=bash
# Shared preamble of the worker launchers; sourced, never run. The caller sets `prog`
# and calls `take_request_file "$@"`, then `require_bridge_env`, `read_max_turns` and
# `write_bridge_mcp_config` as it needs. Everything here exits with 2 on a bad invocation.

fail() { # fail CODE MESSAGE...
    local code=$1
    shift
    printf '%s: %s\n' "${prog:-agent-bridge-launcher}" "$*" >&2
    exit "$code"
}

# Sets request_file to the absolute path of the one argument, a readable file.
take_request_file() {
    [[ $# -eq 1 ]] || fail 2 "usage: $prog REQUEST_FILE"
    request_file=$1
    [[ -f $request_file && -r $request_file ]] || fail 2 "request file is not a readable file: $request_file"
    [[ $request_file == /* ]] || request_file=$PWD/$request_file
}

# The supervisor's environment; sets attempt_dir.
require_bridge_env() {
    local name
    for name in AGENT_ID AGENT_BRIDGE_MESSAGE_ID AGENT_BRIDGE_DB AGENT_BRIDGE_CONFIG \
        AGENT_BRIDGE_PROJECT AGENT_BRIDGE_PYTHON AGENT_BRIDGE_ATTEMPT_DIR; do
        [[ -n ${!name:-} ]] || fail 2 "required environment variable $name is not set"
    done
    attempt_dir=$AGENT_BRIDGE_ATTEMPT_DIR
    [[ -d $attempt_dir ]] || fail 2 "AGENT_BRIDGE_ATTEMPT_DIR is not a directory: $attempt_dir"
    [[ -x $AGENT_BRIDGE_PYTHON ]] || fail 2 "AGENT_BRIDGE_PYTHON is not executable: $AGENT_BRIDGE_PYTHON"
}

# require_command BIN WHAT [HOW]: exit 127 (the shell's own "command not found") unless BIN
# is a command on PATH or an executable path; the line names WHAT and, if given, HOW to fix it.
require_command() {
    command -v -- "$1" >/dev/null 2>&1 || fail 127 "$2 not found: '$1'${3:+ ($3)}"
}

# Sets max_turns from AGENT_BRIDGE_MAX_TURNS (empty when unset).
read_max_turns() {
    max_turns=${AGENT_BRIDGE_MAX_TURNS:-}
    if [[ -n $max_turns && ! $max_turns =~ ^[1-9][0-9]*$ ]]; then
        fail 2 "AGENT_BRIDGE_MAX_TURNS must be a positive integer, got: $max_turns"
    fi
}

# The bridge tools a worker may call, and those it must not even see, are defined once in
# Python (dispatcher/core/permissions.py: WORKER_BRIDGE_TOOLS, NON_WORKER_BRIDGE_TOOLS); each
# launcher takes them from there or from its CLI's profile module (dispatcher/clis/),
# never spelling a tool name itself.

# write_bridge_mcp_config FILE [TYPE]: an MCP config with exactly one stdio server,
# agent_bridge, running as a worker (AGENT_BRIDGE_ROLE=worker) on the supervisor's
# resolved store, config, runtime directory and limits. Written by Python so that paths
# are JSON-escaped; created with O_EXCL|O_NOFOLLOW, so never through a planted name.
write_bridge_mcp_config() {
    "$AGENT_BRIDGE_PYTHON" - "$@" <<'PY'
import json, os, sys

sys.path.insert(0, os.environ["AGENT_BRIDGE_PROJECT"])
from dispatcher.dispatch.worker_mcp import bridge_server
from dispatcher.core.private_files import create_private_file

server = bridge_server(os.environ)
if len(sys.argv) > 2:
    server = {"type": sys.argv[2], **server}
create_private_file(sys.argv[1], json.dumps({"mcpServers": {"agent_bridge": server}}, indent=2) + "\n")
PY
}
