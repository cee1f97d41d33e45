"""A permission profile in Codex CLI 0.171.0's own terms (``launchers/codex_headless.sh``).

Codex has no file-read tool: it reads through its shell tool (``exec_command``) and edits
through ``apply_patch`` (offered for known model slugs). So every level above ``bridge``
switches the shell tool on, and three mechanisms of Codex's own enforce the level:

- its OS **sandbox** (bubblewrap): ``read-only`` at ``read`` (no write anywhere; reads are
  NOT confined to the workspace by it), ``workspace-write`` at ``edit`` and ``shell`` (writes
  only in the workspace, the ``extra_dirs`` and a private ``TMPDIR`` in the attempt
  directory; ``/tmp`` is excluded; no network). Every command runs inside it, allowed
  ones included;
- a **PreToolUse hook** (``hook_decision``, run by Codex before each tool call, trusted for
  this run only by ``--dangerously-bypass-hook-trust``): a command must be plain words (no
  shell syntax) and either one of a fixed read-only vocabulary on paths inside the workspace
  or ``extra_dirs`` (``read_command``), or, at ``shell``, start with an ``allow_commands``
  prefix; ``apply_patch`` is denied at ``read`` and confined to the writable roots above.
  Everything else is denied: this is the default-deny that Codex's execpolicy rules lack
  (an unmatched command runs in the sandbox under approval ``never``, and an ``allow`` rule
  runs its command *outside* the sandbox, so the launcher writes no rules);
- its **tool list**: the bridge's worker tools only, by name, as before profiles existed.

``bridge`` is exactly the launcher's behaviour before profiles (shell off, exec's default
``read-only`` sandbox, no hook). ``project`` trusts the workspace in the private Codex home:
its ``.codex/config.toml`` and ``.codex/rules`` load (``--ignore-rules`` is dropped), and it
decides sandbox and approvals; without them Codex exec's defaults (``read-only``, ``never``)
apply. Its ``.codex/hooks.json`` runs only once trusted in a Codex TUI (never here), and the
user's own ``~/.codex/config.toml`` is not loaded at any level.
"""

import json
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dispatcher.core.permissions import PermissionProfile
from dispatcher.core.protected import git_environment, write_refused

# Where the launcher puts this run's policy (read by the hook) and its private TMPDIR.
POLICY_FILE = "codex-permissions.json"
TMP_DIR = "tmp"
# Codex's tool names as a PreToolUse hook sees them, and as denied_tools records them.
HOOK_SHELL = "Bash"  # the hook's name for exec_command
SHELL_TOOL = "exec_command"
PATCH_TOOL = "apply_patch"

BASE_FLAGS = ("--json", "--ephemeral", "--skip-git-repo-check")

# One shell word the hook accepts: plain characters, '...' or "..." without expansions.
_SEGMENT = r"""[A-Za-z0-9_./=:@+,%-]+|'[^']*'|"[^"$`\\!]*\""""
_WORD = re.compile(rf"(?:{_SEGMENT})+")
_LINE = re.compile(rf"(?:{_SEGMENT})+(?:[ \t]+(?:{_SEGMENT})+)*")
_SEGMENTS = re.compile(_SEGMENT)

# The read-only vocabulary a worker may run from ``read`` up: first word -> options it must
# not use (those that execute programs or write files). Any other first word is denied
# (except an allowed prefix at ``shell``).
READ_COMMANDS: dict[str, tuple[str, ...]] = {
    "cat": (),
    "head": (),
    "tail": (),
    "wc": (),
    "nl": (),
    "ls": (),
    "pwd": (),
    "stat": (),
    "grep": (),
    "cut": (),
    "cmp": (),
    "diff": (),
    "realpath": (),
    "du": (),
    "file": ("-C", "--compile"),
    "rg": ("--pre", "--pre-glob", "-z", "--search-zip"),
    "find": ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fls", "-fprint", "-fprint0", "-fprintf"),
    "sort": ("-o", "--output", "--compress-program"),
    "tree": ("-o",),
    "sed": (),  # only `sed -n <N>p` / `sed -n <N>,<M>p` (see read_command)
}
_SED_PRINT = re.compile(r"\d+(,\d+)?p")
_PATCH_PATH = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): (.+)$", re.MULTILINE)


def sandbox_mode(profile: PermissionProfile) -> str | None:
    """The ``--sandbox`` this level runs in; None: the launcher does not choose one."""
    return {"read": "read-only", "edit": "workspace-write", "shell": "workspace-write"}.get(profile.level)


def uses_hook(profile: PermissionProfile) -> bool:
    return profile.level in ("read", "edit", "shell")


def exec_flags(profile: PermissionProfile) -> list[str]:
    """``codex exec`` flags between ``exec`` and the overrides (see the launcher for each)."""
    flags = list(BASE_FLAGS)
    if profile.level != "project":
        flags.append("--ignore-rules")
    mode = sandbox_mode(profile)
    if mode:
        flags += ["--sandbox", mode]
    if uses_hook(profile):
        flags.append("--dangerously-bypass-hook-trust")
    if profile.writes and profile.level != "project":
        for directory in profile.resolved().extra_dirs:
            flags += ["--add-dir", directory]
    return flags


def features(profile: PermissionProfile) -> dict[str, bool]:
    """``[features]`` switches that differ by level (the rest stay off at every level)."""
    return {"shell_tool": profile.level != "bridge", "hooks": uses_hook(profile)}


def toml_string(value: str) -> str:
    """A TOML basic string (a JSON string, once DEL is escaped)."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def config_tables(profile: PermissionProfile, workspace: Path) -> list[str]:
    """Extra config.toml tables for this level (none at ``bridge``)."""
    if profile.level == "bridge":
        return []
    # Every git the shell tool runs gets the bridge's git configuration. Given here, not only
    # inherited: Codex drops inherited variables whose names hold KEY (GIT_CONFIG_KEY_0 ...),
    # and its `set` table is applied after that filter.
    tables = [
        "[shell_environment_policy.set]",
        *(f"{name} = {toml_string(value)}" for name, value in git_environment().items()),
    ]
    if sandbox_mode(profile) == "workspace-write":
        # /tmp is not a writable root; $TMPDIR is, and the launcher points it into the attempt dir.
        tables += [
            "[sandbox_workspace_write]",
            "exclude_slash_tmp = true",
            "exclude_tmpdir_env_var = false",
            "network_access = false",
        ]
    if profile.level == "project":
        tables += [f"[projects.{toml_string(str(workspace))}]", 'trust_level = "trusted"']
    return tables


def hook_command(python: str, project: str, policy: Path) -> str:
    """The PreToolUse hook's command line: this module's ``hook_main`` on the run's policy file."""
    boot = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from dispatcher.dispatch.cli_profiles.codex import hook_main; sys.exit(hook_main(sys.argv[2]))"
    )
    return shlex.join([python, "-I", "-c", boot, project, str(policy)])


def hooks_json(command: str) -> dict[str, Any]:
    """Codex's hooks.json: the hook before every tool call (it lets non-workspace tools through)."""
    return {
        "hooks": {"PreToolUse": [{"matcher": ".*", "hooks": [{"type": "command", "command": command, "timeout": 60}]}]}
    }


def policy_document(
    profile: PermissionProfile, workspace: Path, tmp_dir: Path, protected: Sequence[str] = ()
) -> dict[str, Any]:
    """What the hook needs: the profile, the roots it may read and write, and what no patch may
    touch (``core.protected``: the bridge's files, the repository's git directory)."""
    resolved = profile.resolved()
    return {
        "profile": json.loads(resolved.to_env()),
        "workspace": str(workspace),
        "tmp_dir": str(tmp_dir),
        "protected": list(protected),
    }


def shell_words(command: str) -> list[str] | None:
    """The words bash would run for ``command``, or None when it uses any shell syntax beyond
    plain words and simple quotes (operators, redirections, expansions, globs, newlines)."""
    line = command.strip(" \t")
    if not _LINE.fullmatch(line):
        return None
    return [
        "".join(s[1:-1] if s[0] in "'\"" else s for s in _SEGMENTS.findall(word.group()))
        for word in _WORD.finditer(line)
    ]


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    resolved = path.resolve()  # symlinks followed: a link out of the workspace is outside
    return any(resolved == root or resolved.is_relative_to(root) for root in roots)


def read_command(words: Sequence[str], cwd: Path, roots: Sequence[Path]) -> str | None:
    """None when ``words`` is a read-only command on paths inside ``roots``, else why not."""
    name, args = words[0], list(words[1:])
    if name not in READ_COMMANDS:
        return f"{name} is not a read-only command"
    banned = READ_COMMANDS[name]
    for arg in args:
        if name == "rg" and arg.startswith("-") and not arg.startswith("--") and "z" in arg:
            return f"{name} {arg} may run programs or write files"
        if arg in banned or any(arg.startswith(b + "=") or (len(b) == 2 and arg.startswith(b)) for b in banned):
            return f"{name} {arg} may run programs or write files"
    if name == "sed" and not (len(args) >= 2 and args[0] == "-n" and _SED_PRINT.fullmatch(args[1])):
        return "sed only as `sed -n <N>p` or `sed -n <N>,<M>p`"
    if not _inside(cwd, roots):
        return "the working directory is outside the workspace"
    for arg in args:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if value.startswith("-") or not value:
            continue
        if not _inside(cwd / value, roots):
            return f"a path outside the workspace: {value}"
    return None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def hook_decision(policy: Mapping[str, Any], event: Mapping[str, Any]) -> str | None:
    """Why the hook denies this tool call, or None to let it through (pure)."""
    profile = PermissionProfile.from_json(policy["profile"])
    workspace = Path(policy["workspace"]).resolve()
    read_roots = [workspace, *(Path(d).resolve() for d in profile.extra_dirs)]
    write_roots = [*read_roots, Path(policy["tmp_dir"]).resolve()]
    tool = event.get("tool_name")
    tool_input = _object(event.get("tool_input"))
    cwd = Path(str(event.get("cwd") or workspace))
    if tool == HOOK_SHELL:
        command = tool_input.get("command")
        words = shell_words(command) if isinstance(command, str) else None
        if words is None:
            return f"denied {SHELL_TOOL}: only plain commands (no shell syntax) at level {profile.level}"
        if profile.level == "shell" and profile.allows_command(words):
            return None
        why = read_command(words, cwd, read_roots)
        if why is None:
            return None
        listed = " or on the allow list" if profile.level == "shell" else ""
        return f"denied {SHELL_TOOL}: {why}; level {profile.level} allows read-only commands{listed}"
    if tool == PATCH_TOOL:
        if not profile.writes:
            return f"denied {PATCH_TOOL}: level {profile.level} does not edit files"
        patch = tool_input.get("command")
        paths = _PATCH_PATH.findall(patch) if isinstance(patch, str) else []
        if not paths:
            return f"denied {PATCH_TOOL}: no file named in the patch"
        for name in paths:
            if not _inside(cwd / name.strip(), write_roots):
                return f"denied {PATCH_TOOL}: writes only inside the workspace at level {profile.level}"
            if (why := write_refused(cwd / name.strip(), policy.get("protected", ()))) is not None:
                return f"denied {PATCH_TOOL}: {why}"
        return None
    return None


def hook_main(policy_path: str) -> int:
    """The hook itself: the event on stdin, a deny decision on stdout. It fails closed: any
    error denies the call (Codex lets a call through when a hook crashes)."""
    try:
        policy = json.loads(Path(policy_path).read_text(encoding="utf-8"))
        reason = hook_decision(policy, json.loads(sys.stdin.read()))
    except Exception as exc:  # noqa: BLE001 - any failure must deny, never allow
        reason = f"denied: the permission hook failed ({type(exc).__name__})"
    if reason is not None:
        # The hook's answer to Codex is its stdout (the PreToolUse contract).
        decision = {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}
        print(json.dumps({"hookSpecificOutput": decision}))  # noqa: T201
    else:
        print("{}")  # noqa: T201 - no decision: the call goes on
    return 0
