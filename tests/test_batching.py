"""Transactions bounded by the clock, and the pause that lets a waiting Hermes writer in."""

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

from maint.store.batching import (BUSY_DELAYS_MS, MARGIN_S, MAX_PAUSE_S, POLL_S, RECOUNT_S, Batcher, PacedWrites, Pacer,
                                  busy_retry_within, pacer_for, run_batched)
from maint.store.holders import other_connections
from maint.ops.prune import execute_prune, plan_prune
from maint.store.connection import open_store
from tests.conftest import query
from tests.live import PATIENT, LiveHermes, pinned_batcher, rows_per_transaction
from tests.storegen import StoreBuilder


@pytest.mark.parametrize("waited_ms, step_ms", [(0, 1), (2, 2), (7, 5), (30, 15), (100, 25), (130, 50),
                                                (227, 50), (228, 100), (5000, 100)])
def test_busy_step_follows_sqlites_default_busy_handler(waited_ms, step_ms):
    assert busy_retry_within(waited_ms / 1000) == pytest.approx(step_ms / 1000)
    assert sum(BUSY_DELAYS_MS) == 328  # the schedule in sqliteDefaultBusyCallback


def small_store(tmp_path):
    with StoreBuilder(tmp_path / "state.db") as b:
        b.session("s1", age=200)
    return tmp_path / "state.db"


class FakeClock:
    """The pacer's clock and sleep: time moves only when the pause sleeps, so every figure is exact."""

    def __init__(self, commits=()):
        self.now = self.start = 1000.0
        self.commits = commits  # when another connection commits: a list of times, or a predicate on the time

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds
        assert self.now - self.start < 60, "the pause never ended"

    def data_version(self) -> int:
        """PRAGMA data_version as the pause sees it: one more for every commit so far."""
        if callable(self.commits):
            return self.commits(self.now)
        return sum(1 for t in self.commits if t <= self.now)

    def pacer(self, writers=lambda: None) -> Pacer:
        return Pacer(self.data_version, writers=writers, clock=self.clock, sleep=self.sleep)

    def pause(self, pacer: Pacer) -> float:
        """Run one pause; how long it took on this clock."""
        started = self.now
        pacer.pause()
        return self.now - started


def ends_after(took: float, seconds: float, polls: int = 1) -> bool:
    """The pause ended at its first look (every POLL_S) once *seconds* had gone by (*polls*: two when the
    moment itself was found by a look)."""
    return seconds - 1e-9 <= took < seconds + polls * POLL_S + 1e-9


def test_pause_lasts_a_whole_busy_step_when_nobody_writes():
    fake = FakeClock()
    pacer = fake.pacer()
    pacer.exposed_since = fake.now - 0.15  # a writer may have waited 150 ms: it sleeps 50 ms
    took = fake.pause(pacer)
    assert ends_after(took, 0.05 + MARGIN_S)
    assert pacer.exposed_since == fake.now  # every waiting writer has had its try
    # so the next pause, right after, waits only the first step of a fresh wait (1 ms)
    assert ends_after(fake.pause(pacer), 0.001 + MARGIN_S)


def test_pause_ends_once_the_only_writer_has_committed():
    fake = FakeClock(commits=[1000.01])
    pacer = fake.pacer(writers=lambda: 1)
    exposed = pacer.exposed_since = fake.now - 10  # a 100 ms step
    took = fake.pause(pacer)
    assert ends_after(took, 0.01)  # at the first look after its commit
    # It ended early, without forgiving the exposure (a second writer may have come since the count).
    assert pacer.exposed_since == exposed


@pytest.mark.parametrize("count", [2, 0, None], ids=["two writers", "none visible", "unknown"])
def test_pause_runs_its_whole_step_unless_there_is_one_writer(count):
    """A commit 10 ms in: with two writers it could be one quick writer's, so it ends nothing; the window
    stays open one whole step (100 ms) after it."""
    fake = FakeClock(commits=[1000.01])
    pacer = fake.pacer(writers=lambda: count)
    pacer.exposed_since = fake.now - 10  # 100 ms steps
    took = fake.pause(pacer)
    assert ends_after(took, 0.01 + 0.1 + MARGIN_S, polls=2)
    assert pacer.exposed_since == fake.now


def test_with_several_writers_each_commit_keeps_the_window_open_up_to_a_bound():
    """Commits every 2 ms with two writers counted: each may have refused the other, so the pause lasts
    one more step after each, up to MAX_PAUSE_S (we must move on too)."""
    fake = FakeClock(commits=lambda now: int((now - 1000.0) / 0.002))
    pacer = fake.pacer(writers=lambda: 2)
    pacer.exposed_since = fake.now - 10  # 100 ms steps
    took = fake.pause(pacer)
    assert ends_after(took, MAX_PAUSE_S)
    assert pacer.exposed_since == fake.now
    # Commits that stop 150 ms in: the window closes one step after the last one, before the bound.
    fake = FakeClock(commits=[1000.0 + 0.002 * k for k in range(1, 76)])
    pacer = fake.pacer(writers=lambda: 2)
    pacer.exposed_since = fake.now - 10
    took = fake.pause(pacer)
    assert ends_after(took, 0.15 + 0.1 + MARGIN_S, polls=2) and took < MAX_PAUSE_S


def test_the_count_of_other_connections_is_taken_again_after_a_while():
    fake = FakeClock()
    counted = []
    pacer = fake.pacer(writers=lambda: counted.append(fake.now) or 1)
    for _ in range(3):
        fake.pause(pacer)
    assert len(counted) == 1
    fake.now += RECOUNT_S
    fake.pause(pacer)
    assert len(counted) == 2


def test_other_connections_counts_each_sqlite_connection_of_other_processes(tmp_path):
    db = small_store(tmp_path)
    code = ("import sqlite3, sys; cs = [sqlite3.connect(sys.argv[1]) for _ in range(2)];"
            "[c.execute('SELECT COUNT(*) FROM sessions').fetchall() for c in cs]; print('open', flush=True);"
            "sys.stdin.read()")
    with open_store(db) as store:  # our own connections never count
        assert other_connections(db) == 0
        proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "open"
            assert other_connections(db) == 2
            assert pacer_for(store).expected_writers() == 2
        finally:
            proc.communicate("")


def count_transactions(units, apply, batcher):
    opened = []

    class Tx:
        def __enter__(self):
            opened.append([])

        def __exit__(self, *exc):
            return False

    def chunk(batch):
        opened[-1].append(list(batch))
        return apply(batch)

    total = run_batched(units, lambda u: 1, chunk, Tx, Pacer(lambda: 0), batcher=batcher)
    return total, opened


def test_chunks_share_a_transaction_while_there_is_time():
    total, txs = count_transactions(list(range(10)), len, Batcher(target_s=60, chunk_s=0.0))
    assert total == 10 and len(txs) == 1 and len(txs[0]) == 10


def test_the_clock_ends_a_transaction():
    # each chunk takes >= 20 ms; after three, 60 ms > 50 ms target: the transaction commits
    def slow(batch):
        time.sleep(0.02)
        return len(batch)

    total, txs = count_transactions(list(range(9)), slow, Batcher(target_s=0.05, chunk_s=0.0))
    assert total == 9 and len(txs) >= 3
    assert all(1 <= len(chunks) <= 3 for chunks in txs)
    assert [u for tx in txs for c in tx for u in c] == list(range(9))  # in order, each once


@pytest.mark.slow
def test_paced_transactions_beside_real_writers_lose_nothing(tmp_path):
    """Ten transactions of ours, each holding the lock 140 ms, paced by the real pacer beside three real Hermes
    writers: every append lands, none fails. (How soon a waiting writer gets its turn is the pacer's logic,
    tested on a fake clock above, and the worst append the benchmarks measure: the writers here are patient.)"""
    db = small_store(tmp_path)
    with LiveHermes(db, writers=3, interval=0.005, reader=False, writer_env=PATIENT) as live:
        with open_store(db) as store:
            pacer = pacer_for(store)
            assert pacer.expected_writers() == 3

            def hold(batch):
                time.sleep(0.14)
                return len(batch)

            assert run_batched(list(range(10)), lambda u: 1, hold, store.write, pacer,
                               batcher=pinned_batcher(1)) == 10
            assert store.write_stats.transactions == 10
        seen = live.finish()
    for stats, err in zip(seen["writers"], seen["errors"]):
        assert stats["failed"] == 0, err
        assert stats["appended"] >= 1 and seen["stored"][stats["session_id"]] == stats["appended"]


def test_one_messages_delete_per_chunk_whatever_its_size(tmp_path):
    """FTS5 writes a segment at every statement; a chunk's delete is never split by an IN-list limit."""
    with StoreBuilder(tmp_path / "state.db") as b:
        for n in range(1500):  # more than any IN-list chunk
            b.session(f"s{n}", age=200, messages=1)
    with open_store(tmp_path / "state.db") as store:
        plan = plan_prune(store, None)
        deletes = []
        store.conn.exec_trace = lambda cur, sql, bindings: (
            deletes.append(sql) if sql.startswith("DELETE FROM messages") else None) or True
        result = execute_prune(store, plan, batcher=Batcher(target_s=60, chunk_s=60))
        store.conn.exec_trace = None
    # the deletes take one transaction; one before it may only finish FTS5 merges (maint/store/fts_index.py)
    assert len(result.deleted_ids) == 1500 and result.transactions <= 2
    assert len(deletes) == 1


def test_prune_leaves_the_wal_copied_back_and_autocheckpoint_on(tmp_path):
    with StoreBuilder(tmp_path / "state.db") as b:
        for n in range(300):
            b.session(f"s{n}", age=200, messages=3)
    with open_store(tmp_path / "state.db") as store:
        execute_prune(store, plan_prune(store, None), batcher=Batcher(target_s=0.0, max_load=5))
        assert store.scalar("PRAGMA wal_autocheckpoint") == 1000
        busy, log, copied = store.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert busy == 0 and log == copied
    assert (tmp_path / "state.db-wal").exists()  # a checkpoint never removes it


def test_a_bulk_job_leaves_checkpoints_to_sqlite_in_its_own_commits(tmp_path, monkeypatch):
    """Hostile try 9, L8: a PASSIVE checkpoint on a second connection after each of our commits, beside Hermes
    processes that open, write and close with a SQLite older than 3.51.3 (Python's own here), made SQLite's WAL-reset
    race likely: 3 of 3 prunes left the store corrupt and acknowledged writes lost, none with SQLite's own
    auto-checkpoint. A bulk job opens no second connection, and auto-checkpointing stays on throughout."""
    import threading

    from maint.store import connection

    with StoreBuilder(tmp_path / "state.db") as b:
        for n in range(300):
            b.session(f"s{n}", age=200, messages=3)
    with open_store(tmp_path / "state.db") as store:
        opened = []
        real = connection.connect_checked
        monkeypatch.setattr(connection, "connect_checked", lambda *a, **k: opened.append(a[0]) or real(*a, **k))
        seen = []
        write = store.write

        def watched():
            seen.append((store.scalar("PRAGMA wal_autocheckpoint"), threading.active_count()))
            return write()

        monkeypatch.setattr(store, "write", watched)
        threads = threading.active_count()
        result = execute_prune(store, plan_prune(store, None), batcher=Batcher(target_s=0.0, max_load=5))
    assert len(result.deleted_ids) == 300 and len(seen) > 10
    assert {autocheckpoint for autocheckpoint, _ in seen} == {1000} and opened == []
    assert {count for _, count in seen} == {threads}  # no thread of ours beside the transactions


RAW_WRITER = """
import os, sqlite3, sys, time, json
db, stop, tag = sys.argv[1], sys.argv[2], sys.argv[3]
c = sqlite3.connect(db, timeout=30.0, isolation_level=None)  # SQLite's busy handler for 30 s, no retry
c.execute("INSERT INTO sessions(id, source, started_at) VALUES (?, 'cli', ?)", (tag, time.time()))
open(stop + "." + tag, "w").close()
done, failed = 0, 0
while not os.path.exists(stop):
    try:
        c.execute("BEGIN IMMEDIATE")
        c.execute("INSERT INTO messages(session_id, role, content, timestamp) VALUES (?, 'user', 'hi', ?)",
                  (tag, time.time()))
        c.execute("COMMIT")
        done += 1
    except sqlite3.OperationalError:
        failed += 1
        if c.in_transaction:
            c.execute("ROLLBACK")
    time.sleep(0.03)
print(json.dumps({"done": done, "failed": failed}))
"""


@pytest.mark.slow
def test_two_writers_beside_a_real_prune_lose_nothing(tmp_path):
    """Two writers on SQLite's own busy handler (no retry of their own) beside a real prune whose chunks are
    pinned to 500 rows: every transaction of ours stays within its chunk, the prune takes every old session,
    and no append fails or is lost."""
    from tests.storegen import bulk_store

    db = tmp_path / "state.db"
    info = bulk_store(db, sessions=500, messages_per_session=12, old_share=0.9)
    stop = str(tmp_path / "stop")
    procs = [subprocess.Popen([sys.executable, "-c", RAW_WRITER, str(db), stop, f"w{i}"], stdout=subprocess.PIPE,
                              text=True) for i in range(2)]
    deadline = time.time() + 120
    while not all(os.path.exists(f"{stop}.w{i}") for i in range(2)):
        assert time.time() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.05)
    with open_store(db) as store:
        plan = plan_prune(store, None)
        with rows_per_transaction(store) as rows:
            result = execute_prune(store, plan, batcher=pinned_batcher(500))
    open(stop, "w").close()
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    work = plan.messages + plan.sessions  # one row deleted per unit of work
    assert len(result.deleted_ids) == plan.sessions == info["old_sessions"] and result.messages == plan.messages
    assert sum(rows) == work and max(rows) <= 500  # each transaction deletes one chunk of at most 500 rows
    assert result.transactions >= -(-work // 500) >= 10
    assert [o["failed"] for o in outs] == [0, 0] and all(o["done"] >= 1 for o in outs)
    for i, o in enumerate(outs):
        assert query(db, "SELECT COUNT(*) FROM messages WHERE session_id = ?", f"w{i}") == [(o["done"],)]


def test_only_a_unit_that_alone_overruns_the_target_is_lightened():
    """Taking a unit's rows out of the index first costs transactions of their own; on a store of real
    text a chunk is a few dozen messages, and lightening every unit heavier than a chunk doubled the
    run's transactions. Only a unit that alone would hold the lock past the target is lightened."""

    class FixedRate(Batcher):
        def observe(self, work, seconds):
            pass

    asked = []

    def lighten(unit):
        asked.append(unit)
        return None

    units = [1, 50, 2000]  # a chunk is 1, the target 1000
    total = run_batched(units, lambda u: u, lambda batch: len(batch), contextlib.nullcontext, Pacer(lambda: 0),
                        batcher=FixedRate(target_s=1.0, chunk_s=0.001, rate=1000), lighten=lighten)
    assert total == 3 and asked == [2000]


def test_paced_writes_run_the_jobs_own_after_commit_after_each_commit():
    """One way to run batches: the job's own work after each commit (prune removes the deleted sessions' files)."""
    calls = []
    writes = PacedWrites(Pacer(lambda: 0))
    total = writes.run_batches([1, 2, 3], lambda u: 1, lambda batch: len(batch), contextlib.nullcontext,
                               batcher=Batcher(target_s=0.0, max_load=1), after_commit=lambda: calls.append("job"))
    assert total == 3
    assert calls == ["job"] * 3


class FixedRate(Batcher):
    """A batcher whose rate is what the test says (the measured rate would follow the machine)."""

    def observe(self, work, seconds):
        pass


def test_chunks_follow_a_unit_heavier_than_a_chunk_while_there_is_room():
    """A unit heavier than a chunk starts a transaction, and that transaction used to end right after it:
    on the Hermes-built store such transactions held the lock 40-75 ms, a quarter of the run's, each paying a
    commit and a pause. Chunks now follow it while there is room, as they follow any chunk."""
    units = [1, 50, 1, 1]  # a chunk is 10, the unit of 50 is over it
    opened: list[list[list[int]]] = []

    @contextlib.contextmanager
    def tx():
        opened.append([])
        yield

    def apply(batch):
        opened[-1].append(list(batch))
        return len(batch)

    total = run_batched(units, lambda u: u, apply, tx, Pacer(lambda: 0),
                        batcher=FixedRate(target_s=60.0, chunk_s=0.01, rate=1000))
    assert total == 4 and opened == [[[1]], [[50], [1, 1]]]  # the big unit still starts its transaction


def test_no_transaction_commits_empty_after_a_lightened_units_last_step():
    """A lightened unit waited for the transaction after the one whose step found nothing left, so that
    transaction committed having done nothing (and paid a pause). Now the unit goes in it."""
    pieces = [True, True, False]
    log: list[list[str]] = []

    class OneStepEach(FixedRate):
        def room_for_another(self, held_s):
            return False  # one step, or one chunk, per transaction

    def lighten(unit):
        def step():
            log[-1].append("piece" if pieces[0] else "none")
            return pieces.pop(0)
        return step

    @contextlib.contextmanager
    def tx():
        log.append([])
        yield

    def apply(batch):
        log[-1].extend(f"unit {u}" for u in batch)
        return len(batch)

    run_batched([5000, 1], lambda u: u, apply, tx, Pacer(lambda: 0), lighten=lighten,
                batcher=OneStepEach(target_s=1.0, chunk_s=0.01, rate=1000, max_load=10**9))
    assert log == [["piece"], ["piece"], ["none", "unit 5000"], ["unit 1"]]
    assert all(any(e != "none" for e in entries) for entries in log)  # none committed having done nothing


class Recording(Batcher):
    """A batcher that keeps every measurement it is taught, and learns nothing from them (a fixed rate)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.taught: list[int] = []

    def observe(self, work, seconds):
        self.taught.append(work)


def test_a_held_back_unit_is_not_work_the_batcher_learns_from(tmp_path, monkeypatch):
    """Issue 28, the 420k scale bench: prune holds back a conversation too big for the lock while the store is
    shared, yet the chunk's whole planned weight was taught as work done in the time of a lookup: the rate came
    out at 10^8 a second, the next chunk at the 200,000-message cap, and its delete held the lock 3.8 s (the
    writer's worst append 4.6 s). Only the units deleted are taught."""
    with StoreBuilder(tmp_path / "state.db") as b:
        b.session("big", age=300, messages=60)  # 60 messages at 0.2 ms each is 12 ms: over the 5 ms limit
        for n in range(4):
            b.session(f"s{n}", age=200, messages=2)
    monkeypatch.setenv("HERMES_MAINT_MAX_UNIT_S", "0.005")
    monkeypatch.setattr("maint.store.batching.other_connections", lambda path: 1)  # the store is shared
    with open_store(tmp_path / "state.db") as store:
        # a chunk holds 100 (all five units), a transaction 1000: the held-back unit shares its chunk with the rest
        batcher = Recording(target_s=1000.0, chunk_s=100.0, rate=1.0)
        result = execute_prune(store, plan_prune(store, None), batcher=batcher)
    assert result.skipped_too_big == ["big"] and sorted(result.deleted_ids) == ["s0", "s1", "s2", "s3"]
    assert batcher.taught == [4 * 3]  # the deleted units' weight (2 messages + 1 session each), not the 61 held


def test_one_quick_chunk_cannot_size_the_next_at_many_times_this_one():
    """Whatever a chunk measured (a chunk of lookups, a clock that barely moved), the next chunk is at most
    1.9 times this one: the measured rate counts at most MAX_RATE_STEP times the rate it was sized by."""
    from maint.store.batching import MAX_RATE_STEP

    batcher = Batcher(target_s=0.1, chunk_s=0.01, rate=1000.0, max_load=10**9)
    before = batcher.chunk_load
    batcher.observe(10**9, 1e-6)
    assert batcher.chunk_load == pytest.approx(before * (0.7 + 0.3 * MAX_RATE_STEP))
    sizes = [batcher.chunk_load]
    for _ in range(5):
        batcher.observe(10**9, 1e-6)
        sizes.append(batcher.chunk_load)
    assert all(b <= a * 1.9 + 1e-9 for a, b in zip(sizes, sizes[1:]))
    slow = Batcher(target_s=0.1, chunk_s=0.01, rate=1000.0)
    slow.observe(5, 1.0)  # a slow chunk still teaches its rate at once (smoothed): no floor on the way down
    assert slow.rate == pytest.approx(0.7 * 1000 + 0.3 * 5)
