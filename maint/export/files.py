"""Writing export files safely: inside the output folder, 0600, never half-written under the final name.

A file is written under an unguessable temporary name created exclusively (``O_EXCL|O_NOFOLLOW``,
0600) in the destination folder, synced, then renamed over the final name. The final name must be
absent or a regular file: a symlink, device, FIFO or folder there is refused before anything is
written, so a planted link can neither redirect the data nor become the "verified" export.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import stat
import sys
from pathlib import Path
from typing import IO
from collections.abc import Iterator

from maint.crashpoints import crash_point
from maint.errors import OutputError

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
SQLITE_HEADER = b"SQLite format 3\x00"
# Room for our temporary prefix and suffix within the usual 255-byte limit of a file name.
MAX_STEM = 120


def safe_name(session_id: str, suffix: str) -> str:
    """A file name for a session id: no separator, no leading dot, and one id per name.

    An id that is already a plain name is used as it is; any other (a slash, a colon, non-ASCII,
    a leading dot, too long) gets a short hash of the real id, so ``a/b`` and ``a_b`` never share
    a file and a bulk export loses no session to a collision.
    """
    name = _SAFE.sub("_", session_id).lstrip(".")
    if name != session_id or not name or len(name) > MAX_STEM:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:10]
        name = f"{(name or 'session')[:MAX_STEM]}-{digest}"
    return f"{name}{suffix}"


def inside(folder: Path, name: str) -> Path:
    """*folder*/*name*, refusing a name that would land anywhere else."""
    if "/" in name or os.sep in name or name in ("", ".", ".."):
        raise OutputError(f"refusing to write {name!r} outside {folder}")
    return Path(os.path.abspath(folder)) / name


def check_destination(path: Path) -> bool:
    """True when *path* is an existing regular file we would replace; refuses anything but that or nothing.

    A SQLite database (a store of any profile) or a ``-wal``/``-shm``/``-journal`` beside one is
    never replaced: an export must not be able to destroy the history it was exporting.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(f"{path}: is a symbolic link; refusing to write through or over it (nothing was written)")
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
            "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket or special file"
        raise OutputError(f"{path}: is {kind}, not a regular file; refusing to write there (nothing was written)")
    if _is_database_file(path):
        raise OutputError(f"{path}: is a SQLite database or its journal; refusing to replace it with an export "
                          "(nothing was written)")
    return True


def _is_database_file(path: Path) -> bool:
    for suffix in ("-wal", "-shm", "-journal"):
        if path.name.endswith(suffix) and os.path.lexists(str(path)[:-len(suffix)]):
            return True
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_HEADER
    except OSError:
        return False


class Sink:
    """Text in, UTF-8 bytes out, hashed as they go; buffered so many small pieces cost one write."""

    LIMIT = 1 << 16

    def __init__(self, fh: IO[bytes], digest: hashlib._Hash):
        self.fh, self.digest = fh, digest
        self.parts: list[str] = []
        self.size = 0

    def write(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if self.size >= self.LIMIT:
            self.flush()

    def write_bytes(self, data: bytes) -> None:
        """UTF-8 already encoded (lines SQLite built), after any text written before it."""
        self.flush()
        self.digest.update(data)
        self.fh.write(data)

    def flush(self) -> None:
        if self.parts:
            data = "".join(self.parts).encode("utf-8")
            self.digest.update(data)
            self.fh.write(data)
            self.parts, self.size = [], 0


@contextlib.contextmanager
def atomic_text(path: Path | str) -> Iterator[Sink]:
    """``-`` is stdout; anything else is written to a private temporary file and renamed into place.

    An existing regular file is replaced atomically and keeps its mode, narrowed to 0600 at most.
    """
    if str(path) == "-":
        sink = Sink(sys.stdout.buffer, hashlib.sha256())
        yield sink
        sink.flush()
        sys.stdout.flush()
        return
    path = Path(path)
    existed = check_destination(path)
    mode = (os.lstat(path).st_mode & 0o600) if existed else 0o600
    tmp = path.with_name(f".{path.name[:MAX_STEM + 40]}.{secrets.token_hex(8)}.partial")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise OutputError(f"{path}: cannot create a file in {path.parent} ({exc.strerror}); nothing was written") \
            from None
    try:
        with os.fdopen(fd, "wb") as fh:
            sink = Sink(fh, hashlib.sha256())
            yield sink
            sink.flush()
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        crash_point("file_written")
        check_destination(path)  # nothing was planted there while we wrote
        os.rename(tmp, path)
        sync_folder(path.parent)
    except OSError as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise OutputError(f"{path}: {exc.strerror or exc}; the partial file was removed, nothing was written") \
            from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def sync_folder(folder: Path) -> None:
    """Make a rename in *folder* durable (best effort: some filesystems refuse to sync a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def sha256_file(path: Path) -> str:
    """The digest of a regular file, opened without following a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OutputError(f"{path}: is not a regular file; refusing to verify it")
        h = hashlib.sha256()
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
