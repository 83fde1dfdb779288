"""Copies our committed pages out of the WAL on a second connection while the bulk job goes on.

Left to SQLite, the copy (the auto-checkpoint) runs inside whichever commit
finds the WAL long: ours, adding the copy to the job's lock time, or a
Hermes writer's, adding it to its append. A thread woken at each of our
commits starts the copy at once, before a waiting writer can commit, and
runs beside our next transaction on the other core. While it holds the
checkpoint lock a writer's own auto-checkpoint gives up at once instead of
repeating the work. PASSIVE mode never waits for or blocks anyone.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import apsw

from maint.store.connection import Store


class Checkpointer:
    def __init__(self, store: Store):
        self.conn = store.sibling_connection()
        self.wanted = threading.Event()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="hermes-maint-checkpoint", daemon=True)

    def _checkpoint(self) -> None:
        with contextlib.suppress(apsw.Error):  # busy (a writer is copying) or not in WAL: the next one will do
            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    def _run(self) -> None:
        while True:
            self.wanted.wait()
            self.wanted.clear()
            if self.stopping:
                return
            self._checkpoint()

    def poke(self) -> None:
        """Call right after each commit."""
        self.wanted.set()

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping = True
        self.wanted.set()
        self.thread.join()
        self._checkpoint()  # whatever the last commit left
        self.conn.close()


@contextlib.contextmanager
def background_checkpoints(store: Store) -> Iterator[Callable[[], None]]:
    """Yields the function to call after each commit. Our connection stops auto-checkpointing for
    the duration and the thread does it instead; if a second connection cannot be opened, SQLite's
    auto-checkpoint stays in charge."""
    try:
        cp = Checkpointer(store)
    except apsw.Error:
        yield lambda: None
        return
    pages = store.scalar("PRAGMA wal_autocheckpoint")
    store.conn.execute("PRAGMA wal_autocheckpoint=0")
    cp.start()
    try:
        yield cp.poke
    finally:
        cp.stop()
        store.conn.execute(f"PRAGMA wal_autocheckpoint={int(pages)}")
