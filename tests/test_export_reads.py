"""Export and the store's read lock (hostile try 3, F28): no read transaction waits on the output.

An export into a pipe nobody reads (``export - | ssh host ...`` on a stalled network) used to keep its
one read transaction open for as long as the pipe stalled: on a rollback-journal store every Hermes
writer failed meanwhile, in WAL mode no checkpoint could finish. Reads now end before their output is
written, and on a rollback-journal store each is bounded by the lock budget.
"""

import fcntl
import json
import sqlite3
import subprocess
import sys
import termios
import time

import pytest

from maint.export import fast_jsonl, render
from maint.export import files as export_files
from maint.store.connection import open_store
from tests.conftest import REPO
from tests.storegen import StoreBuilder

F_GETPIPE_SZ = 1032


def big_store(path, sessions=400, per=10, journal="delete"):
    """A store whose jsonl export is many times a pipe's capacity."""
    with StoreBuilder(path, layout="v22") as b:
        b.session("first", messages=1)
    conn = sqlite3.connect(path)
    conn.executescript(f"""
        CREATE TEMP TABLE n(value INTEGER PRIMARY KEY);
        WITH RECURSIVE c(v) AS (SELECT 0 UNION ALL SELECT v + 1 FROM c WHERE v < {sessions * per})
            INSERT INTO n SELECT v FROM c;
        INSERT INTO sessions(id, source, started_at, ended_at, end_reason)
            SELECT 'old' || value, 'cli', 1700000000 + value, 1700000100 + value, 'done'
            FROM n WHERE value BETWEEN 1 AND {sessions};
        INSERT INTO messages(session_id, role, content, timestamp)
            SELECT 'old' || (value / {per} + 1), 'user', 'text ' || value || ' ' || hex(randomblob(200)), 1700000050
            FROM n WHERE value < {sessions * per};
        PRAGMA journal_mode={journal};
    """)
    conn.close()
    return sessions + 1


def _wait_until_pipe_full(proc):
    """The export has filled the pipe: from here on it can only wait for a reader (or end its read)."""
    fd = proc.stdout.fileno()
    capacity = fcntl.fcntl(fd, F_GETPIPE_SZ)
    guard = time.monotonic() + 120  # a hang guard, not a timing assertion
    while True:
        pending = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
        if int.from_bytes(pending, sys.byteorder) >= capacity:
            return
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < guard, "the export never filled the pipe"
        time.sleep(0.01)


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_a_writer_commits_while_an_export_to_a_stalled_pipe_waits(tmp_path, journal):
    """A Hermes-like writer (BEGIN IMMEDIATE; INSERT; COMMIT with a busy timeout) commits while the export
    waits on a pipe nobody reads; in WAL mode a full checkpoint completes too. Before the fix the export's
    read transaction stayed open for the whole stall and the writer failed ("database is locked")."""
    db = tmp_path / "state.db"
    n = big_store(db, journal=journal)
    proc = subprocess.Popen([sys.executable, "-m", "maint", "export", "--db", str(db), "-"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_until_pipe_full(proc)
        writer = sqlite3.connect(db, timeout=10, isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO sessions(id, source, started_at) VALUES ('live', 'cli', 1800000000)")
        writer.execute("COMMIT")  # rollback journal: needs every reader's lock gone
        if journal == "wal":
            busy, _, _ = writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            assert busy == 0  # no read transaction pins the WAL
        writer.close()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    ids = [json.loads(line)["id"] for line in out.decode().splitlines()]
    assert len(ids) in (n, n + 1) and len(set(ids)) == len(ids)  # each session whole, once


def test_paced_reads_are_bounded_and_give_the_same_bytes(tmp_path, monkeypatch):
    """Read in many short transactions (a few lines each), the export is byte for byte the one-snapshot
    export, every session read whole in one transaction."""
    db = tmp_path / "state.db"
    big_store(db, sessions=60, per=2, journal="delete")
    monkeypatch.setattr(fast_jsonl, "READ_BYTES", 3000)  # a few sessions per transaction
    with open_store(db, readonly=True) as store:
        ids = [r[0] for r in store.conn.execute("SELECT id FROM sessions ORDER BY started_at, id")]
        expected = []
        with store.snapshot():
            for sid in ids:
                render.write_jsonl_session(store, sid, expected.append, False)
        spool, out = export_files.Spool(), []
        reads = fast_jsonl.ReadPacing(store.snapshot, spool, budget_s=None)
        sql_bytes_per_tx = []
        real_spent = reads.spent

        def spent():
            sql_bytes_per_tx.append(spool.size)
            return real_spent()

        reads.spent = spent
        n = fast_jsonl.write_sessions(store, ids, lambda b: out.append(b.decode()),
                           lambda sid: render.write_jsonl_session(store, sid, spool.write, False), reads=reads)
    assert "".join(out) == "".join(expected)
    assert n == 60 * 2 + 1
    assert reads.transactions > 10  # bounded by bytes, not one transaction for the export
    longest = max(len(line.encode()) for line in "".join(expected).splitlines(keepends=True))
    assert max(sql_bytes_per_tx) < 3000 + longest  # a transaction ends at the first session past the bound


def test_the_lock_budget_bounds_a_read_on_a_rollback_journal_store_only(tmp_path):
    for journal, bounded in (("delete", True), ("wal", False)):
        db = tmp_path / f"{journal}.db"
        big_store(db, sessions=2, per=1, journal=journal)
        with open_store(db, readonly=True) as store:
            reads = fast_jsonl.read_pacing(store, export_files.Spool())
            assert (reads.budget_s is not None) == bounded
            reads.clock = iter([0.0, 10.0]).__next__
            reads.begin()
            assert reads.spent() == bounded  # 10 s past the budget: a rollback-journal read ends


def test_a_paced_redacted_export_gates_about_the_sessions_each_transaction_builds(tmp_path, monkeypatch):
    """A transaction that ends within its batch leaves the rest to the next one, which gates them again (it must:
    the rows it builds are gated in it). So after the first, a transaction gates at most GATE_MARGIN sessions
    more than it builds (gated whole, a batch of 256 had every remaining session gated in every transaction);
    the bytes are the one-snapshot redacted export's."""
    db = tmp_path / "state.db"
    big_store(db, sessions=60, per=2, journal="wal")
    monkeypatch.setattr(fast_jsonl, "READ_BYTES", 3000)  # a few sessions per transaction
    gated = []
    real_gate_batch = fast_jsonl._Hits.gate_batch

    def gate_batch(self, batch_json):
        gated.append(json.loads(batch_json))
        real_gate_batch(self, batch_json)
    monkeypatch.setattr(fast_jsonl._Hits, "gate_batch", gate_batch)
    with open_store(db, readonly=True) as store:
        ids = [r[0] for r in store.conn.execute("SELECT id FROM sessions ORDER BY started_at, id")]
        whole = []
        with store.snapshot():
            fast_jsonl.write_sessions(store, ids, whole.append, lambda sid: 0, redact=True)
        gated.clear()
        spool, out = export_files.Spool(), []
        reads = fast_jsonl.ReadPacing(store.snapshot, spool, budget_s=None)
        n = fast_jsonl.write_sessions(store, ids, out.append,
                                      lambda sid: render.write_jsonl_session(store, sid, spool.write, True),
                                      redact=True, reads=reads)
    assert b"".join(out) == b"".join(whole)
    assert n == 60 * 2 + 1
    assert reads.transactions == len(gated) > 10
    starts = [ids.index(batch[0]) for batch in gated] + [len(ids)]
    built = [b - a for a, b in zip(starts, starts[1:])]
    assert sum(built) == len(ids)  # each session built once, in order
    assert all(len(batch) - done <= fast_jsonl.GATE_MARGIN for batch, done in zip(gated[1:], built[1:]))
