"""The scripted model's workspace actions, mapped to each CLI's own tools.

A task in ``MODE=workspace`` names its CLI (``TOOLKIT=claude``) and lists actions, one JSON
object per ``DO=`` line, in order:

- ``{"read": PATH}``: read a file;
- ``{"edit": PATH, "old": TEXT, "new": TEXT}``: replace TEXT in an existing file (read it first);
- ``{"write": PATH, "content": TEXT}``: create a file;
- ``{"run": COMMAND}``: run a shell command (Codex: ``"workdir": DIR`` runs it there).

Each toolkit maps an action to ``(tool name, arguments)`` with the name as the CLI offers it,
or to ``(tool name, None)`` when the CLI does not offer that tool at all: the script then
skips the call and reports the tool as denied. ``denied`` tells a tool result that refused
the action (a permission rule, a sandbox, a path check) from one that carried it out.
"""

import json
import re
import shlex
from collections.abc import Callable

_ACTION = re.compile(r"^DO=(\{.*\})\s*$", re.MULTILINE)
_TOOLKIT = re.compile(r"^TOOLKIT=(\w+)\s*$", re.MULTILINE)
# What the CLIs say when a permission rule, a sandbox or a path check refused a call.
_DENIED = re.compile(
    r"denied|haven't granted|not allowed|read-only file system|not in workspace|outside (of )?the (workspace|project)"
    r"|forbidden|rejected|operation not permitted|permission denied|blocked by policy|not permitted"
    r"|access is blocked|blocked by PreToolUse hook|failed to write file|prevents you from using this specific tool",
    re.IGNORECASE,
)

Mapped = tuple[str, dict | None]


def denied(result: str) -> bool:
    return bool(_DENIED.search(result))


def _offered(turn, name: str) -> bool:
    return name in turn.tools


def claude(action: dict, turn) -> Mapped:
    """Claude Code 2.1.332: Read, Edit, Write, Bash (absolute paths)."""
    if "read" in action:
        name, args = "Read", {"file_path": action["read"]}
    elif "edit" in action:
        name, args = "Edit", {"file_path": action["edit"], "old_string": action["old"], "new_string": action["new"]}
    elif "write" in action:
        name, args = "Write", {"file_path": action["write"], "content": action["content"]}
    else:
        name, args = "Bash", {"command": action["run"], "description": "run the task's command"}
    return name, args if _offered(turn, name) else None


def kimi(action: dict, turn) -> Mapped:
    """Kimi Code 2.1.0: Read{path}, Edit{path,old_string,new_string}, Write{path,content}, Bash{command}.
    A refusal by the permission hook reads "Denied by the Agent Bridge permission profile ..."."""
    if "read" in action:
        name, args = "Read", {"path": action["read"]}
    elif "edit" in action:
        name, args = "Edit", {"path": action["edit"], "old_string": action["old"], "new_string": action["new"]}
    elif "write" in action:
        name, args = "Write", {"path": action["write"], "content": action["content"]}
    else:
        name, args = "Bash", {"command": action["run"]}
    return name, args if _offered(turn, name) else None


def gemini(action: dict, turn) -> Mapped:
    """Gemini CLI 0.61.0: read_file, replace, write_file, run_shell_command (absolute paths)."""
    if "read" in action:
        name, args = "read_file", {"file_path": action["read"]}
    elif "edit" in action:
        name, args = (
            "replace",
            {
                "file_path": action["edit"],
                "old_string": action["old"],
                "new_string": action["new"],
                "instruction": "make the task's edit",
            },
        )
    elif "write" in action:
        name, args = "write_file", {"file_path": action["write"], "content": action["content"]}
    else:
        name, args = "run_shell_command", {"command": action["run"], "description": "run the task's command"}
    return name, args if _offered(turn, name) else None


def _patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"]) + "\n"


def codex(action: dict, turn) -> Mapped:
    """Codex 0.171.0: no read tool, so reads and commands go through ``exec_command{cmd}``;
    edits and new files through the freeform ``apply_patch`` (offered for known model slugs
    only). An edit replaces whole lines: ``old`` and ``new`` are lines of the file."""
    if "read" in action:
        name, args = "exec_command", {"cmd": f"cat {shlex.quote(action['read'])}"}
    elif "run" in action:
        name, args = "exec_command", {"cmd": action["run"]}
        if "workdir" in action:
            args["workdir"] = action["workdir"]
    elif "edit" in action:
        old = [f"-{line}" for line in action["old"].splitlines()]
        new = [f"+{line}" for line in action["new"].splitlines()]
        name, args = "apply_patch", {"input": _patch(f"*** Update File: {action['edit']}", "@@", *old, *new)}
    else:
        body = [f"+{line}" for line in action["content"].splitlines()]
        name, args = "apply_patch", {"input": _patch(f"*** Add File: {action['write']}", *body)}
    return name, args if _offered(turn, name) else None


def opencode(action: dict, turn) -> Mapped:
    """opencode 1.18.33: read{filePath}, edit{filePath,oldString,newString}, write{filePath,content},
    bash{command,description} (absolute paths). A permission rule's refusal reads "The user has
    specified a rule which prevents you from using this specific tool call"."""
    if "read" in action:
        name, args = "read", {"filePath": action["read"]}
    elif "edit" in action:
        name, args = "edit", {"filePath": action["edit"], "oldString": action["old"], "newString": action["new"]}
    elif "write" in action:
        name, args = "write", {"filePath": action["write"], "content": action["content"]}
    else:
        name, args = "bash", {"command": action["run"], "description": "run the task's command"}
    return name, args if _offered(turn, name) else None


TOOLKITS: dict[str, Callable[[dict, object], Mapped]] = {
    "claude": claude,
    "kimi": kimi,
    "gemini": gemini,
    "codex": codex,
    "opencode": opencode,
}


def actions(prompt: str) -> list[dict]:
    return [json.loads(found) for found in _ACTION.findall(prompt)]


def plan_actions(turn) -> tuple[list[tuple[str, dict]], list[str]]:
    """The calls to make, in order, and the tools that were needed but not offered."""
    toolkit_name = _TOOLKIT.search(turn.prompt)
    if toolkit_name is None or toolkit_name.group(1) not in TOOLKITS:
        raise ValueError("a workspace task names its CLI with TOOLKIT=<one of " + ", ".join(TOOLKITS) + ">")
    toolkit = TOOLKITS[toolkit_name.group(1)]
    calls: list[tuple[str, dict]] = []
    missing: list[str] = []
    for action in actions(turn.prompt):
        name, args = toolkit(action, turn)
        if args is None:
            missing.append(name)
        else:
            calls.append((name, args))
    return calls, missing
