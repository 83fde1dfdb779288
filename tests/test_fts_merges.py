"""FTS5 merges held by prune for its duration: done in bounded steps, Hermes's setting put back exactly."""

import json
import os
import subprocess
import sys

import apsw
import pytest

from maint.ops.prune import execute_prune, plan_prune
from maint.store.batching import Batcher, Pacer, run_batched
from maint.store.connection import open_store
from maint.store import fts_index as fts_merges
from maint.store.fts_index import META_KEY, MergeSteps, fts5_tables, restore_left_over, structure_blob
from tests.conftest import REPO
from tests.storegen import StoreBuilder

TABLES = ["messages_fts", "messages_fts_trigram"]  # hermes-agent 0.19.0's


def hermes_store(path, sessions=40, messages=30):
    """One commit per message through SessionDB: many small segments, as Hermes leaves them."""
    with StoreBuilder(path) as b:
        for n in range(sessions):
            b.session(f"old{n}", age=200, messages=messages)
        b.session("recent", age=1, messages=5)
    return path


def configs(path):
    conn = apsw.Connection(str(path))
    try:
        return {t: sorted(conn.execute(f"SELECT k, v FROM {t}_config")) for t in TABLES}
    finally:
        conn.close()


def assert_index_whole(path):
    conn = apsw.Connection(str(path))
    try:
        for t in TABLES:
            conn.execute(f"INSERT INTO {t}({t}, rank) VALUES('integrity-check', 1)")
        # no deleted message is still found, every kept one is
        assert conn.execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'old5'").fetchone()[0] == 0
        kept = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        assert conn.execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'message'").fetchone()[0] \
            == kept
    finally:
        conn.close()


def test_the_store_has_hermes_fts5_tables(tmp_path):
    db = hermes_store(tmp_path / "state.db", sessions=2, messages=2)
    with open_store(db) as store:
        assert fts5_tables(store.conn) == TABLES
        assert all(structure_blob(store.conn, t) for t in TABLES)


@pytest.mark.parametrize("hermes_value", [None, 8])
def test_prune_puts_automerge_back_exactly(tmp_path, hermes_value):
    db = hermes_store(tmp_path / "state.db")
    if hermes_value is not None:  # as if Hermes had tuned it: the row must come back with its value
        conn = apsw.Connection(str(db))
        conn.execute(f"INSERT INTO messages_fts(messages_fts, rank) VALUES('automerge', {hermes_value})")
        conn.close()
    before = configs(db)
    with open_store(db) as store:
        execute_prune(store, plan_prune(store, None), batcher=Batcher(target_s=0.0, max_load=30))
        assert store.get_meta(META_KEY) is None
    assert configs(db) == before
    assert_index_whole(db)


def test_merges_are_held_off_while_prune_deletes(tmp_path, monkeypatch):
    db = hermes_store(tmp_path / "state.db")
    seen = []
    import maint.ops.prune as prune

    real = prune.delete_sessions

    def spy(store, conn, ids):
        seen.append((conn.execute("SELECT v FROM messages_fts_config WHERE k = 'automerge'").fetchone()[0],
                     json.loads(store.get_meta(META_KEY))))
        real(store, conn, ids)

    monkeypatch.setattr(prune, "delete_sessions", spy)
    with open_store(db) as store:
        execute_prune(store, plan_prune(store, None), batcher=Batcher(target_s=0.0, max_load=30))
    assert seen and all(v == 0 and note == {"messages_fts": None, "messages_fts_trigram": None} for v, note in seen)


def test_merge_steps_finish_what_automerge_would_have_done(tmp_path, monkeypatch):
    monkeypatch.setattr(fts_merges, "MAX_PAGES", 8)
    db = hermes_store(tmp_path / "state.db", sessions=4, messages=2)
    with open_store(db) as store:
        for t in TABLES:  # pile up segments the way a held automerge leaves them: one per commit
            store.conn.execute(f"INSERT INTO {t}({t}, rank) VALUES('automerge', 0)")
        for n in range(12):
            with store.write() as conn:
                conn.executemany("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?,?,?,?)",
                                 [("recent", "user", f"message {n} {i} " + "lorem ipsum dolor " * 100, 1.0)
                                  for i in range(20)])
        steps = MergeSteps(store, TABLES)
        steps.pages = 8
        n = 0
        while True:
            with store.write():
                if not steps.step():
                    break
            n += 1
        assert n >= 4  # bounded steps, not one merge of everything
        blobs = [structure_blob(store.conn, t) for t in TABLES]
        with store.write() as conn:  # FTS5's own merge finds nothing left either
            for t in TABLES:
                conn.execute(f"INSERT INTO {t}({t}, rank) VALUES('merge', 1000)")
        assert [structure_blob(store.conn, t) for t in TABLES] == blobs
        store.conn.execute("DELETE FROM messages WHERE session_id = 'old1'")
    assert_index_whole(db)


@pytest.mark.parametrize("rows", [{"crisismerge": "abc"}, {"usermerge": "x", "crisismerge": 1.5},
                                  {"automerge": "abc"}, {"automerge": 100, "usermerge": 99},
                                  {"automerge": "8"}, {"automerge": b"8"}, {"automerge": 2.0}])
def test_options_fts5_would_ignore_neither_stop_a_prune_nor_change(tmp_path, rows, cli):
    """Hand-edited rows FTS5 ignores (it keeps its defaults): the prune runs, the rows come back as they were."""
    db = hermes_store(tmp_path / "state.db", sessions=10, messages=5)
    conn = apsw.Connection(str(db))
    for key, value in rows.items():
        for t in TABLES:
            conn.execute(f"INSERT OR REPLACE INTO {t}_config(k, v) VALUES (?, ?)", (key, value))
    conn.close()
    before = configs(db)
    result = cli("prune", "--db", db, "--older-than", "30", "--yes", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["deleted"] == 10
    assert configs(db) == before
    with open_store(db) as store:
        assert store.get_meta(META_KEY) is None
    assert_index_whole(db)


def test_only_fts5_indexes_are_taken_for_them_an_fts5vocab_table_is_left_alone(tmp_path, cli):
    """Hostile try 12, P14: a stock ``fts5vocab`` table over an index (term statistics) was taken for an FTS5
    index with shadow tables: prune and the nightly sweep stopped at "SQLError: zz_vocab_config"."""
    db = hermes_store(tmp_path / "state.db", sessions=10, messages=5)
    conn = apsw.Connection(str(db))
    conn.execute("CREATE VIRTUAL TABLE zz_vocab USING fts5vocab(messages_fts, row)")
    conn.execute("CREATE VIRTUAL TABLE messages_fts_cjk USING fts5vocab('messages_fts_trigram', 'col')")
    conn.close()
    before = configs(db)
    result = cli("prune", "--db", db, "--older-than", "30", "--yes", "--json")
    assert result.exit_code == 0, result.output
    with open_store(db) as store:
        assert fts5_tables(store.conn) == TABLES and store.fts_tables == TABLES
    assert json.loads(result.stdout)["deleted"] == 10
    assert configs(db) == before
    assert_index_whole(db)
    conn = apsw.Connection(str(db))
    try:  # still there, and counting what is left
        assert conn.execute("SELECT doc FROM zz_vocab WHERE term = 'recent'").fetchone()[0] == 5
    finally:
        conn.close()


def test_a_run_killed_with_merges_held_is_put_right_by_the_next(tmp_path):
    db = hermes_store(tmp_path / "state.db")
    before = configs(db)
    env = dict(os.environ, HERMES_MAINT_CRASH_AT="fts_automerge_held")
    killed = subprocess.run([sys.executable, "-m", "maint", "prune", "--db", str(db), "--yes"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9
    held = configs(db)
    assert all(("automerge", 0) in rows for rows in held.values())
    with open_store(db) as store:
        assert json.loads(store.get_meta(META_KEY)) == {"messages_fts": None, "messages_fts_trigram": None}
        assert restore_left_over(store)
        assert store.get_meta(META_KEY) is None
        assert not restore_left_over(store)
    assert configs(db) == before
    # and a whole run after a kill restores first, then prunes
    killed = subprocess.run([sys.executable, "-m", "maint", "prune", "--db", str(db), "--yes"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9
    done = subprocess.run([sys.executable, "-m", "maint", "prune", "--db", str(db), "--yes"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert configs(db) == before
    assert_index_whole(db)


class Tx:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append([])

    def __exit__(self, *exc):
        return False


def test_pending_upkeep_comes_before_new_chunks_and_a_big_unit_starts_the_next_transaction():
    log: list[list] = []
    debt = [3]  # three steps of leftover work

    class FixedRate(Batcher):
        def observe(self, work, seconds):
            pass

    def upkeep():
        if debt[0] == 0:
            return False
        debt[0] -= 1
        log[-1].append("merge")
        return True

    def apply(batch):
        log[-1].append(list(batch))
        return len(batch)

    units = [1, 1, 5000, 1, 1]  # weights; 5000 is over the chunk budget
    total = run_batched(units, lambda u: u, apply, lambda: Tx(log), Pacer(lambda: 0),
                        batcher=FixedRate(target_s=1.0, chunk_s=0.0, rate=1000), upkeep=upkeep)  # chunks of weight 1
    assert total == 5
    assert log[0] == ["merge", "merge", "merge", [1], [1]]  # the debt first, then chunks; the big one waits
    assert log[1] == [[5000], [1], [1]]  # it starts the next transaction; chunks follow while there is room
    assert debt[0] == 0


def test_nothing_to_prune_leaves_the_fts_config_untouched(tmp_path):
    with StoreBuilder(tmp_path / "state.db") as b:
        b.session("recent", age=1, messages=5)
    db = tmp_path / "state.db"
    with open_store(db) as store:
        blobs = [bytes(store.conn.execute(f"SELECT block FROM {t}_data WHERE id = 10").fetchone()[0]) for t in TABLES]
        result = execute_prune(store, plan_prune(store, None))
        assert result.transactions == 0 and store.write_stats.transactions == 0
        assert blobs == [bytes(store.conn.execute(f"SELECT block FROM {t}_data WHERE id = 10").fetchone()[0])
                         for t in TABLES]  # not even the config cookie moved


def test_automerge_and_usermerge_are_read_with_their_low_32_bits_too():
    from maint.store.fts_index import _automerge, fts5_int

    assert [_automerge(v) for v in (2**32 + 3, 2**32, 2**31 + 3, 65)] == [3, 0, 4, 4]
    assert fts5_int(2**32 + 8, 4, 2, 16) == 8 and fts5_int(2**32 + 17, 4, 2, 16) == 4


@pytest.mark.parametrize("raw", ["garbage{", "[1,2]", '{"messages_fts": [1]}', '{"messages_fts": {"x": 1}}'])
def test_a_damaged_settings_note_is_dropped_with_a_warning_and_the_run_goes_on(tmp_path, cli, raw):
    note = META_KEY
    db = hermes_store(tmp_path / "state.db", sessions=10, messages=5)
    conn = apsw.Connection(str(db))
    for t in TABLES:  # as a killed run left them
        conn.execute(f"INSERT INTO {t}({t}, rank) VALUES('automerge', 0)")
    conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?)", (note, raw))
    conn.close()
    done = subprocess.run([sys.executable, "-m", "maint", "prune", "--db", str(db), "--older-than", "30", "--yes",
                           "--json"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "is damaged" in done.stderr
    assert json.loads(done.stdout)["deleted"] == 10
    assert all("automerge" not in dict(rows) for rows in configs(db).values())  # back to FTS5's default
    with open_store(db) as store:
        assert store.get_meta(note) is None
    assert_index_whole(db)


def test_every_transaction_of_a_run_follows_a_pause_after_our_previous_commit(tmp_path, monkeypatch):
    """A Hermes append waited 333 ms beside a prune (two of our transactions): the run's last one, the
    merges left over and the one that gives Hermes's settings back followed each other with no pause
    between, so a writer that had waited through the first met the next. Traced on the SessionDB-built
    store; here the order of our commits and pauses is checked on a small one."""
    from maint.store.connection import Store

    db = hermes_store(tmp_path / "state.db", sessions=20, messages=30)
    events = []
    real_pause, real_write = Pacer.pause, Store.write

    def pause(self):
        events.append("pause")
        real_pause(self)

    def write(self):
        events.append("tx")
        return real_write(self)

    monkeypatch.setattr(Pacer, "pause", pause)
    monkeypatch.setattr(Store, "write", write)
    with open_store(db) as store:
        plan = plan_prune(store, None)
        events.clear()
        execute_prune(store, plan, batcher=Batcher(target_s=0.001, chunk_s=0.001))
    assert events.count("tx") >= 4, events
    back_to_back = [i for i in range(1, len(events)) if events[i] == events[i - 1] == "tx"]
    assert back_to_back == [], events

