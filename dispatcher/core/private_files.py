"""Private (0700 / 0600) directories and files for the runtime directory and the store.

Every file holding ids, logs or task text is created or opened here, so the rules about
modes, ownership and planted links live in one place:

- every directory the bridge creates is created 0700, each one in the chain;
- a runtime, attempt or store directory that is a symbolic link or belongs to another
  user is refused (``unsafe_path``), and never chmod-ed;
- a new file is created with ``O_EXCL|O_NOFOLLOW``: whatever already sits at its name
  (a file, a link, a pipe) is refused, never followed or truncated;
- a file that is reopened (logs, the listener lock) is opened with ``O_NOFOLLOW`` and then
  checked on the open descriptor: a regular file of ours with no second hard link.
"""

import itertools
import os
import stat
from pathlib import Path

from dispatcher.core.errors import BridgeError

DIR_MODE = 0o700
FILE_MODE = 0o600


class UnsafePath(BridgeError):
    def __init__(self, path: Path, why: str, todo: str) -> None:
        super().__init__("unsafe_path", f"{path} {why}; nothing was written there. {todo}")
        self.path = path


def _not_ours(what: str, path: Path, st: os.stat_result) -> UnsafePath:
    return UnsafePath(
        path,
        f"({what}) belongs to uid {st.st_uid}, not to you (uid {os.geteuid()})",
        "Another user could read or plant the bridge's files there: use a directory you own "
        "(AGENT_BRIDGE_DB and AGENT_BRIDGE_RUNTIME_DIR choose where the bridge keeps its files).",
    )


def _missing_chain(path: Path) -> list[Path]:
    """``path`` and its missing ancestors, outermost first."""
    chain = []
    while not os.path.lexists(path):
        chain.append(path)
        if path.parent == path:
            break
        path = path.parent
    return chain[::-1]


def _check_dir(path: Path, what: str, tighten: bool) -> None:
    """Refuse a link, a non-directory or another user's directory; narrow ours to 0700 if asked."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(
                path,
                f"({what}) is a symbolic link",
                "A link here could send private files anywhere: remove it (and check who created it), "
                "or point the bridge at the real directory.",
            ) from None
        if st.st_uid != os.geteuid():  # e.g. another user's 0700 directory we cannot even open
            raise _not_ours(what, path, st) from None
        raise UnsafePath(
            path, f"({what}) is not a usable directory ({exc.strerror})", "Remove it or choose another location."
        ) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise _not_ours(what, path, st)
        if tighten and stat.S_IMODE(st.st_mode) != DIR_MODE:
            os.fchmod(fd, DIR_MODE)
    finally:
        os.close(fd)


def ensure_private_dir(path: Path, what: str = "directory", *, tighten: bool = True) -> Path:
    """Create ``path`` (and every missing parent) 0700, or check that the existing one is ours.

    ``what`` names the directory in a refusal ("runtime directory", ...). Every directory
    created here is checked as it is made (another user may win the race to create it),
    and the existing ``path`` is narrowed to 0700 unless ``tighten`` is false (the store's
    directory may be a folder the user keeps other things in). Raises ``UnsafePath``.
    """
    chain = _missing_chain(path)
    for missing in chain:
        try:
            os.mkdir(missing, DIR_MODE)
        except FileExistsError:
            pass  # made by someone else meanwhile: checked below like one of ours
        except OSError as exc:
            raise BridgeError(
                "path_unusable",
                f"cannot create {missing} ({what}: {exc.strerror}); nothing was written. Check that its parent "
                "exists and is writable, or choose another location (AGENT_BRIDGE_DB, AGENT_BRIDGE_RUNTIME_DIR).",
            ) from None
        _check_dir(missing, what if missing == path else "parent directory", tighten=True)
    if not chain:
        _check_dir(path, what, tighten)
    return path


def create_private_file(path: Path, text: str = "") -> Path:
    """Create ``path`` as a new 0600 file holding ``text``; refuse anything already there."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        raise UnsafePath(
            path,
            "already exists (a file or link planted where a new private file must be created)",
            "Remove it (and check who created it); the bridge never writes through an existing name.",
        ) from None
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def _open_own_regular_file(path: Path, flags: int) -> int:
    """Open a regular file of ours (created 0600 if ``flags`` say O_CREAT), never through a link.

    O_NONBLOCK: a planted FIFO must fail the check, not block the open.
    """
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, FILE_MODE)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafePath(
                path,
                "is a symbolic link",
                "Remove it (and check who created it); the bridge never writes through links.",
            ) from None
        raise UnsafePath(path, f"cannot be opened ({exc.strerror})", "Remove it or fix its permissions.") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(path, "is not a regular file", "Remove it (and check who created it).")
        if st.st_uid != os.geteuid():
            raise _not_ours("file", path, st)
        if st.st_nlink != 1:
            raise UnsafePath(
                path,
                f"has {st.st_nlink} hard links (it may be another file under a planted name)",
                "Remove it (and check who created it).",
            )
        if stat.S_IMODE(st.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_private_append(path: Path) -> int:
    """A write-only, append-mode descriptor on a 0600 log file of ours (created if missing)."""
    return _open_own_regular_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)


def open_private_lock(path: Path) -> int:
    """A read-write descriptor on a 0600 lock file of ours (created if missing), for flock."""
    return _open_own_regular_file(path, os.O_RDWR | os.O_CREAT)


def _open_beneath(directory: Path, relative: str) -> int:
    """An O_RDONLY descriptor on ``directory/relative``, no component of it (``directory``'s
    last included) followed through a link; O_NONBLOCK, so a FIFO or a device cannot block."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    *dirs, name = Path(relative).parts
    try:
        for part in dirs:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = inner
        return os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY, dir_fd=fd)
    finally:
        os.close(fd)


def read_untrusted(directory: Path, relative: str, max_bytes: int) -> str | None:
    """The one reader of a file a worker could have touched (anything in an attempt directory).

    The first ``max_bytes`` of ``directory/relative`` as text (bad UTF-8 replaced), or None when it
    is missing or is anything but a regular file of ours with one link: a symbolic link anywhere on
    the way, a FIFO, a socket, a device, another user's file, a second hard link. It never blocks
    (O_NONBLOCK, regular files only) and never reads past ``max_bytes``.
    """
    try:
        fd = _open_beneath(directory, relative)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1:
            return None
        chunks, left = [], max_bytes
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", errors="replace")


def writable_by_others(path: Path) -> str | None:
    """Why someone other than you (or root) could change what ``path`` runs or says, or None.

    The rules ``ssh`` applies to ``authorized_keys``: the file and every directory above it,
    along the path as written and along its real path (links resolved), must belong to you or
    root and be neither group- nor world-writable. One exception: a directory owned by root
    with the sticky bit (``/tmp``), where no one else can rename or replace your entries."""
    uid = os.geteuid()
    written = Path(os.path.abspath(path))
    real = Path(os.path.realpath(path))
    for part in dict.fromkeys([written, *written.parents, real, *real.parents]):
        try:
            st = os.lstat(part)  # a link is judged by its owner here, and its target in the real chain
        except OSError:
            continue  # a missing file is its reader's to report
        if st.st_uid not in (0, uid):
            return f"{part} belongs to uid {st.st_uid}, not to you (uid {uid}) or root"
        sticky_root_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX and st.st_uid == 0
        if st.st_mode & 0o022 and not (sticky_root_dir or stat.S_ISLNK(st.st_mode)):
            return f"{part} is {'group' if st.st_mode & 0o020 else 'world'}-writable (mode {st.st_mode & 0o7777:o})"
    return None


_TEMP_NAMES = itertools.count()  # with the pid, a temp name no other writer of this process uses


def write_atomically(path: Path, text: str, mode: int = FILE_MODE) -> None:
    """Replace ``path`` with ``text`` so that a reader sees the old file or the new one, never half.

    The one atomic writer (config.json, the CLIs' settings, the systemd unit, progress files): a new
    temp file beside ``path`` created with ``O_EXCL|O_NOFOLLOW`` (a planted name is never followed
    or truncated; the next name is tried), written and fsync-ed, given ``mode``, renamed over
    ``path``, and the directory fsync-ed so the rename survives a crash. The temp file is removed
    if anything fails. No ``tempfile``: the listener writes its progress through this and stays
    without the modules tempfile loads."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_TEMP_NAMES)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
            break
        except FileExistsError:
            continue
    else:
        raise UnsafePath(path, "has 100 temp names beside it already taken", "Remove the .*.tmp files next to it.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # the umask may have narrowed or the name may have been reused: exactly this
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable; best effort (some file systems refuse it)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
