"""What every agent CLI's result reader shares: the ledger's words and keys, the rule for
``auth_error``, and readers of untrusted JSON that never raise.

The launchers ``exec`` the CLI (so the worker's process-group leader *is* the CLI, and
nothing of the launcher is left to outlive it). They therefore cannot summarise the
CLI's output themselves: each one sends that output to a fixed file in the private
attempt directory (the CLI's ``output_file``), and the supervisor asks the registry
(``dispatcher/clis/registry.py``) for the CLI whose file is there once the worker's whole
tree is gone. Only booleans, numbers, counts, short enum words and lists of tool names
(the tools a CLI reported denied) come out; the raw files (model text) stay in the
attempt directory.

Every CLI's diagnostics also carry the ledger's common keys (``LEDGER_KEYS``): ``cli``,
``cli_status`` (one word of ``CLI_STATUSES``, decided by a pure ``*_status`` function per
CLI), ``cost_usd`` (only a CLI that reports a price), and ``input_tokens``, ``output_tokens``,
``cache_read_tokens``, ``cache_write_tokens`` (None when the CLI did not say). The
settle transaction copies them into the attempt's ledger columns.

The files were written by the worker, so they are read as untrusted input: no links,
a size cap, and any parse failure is a status, never an exception.
"""

import json
import os
import re
from pathlib import Path
from typing import Any

from dispatcher.core.private_files import read_untrusted

# What the CLI itself said about its run, one word (never the verdict: the store decides that).
CLI_STATUSES = (
    "ok",  # it completed its turn normally
    "api_error",  # the model API failed (connection, 4xx/5xx after the CLI's retries)
    "budget_exceeded",  # it stopped at its cost cap (Claude --max-budget-usd)
    "max_turns",  # it stopped at its turn cap (Claude --max-turns, Gemini exit 53)
    "retryable",  # it said trying again later may work (Kimi exit 75)
    "auth_error",  # no usable credentials: not logged in, an invalid API key (``auth_refused``)
    "input_error",  # its input or arguments were refused (Gemini exit 42)
    "config_error",  # its configuration was refused (Gemini exit 52)
    "untrusted_workspace",  # Gemini exit 55
    "cancelled",  # Gemini exit 130
    "error",  # any other failure it reported
    "no_result",  # it left no readable result (killed, crashed, or never started)
)
LEDGER_KEYS = (
    "cli",
    "cli_status",
    "cost_usd",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
)
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
ENUM = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


# What the agent CLIs print when they have no usable credentials, from their real outputs:
# Claude 2.1.332's result "Not logged in · Please run /login" (and "Invalid API key · Please
# run /login"), Kimi 2.1.0's "No model configured. Run `kimi` and use /login to sign in",
# Codex 0.171.0's "unexpected status 401 Unauthorized: Incorrect API key provided", Gemini's
# "Please set an Auth method" (exit 41) and an API's own authentication error words.
AUTH_REFUSED_WORDS = re.compile(
    r"Not logged in|Invalid API key|use /login|Please run /login|status 40[13] (Unauthorized|Forbidden)"
    r"|Please set an Auth method|authentication_error|invalid_api_key|API key not valid|API_KEY_INVALID",
    re.IGNORECASE,
)
AUTH_HTTP_STATUSES = (401, 403)


def auth_refused(text: Any, http_status: Any = None) -> bool:
    """The one rule for ``auth_error``: the CLI's own words (or the API's HTTP status) say it has
    no usable credentials. Only a bool comes out; the text is never kept."""
    if http_status in AUTH_HTTP_STATUSES:
        return True
    return isinstance(text, str) and AUTH_REFUSED_WORDS.search(text[:MAX_OUTPUT_BYTES]) is not None


def enum_word(value: Any) -> str | None:
    return value if isinstance(value, str) and ENUM.fullmatch(value) else None


def integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def number(value: Any) -> int | float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one: untrusted output never raises."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def parse_json(text: str) -> Any:
    """Parsed JSON, or None for anything unreadable (also absurd nesting or huge integers)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def tokens(usage: Any, *names: str) -> int | None:
    """The first of ``names`` that ``usage`` holds as a non-negative integer."""
    if isinstance(usage, dict):
        for name in names:
            value = integer(usage.get(name))
            if value is not None and value >= 0:
                return value
    return None


def sum_known(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


TOOL_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,40}")  # what the ledger keeps of a tool (attempts._ENUM_WORD)
MAX_DENIED_TOOLS = 16  # attempts.MAX_LIST_ITEMS


def denied_tool_names(denials: Any) -> list[str] | None:
    """The names of the tools a CLI reported denied, first seen first, each once; never their
    arguments. None when the CLI gave no list; a name that is not a plain tool name is left out."""
    if not isinstance(denials, list):
        return None
    names: list[str] = []
    for denial in denials:
        name = denial.get("tool_name") if isinstance(denial, dict) else None
        if isinstance(name, str) and TOOL_NAME.fullmatch(name) and name not in names:
            names.append(name)
    return names[:MAX_DENIED_TOOLS]


WORKER_LOG = "worker.log"


def read(attempt_dir: Path, relative: str) -> str | None:
    # A link, a FIFO, a foreign or hard-linked file: treated as no output (read_untrusted).
    return read_untrusted(attempt_dir, relative, MAX_OUTPUT_BYTES)


def subdirs(directory: Path, relative: str) -> list[str]:
    """The names of the real directories (never links) in ``directory/relative``."""
    try:
        with os.scandir(directory / relative) as entries:
            return [e.name for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
