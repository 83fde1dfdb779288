"""The store layer refuses what it must and never writes to a refused file."""

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from maint.errors import StoreError
from maint.store.connection import has_wal_reset_bug, header_journal_mode, open_store, sqlite_version
from tests.conftest import LockHolder, file_hash, query, run_subprocess, session_ids
from tests.storegen import recoded, small_store


def test_missing_file_is_an_error_and_never_created(tmp_path, cli):
    path = tmp_path / "nope" / "state.db"
    with pytest.raises(StoreError, match="no such store"):
        open_store(path)
    result = cli("stats", "--db", path)
    assert result.exit_code == 1 and "no such store" in result.stderr
    assert not path.exists() and not path.parent.exists()


def test_text_file_refused_untouched(tmp_path, cli):
    path = tmp_path / "state.db"
    path.write_text("not a database\n" * 20)
    before = file_hash(path)
    for args in (["stats"], ["prune", "--yes"], ["archive", "--source", "cli", "--yes"]):
        result = cli(*args, "--db", path)
        assert result.exit_code == 1 and "not a SQLite database" in result.stderr
    assert file_hash(path) == before


def test_non_hermes_sqlite_refused_untouched(tmp_path, cli):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.commit()
    conn.close()
    before = file_hash(path)
    result = cli("prune", "--db", path, "--yes")
    assert result.exit_code == 1 and "not a Hermes session store" in result.stderr
    assert file_hash(path) == before


def test_truncated_store_refused_untouched(make_store, cli):
    b = make_store()
    for i in range(30):
        b.session(f"s{i}", messages=10)
    b.close()
    conn = sqlite3.connect(b.path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = b.path.read_bytes()
    b.path.write_bytes(data[: len(data) // 2])
    before = file_hash(b.path)
    result = cli("prune", "--db", b.path, "--yes")
    assert result.exit_code == 1 and ("truncated" in result.stderr or "corrupt" in result.stderr)
    assert "Traceback" not in result.output
    assert file_hash(b.path) == before


def test_directory_refused(tmp_path, cli):
    result = cli("stats", "--db", tmp_path)
    assert result.exit_code == 1 and "is a directory" in result.stderr


def test_opening_keeps_journal_mode_and_schema(make_store):
    b = make_store()
    b.session("x")
    b.close()
    conn = sqlite3.connect(b.path)
    conn.execute("PRAGMA journal_mode=DELETE")
    schema = conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    conn.close()
    with open_store(b.path) as store:
        store.set_meta("hermes_maint_probe", "1")
    assert header_journal_mode(b.path) == "delete"
    conn = sqlite3.connect(b.path)
    assert conn.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == schema
    assert conn.execute("SELECT value FROM state_meta WHERE key='hermes_maint_probe'").fetchone() == ("1",)
    conn.close()


def test_wal_files_are_kept_on_close(make_store):
    b = make_store()
    b.session("x")
    b.close()
    with open_store(b.path) as store:
        store.set_meta("k", "v")
    assert os.path.exists(str(b.path) + "-wal")


def test_layouts_introspected(make_store, layout):
    b = make_store(layout)
    b.session("x")
    b.close()
    with open_store(b.path) as store:
        assert store.has_column("sessions", "pinned") == (layout == "v30")
        assert store.schema_version == (22 if layout == "v22" else 30)
        assert set(store.fts_tables) == {"messages_fts", "messages_fts_trigram"}


def test_busy_store_fails_cleanly(make_store):
    b = make_store()
    b.session("x")
    b.close()
    with LockHolder(b.path), open_store(b.path, busy_timeout_ms=200) as store:
        with pytest.raises(StoreError, match="write lock"):
            store.set_meta("k", "v")
    with open_store(b.path) as store:
        assert store.get_meta("k") is None


def test_sqlite_in_use_has_no_wal_reset_bug():
    assert not has_wal_reset_bug(sqlite_version())
    assert has_wal_reset_bug("3.40.1") and has_wal_reset_bug("3.51.2") and has_wal_reset_bug("3.50.6")
    assert not has_wal_reset_bug("3.51.3") and not has_wal_reset_bug("3.50.7") and not has_wal_reset_bug("3.44.6")
    assert has_wal_reset_bug("3.44.5") and not has_wal_reset_bug("3.6.23")


def test_version_shows_sqlite(cli):
    result = cli("--version")
    assert result.exit_code == 0 and sqlite_version() in result.stdout


def mid_checkpoint(path, extra_pages):
    """The file as a checkpoint that grows it leaves it for a moment: page 1, with the new page count,
    is written; the pages past the old end are not yet. A WAL (with frames) is beside it."""
    import struct

    with open(path, "r+b") as fh:
        header = fh.read(100)
        page_size = struct.unpack(">H", header[16:18])[0]
        pages = struct.unpack(">I", header[28:32])[0]
        fh.seek(28)
        fh.write(struct.pack(">I", pages + extra_pages))
    return page_size * (pages + extra_pages)


def test_a_store_growing_under_a_checkpoint_is_not_called_corrupt(make_store, cli, monkeypatch):
    """A hostile try saw `stats` refuse a healthy store as 'truncated or corrupt' while Hermes's checkpoint
    was extending it (3 runs in 40): a short file beside a WAL is read again until the checkpoint ends."""
    import threading
    import time

    from maint.store import connection
    from maint.store.connection import _check_header

    # A grace no load uses up: a return before it ends is the file reaching its size, never the deadline
    # (which raises).
    monkeypatch.setattr(connection, "CHECKPOINT_GRACE_S", 120.0)

    b = make_store()
    b.session("s1")
    b.close()
    wal = b.path.parent / (b.path.name + "-wal")
    wal.write_bytes(b"\0" * 4096)  # frames being copied out
    full = mid_checkpoint(b.path, 3)

    def checkpoint_ends():
        time.sleep(0.3)
        with open(b.path, "r+b") as fh:
            fh.truncate(full)

    ender = threading.Thread(target=checkpoint_ends)
    started = time.monotonic()
    ender.start()
    _check_header(b.path)  # no CorruptStore: it waited for the file to reach its size
    ender.join()
    assert time.monotonic() - started >= 0.3  # it waited for the file (a sleep never ends early)


def test_a_short_store_stays_corrupt_when_no_checkpoint_ends(make_store, cli):
    b = make_store()
    b.session("s1")
    b.close()
    wal = b.path.parent / (b.path.name + "-wal")
    wal.write_bytes(b"\0" * 4096)
    mid_checkpoint(b.path, 3)
    result = cli("stats", "--db", b.path)
    assert result.exit_code != 0 and "truncated or corrupt store" in result.stderr


@pytest.mark.parametrize("args", [["stats"], ["list"], ["prune", "--dry-run"], ["export", "-"],
                                  ["set-journal-mode", "delete"], ["repair-prompts"], ["optimize"]])
def test_a_fifo_as_the_store_is_refused_at_once(args, tmp_path):
    fifo = tmp_path / "state.db"
    os.mkfifo(fifo)
    result = run_subprocess(*args, "--db", fifo, timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip() == f"hermes-maint: error: {fifo}: is a FIFO, not a store file; refusing to open it"


def test_a_newer_schema_is_read_but_never_written(tmp_path):
    store = small_store(tmp_path / "state.db", layout="v30")
    conn = sqlite3.connect(store)
    conn.execute("INSERT INTO schema_version(version) VALUES (99)")
    conn.execute("CREATE TABLE future_things (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    before = file_hash(store)
    for args in (["prune", "--yes"], ["optimize"], ["sweep", "--force"], ["autoprune", "later"],
                 ["archive", "--source", "cli", "--yes"]):
        result = run_subprocess(*args, "--db", store, env={"HERMES_HOME": str(home)})
        assert result.returncode == 1, (args, result.stderr)
        assert "schema version 99 is newer than this hermes-maint knows" in result.stderr
    preview = run_subprocess("prune", "--dry-run", "--db", store)  # a preview only reads: it runs, warned
    assert preview.returncode == 0 and "newer than this hermes-maint knows (31); reading only" in preview.stderr
    assert file_hash(store) == before
    stats = run_subprocess("stats", "--db", store, "--json")
    assert stats.returncode == 0 and json.loads(stats.stdout)["schema_version"] == 99
    assert "newer than this hermes-maint knows" in stats.stderr


def test_set_journal_mode_refuses_a_newer_schema(tmp_path):
    store = small_store(tmp_path / "state.db", layout="v30")
    conn = sqlite3.connect(store)
    conn.execute("INSERT INTO schema_version(version) VALUES (99)")
    conn.commit()
    conn.close()
    result = run_subprocess("set-journal-mode", "delete", "--db", store)
    assert result.returncode == 1 and "schema version 99" in result.stderr
    assert query(store, "PRAGMA journal_mode") == [("wal",)]


def test_a_foreign_key_from_an_unknown_table_is_reported_before_any_delete(tmp_path):
    store = small_store(tmp_path / "state.db", layout="v30")
    conn = sqlite3.connect(store)
    conn.execute("CREATE TABLE session_notes (id INTEGER PRIMARY KEY, session_id TEXT REFERENCES sessions(id))")
    conn.execute("INSERT INTO session_notes(session_id) VALUES ('old1')")
    conn.commit()
    conn.close()
    before = file_hash(store)
    for args in (["prune", "--yes"], ["prune", "--dry-run"]):
        result = run_subprocess(*args, "--db", store)
        assert result.returncode == 1
        assert "session_notes.session_id -> sessions" in result.stderr and str(store) in result.stderr
    assert file_hash(store) == before
    assert session_ids(store) == {"old0", "old1", "old2", "recent"}


@pytest.mark.parametrize("args", [["prune", "--dry-run"], ["archive", "--older-than", "30", "--dry-run"],
                                  ["clean-markers", "--dry-run"], ["stats"], ["list"], ["doctor"],
                                  ["delete", "old1", "--dry-run"], ["pinned"], ["repair-prompts"],
                                  ["repair-routing"], ["repair-fts"], ["recover"], ["history"], ["export", "-"],
                                  ["discard", "old1", "--dry-run"]])
def test_a_read_of_a_store_at_rest_leaves_its_folder_as_found(tmp_path, args):
    """Hostile try 3, F1: every dry run and report left an empty -wal and a -shm beside a WAL store whose
    Hermes had closed it cleanly (a read-only connection cannot remove them)."""
    store = small_store(tmp_path / "state.db")
    assert header_journal_mode(store) == "wal"
    before = (sorted(os.listdir(tmp_path)), file_hash(store))
    assert before[0] == ["state.db"]
    result = run_subprocess(*args, "--db", store)
    assert result.returncode in (0, 1), result.stderr
    assert (sorted(os.listdir(tmp_path)), file_hash(store)) == before


def test_a_read_leaves_the_wal_files_of_a_store_in_use(tmp_path):
    store = small_store(tmp_path / "state.db")
    holder = sqlite3.connect(store)  # Hermes, with the store open
    holder.execute("SELECT COUNT(*) FROM sessions").fetchone()
    try:
        assert run_subprocess("stats", "--db", store).returncode == 0
        assert {"state.db-wal", "state.db-shm"} <= set(os.listdir(tmp_path))
    finally:
        holder.close()


def test_a_write_stops_when_another_file_was_moved_to_the_stores_name(tmp_path):
    """Hostile try 3, F15: a copy moved into place (as optimize --into and recover --salvage tell the operator
    to do) while a prune ran was corrupted: the run went on committing to the old file, and its WAL, kept by
    name, was replayed into the new one."""
    store = small_store(tmp_path / "state.db")
    replacement = tmp_path / "replacement.db"
    with open_store(store) as opened:
        with opened.write() as conn:
            conn.execute("UPDATE sessions SET title = 'first' WHERE id = 'old0'")
        src = sqlite3.connect(store)
        src.execute("VACUUM INTO ?", (str(replacement),))
        src.close()
        before = file_hash(replacement)
        os.replace(replacement, store)
        with pytest.raises(StoreError, match="another file was moved to this name"):
            with opened.write() as conn:
                conn.execute("UPDATE sessions SET title = 'second' WHERE id = 'old1'")
    assert file_hash(store) == before
    assert query(store, "PRAGMA integrity_check") == [("ok",)]
    assert query(store, "SELECT title FROM sessions WHERE id IN ('old0', 'old1') ORDER BY id") == [("first",), (None,)]


class CommitInProgress:
    """Another process in the middle of a commit on a rollback-journal store: it holds the EXCLUSIVE lock
    (no reader may even read the schema) for *seconds*, then commits and lets go by itself."""

    CODE = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
            "c.execute('BEGIN EXCLUSIVE'); c.execute(\"INSERT OR REPLACE INTO state_meta VALUES ('held', '1')\");"
            "print('locked', flush=True); time.sleep(float(sys.argv[2])); c.execute('COMMIT')")

    def __init__(self, path, seconds=1.0):
        self.path, self.seconds = path, seconds

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, str(self.path), str(self.seconds)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "locked"
        return self

    def __exit__(self, *exc):
        assert self.proc.wait(timeout=60) == 0


@pytest.mark.parametrize("args", [["stats"], ["list"], ["doctor"], ["prune", "--dry-run"],
                                  ["prune", "--older-than", "1", "--yes"]])
def test_a_command_waits_out_a_commit_on_a_rollback_journal_store(tmp_path, args):
    """Hostile try 3, F7: the first statement of an open (a PRAGMA, which reads the schema) ran before the busy
    handler was set, so a writer's commit in progress made every command fail at once with "database is
    locked" instead of waiting for it."""
    store = small_store(tmp_path / "state.db")
    query(store, "PRAGMA journal_mode=delete")
    assert header_journal_mode(store) == "delete"
    with CommitInProgress(store):
        result = run_subprocess(*args, "--db", store, env={"HERMES_MAINT_BUSY_MS": "600000"})
    assert result.returncode == 0, result.stderr
    assert "locked" not in result.stderr
    assert query(store, "SELECT value FROM state_meta WHERE key = 'held'") == [("1",)]
    assert query(store, "PRAGMA integrity_check") == [("ok",)]


def test_every_sqlite_connection_gets_the_busy_handler_before_its_first_statement():
    """F7's rule in one place: only :func:`connect` opens an apsw connection (it sets the handler at once)."""
    import re
    from pathlib import Path

    opened = []
    for source in sorted(Path(__file__).resolve().parent.parent.joinpath("maint").rglob("*.py")):
        for line in source.read_text().splitlines():
            if re.search(r"apsw\.Connection\(", line):
                opened.append((source.name, line.strip()))
    assert opened == [("connection.py", "conn = apsw.Connection(target, flags=flags)")]


def test_the_busy_handler_covers_every_first_statement_of_a_library_connection(tmp_path):
    from maint.store.connection import connect

    store = small_store(tmp_path / "state.db")
    query(store, "PRAGMA journal_mode=delete")
    with CommitInProgress(store):
        conn = connect(str(store), busy_timeout_ms=600000)
        try:
            assert conn.execute("PRAGMA cache_size=-2048").fetchall() == []
        finally:
            conn.close()


def test_sigterm_interrupts_a_statement_a_stores_trigger_keeps_running(tmp_path):
    """Hostile try 3, F32: a trigger the store's owner added ran our delete for 39 minutes, holding the write
    lock, and SIGTERM was acted on only when the statement ended. A pending signal now interrupts it."""
    import signal
    import time

    from tests.conftest import REPO

    store = small_store(tmp_path / "state.db")
    conn = sqlite3.connect(store)
    conn.execute("CREATE TRIGGER slow AFTER DELETE ON sessions BEGIN SELECT count(*) FROM (WITH RECURSIVE "
                 "c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100000000000) SELECT x FROM c); END")
    conn.commit()
    conn.close()
    proc = subprocess.Popen([sys.executable, "-m", "maint", "prune", "--db", str(store), "--yes"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    probe = sqlite3.connect(store, timeout=0, isolation_level=None)
    try:
        while proc.poll() is None:  # until the prune holds the write lock, inside the endless statement
            try:
                probe.execute("BEGIN IMMEDIATE")
                probe.execute("ROLLBACK")
            except sqlite3.OperationalError:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)  # before the fix: as long as the trigger runs (hours)
    finally:
        probe.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM and "terminated by SIGTERM" in err
    assert session_ids(store) == {"old0", "old1", "old2", "recent"}
    assert query(store, "PRAGMA integrity_check") == [("ok",)]


def test_a_restore_dry_run_leaves_the_store_and_the_snapshot_as_found(tmp_path):
    """Hostile try 4, G3: `restore SNAP --dry-run` left -wal and -shm beside the store and beside a snapshot
    copied by hand from a WAL store (its checks open both outside open_store). Both folders stay as found."""
    import shutil

    store = small_store(tmp_path / "live" / "state.db")
    snap = tmp_path / "snaps" / "copy.db"
    snap.parent.mkdir()
    shutil.copy(store, snap)
    assert header_journal_mode(snap) == "wal"
    before = (sorted(os.listdir(store.parent)), sorted(os.listdir(snap.parent)), file_hash(store), file_hash(snap))
    result = run_subprocess("restore", snap, "--db", store, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert (sorted(os.listdir(store.parent)), sorted(os.listdir(snap.parent)), file_hash(store),
            file_hash(snap)) == before


def test_a_real_restore_leaves_the_snapshots_folder_as_found(tmp_path):
    """Hostile try 7, J6: `restore SNAP --yes` left -wal and -shm beside a snapshot at rest (the dry run did not):
    the copy's read of the snapshot was not tidied up."""
    import shutil

    store = small_store(tmp_path / "live" / "state.db")
    snap = tmp_path / "snaps" / "copy.db"
    snap.parent.mkdir()
    shutil.copy(store, snap)
    before = (sorted(os.listdir(snap.parent)), file_hash(snap))
    result = run_subprocess("restore", snap, "--db", store, "--yes")
    assert result.returncode == 0, result.stderr
    assert (sorted(os.listdir(snap.parent)), file_hash(snap)) == before


@pytest.mark.parametrize("version", ["'abc'", "x'16'", "32.5", "1e30"])
def test_a_schema_version_that_is_not_a_whole_number_is_a_schema_we_do_not_know(tmp_path, version):
    """Hostile try 4, G9: a schema_version stored as text or bytes stopped doctor with a TypeError, and every
    writable command wrote a store whose version was text, bytes or 32.5 (only an int above ours was refused)."""
    store = small_store(tmp_path / "state.db")
    conn = sqlite3.connect(store)
    conn.execute(f"UPDATE schema_version SET version = {version}")
    conn.commit()
    conn.close()
    before = file_hash(store)
    pruned = run_subprocess("prune", "--yes", "--db", store)
    assert pruned.returncode == 1 and "is not a whole number; refusing to write it" in pruned.stderr, pruned.stderr
    doctor = run_subprocess("doctor", "--db", store, "--json")
    assert "Traceback" not in doctor.stderr and doctor.returncode in (0, 1), doctor.stderr
    found = {f["kind"]: f for f in json.loads(doctor.stdout)["findings"]}
    assert found["schema"]["severity"] == "warning" and "not a whole number" in found["schema"]["what"]
    assert run_subprocess("set-journal-mode", "delete", "--db", store).returncode == 1
    assert file_hash(store) == before



def _two_homes(tmp_path, sessions):
    """alice's profile folder ("evil") and another user's ("other"), each with a store of *sessions* + 1."""
    home, other = tmp_path / "evil", tmp_path / "other"
    for folder in (home, other):
        folder.mkdir()
        small_store(folder / "state.db", sessions)
    return home, other


def _swap_folder_during_open(monkeypatch, home, other, *, swap_back):
    """Around SQLite's first open of the store, its folder becomes a link to *other* (as a store's owner may do to
    her own profile folder between our checks and the open); with *swap_back* it is put back right after."""
    import maint.store.connection as connection

    real = connection.connect
    kept = home.parent / "kept"
    done = []

    def swapping(target, *args, **kwargs):
        if done or str(home / "state.db") not in str(target):
            return real(target, *args, **kwargs)
        done.append(target)
        home.rename(kept)
        home.symlink_to(other)
        try:
            conn = real(target, *args, **kwargs)
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # SQLite opens the -wal now
            return conn
        finally:
            if swap_back:
                home.unlink()
                kept.rename(home)

    monkeypatch.setattr(connection, "connect", swapping)
    return done


def _put_back(home):
    if home.is_symlink():
        home.unlink()
        (home.parent / "kept").rename(home)


@pytest.mark.parametrize("swap_back", [False, True])
@pytest.mark.parametrize("command", ["prune", "export", "restore", "set-journal-mode", "backup"])
def test_folder_swapped_for_a_link_during_the_open_is_refused(tmp_path, cli, monkeypatch, swap_back, command):
    # hostile try 5, H1: a profile folder swapped for a link to another user's folder between the checks and
    # SQLite's open made root's prune delete the other user's sessions. Swapped back right after the open, the
    # path's stat matches again: only what SQLite holds open tells. Every open that may write is checked.
    home, other = _two_homes(tmp_path, 6)
    snapshot = tmp_path / "snap.db"
    if command == "restore":
        assert cli("backup", str(tmp_path / "snaps"), "--db", home / "state.db").exit_code == 0
        (next((tmp_path / "snaps").glob("*.db"))).rename(snapshot)
    victim = file_hash(other / "state.db")
    ids = session_ids(other / "state.db")
    args = {"prune": ["prune", "--older-than", "1d", "--yes"], "export": ["export", str(tmp_path / "out.jsonl")],
            "restore": ["restore", str(snapshot), "--yes"], "set-journal-mode": ["set-journal-mode", "delete"],
            "backup": ["backup", str(tmp_path / "out")]}
    done = _swap_folder_during_open(monkeypatch, home, other, swap_back=swap_back)
    result = cli(*args[command], "--db", home / "state.db")
    _put_back(home)
    assert done, "the swap never ran"
    assert result.exit_code == 1, result.output
    assert "swapped" in result.stderr or "replaced while being opened" in result.stderr
    assert session_ids(other / "state.db") == ids and file_hash(other / "state.db") == victim
    assert not (tmp_path / "out.jsonl").exists() and not list(tmp_path.glob("out/*.db"))


@pytest.mark.parametrize("command", ["export", "backup", "stats"])
def test_folder_swapped_right_after_the_checks_is_refused_for_readers(tmp_path, cli, monkeypatch, command):
    # hostile try 5, H2: the swap right after the header check (before the open took its own look at the path)
    # made root's export for alice write bob's whole store into alice's file. The file SQLite opens must be the
    # one whose links were judged, for read-only commands too.
    import maint.store.connection as connection

    home, other = _two_homes(tmp_path, 6)
    with sqlite3.connect(other / "state.db") as conn:
        conn.execute("UPDATE sessions SET title = 'OTHER-PRIVATE-' || id")
    conn.close()
    real = connection._check_header
    swapped = []

    def check_then_swap(path):
        st = real(path)
        if not swapped and str(home) in str(path):
            swapped.append(path)
            home.rename(tmp_path / "kept")
            home.symlink_to(other)
        return st

    monkeypatch.setattr(connection, "_check_header", check_then_swap)
    args = {"export": ["export", str(tmp_path / "out.jsonl")], "backup": ["backup", str(tmp_path / "out")],
            "stats": ["stats"]}[command]
    result = cli(*args, "--db", home / "state.db")
    assert swapped, "the swap never ran"
    assert result.exit_code == 1, result.output
    assert "swapped" in result.stderr and "OTHER-PRIVATE" not in result.output
    assert not (tmp_path / "out.jsonl").exists() and not list(tmp_path.glob("out/*.db"))


def test_a_second_open_while_the_store_is_held_still_refuses_another_store(tmp_path, monkeypatch):
    # hostile try 7, J5: the after-open check accepted any open while some descriptor of ours held the checked
    # file. With a first connection held (restore's open of the live store while its safety copy opens the store
    # again), a folder swapped around the second open landed on another user's rollback-journal store (no -wal or
    # -shm to tell), and root's restore copied that store into alice's folder. What an open adds must not be
    # another store.
    import apsw

    from maint.store.connection import connect_checked

    home, other = _two_homes(tmp_path, 3)
    with sqlite3.connect(other / "state.db") as conn:
        conn.execute("PRAGMA journal_mode=delete")
    conn.close()
    db = home / "state.db"
    checked = os.stat(db)
    held = connect_checked(db, checked, apsw.SQLITE_OPEN_READWRITE)
    done = _swap_folder_during_open(monkeypatch, home, other, swap_back=True)
    try:
        with pytest.raises(StoreError, match="not the store it checked"):
            connect_checked(db, checked, apsw.SQLITE_OPEN_READONLY)
    finally:
        held.close()
        _put_back(home)
    assert done, "the swap never ran"


@pytest.mark.parametrize("command", ["stats", "export", "prune", "rename"])
def test_a_hot_journal_planted_after_the_checks_is_never_rolled_back_into_the_store(tmp_path, cli, monkeypatch,
                                                                                    command):
    # hostile try 7, J7: in a shared sticky folder another user made state.db-journal (a hot journal of her own
    # database) once our checks were done: the tidy-up after root's read-only stats, and the writable open of
    # prune or rename, rolled it back: alice's store became hers. While any open makes its first read, the name
    # is ours; she cannot take a name that exists (the sticky bit), so the plant fails.
    import maint.store.connection as connection
    from tests.test_replication import planted_journal

    journal = planted_journal(tmp_path)
    db = small_store(tmp_path / "state.db", 3)
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"state.db{suffix}").unlink(missing_ok=True)
    assert header_journal_mode(db) == "wal"
    before = session_ids(db)
    real = connection.connect
    tries = []

    def plant_then_connect(target, flags=None, **kwargs):
        if str(db) in str(target):  # before any open's first read, read-only ones too (root's hand the name on)
            try:
                fd = os.open(f"{db}-journal", os.O_WRONLY | os.O_CREAT | os.O_EXCL)  # no name taken over
            except FileExistsError:
                tries.append("name taken")
            else:
                os.write(fd, journal)
                os.close(fd)
                tries.append("planted")
        return real(target, flags, **kwargs) if flags is not None else real(target, **kwargs)

    monkeypatch.setattr(connection, "connect", plant_then_connect)
    args = {"stats": ["stats"], "export": ["export", str(tmp_path / "out.jsonl")],
            "prune": ["prune", "--older-than", "1d", "--yes"], "rename": ["rename", "recent", "new title"]}[command]
    result = cli(*args, "--db", db)
    assert tries, "no read-write open ran: nothing was tried"
    assert "planted" not in tries, tries
    assert result.exit_code == 0, result.output
    ids = session_ids(db)
    assert "MALLORY_INJECTED" not in ids and (ids == before or set(ids) < set(before)), ids


def _run_bounded(cli, *args, limit_s=60.0):
    """The command in a thread: a hang fails the test instead of holding the suite (the thread is left behind)."""
    import threading

    out = {}
    worker = threading.Thread(target=lambda: out.update(result=cli(*args)), daemon=True)
    worker.start()
    worker.join(limit_s)
    assert not worker.is_alive(), f"{args[0]} still waits after {limit_s:.0f} s"
    return out["result"], worker


@pytest.mark.parametrize("command", ["stats", "doctor", "export", "prune"])
def test_a_fifo_at_the_journal_name_after_the_checks_never_hangs_a_read(tmp_path, cli, monkeypatch, command):
    # hostile try 7, J1: SQLite's first read of any store opens NAME-journal (its hot-journal probe) with a blocking
    # open; a FIFO made there after our checks held every command for ever, SIGTERM included. The open returns.
    import maint.store.connection as connection

    db = small_store(tmp_path / "state.db", 3)
    real = connection._check_header
    planted = []

    def check_then_plant(path):
        st = real(path)
        if not planted and str(path) == str(db):
            planted.append(path)
            os.mkfifo(f"{db}-journal")
        return st

    monkeypatch.setattr(connection, "_check_header", check_then_plant)
    args = {"stats": ["stats"], "doctor": ["doctor"], "export": ["export", str(tmp_path / "out.jsonl")],
            "prune": ["prune", "--older-than", "1d", "--yes"]}[command]
    result, _ = _run_bounded(cli, *args, "--db", db)
    assert planted, "the FIFO was never planted"
    assert result.exit_code in (0, 1), result.output
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) <= 1, result.stderr


def test_a_fifo_moved_away_while_the_open_waits_on_it_never_hangs_the_open(tmp_path, cli, monkeypatch):
    # hostile try 7, J2: the store swapped for a FIFO after the checks; once SQLite's open waits on it, that FIFO is
    # moved away and a second one, which nobody reads, is put at the name. Releasing what is at the name did
    # not end the wait. The waiting open is interrupted, SQLite opens the name again, and that one is released.
    import threading

    import maint.store.connection as connection

    db = small_store(tmp_path / "state.db", 3)
    open_store(db, readonly=True).close()  # an open from the main thread, as the command's own would be
    real = connection._check_header
    swapped = []

    def blocked_in_fifo_open(tid):
        try:
            with open(f"/proc/self/task/{tid}/wchan") as fh:
                return fh.read().strip() == "wait_for_partner"
        except OSError:
            return False

    def attacker(tid):
        for _ in range(500):
            if blocked_in_fifo_open(tid):
                break
            threading.Event().wait(0.002)
        else:
            return
        swapped.append("moved")
        db.rename(tmp_path / ".waited-on")
        os.mkfifo(tmp_path / ".second")
        os.rename(tmp_path / ".second", db)

    def check_then_swap(path):
        st = real(path)
        if not swapped and str(path) == str(db):
            swapped.append("fifo")
            db.rename(tmp_path / "kept.db")
            os.mkfifo(db)
            threading.Thread(target=attacker, args=(threading.get_native_id(),), daemon=True).start()
        return st

    monkeypatch.setattr(connection, "_check_header", check_then_swap)
    result, _ = _run_bounded(cli, "stats", "--db", db)
    assert swapped == ["fifo", "moved"], swapped
    assert result.exit_code == 1, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("opener", ["open_store", "as_found"])
def test_the_tidy_up_after_a_read_leaves_a_folder_swapped_meanwhile_alone(tmp_path, opener):
    # A read of a store at rest removes the -wal and -shm its read-only open made, through a read-write open by
    # name. A profile folder swapped for a link to another user's folder before that tidy-up made us open the
    # other store read-write (its last connection: SQLite checkpointed it and removed its files). The tidy-up
    # opens only the file that was read.
    from maint.store.connection import as_found, connect

    home, other = _two_homes(tmp_path, 3)
    for folder in (home, other):
        for suffix in ("-wal", "-shm"):
            (folder / f"state.db{suffix}").unlink(missing_ok=True)
    reader = sqlite3.connect(f"file:{other / 'state.db'}?mode=ro", uri=True)  # the other store: an empty -wal
    reader.execute("SELECT COUNT(*) FROM sessions").fetchone()
    reader.close()
    assert (other / "state.db-wal").stat().st_size == 0 and (other / "state.db-shm").exists()

    def swap():
        home.rename(tmp_path / "kept")
        home.symlink_to(other)

    if opener == "open_store":
        store = open_store(home / "state.db", readonly=True)
        assert store.tidy_on_close, "the read-only open does not tidy up: the test proves nothing"
        store.scalar("SELECT COUNT(*) FROM sessions")
        swap()
        store.close()
    else:
        with as_found(home / "state.db"):
            conn = connect(str(home / "state.db"), __import__("apsw").SQLITE_OPEN_READONLY)
            conn.execute("SELECT COUNT(*) FROM sessions").fetchone()
            conn.close()
            assert (tmp_path / "evil" / "state.db-wal").exists()
            swap()
    assert (other / "state.db-wal").exists() and (other / "state.db-shm").exists()
    assert (tmp_path / "kept" / "state.db-wal").exists()  # not tidied either: the path no longer names it


def test_a_view_in_place_of_a_hermes_table_is_not_a_store(tmp_path, cli):
    # hostile try 5, H9: a recursive VIEW named sessions passed the Hermes-store check; stats/list/doctor then ran
    # for ever. A view (or a virtual table) where Hermes keeps a table is refused at the open, in one line.
    path = small_store(tmp_path / "state.db", 3)
    with sqlite3.connect(path) as conn:
        conn.executescript("ALTER TABLE sessions RENAME TO sessions_real; CREATE VIEW sessions AS WITH RECURSIVE "
                           "r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT s.* FROM sessions_real s, r")
    conn.close()
    for args in (["stats"], ["list"], ["doctor"], ["prune", "--dry-run"]):
        result = cli(*args, "--db", path)
        assert result.exit_code == 1, (args, result.output)
        assert "not a Hermes session store (missing table sessions (a view here))" in result.stderr, result.stderr


@pytest.mark.parametrize("command", ["stats", "doctor", "export"])
def test_a_store_swapped_for_a_fifo_after_the_checks_never_hangs_the_open(tmp_path, cli, monkeypatch, command):
    # hostile try 6, I6: the store swapped for a FIFO between the header check and SQLite's read-only open blocked
    # that open for ever (SIGTERM could not end it: the open is retried when interrupted). The open returns, and
    # the store is refused in one line.
    import maint.store.connection as connection

    db = small_store(tmp_path / "state.db", 3)
    real = connection._check_header
    swapped = []

    def check_then_swap(path):
        st = real(path)
        if not swapped and str(path) == str(db):
            swapped.append(path)
            db.rename(tmp_path / "kept.db")
            os.mkfifo(db)
        return st

    monkeypatch.setattr(connection, "_check_header", check_then_swap)
    args = {"stats": ["stats"], "doctor": ["doctor"], "export": ["export", str(tmp_path / "out.jsonl")]}[command]
    result = cli(*args, "--db", db)
    assert swapped, "the swap never ran"
    assert result.exit_code == 1, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr


def test_a_relative_store_path_spelled_like_a_uri_is_a_file_name(tmp_path, cli, monkeypatch):
    """Hostile try 9, L10: a relative --db beginning with `file:` passed every check on its literal name, and
    SQLite then read it as a URI and obeyed its parameters (`nolock=1`: deletes with no file locks). The store
    is opened by its absolute path, which SQLite never reads as a URI."""
    small_store(tmp_path / "s.db")
    monkeypatch.chdir(tmp_path)
    os.symlink("s.db", "file:s.db?vfs=bogus")
    result = cli("stats", "--db", "file:s.db?vfs=bogus", "--json")
    assert result.exit_code == 0 and "vfs" not in result.stderr, result.output
    assert json.loads(result.stdout)["sessions"] > 0


def test_a_commit_that_leaves_the_wal_long_resets_it_at_once(tmp_path):
    """Hostile try 10, M9: after one big transaction (clean-markers' 2,000 rows) the WAL stayed long, and every
    Hermes commit after it ran a checkpoint of its own while other Hermes processes reset the WAL: SQLite's
    WAL-reset race, with Hermes on SQLite < 3.51.3 (3 of 3 stores corrupt). A commit of ours that leaves the WAL
    past two auto-checkpoints' worth copies it back and resets it under the write lock."""
    from maint.store.connection import open_store

    db = small_store(tmp_path / "state.db")
    with open_store(db) as store:
        with store.write() as conn:  # about 3,000 pages of WAL in one transaction
            conn.execute("UPDATE messages SET content = content || ? WHERE id IN (SELECT id FROM messages LIMIT 1)",
                         ("x" * 12_000_000,))
        assert os.path.getsize(f"{db}-wal") == 0
        with store.write() as conn:  # a short one leaves the WAL to SQLite
            conn.execute("UPDATE sessions SET title = 'short' WHERE id IN (SELECT id FROM sessions LIMIT 1)")
        assert os.path.getsize(f"{db}-wal") > 0


def test_a_view_in_place_of_a_table_we_read_is_not_read(tmp_path):
    """Hostile try 11, N1: a view that never yields a row in place of schema_version (read at every open) made
    every command, readers included, run at full CPU until a signal. A view is not a table of Hermes's."""
    import sqlite3

    from tests.conftest import run_subprocess

    db = small_store(tmp_path / "state.db")
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE IF EXISTS schema_version")
    conn.execute("CREATE VIEW schema_version AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                 "SELECT x AS version FROM r WHERE x < 0")
    conn.close()
    result = run_subprocess("stats", "--db", db, "--json", timeout=120)  # a hang fails at the timeout
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["sessions"] > 0


def test_a_store_whose_text_is_utf16_is_refused_by_every_command_naming_the_encoding(tmp_path, cli):
    """Hostile try 12, P4: a UTF-16 store (valid SQLite) was read as UTF-8 bytes: every session of an export
    skipped as "not valid UTF-8", titles shown as c\\x00a\\x00..., ids not found. Hermes writes UTF-8 stores."""
    src = small_store(tmp_path / "src" / "state.db")
    (tmp_path / "u").mkdir()
    path = recoded(src, tmp_path / "u" / "state.db")
    before = file_hash(path)
    for args in (["stats"], ["list"], ["export", str(tmp_path / "out.jsonl")], ["prune", "--yes"], ["doctor"]):
        result = cli(*args, "--db", path)
        assert result.exit_code != 0 and "UTF-16le" in result.stderr and "UTF-8" in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert file_hash(path) == before and not (tmp_path / "out.jsonl").exists()


def test_a_store_with_a_computed_column_is_refused_before_any_read_of_its_rows(tmp_path, cli):
    """Hostile try 12, P7: `ALTER TABLE messages ADD COLUMN zz ... GENERATED ALWAYS AS (hex(zeroblob(2e7)))
    VIRTUAL` made each row's read one VM step of ~20 ms: doctor's and backup's checks ran for minutes, SIGTERM
    waited. Hermes's schema has no generated column: refused at the open, naming it; a snapshot too."""
    path = small_store(tmp_path / "state.db")
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE messages ADD COLUMN zz TEXT GENERATED ALWAYS AS (hex(zeroblob(1000))) VIRTUAL")
    conn.commit()
    conn.close()
    before = file_hash(path)
    for args in (["stats"], ["doctor"], ["backup", str(tmp_path / "snaps")], ["prune", "--yes"]):
        result = cli(*args, "--db", path)
        assert result.exit_code == 1 and "messages.zz" in result.stderr and "generated" in result.stderr, \
            (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
    assert file_hash(path) == before
    from maint.ops.backup import check_file

    with pytest.raises(StoreError, match="messages.zz"):
        check_file(path)


def test_a_store_whose_wal_holds_a_utf16_database_is_refused(tmp_path, cli):
    """Hostile try 13, Q3: the UTF-16 refusal read the main file's header only; a -wal holding the pages of a
    UTF-16 database (page 1 included) beside a UTF-8 main file was opened and read as UTF-8 bytes."""
    src = small_store(tmp_path / "src" / "state.db")
    (tmp_path / "u").mkdir()
    u16 = recoded(src, tmp_path / "u16.db")
    (tmp_path / "s").mkdir()
    path = tmp_path / "s" / "state.db"
    conn = sqlite3.connect(tmp_path / "s" / "state.db")  # an empty UTF-8 main file, WAL mode, same page size
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x)")
    conn.commit()
    conn.close()
    w = sqlite3.connect(tmp_path / "w.db")
    w.execute("PRAGMA encoding = 'UTF-16le'")
    w.execute("PRAGMA journal_mode=WAL")
    w.execute("PRAGMA wal_autocheckpoint=0")
    w.execute("ATTACH ? AS u", (str(u16),))  # same encoding: the rows copy over
    for (sql,) in w.execute("SELECT sql FROM u.sqlite_schema WHERE type = 'table' AND sql IS NOT NULL "
                            "AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '%fts%'").fetchall():
        w.execute(sql)
    for (name,) in w.execute("SELECT name FROM u.sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                             "AND name NOT LIKE '%fts%'").fetchall():
        w.execute(f'INSERT INTO main."{name}" SELECT * FROM u."{name}"')
    w.commit()
    w.execute("DETACH u")
    (tmp_path / "s" / "state.db-wal").write_bytes((tmp_path / "w.db-wal").read_bytes())
    w.close()
    check = sqlite3.connect(f"file:{path}?mode=ro", uri=True)  # read-only: its close checkpoints nothing
    assert check.execute("PRAGMA encoding").fetchone() == ("UTF-16le",)  # what SQLite reads: the WAL's page 1
    check.close()
    (tmp_path / "s" / "state.db-shm").unlink(missing_ok=True)
    with open(path, "rb") as fh:
        assert fh.read(100)[56:60] == b"\0\0\0\1"  # the main file's header still says UTF-8
    result = cli("stats", "--db", path)
    assert result.exit_code == 1 and "UTF-16le" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_hot_journal_stops_a_read_only_command_with_a_line_that_names_it(tmp_path, cli):
    """Hostile try 13, Q9: a rollback-mode store whose writer was killed mid-transaction (a hot -journal) stopped
    every read-only command (doctor, backup, export, stats) with "attempt to write a readonly database"."""
    import subprocess
    import sys

    path = small_store(tmp_path / "state.db")
    code = ("import sqlite3, sys, os; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
            "c.execute('PRAGMA journal_mode=delete'); c.execute('PRAGMA cache_size=5'); c.execute('BEGIN IMMEDIATE');"
            "c.execute(\"UPDATE messages SET content = content || ' CRASHED'\"); os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    journal = tmp_path / "state.db-journal"
    assert journal.exists() and journal.stat().st_size > 0
    for args in (["stats"], ["doctor"], ["export", str(tmp_path / "x.jsonl")]):
        result = cli(*args, "--db", path)
        assert result.exit_code == 1 and "hot journal" in result.stderr and "state.db-journal" in result.stderr, \
            (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
    assert journal.exists()  # left for a writer to roll back
