"""Claude Code's waiting hook: whether Claude Code 2.1.332 runs its ``asyncRewake`` hook in the
background (``claude_backgrounds``), and the Claude process a waiting hook waits beside
(``background_process``), read from ``CLAUDE_PID``, which Claude sets for hooks.

The hook can only tell background from foreground by looking at the Claude process: its argv and
whether its stdout is a terminal, the same test Claude applies. When in doubt it does not wait: a
hook that waited in the foreground would hold a ``claude -p`` run for the whole bound. The
generic waiter is ``dispatcher/wake/hook_wait.py``; this module is what it asks of Claude.

What Claude Code 2.1.332 does with such a hook (read from its bundled JS; the ``SessionStart``
case proved on the real TUI in ``tests/agent_clis/test_claude_session_start.py``):

- an ``asyncRewake`` command hook runs in the background when the session is interactive or has
  streaming input (``-p --input-format stream-json``), else in the foreground;
- its ``timeout`` (seconds; default 600) is a kill timer: at the timeout Claude sends SIGTERM to
  the hook's process group (SIGKILL after a grace) and nothing reaches the model; the same kill
  ends it when the session ends. ``register`` writes ``timeout = wait + WAIT_TIMEOUT_MARGIN_SECONDS``,
  so the hook always ends by itself first;
- exit 2 queues ``Stop hook blocking error from command "<cmd>": <stderr>`` as a ``next``
  priority message with ``stop_hook_active`` set, which starts a turn in an idle session;
- a headless (``-p``) run waits up to 30 s for background asyncRewake hooks before it exits.

The hook can only tell background from foreground by looking at the Claude process
(``CLAUDE_PID``, which Claude sets for hooks): its argv and whether its stdout is a terminal,
the same test Claude applies (``claude_backgrounds``). When in doubt it does not wait: a hook
that waited in the foreground would hold a ``claude -p`` run for the whole bound.
"""

import itertools
from collections.abc import Mapping

from dispatcher.core import processes

CLAUDE_MAX_DEPTH = 8  # how far above the hook Claude may be (a shell or two between)


def claude_backgrounds(argv: list[str], stdout_is_tty: bool | None) -> bool:
    """Whether Claude Code 2.1.332 runs an ``asyncRewake`` hook in the background, from its argv
    (``argv[0]`` the program) and whether its stdout is a terminal (None: unknown).

    Claude: ``(async || asyncRewake && (interactive || hasStreamingInput))``; non-interactive is
    ``-p``/``--print``/``--init-only``/``--sdk-url...`` in the arguments or a stdout that is not a
    terminal; streaming input is ``--input-format stream-json`` (or ``--sdk-url``). Arguments after
    ``--`` are not options. Unknown counts as foreground."""
    args = []
    for arg in argv[1:]:
        if arg == "--":
            break
        args.append(arg)
    sdk = any(a.startswith("--sdk-url") for a in args)
    printing = sdk or any(a in ("-p", "--print", "--init-only") for a in args)
    streaming = (
        sdk
        or "--input-format=stream-json" in args
        or any(a == "--input-format" and b == "stream-json" for a, b in itertools.pairwise(args))
    )
    if printing:
        return streaming
    return stdout_is_tty is True


def background_process(environ: Mapping[str, str]) -> tuple[int, str] | None:
    """(pid, start time) of the Claude Code process that runs this hook when it runs it in the
    background; None otherwise (not under Claude, or in the foreground, or unsure)."""
    raw = environ.get("CLAUDE_PID", "")
    if not raw.isdigit() or int(raw) <= 1:
        return None
    pid = int(raw)
    argv = processes.command_line(pid)  # the cheap look first: a foreground hook never loads psutil
    if argv is None or not claude_backgrounds([a for a in argv if a != ""] or [""], processes.stdout_is_terminal(pid)):
        return None
    if pid not in processes.ancestors()[:CLAUDE_MAX_DEPTH]:
        return None
    start = processes.start_time(pid)
    return None if start is None else (pid, start)
