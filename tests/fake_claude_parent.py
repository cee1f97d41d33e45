"""A stand-in for the Claude Code process in hook tests: run as
``python tests/fake_claude_parent.py [claude's flags...]`` so that /proc/<pid>/cmdline carries
those flags; it starts ``agent-bridge hook claude Stop ...`` (the arguments after ``++``) the way
Claude does (its own process group, CLAUDE_PID set, the hook JSON on stdin), prints the hook's
pid, then one JSON line with the hook's exit code and output."""

import json
import os
import signal
import subprocess
import sys

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: None)  # the test signals the hook's group, not us
    at = sys.argv.index("++")
    hook_args, stdin = sys.argv[at + 1 :], os.environ.pop("FAKE_HOOK_STDIN", "").encode()
    child = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "hook", *hook_args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "CLAUDE_PID": os.environ.get("FAKE_CLAUDE_PID", str(os.getpid()))},
    )
    print(child.pid, flush=True)
    out, err = child.communicate(stdin)
    print(json.dumps({"rc": child.returncode, "stdout": out.decode(), "stderr": err.decode()}), flush=True)
