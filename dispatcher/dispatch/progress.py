"""The per-agent progress document and its one-line rendering (payload-free by construction).

Only ids, enums, numbers and agent names go in. The document is replaced atomically
(temp file + rename), so a reader sees the old or the new version, never half of one.
"""

import itertools
import json
import os
from pathlib import Path
from typing import Any

from dispatcher.core import clock
from dispatcher.core.private_files import FILE_MODE, ensure_private_dir

FORMAT_VERSION = 2
STAGES = ("stopped", "starting", "idle", "received", "supervising", "error")
_TEMP_NAMES = itertools.count()  # with the pid, a temp file name no other writer uses


def write_progress(path: Path, **fields: Any) -> dict:
    doc = {"format_version": FORMAT_VERSION, **fields, "updated_at": round(clock.now(), 3)}
    # A new file (O_EXCL, never through a planted link) and a rename; the directory holding it
    # must still be ours, not a link or another user's. A name taken already (a planted file, a
    # dead writer's with our pid) fails this write; the next one takes the next name. Not
    # tempfile: the listener does without it and the shutil and random it loads (README, "The
    # listener's footprint").
    ensure_private_dir(path.parent, "runtime directory")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_TEMP_NAMES)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
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
