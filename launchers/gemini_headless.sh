#!/usr/bin/env bash
# Agent Bridge worker launcher: Gemini CLI, one non-interactive run (gemini -p).
#
# Checked against Gemini CLI 0.61.0 (npm @google/gemini-cli; `gemini --version` -> "0.61.0"):
# every flag below appears in `gemini --help` of that version, and the whole launcher runs
# end to end in tests/agent_clis/test_gemini.py (the real binary against a scripted model server).
#
# Contract (fixed by the dispatcher):  gemini_headless.sh REQUEST_FILE
#   cwd = workspace, stdin = /dev/null, stdout/stderr = private per-attempt log.
#   REQUEST_FILE's content goes to Gemini on stdin only (Gemini puts stdin before the -p
#   text); argv carries a FIXED instruction, never the task text.
# Environment: AGENT_ID, AGENT_BRIDGE_MESSAGE_ID, AGENT_BRIDGE_DB, AGENT_BRIDGE_CONFIG,
#   AGENT_BRIDGE_PROJECT, AGENT_BRIDGE_PYTHON, AGENT_BRIDGE_ATTEMPT_DIR (required);
#   AGENT_BRIDGE_RUNTIME_DIR, AGENT_BRIDGE_MAX_BODY_BYTES, AGENT_BRIDGE_LOG_LEVEL,
#   AGENT_BRIDGE_WORKER_TOKEN (optional: passed on to the worker's bridge server);
#   GEMINI_BIN (optional, default `gemini` on PATH);
#   GEMINI_CLI_HOME (optional: where the user's own .gemini lives, default $HOME; the
#     worker itself gets a private home, see below);
#   AGENT_BRIDGE_GEMINI_AUTH_TYPE (optional: Gemini's security.auth.selectedType for the
#     worker, e.g. gemini-api-key, oauth-personal, vertex-ai; see "Auth" below);
#   AGENT_BRIDGE_MAX_TURNS (optional positive integer -> model.maxSessionTurns);
#   AGENT_BRIDGE_PERMISSIONS (optional: the agent's permission profile as JSON, default level
#     bridge; dispatcher/clis/gemini/profile.py turns it into Gemini's terms, see
#     "Permission profile" below); AGENT_BRIDGE_WORKSPACE (the workspace, also the cwd).
# The CLI's -o json output goes to gemini-result.json in the attempt dir (on an error
# Gemini 0.61.0 writes its JSON to stderr instead, i.e. into the attempt's worker.log).
# Exit code: Gemini's own exit code; 2 for a bad invocation (an invalid AGENT_BRIDGE_PERMISSIONS
# included); 127 if the CLI is missing; 78 when the profile cannot be enforced here (level shell
# without a working bubblewrap for Gemini's tool sandbox).
set -euo pipefail
set -o noclobber  # a `>` redirect never reuses an existing name (a planted file or link)
umask 077

prog=gemini_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

take_request_file "$@"

require_bridge_env

read_max_turns

gemini_bin=${GEMINI_BIN:-gemini}
require_command "$gemini_bin" "Gemini CLI" "install @google/gemini-cli, or set GEMINI_BIN to its path"

# --- Private GEMINI_CLI_HOME -------------------------------------------------------
# Gemini keeps everything under $GEMINI_CLI_HOME/.gemini (default ~/.gemini): settings,
# MCP servers, extensions, and the chat records of every session, task text included
# (.gemini/tmp/<project>/chats/). The worker gets its own home in the attempt dir, so
# those records stay with the attempt. Into its .gemini go:
#   settings.json          generated: only the bridge server and the worker's settings.
#   oauth_creds.json, google_accounts.json
#                          symlinks to the user's files when present ("Login with Google"
#                          tokens). Symlinks, not copies, so a refreshed token is saved for
#                          the user too.
#   .env                   symlink to the user's ~/.gemini/.env when present (Gemini reads
#                          GEMINI_API_KEY and friends from it).
# Deliberately NOT linked: the user's settings.json (its mcpServers and tools), extensions/,
# skills, GEMINI.md memory, policies, history and tmp/ (chat records).
user_dir=${GEMINI_CLI_HOME:-${HOME:-}}/.gemini
worker_home=$attempt_dir/gemini-home
mkdir -m 700 -- "$worker_home"  # must be new: an existing name (say, a planted link) fails the launch
mkdir -m 700 -- "$worker_home/.gemini"
for item in oauth_creds.json google_accounts.json .env; do
    if [[ -f $user_dir/$item ]]; then
        ln -s -- "$user_dir/$item" "$worker_home/.gemini/$item"
    fi
done

# The bridge server: _common.sh writes the {"mcpServers": {"agent_bridge": ...}} object with
# the worker environment passed explicitly (AGENT_ID, store, config, runtime dir, limits,
# role, worker token); the settings below add Gemini's own keys to it.
mcp_config=$attempt_dir/gemini-mcp-config.json
write_bridge_mcp_config "$mcp_config"

settings=$worker_home/.gemini/settings.json
# Auth: the worker's settings replace the user's, so the auth type is carried over:
# AGENT_BRIDGE_GEMINI_AUTH_TYPE, else the user's security.auth.selectedType, else
# gemini-api-key when GEMINI_API_KEY is set (GOOGLE_GEMINI_BASE_URL alone would make
# Gemini pick the "gateway" type, which headless runs reject with exit 41), else none:
# Gemini then derives it from GOOGLE_GENAI_USE_VERTEXAI / GOOGLE_GENAI_USE_GCA.
#
# Permission profile (dispatcher/clis/gemini/profile.py says what enforces each level):
# the generated settings get tools.core (every tool offered, by exact name: the bridge's worker
# tools, plus read_file & co at read, write_file/replace at edit, run_shell_command(<prefix>)
# per allowed command at shell; none at project, where the workspace's settings decide) and,
# at shell, Gemini's tool sandbox (security.toolSandboxing). The script prints the level, then
# the extra flags (--approval-mode, --include-directories), one per line; it exits 2 on an
# invalid AGENT_BRIDGE_PERMISSIONS and 78 on a profile Gemini cannot express.
mkdir -m 700 -- "$attempt_dir/tmp"
profile_lines=$("$AGENT_BRIDGE_PYTHON" - "$mcp_config" "$settings" "$user_dir/settings.json" "$max_turns" \
    "$attempt_dir/tmp" <<'PY'
import json, os, sys

sys.path.insert(0, os.environ["AGENT_BRIDGE_PROJECT"])
from dispatcher.clis.gemini import profile as profiles
from dispatcher.core.permissions import WORKER_BRIDGE_TOOLS, ProfileError, profile_from_env
from dispatcher.core.private_files import create_private_file
from dispatcher.core.protected import protected_from_env

mcp_path, settings_path, user_settings, max_turns, attempt_tmp = sys.argv[1:]
try:
    profile = profile_from_env(os.environ).resolved()
    flags = profiles.cli_args(profile)
except ProfileError as exc:
    sys.exit("gemini_headless.sh: " + " ".join(str(exc).split()))  # one line; exit 1 here, 2 below
except profiles.Unenforceable as exc:
    print(f"gemini_headless.sh: permissions unenforceable: {exc}", file=sys.stderr)
    sys.exit(78)
with open(mcp_path, encoding="utf-8") as fh:
    server = json.load(fh)["mcpServers"]["agent_bridge"]
server.update({
    "trust": True,             # the bridge's own tools need no confirmation
    "includeTools": list(WORKER_BRIDGE_TOOLS),  # the worker tools by name (never listener, start_conversation)
    "timeout": 60000,          # ms per tool call
})


def user_setting(section, *keys):
    """A string from the user's own settings.json, or None (missing, unreadable, JSONC)."""
    try:
        with open(user_settings, encoding="utf-8") as fh:
            value = json.load(fh).get(section)
        for key in keys:
            value = value.get(key)
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value else None


auth = os.environ.get("AGENT_BRIDGE_GEMINI_AUTH_TYPE") or user_setting("security", "auth", "selectedType")
if auth is None and os.environ.get("GEMINI_API_KEY"):
    auth = "gemini-api-key"
settings = {
    "mcpServers": {"agent_bridge": server},
    "mcp": {"allowed": ["agent_bridge"]},
    "skills": {"enabled": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False, "logPrompts": False},
    "general": {"maxAttempts": 1, "enableAutoUpdate": False, "enableAutoUpdateNotification": False,
                "checkpointing": {"enabled": False}},
    "model": {"skipNextSpeakerCheck": True},
}
if auth:
    settings["security"] = {"auth": {"selectedType": auth}}
model_name = user_setting("model", "name")  # the user's choice; GEMINI_MODEL still wins over it
if model_name:
    settings["model"]["name"] = model_name
if max_turns:
    settings["model"]["maxSessionTurns"] = int(max_turns)
# The profile's keys: tools.core is an allowlist of tools by exact name, built-in and MCP alike
# (at bridge: only the bridge's worker tools; no read_file, glob, google_web_search,
# invoke_agent, ... at all); at shell also security.toolSandboxing and its writable paths.
for section, keys in profiles.settings_keys(profile, attempt_tmp).items():
    settings.setdefault(section, {}).update(keys)
# At the levels that write, a BeforeTool hook refuses writes into the bridge's own files and
# any .git (core.protected).
hook = profiles.hook_command(os.environ["AGENT_BRIDGE_PYTHON"], os.environ["AGENT_BRIDGE_PROJECT"],
                             protected_from_env(os.environ))
if hooks := profiles.hooks_keys(profile, hook):
    settings["hooks"] = hooks
create_private_file(settings_path, json.dumps(settings, indent=2) + "\n")
print("\n".join([profile.level, *flags]))
PY
) || { code=$?; [[ $code == 78 ]] && exit 78; exit 2; }
level=${profile_lines%%$'\n'*}
profile_flags=()
if [[ $profile_lines == *$'\n'* ]]; then
    mapfile -t profile_flags <<<"${profile_lines#*$'\n'}"
fi

# Level shell: an allowed command runs in Gemini's tool sandbox (bubblewrap: read-only /,
# writable workspace, private /tmp, no network). Gemini does not check that bwrap works before
# it needs it, so try the same kind of sandbox here, and refuse the level rather than let the
# worker find out command by command.
if [[ $level == shell ]]; then
    command -v bwrap >/dev/null 2>&1 \
        || fail 78 "level shell needs bubblewrap (bwrap) on PATH for Gemini CLI's tool sandbox: install it (Debian: apt-get install bubblewrap), or use level edit"
    bwrap --unshare-all --new-session --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp \
        -- true >/dev/null 2>&1 \
        || fail 78 "level shell needs a working bubblewrap sandbox for Gemini CLI, and 'bwrap --unshare-all' fails here (are unprivileged user namespaces disabled?): enable them, or use level edit"
fi

# The fixed instruction: message id and agent only. Gemini puts stdin (the request file,
# with the task text) before it.
instruction="You are the Agent Bridge worker for agent '$AGENT_ID', working on message $AGENT_BRIDGE_MESSAGE_ID. \
The text above is your task: carry it out exactly as it says, using the agent_bridge tools."

export GEMINI_CLI_HOME=$worker_home
# Gemini writes a "full report" of every failed API call, request contents (the task text)
# included, to os.tmpdir() (/tmp/gemini-client-error-*.json): keep those in the attempt dir.
export TMPDIR=$attempt_dir/tmp
export GEMINI_CLI_NO_RELAUNCH=true  # no second Node process just to raise the heap limit
# Whose settings count. Gemini 0.61.0 reads its settings before it acts on --skip-trust, so
# with the flag alone the workspace's .gemini/settings.json (its tools, hooks, MCP servers) is
# never loaded, while the run itself still counts as trusted (MCP servers start, approval modes
# apply). GEMINI_CLI_TRUST_WORKSPACE=true, by contrast, trusts the folder before the settings
# are read: only level project, where the workspace's settings decide, sets it; every other
# level drops an inherited one.
if [[ $level == project ]]; then
    export GEMINI_CLI_TRUST_WORKSPACE=true
else
    unset GEMINI_CLI_TRUST_WORKSPACE
fi

# Why each flag (Gemini CLI 0.61.0):
#   --skip-trust                     trust the workspace for this run; an untrusted folder
#                                    ends a headless run with exit 55.
#   --allowed-mcp-server-names NAME  only the bridge's server, whatever else is configured.
#   -o json                          one JSON object at the end (response, stats, error).
#   -p INSTRUCTION                   headless mode; stdin (the request file) comes first.
#   "${profile_flags[@]}"            from the permission profile, none at bridge and project:
#     --approval-mode default        at read (no tool needs a confirmation there).
#     --approval-mode auto_edit      at edit and shell: adds Gemini's allowed-path checker to
#                                    write_file and replace (tools.core already allows them).
#     --include-directories DIR      once per extra_dirs entry: the file tools accept paths
#                                    there too (writing only where write tools are offered).
# Not used: -y/--yolo and --approval-mode yolo (they would approve every tool; the bridge
# server's "trust": true approves only its own), --allowed-tools (deprecated).
# exec: Gemini replaces this shell, so the worker's process-group leader is the CLI itself.
# The JSON holds model text: it goes to the private attempt dir only, under a fixed name.
exec "$gemini_bin" --skip-trust --allowed-mcp-server-names agent_bridge "${profile_flags[@]}" -o json \
    -p "$instruction" <"$request_file" >"$attempt_dir/gemini-result.json"
