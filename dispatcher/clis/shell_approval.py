"""A worker's shell hook asks a person for a command outside its allow list (docs/approvals.md).

With ``ask`` at ``shell``, the CLI's PreToolUse hook on the shell tool is its profile's
``asking_hook_main``: the one gate (``clis.command_gate``) decides as always, and a
command it refuses only for not being on the allow list (``command_gate.askable``) is asked of a
person here, as the worker: the request is recorded in the store for the worker's own attempt
(``bridge.approvals.ask``, the attempt proven by its token, as the worker's bridge server proves
it), the ``approval_waiting`` notice goes out, and the hook waits for the decision with the one
waiting rule (``bridge.approvals.decision``), until the request's expiry (the agent's
``approval_timeout_seconds``, never past the attempt's deadline less its answer margin). Allowed:
the call runs. Denied or unanswered: the hook denies it with the reason the worker's model reads
(answer ``blocked: denied <tool>``).

The hook records a request and reads its decision; it never decides one (no import of a
decision here: only a person's command does, ``ops.approvals``). Everything it needs beyond the
gate is imported only once a person is to be asked: an allowed command's hook stays light. The command's input (its text)
stays in the store: never in a log line or the notice.
"""

import logging
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any


def ask(tool: str, policy: Mapping[str, Any], event: Mapping[str, Any]) -> str | None:
    """A person's answer to this refused ``tool`` call (``command_gate.Ask``): None when they
    allowed it (once, or for the rest of the attempt), else the denial the model reads."""
    import anyio

    from dispatcher.bridge import approvals
    from dispatcher.bridge.counters import count_notice
    from dispatcher.bridge.worker_scope import WorkerScope
    from dispatcher.core import clock
    from dispatcher.core.config import load_config
    from dispatcher.core.logs import configure_logging
    from dispatcher.core.notice_spawn import notify_agent
    from dispatcher.core.notices import Notice
    from dispatcher.store import approvals as rows
    from dispatcher.store import open_store

    configure_logging(stderr_level=logging.CRITICAL)  # stdout is the hook's answer: nothing else there
    asker = policy["asker"]
    agent = str(asker["AGENT_ID"])
    config = load_config(Path(asker["AGENT_BRIDGE_CONFIG"]))
    scope = WorkerScope(agent, int(asker["AGENT_BRIDGE_MESSAGE_ID"]), str(asker["AGENT_BRIDGE_WORKER_TOKEN"]))
    tool_input = {"command": event["tool_input"]["command"]}
    conn = open_store(asker["AGENT_BRIDGE_DB"])
    try:
        approval_id, outcome = approvals.ask(
            conn, scope, tool, tool_input, clock.now(), config.agents[agent].approval_timeout_seconds
        )
        if approval_id is not None:
            notice = Notice("approval_waiting", agent, approval_id)
            if (started := notify_agent(config, notice)) is not None:
                count_notice(lambda: conn, notice, started)  # (a hook logs nothing: dropped, docs/metrics.md)
            outcome = anyio.run(
                approvals.decision, partial(rows.get_request, conn, approval_id), clock.now, anyio.sleep
            )
    finally:
        conn.close()
    answer = approvals.prompt_answer(outcome or "expired", tool, tool_input)
    return None if answer["behavior"] == "allow" else str(answer["message"])
