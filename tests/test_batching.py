"""Transactions bounded by the clock, and the pause that lets a waiting Hermes writer in."""

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from maint.batching import BUSY_DELAYS_MS, Batcher, Pacer, busy_retry_within, run_batched
from maint.prune import execute_prune, plan_prune
from maint.store import open_store
from tests.conftest import REPO
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


def test_pause_lasts_a_whole_busy_step_when_nobody_writes(tmp_path):
    with open_store(small_store(tmp_path)) as store:
        pacer = Pacer(store.data_version)
        pacer.exposed_since = time.monotonic() - 0.15  # a writer may have waited 150 ms: it sleeps 50 ms
        started = time.monotonic()
        pacer.pause()
        assert time.monotonic() - started >= 0.05
        assert pacer.exposed_since >= started  # every waiting writer has had its try


def test_pause_ends_when_another_connection_commits(tmp_path):
    db = small_store(tmp_path)
    with open_store(db) as store:
        pacer = Pacer(store.data_version)
        exposed = pacer.exposed_since = time.monotonic() - 10
        done = threading.Event()

        def writer():
            conn = sqlite3.connect(db, isolation_level=None)
            while not done.is_set():
                conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES ('t', ?)", (str(time.time()),))
                time.sleep(0.002)
            conn.close()

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            pacer.pause()
        finally:
            done.set()
            thread.join()
        # A writer was served, but another may still be queued: the exposure is not forgiven.
        assert pacer.exposed_since == exposed


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
def test_a_waiting_writer_gets_the_next_turn(tmp_path):
    """Each of our transactions holds the lock 140 ms, so a writer waiting from its start is asleep in a
    50 ms busy-handler step when we commit. The pause must outlast that step: a shorter one lets us
    take the lock again and the writer waits through a second transaction (~330 ms). This writer is
    Hermes's own append path, but gives up after 250 ms with no retry."""
    db = small_store(tmp_path)
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-m", "tests.hermes_writer", str(db), str(stop), "0.005"],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, HERMES_WRITER_PATIENCE_MS="250"))
    deadline = time.time() + 60
    while not (tmp_path / "stop.ready").exists():
        assert time.time() < deadline and writer.poll() is None
        time.sleep(0.05)
    time.sleep(0.2)
    with open_store(db) as store:

        def hold(batch):
            time.sleep(0.14)
            return len(batch)

        run_batched(list(range(15)), lambda u: 1, hold, store.write, Pacer(store.data_version),
                    batcher=Batcher(target_s=0.0, max_load=1))
        assert store.write_stats.transactions == 15
    stop.write_text("1")
    out, err = writer.communicate(timeout=60)
    stats = json.loads(out.strip().splitlines()[-1])
    assert stats["failed"] == 0, err
    assert stats["appended"] >= 15


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
    assert len(result.deleted_ids) == 1500 and result.transactions == 1
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
    assert (tmp_path / "state.db-wal").exists()  # the checkpoint connection never removes it
