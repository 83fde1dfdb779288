"""Writing export files safely: inside the output folder, 0600, never half-written under the final name."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sys
from pathlib import Path
from typing import IO
from collections.abc import Iterator

from maint.crashpoints import crash_point
from maint.errors import MaintError

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(session_id: str, suffix: str) -> str:
    """A file name from a session id that can never contain a path separator or '..'."""
    name = _SAFE.sub("_", session_id).lstrip(".") or "session"
    return f"{name}{suffix}"


def inside(folder: Path, name: str) -> Path:
    target = (folder / name).resolve()
    if target.parent != folder.resolve():
        raise MaintError(f"refusing to write {name!r} outside {folder}")
    return target


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

    def flush(self) -> None:
        if self.parts:
            data = "".join(self.parts).encode("utf-8")
            self.digest.update(data)
            self.fh.write(data)
            self.parts, self.size = [], 0


@contextlib.contextmanager
def atomic_text(path: Path | str) -> Iterator[Sink]:
    """``-`` is stdout; anything else is created 0600 as ``.<name>.partial`` and renamed when done."""
    if str(path) == "-":
        sink = Sink(sys.stdout.buffer, hashlib.sha256())
        yield sink
        sink.flush()
        sys.stdout.flush()
        return
    path = Path(path)
    tmp = path.with_name(f".{path.name}.partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            sink = Sink(fh, hashlib.sha256())
            yield sink
            sink.flush()
            fh.flush()
            os.fsync(fh.fileno())
        crash_point("file_written")
        os.replace(tmp, path)
        os.chmod(path, 0o600)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
