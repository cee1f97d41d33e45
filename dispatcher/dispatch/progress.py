"""The per-agent progress document and its one-line rendering (payload-free by construction).

Only ids, enums, numbers and agent names go in. The document is replaced atomically
(temp file + rename), so a reader sees the old or the new version, never half of one.
"""

import json
from pathlib import Path
from typing import Any

from dispatcher.core import clock
from dispatcher.core.private_files import ensure_private_dir, write_atomically

FORMAT_VERSION = 2
STAGES = ("stopped", "starting", "idle", "received", "supervising", "error")


def write_progress(path: Path, **fields: Any) -> dict:
    doc = {"format_version": FORMAT_VERSION, **fields, "updated_at": round(clock.now(), 3)}
    # The directory holding it must still be ours, not a link or another user's.
    ensure_private_dir(path.parent, "runtime directory")
    write_atomically(path, json.dumps(doc))
    return doc


def read_progress(path: Path) -> tuple[dict | None, str | None]:
    """Returns (document, problem) where problem is None, 'missing_file', 'unreadable' or 'no_format_version'."""
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None, "missing_file"
    except (OSError, ValueError):
        return None, "unreadable"
    if not isinstance(doc, dict):
        return None, "unreadable"
    if "format_version" not in doc:
        return doc, "no_format_version"
    return doc, None


def render_last(last: dict | None) -> str:
    if not last:
        return ""
    parts = [f"last msg#{last.get('message_id')}", f"sender={last.get('sender')}", f"result={last.get('result')}"]
    if last.get("duration_seconds") is not None:
        parts.append(f"in {last['duration_seconds']:.1f}s")
    if last.get("exit_code") is not None:
        parts.append(f"rc={last['exit_code']}")
    if last.get("error_kind"):
        parts.append(f"error_kind={last['error_kind']}")
    if last.get("reason"):  # a failure: its cause in short (`listener status` has the fix)
        parts.append(f"why={last['reason'].split(': ', 1)[0]}")
    if last.get("denied_tools"):
        parts.append(f"denied={last['denied_tools']}")
    return " | " + " ".join(parts)


def render_line(agent: str, stage: str, doc: dict | None, detail: str | None = None) -> str:
    """E.g. ``[claude] idle | last msg#43 sender=kimi result=succeeded in 21.5s rc=0``."""
    head = f"[{agent}] {stage}"
    current = (doc or {}).get("current")
    if stage in ("received", "supervising") and current:
        head += f" msg#{current.get('message_id')} sender={current.get('sender')}"
        if current.get("supervisor_pid"):
            head += f" supervisor={current['supervisor_pid']}"
        if current.get("started_at"):
            head += f" for {max(0, int(clock.now() - current['started_at']))}s"
    if detail:
        head += f" ({detail})"
    return head + render_last((doc or {}).get("last"))
