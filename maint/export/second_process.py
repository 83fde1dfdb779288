"""A big jsonl export shared with a second process, on a machine with more than one core.

SQLite builds the lines in C on one core (:mod:`maint.export.fast_jsonl`). When the selection holds
at least :data:`SPLIT_MESSAGES` messages, a second process (``python -m
maint.export.second_process``) builds the sessions of the second half, split where half the
messages are done, into an unnamed temporary file beside the output, while this process writes the
first half; this process then appends that file. The output is byte for byte the one-process
output: the same code builds every line, in the same order.

Both processes read one state of the store: the two snapshots are taken while this process holds
the write lock, which keeps every commit out for a moment (at most :data:`GATE_S`) and writes
nothing. A snapshot that has already read, a store this process cannot lock (read-only), or a lock
not had within :data:`GATE_WAIT_S` leaves the whole export to this process.

Whatever goes wrong with the second process (it fails, is killed, finds another file at the
store's path, or the selection holds an id that is not text) costs only time: this process then
writes the second half itself, so any error is the one the one-process export raises. The
temporary files have no name (``O_TMPFILE``, or unlinked at once), so a kill leaves nothing
behind, and the second process stops when this one is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import apsw

from maint.crashpoints import crash_point
from maint.errors import UsageError
from maint.export.fast_jsonl import CHUNK, write_sessions
from maint.settings import env_number
from maint.store.connection import Store, polling_busy_handler

PROCESSES_ENV = "HERMES_MAINT_EXPORT_PROCESSES"
SPLIT_MESSAGES = 40_000  # below this the second process's start (about 0.2 s) costs more than it saves
PAGE = 2048  # ids read from the selection per statement
OPEN_S = 30.0  # for the second process to start and open the store (a loaded machine is slow to start Python)
GATE_WAIT_S = 1.0  # for the write lock that keeps commits out while the two snapshots are taken
GATE_S = 0.1  # for the second process to take its snapshot while that lock is held


def export_processes() -> int:
    """1 or 2 from the environment (default 2), never more than the cores this process may use."""
    value = env_number(PROCESSES_ENV, 2, low=1, high=2, low_open=False, unit="processes")
    if not float(value).is_integer():
        raise UsageError(f"{PROCESSES_ENV}={os.environ[PROCESSES_ENV]!r}: expected 1 or 2 processes")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(int(value), cores)


def _pages(ids: Sequence[Any], start: int = 0) -> Iterator[list[Any]]:
    for i in range(start, len(ids), PAGE):
        yield [ids[j] for j in range(i, min(i + PAGE, len(ids)))]


def _counts_sql(store: Store) -> str:
    """Each id's stored message count (Hermes keeps ``message_count``; only the balance depends on it)."""
    if store.has_column("sessions", "message_count"):
        count = "iif(typeof(s.message_count) = 'integer', max(s.message_count, 0), 0)"
        return f"SELECT {count} AS n FROM json_each(?) j LEFT JOIN sessions s ON s.id = j.value ORDER BY j.key"
    return ("SELECT (SELECT COUNT(*) FROM messages m WHERE m.session_id = j.value) AS n FROM json_each(?) j "
            "ORDER BY j.key")


def split_point(store: Store, ids: Sequence[Any]) -> int | None:
    """Where the second half starts, or None when the selection is too small to share or holds an
    id the second process cannot be given (not text)."""
    if len(ids) < 2:
        return None
    sql, total = _counts_sql(store), 0
    for page in _pages(ids):
        if not all(isinstance(sid, str) for sid in page):
            return None
        total += sum(r[0] for r in store.conn.execute(sql, (json.dumps(page),)))
    if total < SPLIT_MESSAGES:
        return None
    done, index = 0, 0
    for page in _pages(ids):
        for (count,) in store.conn.execute(sql, (json.dumps(page),)):
            done += count
            index += 1
            if done * 2 >= total:
                return index if index < len(ids) else None
    return None


class _Helper:
    """The second process: started, sharing this process's snapshot, then given ids[start:]; and what it wrote."""

    def __init__(self, store: Store, folder: Path):
        self.ids_file: IO[bytes] = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115 (closed by close())
        self.out_file: IO[bytes] = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115
        st = os.stat(store.path)
        fds = (self.ids_file.fileno(), self.out_file.fileno())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "maint.export.second_process", str(store.path), str(st.st_dev), str(st.st_ino),
             *map(str, fds), str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, pass_fds=fds, bufsize=0)

    def _line(self, timeout: float) -> bytes:
        """One line the second process wrote, or b"" when it wrote none in time."""
        line, deadline = b"", time.monotonic() + timeout
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return b""
            byte = self.proc.stdout.read(1)
            if not byte:
                return b""
            line += byte
        return line

    def _say(self, word: bytes) -> bool:
        try:
            self.proc.stdin.write(word + b"\n")
            return True
        except OSError:
            return False

    def share_snapshot(self, store: Store) -> bool:
        """Take this process's snapshot and the second one's with no commit between them."""
        if self._line(OPEN_S) != b"open\n":
            return False
        try:
            gate = store.sibling_connection()
        except apsw.Error:
            return False
        try:
            gate.set_busy_handler(polling_busy_handler(int(GATE_WAIT_S * 1000)))
            gate.execute("BEGIN IMMEDIATE")  # writes nothing; keeps commits out
        except apsw.Error:  # busy beyond the wait, or a store this process may not lock
            gate.close()
            return False
        try:
            if store.conn.txn_state("main") != apsw.SQLITE_TXN_NONE:
                return False  # this process's snapshot was taken before the gate: it cannot be shared
            store.conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # this process's snapshot
            if store.conn.txn_state("main") != apsw.SQLITE_TXN_READ:
                return False
            return self._say(b"go") and self._line(GATE_S) == b"ready\n"
        finally:
            with contextlib.suppress(apsw.Error):
                gate.execute("ROLLBACK")
            gate.close()

    def start(self, ids: Sequence[Any], start: int) -> bool:
        for page in _pages(ids, start):
            self.ids_file.write(json.dumps(page).encode() + b"\n")
        self.ids_file.flush()
        return self._say(b"ids")

    def result(self) -> int | None:
        """The messages the second process wrote, once it ended well; None when this process must do its part."""
        report = b"".join(iter(lambda: self.proc.stdout.read(1 << 16), b""))
        self.proc.wait()
        try:
            done = json.loads(report)
        except ValueError:
            return None
        if self.proc.returncode != 0 or not isinstance(done, dict) or not isinstance(done.get("messages"), int) \
                or done.get("bytes") != os.fstat(self.out_file.fileno()).st_size:
            return None
        return done["messages"]

    def copy(self, write: Callable[[bytes], None]) -> None:
        self.out_file.seek(0)
        for block in iter(lambda: self.out_file.read(CHUNK), b""):
            write(block)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.ids_file, self.out_file):
            with contextlib.suppress(OSError):
                stream.close()


def _messages(store: Store, ids: Sequence[Any]) -> int | None:
    """The selection's stored messages, read beside this process's snapshot (which is not begun yet);
    None when an id is not text (the second process could not be given it)."""
    conn, total = store.sibling_connection(), 0
    try:
        sql = f"SELECT SUM(n) FROM ({_counts_sql(store)})"
        for page in _pages(ids):
            if not all(isinstance(sid, str) for sid in page):
                return None
            total += conn.execute(sql, (json.dumps(page),)).fetchone()[0] or 0
    finally:
        conn.close()
    return total


def write_shared(store: Store, ids: Sequence[Any], write: Callable[[bytes], None],
                 reference: Callable[[Any], int], folder: Path | None, processes: int) -> int:
    """:func:`maint.export.fast_jsonl.write_sessions`, with the second half built by a second process
    when there are two cores to use and enough messages to share.

    Called in a snapshot that has read nothing yet (``BEGIN DEFERRED``): the shared snapshot is
    taken here. One that has already read cannot be shared, and this process does all the work.
    """
    if processes < 2 or len(ids) < 2 or store.conn.txn_state("main") != apsw.SQLITE_TXN_NONE:
        return write_sessions(store, ids, write, reference)
    total = _messages(store, ids)
    if total is None or total < SPLIT_MESSAGES:
        return write_sessions(store, ids, write, reference)
    try:
        helper = _Helper(store, folder or Path(tempfile.gettempdir()))
    except OSError:  # no room or no right for the temporary files, or no process: one process does it all
        return write_sessions(store, ids, write, reference)
    try:
        start = split_point(store, ids) if helper.share_snapshot(store) else None
        if start is None or not helper.start(ids, start):
            helper.close()
            return write_sessions(store, ids, write, reference)
        crash_point("export_shared")
        n = write_sessions(store, _Slice(ids, 0, start), write, reference)
        messages = helper.result()
        if messages is None:
            return n + write_sessions(store, _Slice(ids, start, len(ids)), write, reference)
        helper.copy(write)
        return n + messages
    finally:
        helper.close()


class _Slice(Sequence[Any]):
    """ids[start:stop] without copying a selection that is read a page at a time."""

    def __init__(self, ids: Sequence[Any], start: int, stop: int):
        self.ids, self.start, self.stop = ids, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.ids[self.start + index]


# -- the second process ------------------------------------------------------------------------

class _NoDigest:
    def update(self, data: bytes) -> None:
        pass


def _ids(source: IO[bytes], parent: int) -> Iterator[str]:
    """The ids this process was given, a page per line; stops when the first process is gone."""
    for line in source:
        for sid in json.loads(line):
            if os.getppid() != parent:
                raise SystemExit(1)
            yield sid


def _say(word: str) -> None:
    sys.stdout.write(word + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    from maint.export.files import Sink
    from maint.export.pipeline import _reference_jsonl
    from maint.store.connection import open_store

    path, dev, ino, ids_fd, out_fd, parent = argv
    with open_store(path, readonly=True) as store:
        st = os.stat(path)
        if (st.st_dev, st.st_ino) != (int(dev), int(ino)):
            return 1  # another file at the store's path: the first process does this part itself
        _say("open")
        if sys.stdin.readline() != "go\n":
            return 1
        with store.snapshot():
            store.conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # the snapshot the first one shares
            _say("ready")
            if sys.stdin.readline() != "ids\n":
                return 1
            with os.fdopen(int(ids_fd), "rb") as source, os.fdopen(int(out_fd), "wb") as fh:
                source.seek(0)
                sink = Sink(fh, _NoDigest())
                n = write_sessions(store, _ids(source, int(parent)), sink.write_bytes,
                                   lambda sid: _reference_jsonl(store, sid, sink.write))
                sink.flush()
                crash_point("export_second_process")
                fh.flush()
                size = fh.tell()
    _say(json.dumps({"messages": n, "bytes": size}))
    return 0


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except BaseException:  # any failure: the first process writes this part itself
        code = 1
    sys.exit(code)
