"""Live Hermes processes beside a maintenance job: several writers appending and one FTS reader.

The suite's live-writer tests check correctness, not speed: their writers wait for the lock with a patience no
load can use up (``PATIENT``), so a failed or lost append is a real bug (a lock held for tens of seconds, a
write undone), never a busy machine. How long writers wait beside each job is measured by the benchmarks
(bench/prune_bench.py, bench/load_bench.py, bench/backup_bench.py).
"""

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# SQLite's busy handler for 30 s and no retry (tests/hermes_writer.py): twice Hermes's own budget
# (15 tries of 1 s with 20-150 ms between them).
PATIENT = {"HERMES_WRITER_PATIENCE_MS": "30000"}


def pinned_batcher(load: int):
    """A Batcher whose counts do not depend on the clock: one chunk per transaction, each chunk *load* work
    units (or one bigger unit alone), however fast the machine is."""
    from maint.store.batching import Batcher

    # chunk_s above target_s: no room for a second chunk; min_load = max_load: the learnt rate is not used.
    return Batcher(target_s=0.0, chunk_s=1.0, min_load=load, max_load=load)


@contextlib.contextmanager
def rows_per_transaction(store):
    """How many rows of ``sessions`` and ``messages`` each write transaction of *store* added or removed, in
    order (counted inside the transaction, where nobody else can write)."""
    rows: list[int] = []
    write = store.write

    def count() -> int:
        return store.scalar("SELECT (SELECT COUNT(*) FROM sessions) + (SELECT COUNT(*) FROM messages)")

    @contextlib.contextmanager
    def counted():
        with write() as conn:
            before = count()
            yield conn
            rows.append(abs(count() - before))

    store.write = counted
    try:
        yield rows
    finally:
        del store.write


class LiveHermes:
    def __init__(self, db: Path, writers: int = 3, interval: float = 0.01, reader: bool = True,
                 writer_env: dict | None = None):
        self.db, self.n, self.interval, self.with_reader = Path(db), writers, interval, reader
        self.writer_env = dict(os.environ, **(writer_env or {}))
        self.stop = self.db.parent / "live.stop"

    def __enter__(self):
        self.stop.unlink(missing_ok=True)
        self.writers = [subprocess.Popen([sys.executable, "-m", "tests.hermes_writer", str(self.db),
                                          str(self.stop) + f".w{i}", str(self.interval), f"live_writer_{i}"],
                                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         env=self.writer_env)
                        for i in range(self.n)]
        self.procs = list(self.writers)
        ready = [Path(str(self.stop) + f".w{i}.ready") for i in range(self.n)]
        if self.with_reader:
            self.reader = subprocess.Popen([sys.executable, "-m", "tests.hermes_reader", str(self.db),
                                            str(self.stop)],
                                           cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.procs.append(self.reader)
            ready.append(Path(str(self.stop) + ".reader-ready"))
        deadline = time.time() + 120  # process start-up on a loaded machine
        while not all(p.exists() for p in ready):
            if time.time() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError("live Hermes processes failed to start")
            time.sleep(0.05)
        return self

    def finish(self) -> dict:
        for i in range(self.n):
            Path(str(self.stop) + f".w{i}").write_text("1")
        self.stop.write_text("1")
        writers, errors = [], []
        for p in self.writers:
            out, err = p.communicate(timeout=120)
            writers.append(json.loads(out.strip().splitlines()[-1]))
            errors.append(err)
        reader = None
        if self.with_reader:
            out, _ = self.reader.communicate(timeout=120)
            reader = json.loads(out.strip().splitlines()[-1])
        conn = sqlite3.connect(self.db)
        stored = {w["session_id"]: conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?",
                                                (w["session_id"],)).fetchone()[0] for w in writers}
        conn.close()
        return {"writers": writers, "reader": reader, "stored": stored, "errors": errors}

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
