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


def render_running(entry: dict) -> str:
    """One running attempt: ``msg#44 sender=kimi supervisor=812 for 3s``."""
    text = f"msg#{entry.get('message_id')}"
    if entry.get("sender"):
        text += f" sender={entry['sender']}"
    if entry.get("supervisor_pid"):
        text += f" supervisor={entry['supervisor_pid']}"
    if isinstance(entry.get("started_at"), int | float):
        text += f" for {max(0, int(clock.now() - entry['started_at']))}s"
    return text


def render_line(agent: str, stage: str, doc: dict | None, detail: str | None = None) -> str:
    """E.g. ``[claude] idle | last msg#43 sender=kimi result=succeeded in 21.5s rc=0``; with
    several workers, each running attempt: ``[codex] supervising 2/2 msg#44 ...; msg#45 ...``."""
    head = f"[{agent}] {stage}"
    doc = doc or {}
    running = doc.get("running")
    if not isinstance(running, list):  # a document of a listener from before several workers
        running = [doc["current"]] if isinstance(doc.get("current"), dict) else []
    running = [r for r in running if isinstance(r, dict)]
    if stage in ("received", "supervising") and running:
        if isinstance(doc.get("max_workers"), int) and doc["max_workers"] > 1:
            head += f" {len(running)}/{doc['max_workers']}"
        head += " " + "; ".join(render_running(r) for r in running)
    if doc.get("held") and stage in ("idle", "supervising"):
        head += f" · next task held ({doc['held']})"
    if detail:
        head += f" ({detail})"
    return head + render_last(doc.get("last"))
