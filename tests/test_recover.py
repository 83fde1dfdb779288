"""recover (stray messages get a 'recovered' placeholder) and repair-fts (a damaged search index rebuilt)."""

import json
import os
import sqlite3

import pytest

from maint.config import load_config
from maint.ops.sweep import run_sweep
from tests.conftest import LockHolder, file_hash, query, run_size_limited, run_subprocess
from tests.storegen import DAY, StoreBuilder
from tests.test_sweep import PLENTY, QUIET


def _stray(db, sid, n, ts):
    conn = sqlite3.connect(db)  # foreign keys off, as a crashed or careless writer leaves them
    for i in range(n):
        conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                     (sid, "user" if i % 2 == 0 else "assistant", f"stranded {sid} word{i}", ts + i))
    conn.commit()
    conn.close()


@pytest.fixture
def stray_store(hermes_home, layout):
    db = hermes_home / "state.db"
    with StoreBuilder(db, layout=layout) as b:
        b.session("kept", age=1, messages=2)
        now = b.now
    _stray(db, "lost_a", 3, now - 200 * DAY)
    _stray(db, "lost_b", 2, now - 2 * DAY)
    return db, now


def test_report_only_writes_nothing(stray_store):
    db, _ = stray_store
    before = file_hash(db)
    result = run_subprocess("recover", "--db", db, "--json")
    r = json.loads(result.stdout)
    assert result.returncode == 0 and file_hash(db) == before
    assert [s["session_id"] for s in r["stray_sessions"]] == ["lost_a", "lost_b"] and r["stray_messages"] == 5
    assert r["recovered"] == [] and r["apply"] is False


def test_apply_needs_a_terminal_or_yes(stray_store):
    db, _ = stray_store
    before = file_hash(db)
    result = run_subprocess("recover", "--db", db, "--apply")
    assert result.returncode == 2 and "--yes" in result.stderr and file_hash(db) == before
    assert run_subprocess("recover", "--db", db, "--apply", "--dry-run").returncode == 2


def test_apply_creates_open_recovered_placeholders(stray_store, layout):
    db, now = stray_store
    result = run_subprocess("recover", "--db", db, "--apply", "--yes", "--json")
    r = json.loads(result.stdout)
    assert r["recovered"] == ["lost_a", "lost_b"] and r["recovered_messages"] == 5
    rows = query(db, "SELECT id, source, ended_at, end_reason, started_at, message_count FROM sessions "
                     "WHERE source = 'recovered' ORDER BY id")
    assert [(x[0], x[1], x[2], x[3], x[5]) for x in rows] == [("lost_a", "recovered", None, None, 3),
                                                              ("lost_b", "recovered", None, None, 2)]
    assert rows[0][4] == pytest.approx(now - 200 * DAY)
    if layout == "v30":
        assert query(db, "SELECT last_activity_at FROM sessions WHERE id = 'lost_a'")[0][0] == pytest.approx(
            now - 200 * DAY + 2)
    exported = run_subprocess("export", "-", "--db", db, "--session-id", "lost_a")
    assert exported.returncode == 0 and "stranded lost_a word2" in exported.stdout
    again = json.loads(run_subprocess("recover", "--db", db, "--apply", "--yes", "--json").stdout)
    assert again["stray_sessions"] == [] and again["recovered"] == []


def test_the_sweep_reaps_a_placeholder_then_prunes_it_a_retention_later(stray_store, hermes_home):
    db, now = stray_store
    run_subprocess("recover", "--db", db, "--apply", "--yes")
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 90\n")
    first = run_sweep(db, load_config(), now=now, holders=QUIET, disk_usage=PLENTY)
    assert first["reaped_ids"] == ["lost_a"] and "lost_a" not in first["pruned_ids"]
    assert query(db, "SELECT end_reason FROM sessions WHERE id = 'lost_a'") == [("startup_orphan_reap",)]
    later = run_sweep(db, load_config(), now=now + 91 * DAY, holders=QUIET, disk_usage=PLENTY, force=True)
    assert "lost_a" in later["pruned_ids"]
    assert query(db, "SELECT COUNT(*) FROM messages WHERE session_id = 'lost_a'") == [(0,)]


def test_one_transaction_per_session_id(stray_store):
    db, _ = stray_store
    killed = run_subprocess("recover", "--db", db, "--apply", "--yes", env={"HERMES_MAINT_CRASH_AT": "tx_committed:1"})
    assert killed.returncode == -9
    assert query(db, "SELECT id FROM sessions WHERE source = 'recovered'") == [("lost_a",)]
    assert query(db, "PRAGMA integrity_check") == [("ok",)]
    done = json.loads(run_subprocess("recover", "--db", db, "--apply", "--yes", "--json").stdout)
    assert done["recovered"] == ["lost_b"]


# -- repair-fts ------------------------------------------------------------------------------------

@pytest.fixture
def damaged(hermes_home):
    db = hermes_home / "state.db"
    with StoreBuilder(db, layout="v30") as b:
        for n in range(10):
            b.session(f"s{n}", age=1, messages=6)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM messages_fts_trigram_data WHERE id = (SELECT MAX(id) FROM messages_fts_trigram_data)")
    conn.commit()
    conn.close()
    return db


def test_repair_fts_reports_without_writing(damaged):
    before = file_hash(damaged)
    result = run_subprocess("repair-fts", "--db", damaged, "--json")
    r = json.loads(result.stdout)
    assert result.returncode == 0 and file_hash(damaged) == before
    assert list(r["damaged"]) == ["messages_fts_trigram"] and r["rebuilt"] == []


def test_repair_fts_refuses_while_held(damaged):
    before = file_hash(damaged)
    with LockHolder(damaged) as holder:
        result = run_subprocess("repair-fts", "--db", damaged, "--apply", "--yes")
        assert result.returncode == 1 and f"pid {holder.proc.pid}" in result.stderr
    assert file_hash(damaged) == before


def test_repair_fts_rebuilds_and_records_the_run(damaged, cli):
    r = json.loads(run_subprocess("repair-fts", "--db", damaged, "--apply", "--yes", "--json").stdout)
    assert r["rebuilt"] == ["messages_fts_trigram"]
    assert query(damaged, "PRAGMA quick_check") == [("ok",)]
    [run] = cli.json("history", "--db", damaged, "--kind", "repair-fts")["runs"]
    assert run["rows"] == 1


def test_incomplete_inline_index_is_refilled_as_hermes_indexes(hermes_home):
    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:  # hermes-agent 0.19: inline-content indexes
        for n in range(5):
            b.session(f"s{n}", age=1, messages=4)
    conn = sqlite3.connect(db)
    hermes_row = conn.execute("SELECT content FROM messages_fts WHERE rowid = 3").fetchone()
    conn.execute("DELETE FROM messages_fts WHERE rowid IN (1, 2, 3)")
    conn.commit()
    conn.close()
    r = json.loads(run_subprocess("repair-fts", "--db", db, "--json").stdout)
    assert r["damaged"] == {"messages_fts": ["messages_fts holds 17 of the 20 messages it should index"]}
    done = json.loads(run_subprocess("repair-fts", "--db", db, "--apply", "--yes", "--json").stdout)
    assert done["how"] == {"messages_fts": "refill"}
    assert query(db, "SELECT content FROM messages_fts WHERE rowid = 3") == [hermes_row]
    assert query(db, "SELECT COUNT(*) FROM messages_fts") == [(20,)]
    assert query(db, "PRAGMA quick_check") == [("ok",)]


# -- recover --salvage NEW_PATH (issue 25 item 7) -------------------------------

def _corrupt_pages(db, counts, seed=5):
    """Overwrite ``counts[table]`` leaf pages of each table's b-tree, from its middle, with garbage."""
    import random

    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    chosen = []
    for table, count in counts.items():
        leaves = [p for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' "
                                             "ORDER BY pageno", (table,))]
        assert len(leaves) > 3 * count
        chosen += leaves[len(leaves) // 2: len(leaves) // 2 + count]
    conn.close()
    rng = random.Random(seed)
    with open(db, "r+b") as fh:
        for page in chosen:
            fh.seek((page - 1) * page_size)
            fh.write(bytes(rng.randrange(256) for _ in range(page_size)))
    return chosen


@pytest.fixture
def broken(tmp_path, hermes_home):
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v22") as b:
        for i in range(150):
            b.session(f"s{i:03d}", age=5 + i / 10, messages=12, title=f"a fairly long title for session {i:03d} "
                      "so that the sessions table spans several pages" * 3)
    total = query(db, "SELECT COUNT(*) FROM messages")[0][0]
    _corrupt_pages(db, {"messages": 2, "sessions": 1})
    conn = sqlite3.connect(db)
    with pytest.raises(sqlite3.DatabaseError):
        conn.execute("SELECT COUNT(*), SUM(length(content)) FROM messages").fetchall()
    conn.close()
    return db, total


def test_salvage_copies_every_readable_row_and_never_touches_the_damaged_file(broken, tmp_path, cli):
    import os
    import stat

    db, total = broken
    before = {s: file_hash(f"{db}{s}") for s in ("", "-wal") if os.path.exists(f"{db}{s}")}
    new = tmp_path / "salvaged.db"
    r = cli("recover", "--db", db, "--salvage", new, "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert {s: file_hash(f"{db}{s}") for s in before} == before  # the damaged store: byte for byte
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o600 and os.stat(new).st_uid == os.stat(db).st_uid
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".partial")]
    tables = {t["table"]: t for t in report["tables"]}
    lost = tables["messages"]["unread_rowid_ranges"]
    assert lost and not report["complete"]  # what could not be read is reported, as rowid spans
    unread = sum(hi - lo + 1 for lo, hi in lost)
    assert 0 < total - report["messages"] <= unread  # only rows on the damaged pages are missing
    assert report["messages"] > total * 0.8
    # bisection cost is bounded by the damage, not the table: each damaged span costs at most two range
    # reads per level of a 64-bit rowid space plus two per rowid in it
    spans = [span for t in tables.values() for span in t["unread_rowid_ranges"]]
    assert sum(t["queries"] for t in tables.values()) <= len(tables) + sum(
        2 * 64 + 2 * (hi - lo + 1) for lo, hi in spans)
    assert query(new, "PRAGMA integrity_check") == [("ok",)]
    assert query(new, "PRAGMA foreign_key_check") == []
    # messages whose session row was on the damaged page keep their transcript under a placeholder
    assert report["placeholder_sessions"] >= 1
    assert query(new, "SELECT COUNT(*) FROM sessions WHERE source = 'recovered'") == [(report["placeholder_sessions"],)]
    # search was rebuilt through Hermes's triggers: 0.19.0 itself opens, lists and searches the new file
    from hermes_state import SessionDB

    hermes = SessionDB(new)
    try:
        assert hermes.search_messages("topic3")
        kept = query(new, "SELECT id FROM sessions WHERE source <> 'recovered' ORDER BY id DESC LIMIT 1")[0][0]
        assert len(hermes.get_messages(kept)) == 12
    finally:
        hermes.close()


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_a_killed_salvages_private_copy_is_removed_by_the_next_salvage_a_live_ones_kept(
        broken, tmp_path, cli, monkeypatch, dry_run):
    """Hostile try 4, G6: a salvage killed by SIGKILL (OOM, power loss) left $TMPDIR/hermes-maint-salvage-*/damaged.db,
    a whole copy of the store, that no later run removed. The working folder is locked while its run lives; the
    next salvage removes ours that no run holds, and leaves a live run's, another user's and a link alone."""
    import fcntl
    import stat
    import tempfile

    from maint.ops import salvage

    db, _ = broken
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    dead, live, elsewhere = temp / "hermes-maint-salvage-k1ll3d", temp / "hermes-maint-salvage-l1v3", tmp_path / "x"
    for folder in (dead, live, elsewhere):
        folder.mkdir(mode=0o700)
        (folder / "damaged.db").write_bytes(b"a whole copy of the store")
    (temp / "hermes-maint-salvage-l1nk").symlink_to(elsewhere)
    kept = {live.name, "hermes-maint-salvage-l1nk"}
    if os.geteuid() == 0:  # another user's folder is theirs to clear
        theirs = temp / "hermes-maint-salvage-th31rs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 4321, 4321)
        kept.add(theirs.name)
    seen = {}
    real_copy = salvage.copy_bundle

    def spy(path, work, checked=None):
        copy, fingerprint = real_copy(path, work, checked)
        seen.update(work=os.stat(work), copy=os.stat(copy), work_path=work)
        probe = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with pytest.raises(BlockingIOError):  # held by this run: the next run's clean-up leaves it
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
        return copy, fingerprint

    monkeypatch.setattr(salvage, "copy_bundle", spy)
    # A dead copy filled a small $TMPDIR: it is gone before the room for the new one is judged.
    monkeypatch.setattr(salvage, "room_problem", lambda root, size: "full of a dead copy" if dead.exists() else None)
    holder = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # a salvage still running
    try:
        r = cli("recover", "--db", db, "--salvage", tmp_path / "new.db", *dry_run, "--json")
    finally:
        os.close(holder)
    assert r.exit_code == 0, r.output
    assert set(os.listdir(temp)) == kept  # the dead run's copy went, and this run's own
    assert (live / "damaged.db").exists() and (elsewhere / "damaged.db").exists()
    assert stat.S_IMODE(seen["work"].st_mode) == 0o700 and stat.S_IMODE(seen["copy"].st_mode) == 0o600
    assert seen["work"].st_uid == seen["copy"].st_uid == os.geteuid() and seen["work_path"].parent == temp


def test_salvage_dry_run_creates_nothing(broken, tmp_path, cli):
    db, _ = broken
    new = tmp_path / "salvaged.db"
    report = json.loads(cli("recover", "--db", db, "--salvage", new, "--dry-run", "--json").stdout)
    assert report["dry_run"] and report["messages"] > 0 and not new.exists()


@pytest.mark.parametrize("name", ["exists.db", "state.db", "state.db-wal", "state.db-journal", "state.db-shm",
                                  "state.db.hermes-maint.lock"])
def test_salvage_never_overwrites(broken, tmp_path, cli, name):
    """Hostile try 3, F4: a NEW_PATH naming the damaged store's own -wal was taken; the next open of the store
    removed the salvage."""
    db, _ = broken
    target = tmp_path / name
    if name == "exists.db":
        target.write_bytes(b"keep me")
    r = cli("recover", "--db", db, "--salvage", target)
    assert r.exit_code == 2, r.output
    assert "--salvage" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    if name == "exists.db":
        assert target.read_bytes() == b"keep me"


def test_salvage_applies_the_open_preflight_to_the_damaged_store(broken, tmp_path, cli):
    """Hostile try 3, F5: the salvage read the store's side files through links (a -wal linked to another
    user's store was replayed into the copy handed to this store's owner); every other command refuses it."""
    db, _ = broken
    other = tmp_path / "other.db-wal"
    other.write_bytes(b"not this store's")
    os.symlink(other, f"{db}-wal")
    new = tmp_path / "salvaged.db"
    r = cli("recover", "--db", db, "--salvage", new, "--json")
    assert r.exit_code == 1, r.output
    assert f"{db}-wal: is not a regular file" in r.stderr and not new.exists()


def test_salvage_of_an_intact_store_is_complete(tmp_path, hermes_home, cli, layout):
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout=layout) as b:
        for i in range(5):
            b.session(f"s{i}", age=3, messages=4)
    new = tmp_path / "copy.db"
    report = json.loads(cli("recover", "--db", db, "--salvage", new, "--json").stdout)
    assert report["complete"] and report["sessions"] == 5 and report["messages"] == 20
    assert query(new, "SELECT id, session_id, content FROM messages ORDER BY id") == \
        query(db, "SELECT id, session_id, content FROM messages ORDER BY id")
    hits = query(new, "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'topic1'")
    assert hits == query(db, "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'topic1'") and hits[0][0] > 0


def test_salvage_skips_and_names_a_virtual_table_whose_module_this_sqlite_lacks(tmp_path, hermes_home, cli):
    """Hostile try 12, P14: a sqlite-vec ``vec0`` table (a module this SQLite lacks) stopped the whole salvage at
    "SQLError: vec0", and an ``fts5vocab`` table was taken for a search index and failed the copy's check. The
    rest is salvaged; the table we cannot make, and the trigger that writes to it, are named and left out."""
    import apsw

    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v30") as b:
        for i in range(5):
            b.session(f"s{i}", age=3, messages=4)
    conn = apsw.Connection(str(db))
    conn.execute("CREATE VIRTUAL TABLE zz_vocab USING fts5vocab(messages_fts, row)")
    conn.execute("CREATE TABLE msg_vec_rowids (rowid INTEGER PRIMARY KEY, id TEXT)")  # one of vec0's own tables
    conn.execute("INSERT INTO msg_vec_rowids (rowid, id) VALUES (1, 'm1')")
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES ('table', 'msg_vec', "
                 "'msg_vec', 0, 'CREATE VIRTUAL TABLE msg_vec USING vec0(embedding float[4])')")
    conn.execute("INSERT INTO sqlite_master (type, name, tbl_name, rootpage, sql) VALUES ('trigger', 'msg_vec_ai', "
                 "'messages', 0, 'CREATE TRIGGER msg_vec_ai AFTER INSERT ON messages BEGIN "
                 "INSERT INTO msg_vec (rowid, embedding) VALUES (new.id, ''[1,2,3,4]''); END')")
    conn.close()
    new = tmp_path / "copy.db"
    r = cli("recover", "--db", db, "--salvage", new)
    assert r.exit_code == 0, r.output
    assert "virtual table msg_vec: not made in the new file (no such module: vec0)" in r.stdout
    assert "trigger msg_vec_ai: not made in the new file (names msg_vec, left out)" in r.stdout
    assert "Salvaged 5 session(s) and 20 message(s)" in r.stdout and "partial" in r.stdout
    assert query(new, "SELECT id, session_id, content FROM messages ORDER BY id") == \
        query(db, "SELECT id, session_id, content FROM messages ORDER BY id")
    assert query(new, "SELECT * FROM msg_vec_rowids") == [(1, "m1")]
    names = {n for (n,) in query(new, "SELECT name FROM sqlite_master")}
    assert "zz_vocab" in names and not names & {"msg_vec", "msg_vec_ai"}
    assert query(new, "SELECT doc FROM zz_vocab WHERE term = 'topic1'")[0][0] > 0


def _bloated(path, megabytes=4):
    with StoreBuilder(path, layout="v22") as b:
        for i in range(5):
            b.session(f"s{i}", age=3, messages=4)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE bloat(x)")
    conn.executemany("INSERT INTO bloat VALUES (randomblob(1000000))", [()] * megabytes)
    conn.commit()
    conn.close()
    return path


@pytest.mark.parametrize("past_checks", [False, True])
@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_salvage_whose_private_copy_cannot_be_written_says_where_and_how_much(tmp_path, past_checks, dry_run):
    """Hostile try 3, F21: when the private copy of the store failed (a full $TMPDIR, a file size limit) the
    salvage died with an UnboundLocalError traceback hiding the cause. The room is checked first (as backup
    does); a copy that fails anyway is named: where it goes, how many bytes it needs, what was reached."""
    db = _bloated(tmp_path / "state.db")
    temp = tmp_path / "tmp"
    temp.mkdir()
    before = file_hash(db)
    r = run_size_limited(1 << 20, "recover", "--db", db, "--salvage", tmp_path / "new.db", *dry_run,
                         past_checks=past_checks, env={"TMPDIR": str(temp)})
    assert r.returncode == 1, r.stderr
    line, = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and str(temp) in line and "ulimit -f" in line, line
    assert f"{os.path.getsize(db)} bytes" in line and "nothing was written" in line
    assert ("limit" in line and "reached" in line) if past_checks else "at most 1048576 bytes" in line
    assert file_hash(db) == before and os.listdir(temp) == [] and not (tmp_path / "new.db").exists()


def test_salvage_rolls_back_a_hot_journal_on_its_private_copy(tmp_path, hermes_home, cli):
    """Hostile try 3, F12: a writer that crashed mid-transaction on a rollback-journal store leaves a hot -journal
    holding the original pages; the salvage copied the main file alone and read the torn state (1000 of 1500
    committed messages gone, the uncommitted titles kept). The -journal is copied too and rolled back on the
    copy; the damaged store and its journal stay byte for byte."""
    import subprocess
    import sys

    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v22") as b:
        for i in range(60):
            b.session(f"s{i:03d}", age=3, messages=5, title=f"title {i}")
    query(db, "PRAGMA journal_mode=delete")
    truth = query(db, "SELECT id, session_id, content FROM messages ORDER BY id")
    crash = ("import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
             "c.execute('PRAGMA cache_size=2'); c.execute('BEGIN');"
             "c.execute(\"DELETE FROM messages WHERE session_id < 's040'\");"
             "c.execute(\"UPDATE sessions SET title = 'UNCOMMITTED ' || id\"); os._exit(9)")
    assert subprocess.run([sys.executable, "-c", crash, str(db)]).returncode == 9
    journal = tmp_path / "state.db-journal"
    assert journal.stat().st_size > 0
    before = {p: (tmp_path / p).read_bytes() for p in ("state.db", "state.db-journal")}
    new = tmp_path / "salvaged.db"
    r = cli("recover", "--db", db, "--salvage", new, "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["complete"] and report["messages"] == len(truth) and report["sessions"] == 60
    assert {p: (tmp_path / p).read_bytes() for p in before} == before
    assert report["source_fingerprint"]["-journal"] is not None
    assert query(new, "SELECT id, session_id, content FROM messages ORDER BY id") == truth
    assert query(new, "SELECT COUNT(*) FROM sessions WHERE title LIKE 'UNCOMMITTED%'") == [(0,)]


def test_salvage_refuses_a_journal_that_is_a_link(broken, tmp_path, cli):
    """The -journal gets the -wal's checks: a link beside the store is never read into the copy."""
    db, _ = broken
    other = tmp_path / "other.db-journal"
    other.write_bytes(b"not this store's")
    os.symlink(other, f"{db}-journal")
    new = tmp_path / "salvaged.db"
    r = cli("recover", "--db", db, "--salvage", new, "--json")
    assert r.exit_code == 1, r.output
    assert f"{db}-journal: is not a regular file" in r.stderr and not new.exists()


def test_salvage_never_rolls_a_planted_journal_into_its_new_file(broken, tmp_path, cli, monkeypatch):
    """Hostile try 4, G8 (salvage): the new file, opened read-write by name in NEW_PATH's folder, had a -journal
    another user planted beside our temporary name rolled into it before the salvage filled it. Refused now."""
    from maint import files
    from tests.test_replication import planted_journal

    db, _ = broken
    journal = planted_journal(tmp_path)
    made = files.Folder.temporary

    def temporary(self, name, **kwargs):
        temp, fd = made(self, name, **kwargs)
        (self.path / f"{temp}-journal").write_bytes(journal)
        return temp, fd

    monkeypatch.setattr(files.Folder, "temporary", temporary)
    new = tmp_path / "salvaged.db"
    r = cli("recover", "--db", db, "--salvage", new, "--json")
    # SQLite rolls the journal in when it judges it hot (it may also judge a journal beside an empty file cold
    # and delete it): either way, what is kept never holds the planted database.
    if r.exit_code == 0:
        assert query(new, "SELECT COUNT(*) FROM sessions WHERE id = 'MALLORY_INJECTED'") == [(0,)]
        assert json.loads(r.stdout)["sessions"] == query(new, "SELECT COUNT(*) FROM sessions")[0][0]
    else:
        assert "was not empty when opened" in r.stderr and not new.exists(), r.output


@pytest.mark.parametrize("layout", ["v22"])
def test_salvage_copies_the_store_it_checked_not_what_its_name_leads_to_later(tmp_path, cli, monkeypatch, layout):
    """Hostile try 6, I3: the salvage checked the store's path and then copied it by name: alice swapped her
    profile folder for a link to bob's home in between and got bob's whole store in a file she owns."""
    from maint.ops import salvage

    home, other = tmp_path / "evil", tmp_path / "other"
    for folder, n in ((home, 3), (other, 9)):
        folder.mkdir()
        with StoreBuilder(folder / "state.db", layout=layout) as b:
            for i in range(n):
                b.session(f"{folder.name}{i}", age=5, messages=2)
    real = salvage.bundle_bytes

    def swap_after_the_checks(path):
        size = real(path)
        home.rename(tmp_path / "kept")
        home.symlink_to(other)
        return size

    monkeypatch.setattr(salvage, "bundle_bytes", swap_after_the_checks)
    new = tmp_path / "out" / "salvaged.db"
    new.parent.mkdir()
    r = cli("recover", "--db", home / "state.db", "--salvage", new)
    assert (tmp_path / "kept").exists(), "the swap never ran"
    assert r.exit_code == 1, r.output
    assert "swapped" in r.stderr and not new.exists() and list(new.parent.iterdir()) == []


@pytest.mark.parametrize("dry", [False, True])
def test_a_salvage_stops_at_its_bound_when_the_stores_trigger_never_ends(tmp_path, dry):
    """Hostile try 11, N3: the salvage recreates the damaged store's own triggers in the new file and runs them for
    every row copied (they index each message as Hermes does); a trigger that never ends ran for good, dry run
    included. The salvage is bounded (write_limit_s per GB of the store) and says so in one line."""
    import sqlite3

    from tests.conftest import run_subprocess
    from tests.storegen import small_store

    db = small_store(tmp_path / "state.db")
    conn = sqlite3.connect(db)
    conn.execute("CREATE TRIGGER spin AFTER INSERT ON messages BEGIN SELECT count(*) FROM (WITH RECURSIVE "
                 "r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r); END")
    conn.close()
    out = tmp_path / "new.db"
    result = run_subprocess("recover", "--salvage", out, *(["--dry-run"] if dry else []), "--db", db,
                            env={"HERMES_MAINT_WRITE_LIMIT_S": "2"}, timeout=120)  # a hang fails at the timeout
    assert result.returncode == 1 and "the salvage was still running after 2 s" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()
