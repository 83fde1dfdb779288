"""Export files: their names, and the checks an export adds to :mod:`maint.files` (which writes them).

A session id becomes a file name that cannot leave the output folder; the final name must be absent or
a regular file that is not a SQLite database (an export never replaces a store), so a planted link can
neither redirect the data nor become the "verified" export.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO
from collections.abc import Iterator

from maint import files
from maint.crashpoints import crash_point
from maint.errors import OutputError, StdoutFailed

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
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
    path = Path(path)
    companion = files.store_companion(path)
    if companion:
        raise OutputError(f"{path}: {companion}; refusing to write an export there (nothing was written)")
    if not os.path.isdir(path.parent):
        return False  # the folder is made (or refused) when the export runs
    try:
        with files.Folder.open(path.parent, follow_links=True) as folder:
            existed = folder.check_target(path.name) is not None
            if existed and files.is_database_file(folder, path.name):
                raise OutputError(f"{path}: is a SQLite database or its journal; refusing to replace it with an "
                                  "export (nothing was written)")
    except files.FileRefused as exc:
        raise OutputError(str(exc)) from None
    return existed


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


class Spool:
    """Output gathered while a read transaction is open and written once it has ended.

    An export never holds a read transaction while it waits on its output (a pipe nobody reads, a
    slow disk): on a rollback-journal store that read lock would fail every Hermes writer, in WAL
    mode it would stop every checkpoint. What one transaction reads is bounded by its caller (one
    session or document, or a batch of lines); it stays in memory up to *memory* bytes and goes to
    a private temporary file (unlinked at once) beyond that, so a huge session costs no memory.
    """

    MEMORY = 16 << 20
    BLOCK = 1 << 20

    def __init__(self, memory: int | None = None):
        self.memory = self.MEMORY if memory is None else memory
        self.parts: list[bytes] = []
        self.size = 0
        self.file: IO[bytes] | None = None

    def write(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def write_bytes(self, data: bytes) -> None:
        if self.file is None and self.size + len(data) > self.memory:
            self.file = tempfile.TemporaryFile(prefix="hermes-maint-spool-")  # noqa: SIM115 (closed by drain/close)
            for part in self.parts:
                self.file.write(part)
            self.parts = []
        if self.file is not None:
            self.file.write(data)
        else:
            self.parts.append(data)
        self.size += len(data)

    def drain(self, write_bytes) -> None:
        """Hand everything gathered, in order, to *write_bytes*; the spool is then empty. Call it with no
        transaction open."""
        if self.file is not None:
            fh, self.file = self.file, None
            with fh:
                fh.seek(0)
                for block in iter(lambda: fh.read(self.BLOCK), b""):
                    write_bytes(block)
        else:
            parts, self.parts = self.parts, []
            for part in parts:
                write_bytes(part)
        self.parts, self.size = [], 0

    def take(self) -> list[bytes] | None:
        """What was gathered, as the pieces written, when it is all in memory (the spool is then empty);
        None when it went to the temporary file (use :meth:`drain`)."""
        if self.file is not None:
            return None
        parts, self.parts, self.size = self.parts, [], 0
        return parts

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
        self.parts, self.size = [], 0


@contextlib.contextmanager
def atomic_text(path: Path | str, store: Path | None = None) -> Iterator[Sink]:
    """``-`` is stdout; anything else is written whole or not at all by :func:`maint.files.atomic_file`
    (our temporary name, removed on failure or termination). An existing regular file is replaced and keeps
    its mode, narrowed to 0600 at most. *store*: whose content it is (links and owner as
    :meth:`maint.files.Folder.open` says)."""
    if str(path) == "-":
        try:
            sink = Sink(sys.stdout.buffer, hashlib.sha256())
            yield sink
            sink.flush()
            sys.stdout.flush()
        except StdoutFailed as exc:  # stdout's failure, never the store's (hostile try 4, G10)
            raise StdoutFailed(exc.reason, "the export", "; nothing else was changed") from None
        return
    path = Path(path)
    check_destination(path)
    try:
        with files.atomic_file(path, mode=0o600, store=store) as fh:
            sink = Sink(fh, hashlib.sha256())
            yield sink
            sink.flush()
            crash_point("file_written")
    except files.FileRefused as exc:
        raise OutputError(str(exc)) from None
    except OSError as exc:
        raise OutputError(f"{path}: {exc.strerror or exc}; the partial file was removed, nothing was written") \
            from None


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
