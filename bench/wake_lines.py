"""What a Monitor watch's stdout line says, for the wake benchmarks (pure, no I/O).

Our ``inbox watch`` names messages by id (``2 new for claude: #41 from kimi (task), ...``);
dlb-mcp's ``dlb-monitor`` prints one line per message with no id but a quoted snippet of its
body (``2026-06-30T21:30:14Z bravo: "ping, can you ..."``), so the benchmarks recognise a dlb
message by a nonce in its body. Reports only ever show a line's *shape*, never its text.
"""

from __future__ import annotations

import re

OURS_IDS = re.compile(r"#(\d+) from ")
DLB_LINE = re.compile(r'^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) (.*?): "(.*)"$')


def ours_line(line: str) -> tuple[str, list[int]]:
    """(``new``, ``unread`` or ``other``, the ids named) of one ``inbox watch`` line."""
    kind = "new" if " new for " in line else "unread" if " unread for " in line else "other"
    return kind, [int(i) for i in OURS_IDS.findall(line)] if kind != "other" else []


def dlb_line(line: str) -> tuple[str, str, str] | None:
    """(UTC timestamp, sender, snippet) of one ``dlb-monitor`` line; None for anything else."""
    m = DLB_LINE.match(line.rstrip("\n"))
    return (m.group(1), m.group(2), m.group(3)) if m else None


def dlb_nonce(line: str, body_prefix: str) -> str | None:
    """The nonce (digits) of a benchmark body ``<body_prefix> <nonce>`` quoted whole on a
    dlb-monitor line; None for any other line or a truncated snippet."""
    parsed = dlb_line(line)
    if parsed is None:
        return None
    head, _, nonce = parsed[2].rpartition(" ")
    return nonce if head == body_prefix and nonce.isdigit() else None


def line_shape(line: str, text: str) -> str:
    """The line with ``text`` (the message body) replaced by ``<text>`` and every digit by 9:
    what a line carries, printable without its payload."""
    return re.sub(r"\d", "9", line.rstrip("\n").replace(text, "<text>"))
