"""A big jsonl export shared with a second process, on a machine with more than one core.

SQLite builds the lines in C on one core (:mod:`maint.export.fast_jsonl`). When the selection holds
at least :data:`SPLIT_MESSAGES` messages, a second process builds the sessions of the second half,
split where half the messages are done, into an unnamed temporary file beside the output, while
this process writes the first half; this process then appends that file. The output is byte for
byte the one-process output: the same code builds every line, in the same order.

Both processes read one state of one file. The second process is started from the ``maint``
package this process runs, with its interpreter flags (never a ``maint`` in the working directory),
and refuses a store that is not the file this process opened (device and inode) or that has a
second name (another WAL); the two snapshots are taken while this process holds the write lock,
which keeps every commit out for a moment (at most :data:`GATE_S`) and writes nothing.

Whatever goes wrong with the second process (it fails, is killed, stops making progress, finds
another file at the store's path; the lock is not had within :data:`GATE_WAIT_S`; the store cannot
be locked or read beside this process; the output's folder has less than twice the store's size
free) costs only time: this process writes the second half itself, after giving back the
temporary files, so any error is the one the one-process export raises. The temporary files have
no name (``O_TMPFILE``, or unlinked at once), so a kill leaves nothing behind, and the second
process ends within a moment of this one.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import apsw

from maint.crashpoints import crash_point, hang_point
from maint.errors import UsageError
from maint.export.fast_jsonl import CHUNK, write_sessions
from maint.store.connection import Store, busy_timeout_from_env, polling_busy_handler

PROCESSES_ENV = "HERMES_MAINT_EXPORT_PROCESSES"
SPLIT_MESSAGES = 40_000  # below this the second process's start (about 0.2 s) costs more than it saves
PAGE = 2048  # ids read from the selection per statement
OPEN_S = 30.0  # for the second process to start and open the store (a loaded machine is slow to start Python)
GATE_WAIT_S = 1.0  # for the write lock that keeps commits out while the two snapshots are taken
GATE_S = 0.1  # for the second process to take its snapshot while that lock is held
STALL_S = 60.0  # a second process that neither writes nor computes for this long is given up
WATCH_S = 0.2  # how often the second process looks for this one
COUNT_CAP = 1 << 30  # a stored message count above this is taken as this (only the balance depends on it)
ROOT = str(Path(__file__).resolve().parent.parent.parent)  # the folder holding this ``maint`` package


def export_processes() -> int:
    """1 or 2 from the environment (unset or empty: 2), never more than the cores this process may use."""
    raw = os.environ.get(PROCESSES_ENV, "")
    if raw not in ("", "1", "2"):
        raise UsageError(f"{PROCESSES_ENV}={raw!r}: expected 1 or 2 (processes for a big jsonl export)")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(int(raw or 2), cores)


def _pages(ids: Sequence[Any], start: int = 0) -> Iterator[list[Any]]:
    for i in range(start, len(ids), PAGE):
        yield [ids[j] for j in range(i, min(i + PAGE, len(ids)))]


def _counts_sql(store: Store) -> str:
    """Each id's message count: Hermes's ``message_count`` when it is a plausible number, else a count."""
    counted = "(SELECT COUNT(*) FROM messages m WHERE m.session_id = j.value)"
    if store.has_column("sessions", "message_count"):
        count = (f"iif(typeof(s.message_count) = 'integer' AND s.message_count >= 0, "
                 f"min(s.message_count, {COUNT_CAP}), {counted})")
        return f"SELECT {count} AS n FROM json_each(?) j LEFT JOIN sessions s ON s.id = j.value ORDER BY j.key"
    return f"SELECT {counted} AS n FROM json_each(?) j ORDER BY j.key"


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


def _estimate(store: Store, ids: Sequence[Any]) -> int | None:
    """The selection's messages, read beside this process's snapshot (which must not begin yet) by a
    read-only connection; None when an id is not text or the store cannot be read that way now."""
    try:
        conn = apsw.Connection(str(store.path), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error:
        return None
    try:
        conn.set_busy_handler(polling_busy_handler(busy_timeout_from_env()))
        sql, total = f"SELECT SUM(n) FROM ({_counts_sql(store)})", 0
        for page in _pages(ids):
            if not all(isinstance(sid, str) for sid in page):
                return None
            total += conn.execute(sql, (json.dumps(page),)).fetchone()[0] or 0
        return total
    except apsw.Error:
        return None
    finally:
        conn.close()


def _room(folder: Path, store: Store) -> bool:
    """The second half is written twice in the output's folder: start only with twice the store's size free."""
    try:
        st = os.statvfs(folder)
        size = sum(os.stat(f"{store.path}{suffix}").st_size for suffix in ("", "-wal")
                   if os.path.exists(f"{store.path}{suffix}"))
    except OSError:
        return False
    return st.f_bavail * st.f_frsize >= 2 * size


# The package's folder first, and neither the working directory ('' with -c) nor '.' anywhere.
_BOOT = ("import sys; sys.path[:] = [sys.argv[1]] + [p for p in sys.path if p not in ('', '.')]; "
         "from maint.export.second_process import main; sys.exit(main(sys.argv[2:]))")


def _one_name(path: Path | str) -> bool:
    """SQLite keeps a WAL beside each name a file is opened by: a store with a second hard link can be
    read through another WAL by a process that opens the same inode under the other name."""
    try:
        return os.stat(path).st_nlink == 1
    except OSError:
        return False


class _Helper:
    """The second process: started, sharing this process's snapshot, then given ids[start:]; and what it wrote."""

    def __init__(self, store: Store, folder: Path):
        self.store = store
        self.ids_file: IO[bytes] = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115 (closed by close())
        self.out_file: IO[bytes] = tempfile.TemporaryFile(dir=folder)  # noqa: SIM115
        dev, ino = store.file_id or (0, 0)
        fds = (self.ids_file.fileno(), self.out_file.fileno())
        try:
            # This interpreter's flags (-I, -E, -s...), and the package's own folder first on the path: never
            # a ``maint`` from the working directory.
            self.proc = subprocess.Popen(
                [sys.executable, *subprocess._args_from_interpreter_flags(), "-c", _BOOT, ROOT, str(store.path),
                 str(dev), str(ino), *map(str, fds), str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, pass_fds=fds, bufsize=0)
        except BaseException:
            self.ids_file.close()
            self.out_file.close()
            raise

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

    def share_snapshot(self) -> bool:
        """Take this process's snapshot and the second one's with no commit between them."""
        store = self.store
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
            if _file_id(store.path) != store.file_id or not _one_name(store.path):
                return False  # the lock is on whatever the path names now, not on this store
            if store.conn.txn_state("main") != apsw.SQLITE_TXN_NONE:
                return False  # this process's snapshot was taken before the lock: it cannot be shared
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

    def _progress(self) -> tuple[int, list[bytes]]:
        """What the second process has written, and its CPU time (utime, stime) as /proc tells it, if it does."""
        cpu: list[bytes] = []
        with contextlib.suppress(OSError), open(f"/proc/{self.proc.pid}/stat", "rb") as fh:
            cpu = fh.read().rsplit(b")", 1)[-1].split()[11:13]  # after the name: state is field 0
        return os.fstat(self.out_file.fileno()).st_size, cpu

    def result(self) -> int | None:
        """The messages the second process wrote, once it ended well; None when this process must do its part
        (it failed, or neither wrote nor computed for :data:`STALL_S`)."""
        last, since = self._progress(), time.monotonic()
        while True:
            try:
                self.proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                now = self._progress()
                if now != last:
                    last, since = now, time.monotonic()
                elif time.monotonic() - since > STALL_S:
                    return None
        report = b"".join(iter(lambda: self.proc.stdout.read(1 << 16), b""))
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


def _file_id(path: Path | str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def write_shared(store: Store, ids: Sequence[Any], write: Callable[[bytes], None],
                 reference: Callable[[Any], int], folder: Path | None, processes: int) -> int:
    """:func:`maint.export.fast_jsonl.write_sessions`, with the second half built by a second process
    when there are two cores to use and enough messages to share.

    Called in a snapshot that has read nothing yet (``BEGIN DEFERRED``): the shared snapshot is
    taken here. One that has already read cannot be shared, and this process does all the work.
    """
    folder = folder or Path(tempfile.gettempdir())
    if processes < 2 or len(ids) < 2 or store.file_id is None or not _one_name(store.path) \
            or store.conn.txn_state("main") != apsw.SQLITE_TXN_NONE:
        return write_sessions(store, ids, write, reference)
    total = _estimate(store, ids)
    if total is None or total < SPLIT_MESSAGES or not _room(folder, store):
        return write_sessions(store, ids, write, reference)
    try:
        helper = _Helper(store, folder)
    except OSError:  # no right for the temporary files, or no process: one process does it all
        return write_sessions(store, ids, write, reference)
    try:
        start = split_point(store, ids) if helper.share_snapshot() else None
        if start is None or not helper.start(ids, start):
            helper.close()
            return write_sessions(store, ids, write, reference)
        crash_point("export_shared")
        n = write_sessions(store, _Slice(ids, 0, start), write, reference)
        messages = helper.result()
        if messages is None:
            helper.close()  # its temporary files go before this process writes the rest
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


def _watch(parent: int) -> None:
    """Ends this process within :data:`WATCH_S` of the first one's end (a session may take long)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_S)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="export-watch").start()


def _ids(source: IO[bytes]) -> Iterator[str]:
    for line in source:
        yield from json.loads(line)


def _say(word: str) -> None:
    sys.stdout.write(word + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    """The second process: ``path dev ino ids_fd out_fd parent``; any failure is exit 1, no output."""
    try:
        return _main(argv)
    except BaseException:  # the first process writes this part itself
        return 1


def _main(argv: list[str]) -> int:
    from maint.export.files import Sink
    from maint.export.pipeline import _reference_jsonl
    from maint.store.connection import open_store

    path, dev, ino, ids_fd, out_fd, parent = argv
    if os.getppid() != int(parent):
        return 1
    _watch(int(parent))
    with open_store(path, readonly=True) as store:
        if store.file_id != (int(dev), int(ino)) or not _one_name(path):
            return 1  # not the file (or not the WAL) the first process reads: it does this part itself
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
                hang_point("export_second_process")
                n = write_sessions(store, _ids(source), sink.write_bytes,
                                   lambda sid: _reference_jsonl(store, sid, sink.write))
                sink.flush()
                crash_point("export_second_process")
                fh.flush()
                size = fh.tell()
    _say(json.dumps({"messages": n, "bytes": size}))
    return 0
