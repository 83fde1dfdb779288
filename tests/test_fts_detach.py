"""A conversation too big for one short transaction leaves Hermes's FTS indexes in pieces before its delete."""

import json
import sqlite3
import subprocess
import sys

import apsw
import pytest

import maint.ops.prune as prune
from maint.store.fts_index import NOTE_KEY, Detacher, detachable, put_back_left_over
from maint.ops.prune import execute_prune, plan_prune
from maint.store.batching import Batcher, Pacer
from maint.store.connection import open_store
from tests.conftest import run_subprocess
from tests.storegen import StoreBuilder

TABLES = ["messages_fts", "messages_fts_trigram"]  # hermes-agent 0.19.0's


def store_with_a_big_one(path, big=240):
    with StoreBuilder(path) as b:
        for n in range(6):
            b.session(f"small{n}", age=200, messages=3)
        b.session("big", age=200, messages=big)
        b.session("recent", age=1, messages=4)
    return path


def fts_rows(path, table, session_id):
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT COUNT(*) FROM {table} WHERE rowid IN "
                            "(SELECT id FROM messages WHERE session_id = ?)", (session_id,)).fetchone()[0]
    finally:
        conn.close()


def assert_index_complete(path):
    """Integrity per FTS5, every message indexed once, and a word of each kept session found by search."""
    conn = apsw.Connection(str(path))
    try:
        for t in TABLES:
            conn.execute(f"INSERT INTO {t}({t}, rank) VALUES('integrity-check', 1)")
            assert conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone() == \
                conn.execute("SELECT COUNT(*) FROM messages").fetchone()
        for (sid,) in list(conn.execute("SELECT id FROM sessions")):
            n = conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,)).fetchone()[0]
            assert conn.execute("SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH ?",
                                (f'"{sid}"',)).fetchone()[0] == n
            assert conn.execute("SELECT COUNT(*) FROM messages_fts_trigram WHERE messages_fts_trigram MATCH ?",
                                (f'"of {sid} "',)).fetchone()[0] == n
    finally:
        conn.close()


def assert_all_back(db):
    """The big conversation is whole in both indexes again, the index is complete, and no note is left."""
    assert fts_rows(db, "messages_fts", "big") == fts_rows(db, "messages_fts_trigram", "big") == 240
    assert_index_complete(db)
    with open_store(db) as store:
        assert store.get_meta(NOTE_KEY) is None and not put_back_left_over(store)


class FixedRate(Batcher):
    """The rate the test says, whatever this machine measures: at load 5 the learnt rate fell under 4,000 units a
    second, and a small session (4) became heavier than a transaction's 1 ms and was taken apart as the big one."""

    def observe(self, work, seconds):
        pass


def small_batches():
    # A chunk is 1 ms at 6,000 units a second (6 units): the big session (241) is heavier, the small ones (4) are not.
    return FixedRate(target_s=0.001, chunk_s=0.001, rate=6000.0)


def test_hermes_019_indexes_can_be_taken_apart_and_external_content_ones_cannot(tmp_path):
    for layout, expected in (("v22", TABLES), ("v30", []), ("v31", [])):
        db = tmp_path / f"{layout}.db"
        with StoreBuilder(db, layout=layout) as b:
            b.session("a", messages=2)
        with open_store(db) as store:
            assert [ix.table for ix in detachable(store)] == expected, layout


def test_an_index_whose_delete_trigger_differs_from_its_insert_is_left_to_its_trigger(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("a", messages=2)
    conn = sqlite3.connect(db)
    conn.executescript("""DROP TRIGGER messages_fts_trigram_delete;
        CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages WHEN old.role <> 'tool' BEGIN
            DELETE FROM messages_fts_trigram WHERE rowid = old.id;
        END;""")
    conn.close()
    with open_store(db) as store:
        assert [ix.table for ix in detachable(store)] == ["messages_fts"]


def test_the_big_conversation_is_out_of_every_index_before_the_transaction_that_deletes_it(tmp_path, monkeypatch):
    db = store_with_a_big_one(tmp_path / "state.db")
    seen = {}
    real = prune.delete_sessions

    def spy(store, conn, ids):
        for sid in ids:
            seen[sid] = [fts_rows_in(conn, t, sid) for t in TABLES] + [store.get_meta(NOTE_KEY) is not None]
        real(store, conn, ids)

    pieces = []
    real_step = Detacher.step

    def counting_step(self):
        more = real_step(self)
        pieces.append(more)
        return more

    monkeypatch.setattr(prune, "delete_sessions", spy)
    monkeypatch.setattr(Detacher, "step", counting_step)
    with open_store(db) as store:
        result = execute_prune(store, plan_prune(store, None), batcher=small_batches())
        assert store.get_meta(NOTE_KEY) is None
    assert seen["big"] == [0, 0, True]  # nothing left for the trigger, and the note still names it
    assert all(seen[f"small{n}"] == [3, 3, False] for n in range(6))  # small ones go the usual way
    assert pieces.count(True) >= 3  # in pieces: 240 messages at 16 or more a piece
    assert "big" in result.deleted_ids and result.messages == 240 + 18
    assert_index_complete(db)


def fts_rows_in(conn, table, sid):
    return conn.execute(f"SELECT COUNT(*) FROM {table} WHERE rowid IN "
                        "(SELECT id FROM messages WHERE session_id = ?)", (sid,)).fetchone()[0]


APPEND = ("import sys, pathlib; from hermes_state import SessionDB; db = SessionDB(pathlib.Path(sys.argv[1])); "
          "db.append_message('big', 'user', 'one more message of big about topic1'); db.close()")


def test_a_conversation_written_to_while_it_was_out_of_the_index_goes_back_in(tmp_path, monkeypatch):
    db = store_with_a_big_one(tmp_path / "state.db")
    written = []
    with open_store(db) as store:
        def pause_with_a_write(self):
            # Hermes appends from its own process (two SQLite libraries must not share one in a process).
            if not written and fts_rows_in(store.conn, "messages_fts", "big") < 240:  # part of it is out
                subprocess.run([sys.executable, "-c", APPEND, str(db)], check=True, timeout=60)
                written.append(True)

        monkeypatch.setattr(Pacer, "pause", pause_with_a_write)
        result = execute_prune(store, plan_prune(store, None), batcher=small_batches())
        assert store.get_meta(NOTE_KEY) is None
    assert written == [True]
    assert "big" in result.skipped_changed and "big" not in result.deleted_ids
    assert fts_rows(db, "messages_fts", "big") == fts_rows(db, "messages_fts_trigram", "big") == 241
    assert_index_complete(db)


def test_a_conversation_given_up_goes_back_a_piece_per_transaction_with_writers_let_in(tmp_path, monkeypatch):
    """Put back in one transaction, a 100k-message conversation held the lock 3.8 s: it goes back in
    pieces of the usual length, in transactions with pauses between them, and the note goes with the last."""
    import maint.store.fts_index as fd

    monkeypatch.setattr(fd, "MAX_PIECE", 32)
    db = store_with_a_big_one(tmp_path / "state.db")
    written, pieces, seen = [], [0], []
    give_back_step = Detacher.give_back_step

    def counted(self):
        more = give_back_step(self)
        pieces[0] += more
        return more

    with open_store(db) as store:
        def pause(self):
            if not written and fts_rows_in(store.conn, "messages_fts", "big") < 240:
                subprocess.run([sys.executable, "-c", APPEND, str(db)], check=True, timeout=60)
                written.append(True)  # the conversation changed: it is given up
            seen.append((pieces[0], store.get_meta(NOTE_KEY) is not None))

        monkeypatch.setattr(Pacer, "pause", pause)
        monkeypatch.setattr(Detacher, "give_back_step", counted)
        result = execute_prune(store, plan_prune(store, None), batcher=small_batches())
        assert store.get_meta(NOTE_KEY) is None
    assert "big" in result.skipped_changed
    assert pieces[0] >= 8  # 241 messages, at most 32 a piece
    # pauses that came after some pieces and before the last, the note still there: writers let in midway
    midway = {n for n, noted in seen if 0 < n < pieces[0] and noted}
    assert len(midway) >= 1 and seen[-1][1] is False, seen
    assert fts_rows(db, "messages_fts", "big") == fts_rows(db, "messages_fts_trigram", "big") == 241
    assert_index_complete(db)


def test_a_run_stopped_with_a_conversation_out_of_the_index_puts_it_back(tmp_path, monkeypatch):
    db = store_with_a_big_one(tmp_path / "state.db")
    import maint.store.batching as batching

    with open_store(db) as store:
        def stop_after_a_piece(self):
            if fts_rows_in(store.conn, "messages_fts", "big") < 240:
                batching.CANCEL.set()  # as SIGTERM does in the job loop

        monkeypatch.setattr(Pacer, "pause", stop_after_a_piece)
        try:
            result = execute_prune(store, plan_prune(store, None), batcher=small_batches())
        finally:
            batching.CANCEL.clear()
        assert store.get_meta(NOTE_KEY) is None
    assert "big" not in result.deleted_ids
    assert fts_rows(db, "messages_fts", "big") == fts_rows(db, "messages_fts_trigram", "big") == 240
    assert_index_complete(db)


def killed_with_pieces_out(tmp_path, nth=3):
    """A store whose prune was SIGKILLed at its *nth* commit, while the big conversation was partly out of
    the index (only the big one is old enough, so the first transactions are its pieces)."""
    db = store_with_a_big_one(tmp_path / "state.db")
    conn = sqlite3.connect(db)
    conn.execute("UPDATE sessions SET ended_at = strftime('%s','now') - 86400 WHERE id LIKE 'small%'")
    conn.execute("UPDATE messages SET timestamp = strftime('%s','now') - 86400 WHERE session_id LIKE 'small%'")
    for t in TABLES:  # as Hermes's periodic optimize leaves it: no merge due, so the pieces come first
        conn.execute(f"INSERT INTO {t}({t}) VALUES('optimize')")
    conn.commit()
    conn.close()
    env = {"HERMES_MAINT_BATCH_MS": "1", "HERMES_MAINT_CRASH_AT": f"tx_committed:{nth}"}
    killed = run_subprocess("prune", "--db", db, "--yes", "--older-than", "90d", env=env)
    assert killed.returncode == -9, killed.stderr
    assert fts_rows(db, "messages_fts", "big") < 240
    return db


@pytest.mark.parametrize("nth", [2, 4])
def test_a_crash_with_a_conversation_out_of_the_index_is_put_back_by_the_next_run(tmp_path, nth):
    db = killed_with_pieces_out(tmp_path, nth)
    out = fts_rows(db, "messages_fts", "big")
    assert 0 <= out < 240 and fts_rows(db, "messages_fts_trigram", "big") == out  # pieces out, in step
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = 'big'").fetchone()[0] == 240  # whole
    assert json.loads(conn.execute("SELECT value FROM state_meta WHERE key = ?", (NOTE_KEY,)).fetchone()[0]) \
        == {"sessions": ["big"]}
    conn.close()
    # The next run, whatever it selects (here: nothing), puts the messages back first.
    again = run_subprocess("prune", "--db", db, "--yes", "--older-than", "9999d")
    assert again.returncode == 0, again.stderr
    assert_all_back(db)


def test_a_crash_while_putting_back_leaves_the_note_and_the_run_after_finishes(tmp_path):
    db = killed_with_pieces_out(tmp_path, 4)
    out = fts_rows(db, "messages_fts", "big")
    # One piece a transaction; the first two put FTS5's automerge and crisismerge back.
    env = {"HERMES_MAINT_BATCH_MS": "0.001", "HERMES_MAINT_CRASH_AT": "tx_committed:3"}
    killed = run_subprocess("prune", "--db", db, "--yes", "--older-than", "9999d", env=env)
    assert killed.returncode == -9, killed.stderr
    partly = fts_rows(db, "messages_fts", "big")
    assert out < partly < 240, (out, partly)  # one piece back, committed on its own
    with open_store(db, readonly=True) as store:
        assert json.loads(store.get_meta(NOTE_KEY)) == {"sessions": ["big"]}
    again = run_subprocess("prune", "--db", db, "--yes", "--older-than", "9999d")
    assert again.returncode == 0, again.stderr
    assert_all_back(db)


def test_doctor_reports_what_a_killed_prune_left_and_repair_fts_puts_it_back(tmp_path):
    db = killed_with_pieces_out(tmp_path)
    doctor = run_subprocess("doctor", "--db", db, "--json")
    found = [f for f in json.loads(doctor.stdout)["findings"] if f["kind"] == "interrupted_prune"]
    # automerge and the rows out of the index
    assert [(f["severity"], len(f["data"]["left"])) for f in found] == [("warning", 2)], found
    assert "repair-fts --apply" in found[0]["fix"]
    shown = run_subprocess("repair-fts", "--db", db)  # a report writes nothing
    assert shown.returncode == 0 and "stopped midway" in shown.stdout
    assert fts_rows(db, "messages_fts", "big") < 240
    again = run_subprocess("repair-fts", "--db", db, "--apply", "--yes", "--json")
    assert again.returncode == 0, again.stderr
    assert_all_back(db)
    assert json.loads(again.stdout)["recovered"] is True
    conn = apsw.Connection(str(db))
    try:  # Hermes's automerge is back too (it never wrote the row: the row is gone again)
        assert [list(conn.execute(f"SELECT v FROM {t}_config WHERE k = 'automerge'")) for t in TABLES] == [[], []]
    finally:
        conn.close()


def test_a_prune_that_refuses_without_confirmation_puts_nothing_back_either(tmp_path):
    from tests.conftest import file_hash

    db = killed_with_pieces_out(tmp_path)
    before = file_hash(db)
    refused = run_subprocess("prune", "--db", db, "--older-than", "90d", input="")
    assert refused.returncode == 2, refused.stderr
    assert file_hash(db) == before  # "nothing was changed" is true
    with open_store(db, readonly=True) as store:
        assert store.get_meta(NOTE_KEY) is not None


def test_a_sweep_skipped_by_its_interval_still_puts_back_what_a_killed_run_left(tmp_path):
    db = killed_with_pieces_out(tmp_path)
    (db.parent / "config.yaml").write_text("sessions: {auto_prune: true, retention_days: 90, min_interval_hours: 24}\n")
    conn = sqlite3.connect(db)  # Hermes's own start-up sweep has just run
    conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES ('last_auto_prune', strftime('%s','now'))")
    conn.commit()
    conn.close()
    swept = run_subprocess("sweep", "--db", db, "--json")
    assert swept.returncode == 0, swept.stderr
    assert json.loads(swept.stdout)["swept"] is False
    assert fts_rows(db, "messages_fts", "big") == fts_rows(db, "messages_fts_trigram", "big") == 240
    assert_index_complete(db)


@pytest.mark.parametrize("value", ['{"sessions": null}', '{"sessions": 5}', '{"sessions": [1]}', "[[\"big\"]]",
                                   "not json", "[" * 100_000 + "]" * 100_000])
def test_a_damaged_note_is_dropped_with_a_warning_not_a_traceback(tmp_path, value):
    db = killed_with_pieces_out(tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE state_meta SET value = ? WHERE key = ?", (value, NOTE_KEY))
    conn.commit()
    conn.close()
    again = run_subprocess("prune", "--db", db, "--yes", "--older-than", "9999d")
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr and "repair-fts --apply" in again.stderr
    with open_store(db) as store:
        assert store.get_meta(NOTE_KEY) is None
    fixed = run_subprocess("repair-fts", "--db", db, "--apply", "--yes")  # what the warning says to run
    assert fixed.returncode == 0, fixed.stderr
    assert_index_complete(db)


def test_each_piece_costs_its_own_size_not_the_whole_conversation(tmp_path, monkeypatch):
    """Counted in SQLite VM steps (no clock): the second piece of a 2,000-message conversation costs
    about what the second piece of a 200-message one does."""
    import maint.store.fts_index as fd

    monkeypatch.setattr(fd, "MIN_PIECE", 16)
    monkeypatch.setattr(fd, "MAX_PIECE", 16)
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("long", age=200, messages=2000)
        b.session("short", age=200, messages=200)
    cost = {}
    with open_store(db) as store:
        ticks = [0]

        def tick():
            ticks[0] += 1
            return False

        for sid in ("long", "short"):
            d = Detacher(store, detachable(store), piece=16)
            with store.write() as conn:
                step = d.start([sid])
                step()  # the first piece also lists the conversation
                store.conn.set_progress_handler(tick, 100)
                ticks[0] = 0
                step()
                store.conn.set_progress_handler(None)
                cost[sid] = ticks[0]
                d.settle(conn, deleted=False)  # given up: it goes back a piece at a time
                while d.give_back_step():
                    pass
    assert cost["long"] < 2 * cost["short"], cost
    assert_index_complete(db)


def test_doctor_keeps_the_finding_name_apart_from_its_text(tmp_path):
    db = killed_with_pieces_out(tmp_path)
    shown = run_subprocess("doctor", "--db", db)
    line = next(ln for ln in shown.stdout.splitlines() if "interrupted_prune" in ln)
    assert "interrupted_prune a prune stopped midway" in " ".join(line.split()), line
