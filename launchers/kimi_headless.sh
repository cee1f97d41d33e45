#!/usr/bin/env bash
# Agent Bridge worker launcher: Kimi Code, one non-interactive run (prompt mode).
#
# Checked against Kimi Code 2.1.0 (npm @moonshot-ai/kimi-code; `kimi --version` -> "2.1.0"):
# every flag below appears in `kimi --help` of that version, and tests/agent_clis/test_kimi.py runs
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
set -o noclobber  # a `>` redirect never reuses an existing name (a planted file or link)
umask 077

prog=kimi_headless.sh
# shellcheck source=SCRIPTDIR/_common.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/_common.sh"

take_request_file "$@"

require_bridge_env

read_max_turns

kimi_bin=${KIMI_BIN:-kimi}
require_command "$kimi_bin" "Kimi Code CLI" "install @moonshot-ai/kimi-code, or set KIMI_BIN to its path"
kimi_cmd=("$kimi_bin")
if [[ -n ${KIMI_NODE:-} ]]; then
    require_command "$KIMI_NODE" KIMI_NODE
    kimi_cmd=("$KIMI_NODE" "$(command -v -- "$kimi_bin")")
fi

# --- Private KIMI_CODE_HOME --------------------------------------------------------
# Kimi 2.1.0 has no --mcp-config flag: MCP servers come from $KIMI_CODE_HOME/mcp.json
# (plus the project's .mcp.json and .kimi-code/mcp.json, which Kimi loads only for a
# workspace trusted in its home's trust records). The worker therefore gets its own
# home in the attempt dir, containing:
#   mcp.json      generated: only the agent_bridge server.
#   config.toml   at level bridge a symlink to the user's file: providers, default model,
#                 [loop_control]. Above bridge a private copy of it with the permission
#                 hook appended (see "Permission profile" below).
#   credentials/  symlink to the user's directory: `kimi login` OAuth tokens. A symlink,
#                 not a copy, so a token refreshed by the worker is saved for the user too.
#   device_id, region   symlinks (device identity; the mainland-cn/global login region).
#   bin/rg        above bridge, a symlink to the user's Kimi-downloaded ripgrep, if any
#                 (Glob and Grep need `rg` on PATH or there).
# Deliberately NOT linked: sessions and logs (they hold the task and the model's text and
# stay private to this attempt), plugins, skills, AGENTS.md, the user's mcp.json, and the
# trust records (so the workspace counts as untrusted and its project MCP files are ignored).
user_home=${KIMI_CODE_HOME:-${HOME:-}/.kimi-code}
worker_home=$attempt_dir/kimi-code-home
mkdir -m 700 -- "$worker_home"  # must be new: an existing name (say, a planted link) fails the launch

# --- Permission profile (AGENT_BRIDGE_PERMISSIONS) -------------------------------------
# In prompt mode Kimi 2.1.0 approves every call it is offered, and [[permission.rules]] in
# config.toml are parsed but not applied (a deny rule for Read did not stop a Read). What
# Kimi itself does enforce (dispatcher/clis/kimi/profile.py):
#   - the agent file's `tools:` list: the model is offered exactly these tools, and a call to
#     any other is answered `Tool "X" not found`. Kimi matches built-in tools by exact name,
#     so Bash, Write, Edit, FetchURL, Agent, Skill ... are not offered unless listed. The
#     bridge tools are listed by name, never the `mcp__agent_bridge__*` glob (which would
#     include `listener`).
#       bridge: Read (needed to read REQUEST_FILE). Read is not limited to REQUEST_FILE: it
#               opens any file the user can read whose name Kimi does not treat as a secret
#               (.env*, id_rsa*, credentials* ...); the token files inside credentials/ pass.
#       read: + Glob, Grep.   edit: + Write, Edit.   shell: + Bash.
#   - above bridge, a PreToolUse hook in the private config.toml (clis/kimi/kimi_hook.py):
#     Kimi runs it before every call and refuses the call when it exits 2. It confines file
#     paths (symlinks resolved) to the workspace and extra_dirs (Read also: REQUEST_FILE),
#     and lets Bash run only plain-word commands that start with an allowed command. There is
#     no OS sandbox: an allowed command runs with the user's full rights.
#   - level project: refused, exit 78 (prompt mode applies no workspace permission settings,
#     so it would run every tool unconfined).
# Exit 2: AGENT_BRIDGE_PERMISSIONS is not a valid profile. Exit 78: the profile cannot be
# enforced here. ${base_prompt} in the agent file keeps Kimi's default system prompt.
agent_file=$attempt_dir/kimi-agent-bridge-worker.md
"$AGENT_BRIDGE_PYTHON" - "$agent_file" "$worker_home" "$user_home" "$request_file" <<'PY'
import os, sys

sys.path.insert(0, os.environ["AGENT_BRIDGE_PROJECT"])
from dispatcher.clis.kimi import profile as kimi
from dispatcher.core.permissions import ProfileError, profile_from_env
from dispatcher.core.protected import protected_from_env
from dispatcher.core.private_files import create_private_file

agent_file, worker_home, user_home, request_file = sys.argv[1:5]
try:
    profile = profile_from_env(os.environ)
except ProfileError as exc:
    print(f"kimi_headless.sh: {exc}", file=sys.stderr)
    sys.exit(2)
try:
    text = kimi.agent_file(profile)
    config = None
    if profile.level != "bridge":
        user_config = os.path.join(user_home, "config.toml")
        existing = open(user_config, encoding="utf-8").read() if os.path.isfile(user_config) else None
        # The cwd (the workspace): Kimi resolves relative paths against it.
        policy = kimi.hook_policy(profile, os.getcwd(), request_file, protected_from_env(os.environ))
        hook = os.path.join(os.environ["AGENT_BRIDGE_PROJECT"], "dispatcher", "clis", "kimi", "kimi_hook.py")
        config = kimi.worker_config(existing, kimi.hook_command(os.environ["AGENT_BRIDGE_PYTHON"], hook, policy))
except kimi.Unenforceable as exc:
    print(f"kimi_headless.sh: permission level {profile.level}: {exc}", file=sys.stderr)
    sys.exit(78)
create_private_file(agent_file, text)
if config is not None:
    create_private_file(os.path.join(worker_home, "config.toml"), config)
    rg = os.path.join(user_home, "bin", "rg")
    if os.path.isfile(rg):
        os.mkdir(os.path.join(worker_home, "bin"), 0o700)
        os.symlink(rg, os.path.join(worker_home, "bin", "rg"))
PY
# set -e: the step's exit code (2 or 78) is the launcher's. Then the links (config.toml only
# where the step wrote none, that is at level bridge).
for item in config.toml credentials device_id region; do
    if [[ -e $user_home/$item && ! -e $worker_home/$item ]]; then
        ln -s -- "$user_home/$item" "$worker_home/$item"
    fi
done
if [[ ! -e $worker_home/config.toml ]]; then
    printf '%s: note: no %s; relying on KIMI_MODEL_* environment variables\n' \
        "$prog" "$user_home/config.toml" >&2
fi
write_bridge_mcp_config "$worker_home/mcp.json"

# The fixed instruction: message id and file path only, never the task text.
instruction="You are the Agent Bridge worker for agent '$AGENT_ID', working on message $AGENT_BRIDGE_MESSAGE_ID. \
Read your task from the file $request_file with the Read tool and carry it out exactly as it says, \
using the agent_bridge tools."

export KIMI_CODE_HOME=$worker_home
export KIMI_DISABLE_TELEMETRY=1     # no telemetry events
export KIMI_CODE_NO_AUTO_UPDATE=1   # no update check/download from a worker
if [[ -n $max_turns && -z ${KIMI_LOOP_MAX_STEPS_PER_TURN:-} ]]; then
    export KIMI_LOOP_MAX_STEPS_PER_TURN=$max_turns
fi

# Why each flag (Kimi Code 2.1.0):
#   --agent-file FILE             the agent file above: the level's tools + the bridge tools.
#   --output-format stream-json   one JSON object per line; used for the diagnostics.
#   -p INSTRUCTION                prompt mode: run one prompt and exit. Last, so that
#                                 nothing can be mistaken for its value.
# Not used: --yolo / --auto / --plan (rejected together with -p in 2.1.0).
# exec: Kimi replaces this shell, so the worker's process-group leader is the CLI itself.
# The raw stream holds model text: it goes to the private attempt dir only, under a fixed
# name. Once the worker is gone the supervisor takes the payload-free diagnostics from it
# and from the session's wire.jsonl in the private home (dispatcher/dispatch/cli_results.py).
exec "${kimi_cmd[@]}" --agent-file "$agent_file" --output-format stream-json -p "$instruction" \
    </dev/null >"$attempt_dir/kimi-stream.jsonl"
