"""restore through the real CLI: in place (same inode) with a safety snapshot, and what it refuses before it writes
(a held store, a snapshot that is not an intact Hermes store, the shared write preflight, special files)."""

import json
import os
import sqlite3
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from maint.errors import MaintError
from maint.ops.backup import list_snapshots
from tests.conftest import REPO, file_hash, query, run_subprocess, session_ids
from tests.storegen import StoreBuilder, recoded

Usage = namedtuple("Usage", "total used free")


def _store(path, layout="v22", n=6):
    with StoreBuilder(path, layout=layout) as b:
        for i in range(n):
            b.session(f"s{i}", age=10 + i, messages=4)
        b.session("old", age=200, messages=3)
    return path


def _snapshot(home):
    result = run_subprocess("backup", "--json", env={"HERMES_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["snapshot"]["path"]


def restore(home, *args, expect=0, input=None):
    """The --json report when it succeeds, the finished process when it is refused."""
    result = run_subprocess("restore", *args, "--json", env={"HERMES_HOME": str(home)}, input=input, timeout=60)
    assert result.returncode == expect, result.stderr
    return json.loads(result.stdout) if expect == 0 else result


def counts(db):
    return query(db, "SELECT (SELECT COUNT(*) FROM sessions), (SELECT COUNT(*) FROM messages)")[0]


def test_restore_refuses_a_store_with_a_second_hard_link(hermes_home, tmp_path):
    """Finding 1: the other name's WAL would be replayed over the restored pages ("Rowid out of order")."""
    db = _store(hermes_home / "state.db")
    snap = _snapshot(hermes_home)
    os.link(db, tmp_path / "other-name.db")
    before = file_hash(db)
    refused = restore(hermes_home, snap, "--yes", expect=1)
    assert "2 hard links" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert file_hash(db) == before
    assert not list((hermes_home / "state-snapshots").glob("*.pre-restore*"))


def test_restore_refuses_a_snapshot_newer_than_we_know(hermes_home, tmp_path):
    """Finding 13: a snapshot of schema version 99 was copied over a v22 store."""
    db = _store(hermes_home / "state.db")
    snap = _snapshot(hermes_home)
    conn = sqlite3.connect(snap)
    conn.execute("INSERT INTO schema_version(version) VALUES (99)")
    conn.commit()
    conn.close()
    before = file_hash(db)
    for args in ((snap, "--yes"), (snap, "--dry-run")):
        refused = restore(hermes_home, *args, expect=2)
        assert "schema version 99" in refused.stderr and "newer" in refused.stderr
    assert file_hash(db) == before


def test_restore_refuses_a_snapshot_whose_text_encoding_is_not_utf8_before_the_copy(hermes_home, tmp_path):
    """Hostile try 12, P3: a UTF-16 snapshot was copied over the UTF-8 store (the backup API copies the header),
    then the restore ended "error: attached databases must use the same text encoding", with no word that the
    store had been replaced."""
    db = _store(hermes_home / "state.db")
    snap = recoded(Path(_snapshot(hermes_home)), tmp_path / "u16.db")
    before = file_hash(db)
    for args in ((snap, "--yes"), (snap, "--dry-run")):
        refused = restore(hermes_home, *args, expect=1)
        assert "UTF-16le" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert file_hash(db) == before
    assert query(db, "PRAGMA encoding") == [("UTF-8",)]
    assert not list((hermes_home / "state-snapshots").glob("*.pre-restore*"))


def test_restore_dry_run_beside_a_fifo_named_like_the_sidecar(hermes_home):
    """Finding 10: a FIFO at SNAP.json hung `restore SNAP --dry-run` on the sidecar read."""
    _store(hermes_home / "state.db")
    snap = _snapshot(hermes_home)
    os.unlink(snap + ".json")
    os.mkfifo(snap + ".json")
    dry = restore(hermes_home, snap, "--dry-run")
    assert dry["dry_run"] is True


HOLD = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT COUNT(*) FROM sessions').fetchall();"
        "print('ready', flush=True); sys.stdin.read()")


def _fts_ok(db):
    conn = sqlite3.connect(db)
    try:
        for table in ("messages_fts", "messages_fts_trigram"):
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")
    finally:
        conn.close()


def test_restore_in_place_same_inode_with_safety_snapshot(hermes_home, layout):
    db = _store(hermes_home / "state.db", layout)
    snap = _snapshot(hermes_home)
    wanted = counts(db)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM messages WHERE session_id IN ('s1', 's2')")
    conn.execute("DELETE FROM sessions WHERE id IN ('s1', 's2')")
    conn.commit()
    conn.close()
    damaged = counts(db)
    inode = db.stat().st_ino
    r = restore(hermes_home, snap, "--yes")
    assert (r["before"]["sessions"], r["before"]["messages"]) == damaged
    assert (r["after"]["sessions"], r["after"]["messages"]) == wanted == counts(db)
    assert r["inode_kept"] and db.stat().st_ino == inode
    assert query(db, "PRAGMA integrity_check") == [("ok",)]
    _fts_ok(db)
    safety = Path(r["safety_snapshot"])
    assert safety.name.endswith(".pre-restore.db") and counts(safety) == damaged
    assert [s.verified for s in list_snapshots(safety.parent) if s.path == safety] == [True]
    # Hermes carries on in the restored store.
    code = ("import sys; from pathlib import Path; from hermes_state import SessionDB;"
            "db = SessionDB(Path(sys.argv[1])); db.append_message('s1', 'user', 'after restore'); db.close()")
    subprocess.run([sys.executable, "-c", code, str(db)], check=True, cwd=REPO)
    assert query(db, "SELECT COUNT(*) FROM messages WHERE session_id = 's1'") == [(5,)]


def test_restore_refused_while_a_process_holds_the_store(hermes_home):
    db = _store(hermes_home / "state.db")
    snap = _snapshot(hermes_home)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM sessions WHERE id = 'old'")
    conn.commit()
    conn.close()
    before = file_hash(db)
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        result = restore(hermes_home, snap, "--yes", expect=1)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert f"pid {proc.pid}" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert file_hash(db) == before and "old" not in session_ids(db)
    assert not list((hermes_home / "state-snapshots").glob("*.pre-restore.db"))


def test_restore_needs_yes_without_a_terminal_and_dry_run_writes_nothing(hermes_home):
    db = _store(hermes_home / "state.db")
    snap = _snapshot(hermes_home)
    before = file_hash(db)
    refused = restore(hermes_home, snap, expect=2, input="y\n")
    assert "not a terminal" in refused.stderr
    dry = restore(hermes_home, snap, "--dry-run")
    assert dry["dry_run"] and dry["safety_snapshot"] is None
    assert file_hash(db) == before and not list((hermes_home / "state-snapshots").glob("*.pre-restore*"))


@pytest.mark.parametrize("kind", ["text", "other_sqlite", "truncated", "missing", "itself"])
def test_restore_refuses_what_is_not_an_intact_hermes_store(hermes_home, tmp_path, kind):
    db = _store(hermes_home / "state.db")
    bad = tmp_path / "snap.db"
    if kind == "text":
        bad.write_text("hello\n")
    elif kind == "other_sqlite":
        conn = sqlite3.connect(bad)
        conn.execute("CREATE TABLE t(x)")
        conn.commit()
        conn.close()
    elif kind == "truncated":
        good = Path(_snapshot(hermes_home))
        bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif kind == "itself":
        bad = db
    before = file_hash(db)
    result = restore(hermes_home, bad, "--yes", expect=2 if kind in ("missing", "itself") else 1)
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert file_hash(db) == before
    assert not list((hermes_home / "state-snapshots").glob("*.pre-restore*"))


def test_restore_over_a_damaged_store_keeps_its_copy(hermes_home):
    """The store fails quick_check (why one restores): the copy is kept as found, the restore goes ahead."""
    db = _store(hermes_home / "state.db", n=60)
    snap = _snapshot(hermes_home)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(db, "r+b") as fh:  # scribble over the messages table's root page
        fh.seek((root - 1) * page + 8)
        fh.write(b"\xff" * 64)
    r = restore(hermes_home, snap, "--yes")
    assert (r["after"]["sessions"], r["after"]["messages"]) == counts(snap)
    assert query(db, "PRAGMA integrity_check") == [("ok",)]
    assert any("failed its check" in w for w in r["warnings"])
    assert Path(r["safety_snapshot"]).exists()
    (listed,) = [s for s in list_snapshots(Path(r["safety_snapshot"]).parent) if str(s.path) == r["safety_snapshot"]]
    assert not listed.verified and "kept as found" in listed.reason


def test_restore_preflight_names_both_figures_and_changes_nothing(hermes_home):
    from maint.ops.restore import inspect_snapshot, restore as restore_store

    db = _store(hermes_home / "state.db")
    snap = _snapshot(hermes_home)
    before = file_hash(db)
    folder = hermes_home / "state-snapshots"
    with pytest.raises(MaintError) as err:
        restore_store(db, inspect_snapshot(Path(snap)), label="default", safety_folder=folder,
                      disk_usage=lambda p: Usage(10**9, 10**9 - 4096, 4096))
    assert "4096 bytes free" in str(err.value) and "need about" in str(err.value)
    assert file_hash(db) == before and not list(folder.glob("*.pre-restore*"))


def test_restore_refused_while_another_hermes_maint_works_on_the_store(hermes_home):
    db = _store(hermes_home / "state.db")
    snap = _snapshot(hermes_home)
    before = file_hash(db)
    code = ("import sys; from pathlib import Path; from maint.store.runlock import run_lock;"
            "run_lock(Path(sys.argv[1])); print('ready', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=REPO)
    try:
        assert proc.stdout.readline().strip() == "ready"
        result = restore(hermes_home, snap, "--yes", expect=1)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert f"pid {proc.pid}" in result.stderr and "another hermes-maint" in result.stderr
    assert file_hash(db) == before and not list((hermes_home / "state-snapshots").glob("*.pre-restore*"))


def test_a_process_writing_after_the_copy_leaves_the_restore_done_and_said_so(hermes_home, cli, monkeypatch):
    """Hostile try 3, F14: a Hermes writer that started during the copy made restore exit 1 "expected 50
    sessions" although the snapshot WAS in place, inviting a second restore that would drop the writer's rows.
    Now: exit 0, the restore reported, a warning naming the counts and that another process wrote since."""
    from maint.ops import restore as restore_mod

    db = _store(hermes_home / "state.db")
    snap = _snapshot(hermes_home)
    with StoreBuilder(db) as b:
        b.session("after_the_snapshot", age=1, messages=2)  # the restore takes this one away
    copy = restore_mod.copy_into

    def copy_then_a_writer(conn, snapshot, *args):
        copy(conn, snapshot, *args)
        writer = sqlite3.connect(db, timeout=10)  # a Hermes process that started meanwhile
        with writer:
            writer.execute("INSERT INTO sessions (id, source, started_at) VALUES ('live', 'cli', 1800000000)")
        writer.close()

    monkeypatch.setattr(restore_mod, "copy_into", copy_then_a_writer)
    result = cli("restore", snap, "--yes")
    assert result.exit_code == 0, result.output
    assert "the snapshot is in place, and another process wrote to the store after the copy" in result.stderr
    assert "now reads 8 sessions" in result.stderr and "the snapshot holds 7" in result.stderr
    assert session_ids(db) == {f"s{i}" for i in range(6)} | {"old", "live"}


def test_an_error_after_the_copy_says_the_store_was_replaced_and_where_the_old_one_is(hermes_home, cli, monkeypatch):
    """Hostile try 12, P3: once the copy is committed, an error in the steps after it (there: the text encoding)
    read "error: ... SQLite error" as if nothing had changed, inviting a second restore."""
    import apsw

    from maint.ops import restore as restore_mod

    db = _store(hermes_home / "state.db")
    snap = _snapshot(hermes_home)
    with StoreBuilder(db) as b:
        b.session("after_the_snapshot", age=1, messages=2)

    def counts_fail(conn):
        raise apsw.SQLError("SQLError: something after the copy")

    monkeypatch.setattr(restore_mod, "counts", counts_fail)
    result = cli("restore", snap, "--yes")
    assert result.exit_code == 1, result.output
    assert "the snapshot was copied into the store, then" in result.stderr and "something after the copy" in \
        result.stderr
    safety = list((hermes_home / "state-snapshots").glob("*.pre-restore*.db"))
    assert len(safety) == 1 and str(safety[0]) in result.stderr
    assert "after_the_snapshot" not in session_ids(db)


def test_a_stop_during_the_copy_leaves_the_store_as_it_was(hermes_home, cli, monkeypatch):
    """Hostile try 14, R5: the copy was one backup step, which no signal reaches: SIGTERM to the restore of a 2.8 GB
    snapshot waited 17 s, then the store was the snapshot's. The copy goes in steps (one lock and one commit still);
    a stop between two rolls the copy back: the store is as it was."""
    from maint.errors import Terminated
    from maint.ops import restore as restore_mod
    from maint.store import snapshots as snapshots_mod

    db = _store(hermes_home / "state.db", n=30)
    snap = _snapshot(hermes_home)
    with StoreBuilder(db) as b:
        b.session("after_the_snapshot", age=1, messages=2)  # the restore would take this one away
    before = session_ids(db)
    steps = []

    def stop_after_the_first_step():
        steps.append(1)
        raise Terminated(15)

    monkeypatch.setattr(snapshots_mod, "COPY_STEP_PAGES", 1)
    monkeypatch.setattr(restore_mod, "_between_steps", stop_after_the_first_step)
    result = cli("restore", snap, "--yes")
    assert result.exit_code == 143, result.output
    assert steps == [1] and session_ids(db) == before
    assert query(db, "PRAGMA quick_check") == [("ok",)]


def test_a_stop_after_the_copy_says_the_store_was_replaced(hermes_home, cli, monkeypatch):
    """Hostile try 14, R3: SIGTERM once the copy had committed ended with the generic "terminated" line: no word that
    the store now holds the snapshot, nor where the previous store is."""
    from maint.errors import Terminated
    from maint.ops import restore as restore_mod

    _store(hermes_home / "state.db")
    snap = _snapshot(hermes_home)

    def stopped(name):
        if name == "restore_checkpointed":  # after the copy's commit
            raise Terminated(15)

    monkeypatch.setattr(restore_mod, "crash_point", stopped)
    result = cli("restore", snap, "--yes")
    assert result.exit_code == 143, result.output
    safety = list((hermes_home / "state-snapshots").glob("*.pre-restore*.db"))
    assert "copied into the store" in result.stderr and len(safety) == 1 and str(safety[0]) in result.stderr


def test_a_commit_while_the_safety_snapshot_is_taken_stops_the_restore(hermes_home, cli, monkeypatch):
    """Hostile try 9, L6: a Hermes that opens the store, writes and closes (a one-shot turn, a cron run) holds
    nothing when the holder checks look; what it committed after the safety snapshot's read began and before the
    copy was in neither the safety snapshot nor the restored store. The copy, once it holds the store's write
    lock, checks that no one has committed since the safety snapshot began: the restore is refused, the store
    keeps the write."""
    from maint.ops import restore as restore_mod

    db = _store(hermes_home / "state.db")
    snap = _snapshot(hermes_home)
    take = restore_mod.take_snapshot

    def snapshot_while_hermes_writes(*args, **kwargs):
        safety = take(*args, **kwargs)
        writer = sqlite3.connect(db, timeout=10)  # committed after the safety snapshot's read view began
        with writer:
            writer.execute("INSERT INTO sessions (id, source, started_at) VALUES ('acked', 'cli', 1800000000)")
        writer.close()
        return safety

    monkeypatch.setattr(restore_mod, "take_snapshot", snapshot_while_hermes_writes)
    result = cli("restore", snap, "--yes")
    assert result.exit_code == 1 and "another process wrote to the store while its safety snapshot" in \
        result.stderr, result.output
    assert "acked" in session_ids(db) and len(result.stderr.strip().splitlines()) == 1
    monkeypatch.setattr(restore_mod, "take_snapshot", take)
    assert cli("restore", snap, "--yes").exit_code == 0 and "acked" not in session_ids(db)  # nobody writing now


def _uid(name):
    import pwd

    return pwd.getpwnam(name).pw_uid


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user here")
@pytest.mark.parametrize("how, refused", [
    ("file", "is owned by another user (uid {mallory}), not you, root nor the store's owner"),
    ("writable", "is writable by its group (mode 660)"),
    ("folder", "its folder {folder} lets its owner (uid {mallory}, not the store's) create files in it"),
    ("link", "a symbolic link owned by uid {mallory}"),  # refused before too (the store link rule)
    ("owners", None),  # the store's owner's snapshot in her own folder
])
def test_restore_refuses_a_snapshot_another_user_could_have_chosen(hermes_home, tmp_path, how, refused):
    """Hostile try 5, H11: mallory replaced a snapshot in a folder she owned with her own database, and root's
    restore put it into alice's store (rc 0). A SNAPSHOT must be ours, root's or the store's owner's, in
    folders only they control, reached through no other user's link: else one line, nothing changed."""
    db = _store(hermes_home / "state.db")
    os.chown(db, _uid("alice"), _uid("alice"))
    snap = Path(_snapshot(hermes_home))
    folder = tmp_path / "theirs"
    folder.mkdir()
    for p in (snap, Path(f"{snap}.json")):
        p.rename(folder / p.name)
    snap = folder / snap.name
    target = snap
    if how == "file":
        os.chown(snap, _uid("mallory"), _uid("mallory"))
    elif how == "writable":
        os.chmod(snap, 0o660)
    elif how == "folder":
        os.chown(folder, _uid("mallory"), _uid("mallory"))
    elif how == "link":
        target = tmp_path / "snap.db"
        os.symlink(snap, target)
        os.lchown(target, _uid("mallory"), _uid("mallory"))
    else:
        for p in (folder, snap, Path(f"{snap}.json")):
            os.chown(p, _uid("alice"), _uid("alice"))
    with StoreBuilder(db) as b:
        b.session("after_the_snapshot", age=1, messages=2)
    before = file_hash(db)
    if refused is None:
        assert "after_the_snapshot" not in session_ids(restore(hermes_home, target, "--yes")["store"])
        return
    refused = refused.format(mallory=_uid("mallory"), folder=folder)
    for args in (("--dry-run",), ("--yes",)):
        r = restore(hermes_home, target, *args, expect=1)
        assert refused in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert file_hash(db) == before and not list((hermes_home / "state-snapshots").glob("*.pre-restore*"))


@pytest.mark.parametrize("how", ["other_store", "same_counts", "old_sidecar_other_store", "old_sidecar"])
def test_restore_refuses_a_file_its_sidecar_does_not_describe(hermes_home, tmp_path, how):
    """Hostile try 5, H11: the sidecar recorded 5 sessions, 25 messages and the size, and restore put back a
    2-session database found under the snapshot's name without a word. What the sidecar recorded is compared
    (its sha256 since sidecar version 2; counts and size for older sidecars, which keep working)."""
    db = _store(hermes_home / "state.db")
    snap = Path(_snapshot(hermes_home))
    side = Path(f"{snap}.json")
    if how.startswith("old_sidecar"):
        meta = json.loads(side.read_text())
        del meta["sha256"]
        meta["version"] = 1
        side.write_text(json.dumps(meta))
    if how.endswith("other_store"):
        other = _store(tmp_path / "other.db", n=2)
        conn = sqlite3.connect(other)
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.close()
        snap.write_bytes(other.read_bytes())
    elif how == "same_counts":  # one byte of one message: counts and size as recorded
        conn = sqlite3.connect(snap)
        conn.execute("UPDATE messages SET content = replace(content, 'message', 'MESSAGE') WHERE id = "
                     "(SELECT MIN(id) FROM messages)")
        conn.commit()
        conn.close()
        assert snap.stat().st_size == json.loads(side.read_text())["bytes"]
    before = file_hash(db)
    if how == "old_sidecar":
        assert restore(hermes_home, snap, "--yes")["after"]["sessions"] == 7
        return
    for args in (("--dry-run",), ("--yes",)):
        r = restore(hermes_home, snap, *args, expect=1)
        assert "this is not the snapshot hermes-maint made" in r.stderr and "nothing was changed" in r.stderr
        assert ("sha256" if how == "same_counts" else "sessions 7 (the file: 3)") in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert file_hash(db) == before and not list((hermes_home / "state-snapshots").glob("*.pre-restore*"))


def test_restore_copies_the_snapshot_it_vouched_for_not_what_its_name_leads_to_later(hermes_home, tmp_path, cli,
                                                                                      monkeypatch):
    """Hostile try 6, I4: restore judged SNAPSHOT by one lookup and copied from it by another: alice swapped her
    snapshot folder for a link to bob's home after the checks, and her store then held bob's whole store."""
    from maint.ops import restore as restore_mod

    db = _store(hermes_home / "state.db")
    mine, other = tmp_path / "snaps", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    _store(mine / "state.db", n=3)
    _store(other / "state.db", n=9)
    before = session_ids(db)
    vouch = restore_mod.vouch_for
    swapped = []

    def vouch_then_swap(snapshot, store):
        vouch(snapshot, store)
        mine.rename(tmp_path / "kept")
        mine.symlink_to(other)
        swapped.append(snapshot.path)

    monkeypatch.setattr(restore_mod, "vouch_for", vouch_then_swap)
    result = cli("restore", mine / "state.db", "--yes")
    assert swapped, "the swap never ran"
    assert result.exit_code == 1, result.output
    assert "swapped" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert session_ids(db) == before
