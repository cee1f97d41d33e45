# shellcheck shell=bash
# Shared preamble of the worker launchers; sourced, never run. The caller sets `prog` and
# calls `take_request_file "$@"` and `require_bridge_env`, or `launch_cli CLI "$@"` for an agent
# CLI, whose launch plan (flags, environment, files) is Python's, never this shell's.
# Everything here exits with 2 on a bad invocation.

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

# launch_cli CLI "$@": the launcher of an agent CLI whose launch plan is Python's
# (dispatcher/clis/<cli>/launch.py): the request file and the supervisor's environment checked
# here, then exec into dispatcher/dispatch/launch.py, which writes the plan's files into the
# attempt dir and execs the CLI itself (so the CLI leads the worker's process group).
launch_cli() {
    local cli=$1
    shift
    take_request_file "$@"
    require_bridge_env
    # shellcheck disable=SC2016  # the Python program's own text
    exec "$AGENT_BRIDGE_PYTHON" -c 'import sys; sys.path.insert(0, sys.argv[1]); from dispatcher.dispatch.launch import main; sys.exit(main(*sys.argv[2:5]))' \
        "$AGENT_BRIDGE_PROJECT" "$cli" "$request_file" "$prog"
}
