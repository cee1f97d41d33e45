"""Kimi Code's PreToolUse hook for a worker's permission profile (see kimi.py).

Kimi runs it before every tool call as ``PYTHON -I kimi_hook.py POLICY_JSON`` with the call as
JSON on stdin; exit 2 refuses the call and its stderr line becomes the tool result. Kimi 2.1.0
treats any other exit code as "allow", so every error this script can catch refuses the call.
"""

import sys
from pathlib import Path


def main() -> int:
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the project, before anything else
        from dispatcher.clis.kimi.profile import hook_main

        code, line = hook_main(sys.argv[1], sys.stdin.read())
    except BaseException:  # noqa: BLE001 - fail closed: an unreadable call or policy is refused
        code, line = 2, "Denied by the Agent Bridge permission profile: the permission hook failed."
    if line:
        print(line, file=sys.stderr)  # noqa: T201 - Kimi shows the hook's stderr line to the model as the refusal
    return code


if __name__ == "__main__":
    sys.exit(main())
