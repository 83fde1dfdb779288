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
from maint.store import fts_merges
from maint.store.fts_merges import META_KEY, MergeSteps, restore_left_over
from maint.store.fts_segments import fts5_tables, read_structure
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
        assert all(read_structure(store.conn, t).segments >= 1 for t in TABLES)


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
        assert all(read_structure(store.conn, t).pending_merge(4) for t in TABLES)
        steps = MergeSteps(store, TABLES)
        steps.pages = 8
        n = 0
        while True:
            with store.write():
                if not steps.step():
                    break
            n += 1
        assert n >= 4  # bounded steps, not one merge of everything
        assert not any(read_structure(store.conn, t).pending_merge(4) for t in TABLES)
        store.conn.execute("DELETE FROM messages WHERE session_id = 'old1'")
    assert_index_whole(db)


def test_during_the_run_a_level_waits_for_more_segments_and_the_end_merges_down_to_usermerge(tmp_path):
    """Merging a level once it holds 12 segments (4 short of FTS5's crisis merge) instead of 4 rewrites
    each delete marker fewer times over a long run; the end still leaves what automerge would."""
    db = hermes_store(tmp_path / "state.db", sessions=4, messages=2)
    with open_store(db) as store:
        for t in TABLES:
            store.conn.execute(f"INSERT INTO {t}({t}, rank) VALUES('automerge', 0)")
        for n in range(6):
            with store.write() as conn:
                conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?,?,?,?)",
                             ("recent", "user", f"message {n}", 1.0))
        steps = MergeSteps(store, TABLES)
        assert steps.run_segments == {t: 12 for t in TABLES}
        with store.write():
            assert steps.step() is False  # 6 or 7 segments a level: left for later
        assert all(read_structure(store.conn, t).pending_merge(4) for t in TABLES)
        steps.finishing = True
        while True:
            with store.write():
                if not steps.step():
                    break
        assert not any(read_structure(store.conn, t).pending_merge(4) for t in TABLES)
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


def test_pending_upkeep_comes_before_new_chunks_and_a_big_unit_goes_alone():
    log: list[list] = []
    debt = [3]  # three steps of leftover work

    def upkeep():
        if debt[0] == 0:
            return False
        debt[0] -= 1
        log[-1].append("merge")
        return True

    def apply(batch):
        log[-1].append(list(batch))
        return len(batch)

    units = [1, 1, 50, 1, 1]  # weights; 50 is over the chunk budget
    total = run_batched(units, lambda u: u, apply, lambda: Tx(log), Pacer(lambda: 0),
                        batcher=Batcher(target_s=60, chunk_s=0.0), upkeep=upkeep)  # chunks of weight 1
    assert total == 5
    assert log[0] == ["merge", "merge", "merge", [1], [1]]  # the debt first, then chunks; the big one waits
    assert log[1] == [[50]]  # alone in its transaction
    assert log[2] == [[1], [1]]
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


@pytest.mark.parametrize("stored, read", [(8, 8), ("8", 8), (b"8", 4), ("x", 4), (None, 4)])
def test_merge_levels_read_usermerge_as_fts5_does(tmp_path, stored, read):
    """Digits stored as text are a number to FTS5 (numeric affinity); a blob is not."""
    db = hermes_store(tmp_path / "state.db", sessions=1, messages=1)
    if stored is not None:
        conn = apsw.Connection(str(db))
        conn.execute("INSERT OR REPLACE INTO messages_fts_config(k, v) VALUES ('usermerge', ?)", (stored,))
        conn.close()
    with open_store(db) as store:
        assert MergeSteps(store, TABLES).min_segments == {"messages_fts": read, "messages_fts_trigram": 4}


def test_a_long_run_merges_wider_levels_so_each_delete_marker_is_rewritten_once():
    from maint.store.fts_merges import run_fan_in

    assert [run_fan_in(t, 12) for t in (0, 40, 434, 10**9)] == [12, 14, 145, 400]
    assert run_fan_in(100, 60) == 60  # never narrower than Hermes's own crisis merge allows


def test_hermes_commits_during_a_run_never_crisis_merge_a_level_while_it_gathers(tmp_path):
    """Our steps merge a level once it holds the run's fan-in, a few pages at a time, while Hermes's
    commits keep adding segments to it. With crisismerge only 4 above the fan-in, an append on a
    SessionDB-built store merged the 23 segments of level 0 in its own commit (192 ms, beside a
    prune); held at twice the fan-in, at least 16 above, those commits only add segments."""
    from maint.store.fts_merges import merges_in_our_hands

    db = hermes_store(tmp_path / "state.db", sessions=2, messages=2)
    with open_store(db) as store:
        with merges_in_our_hands(store, target_s=0.01, pause=lambda: None, after_commit=lambda: None,
                                 expected_transactions=0):
            fan_in = 12  # Hermes's own crisis merge (16) - 4: the narrowest a run takes
            writer = apsw.Connection(str(db))
            try:
                for n in range(100):
                    level0 = [len(read_structure(writer, t).levels[0].leaves) for t in TABLES]
                    if min(level0) >= fan_in + 15:
                        break
                    before = [read_structure(writer, t).segments for t in TABLES]
                    writer.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                                   "VALUES ('recent', 'user', ?, 1.0)", (f"live {n}",))
                    after = [read_structure(writer, t).segments for t in TABLES]
                    assert after == [b + 1 for b in before], (n, level0, before, after)  # added, nothing merged
            finally:
                writer.close()
            assert min(level0) >= fan_in + 15


@pytest.mark.parametrize("hermes_crisis", [None, 20, "20"])
def test_crisismerge_is_held_above_the_run_fan_in_and_put_back_exactly(tmp_path, hermes_crisis):
    from maint.ops.prune import interrupted
    from maint.store.fts_merges import CRISIS_KEY, merges_in_our_hands

    db = hermes_store(tmp_path / "state.db", sessions=2, messages=2)
    if hermes_crisis is not None:
        conn = apsw.Connection(str(db))
        for t in TABLES:
            conn.execute(f"INSERT OR REPLACE INTO {t}_config(k, v) VALUES ('crisismerge', ?)", (hermes_crisis,))
        conn.close()
    before = configs(db)
    with open_store(db) as store:
        with merges_in_our_hands(store, target_s=0.01, pause=lambda: None, after_commit=lambda: None,
                                 expected_transactions=900) as step:
            held = {t: dict(store.conn.execute(f"SELECT k, v FROM {t}_config")) for t in TABLES}
            assert all(h["crisismerge"] == 600 and h["automerge"] == 0 for h in held.values()), held  # 2 x 900/3
            assert json.loads(store.get_meta(CRISIS_KEY)) == {t: None if hermes_crisis is None else
                                                              (20 if hermes_crisis == 20 else {"text": "20"})
                                                              for t in TABLES}
            assert len(interrupted(store)) == 2  # what doctor would report if we died here
            assert step() is False  # nothing to merge on this store
        assert store.get_meta(CRISIS_KEY) is None and interrupted(store) == []
    assert configs(db) == before


KILLED_WHILE_HELD = """
import os, signal, sys
from maint.store.connection import open_store
from maint.store.fts_merges import merges_in_our_hands
store = open_store(sys.argv[1])
with merges_in_our_hands(store, target_s=0.01, pause=lambda: None, after_commit=lambda: None,
                         expected_transactions=900):
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_killed_with_crisismerge_held_is_put_right_by_the_next(tmp_path):
    from maint.store.fts_merges import CRISIS_KEY

    db = hermes_store(tmp_path / "state.db", sessions=2, messages=2)
    before = configs(db)
    killed = subprocess.run([sys.executable, "-c", KILLED_WHILE_HELD, str(db)], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    assert all(("crisismerge", 600) in rows for rows in configs(db).values())
    with open_store(db) as again:
        assert restore_left_over(again)
        assert again.get_meta(CRISIS_KEY) is None and again.get_meta(META_KEY) is None
    assert configs(db) == before


def test_crisismerge_is_read_as_fts5_reads_it():
    from maint.store.fts_merges import _crisismerge

    assert [_crisismerge(v) for v in (None, 20, {"text": "50"}, 5000, 1, 0, -3, 20.5, {"blob": "3230"})] == \
        [16, 20, 50, 1999, 16, 16, 16, 16, 16]
    # FTS5 reads it with sqlite3_value_int: the low 32 bits, signed (a hostile try found 2**32 + 5 read as 1999)
    assert [_crisismerge(v) for v in (2**32 + 5, {"text": str(2**32 + 5)}, 2**31, 2**32 - 1, 2**63 - 1, 2**64)] == \
        [5, 5, 16, 16, 16, 16]


def test_automerge_and_usermerge_are_read_with_their_low_32_bits_too():
    from maint.store.fts_merges import _automerge, fts5_int

    assert [_automerge(v) for v in (2**32 + 3, 2**32, 2**31 + 3, 65)] == [3, 0, 4, 4]
    assert fts5_int(2**32 + 8, 4, 2, 16) == 8 and fts5_int(2**32 + 17, 4, 2, 16) == 4


@pytest.mark.parametrize("note", [META_KEY, "hermes_maint.fts_crisismerge"])
@pytest.mark.parametrize("raw", ["garbage{", "[1,2]", '{"messages_fts": [1]}', '{"messages_fts": {"x": 1}}'])
def test_a_damaged_settings_note_is_dropped_with_a_warning_and_the_run_goes_on(tmp_path, cli, note, raw):
    db = hermes_store(tmp_path / "state.db", sessions=10, messages=5)
    conn = apsw.Connection(str(db))
    for t in TABLES:  # as a killed run left them
        conn.execute(f"INSERT INTO {t}({t}, rank) VALUES('automerge', 0)")
        conn.execute(f"INSERT INTO {t}({t}, rank) VALUES('crisismerge', 300)")
    conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?)", (note, raw))
    conn.close()
    done = subprocess.run([sys.executable, "-m", "maint", "prune", "--db", str(db), "--older-than", "30", "--yes",
                           "--json"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "is damaged" in done.stderr
    assert json.loads(done.stdout)["deleted"] == 10
    option = "automerge" if note == META_KEY else "crisismerge"
    assert all(option not in dict(rows) for rows in configs(db).values())  # back to FTS5's default
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
