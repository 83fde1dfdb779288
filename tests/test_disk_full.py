"""Exports and VACUUM on a small filesystem this test mounts itself: clear error, store intact, no partial files."""

import json
import os
import shutil
import subprocess
import uuid
from collections import namedtuple
from pathlib import Path

import pytest

from maint.errors import StoreError
from maint.store.connection import open_store
from maint.ops.vacuum import optimize
from tests.conftest import file_hash, query, run_subprocess
from tests.storegen import StoreBuilder, bulk_store

Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def small_fs(tmp_path):
    yield from _mounted(tmp_path, "3m")


@pytest.fixture
def fs_7m(tmp_path):
    yield from _mounted(tmp_path, "7m")


def _mounted(tmp_path, size):
    mnt = tmp_path / f"fs-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    # mode=0755: a tmpfs root is 1777 by default, and a store in a folder others may add names to is refused
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(mnt)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"this machine forbids mounting a size-limited tmpfs: {result.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _store(path, sessions=30, messages=20):
    """Built on the normal disk (SessionDB's WAL alone can outgrow a tiny filesystem), then moved."""
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        built = Path(tmp) / "state.db"
        with StoreBuilder(built) as b:
            for n in range(sessions):
                b.session(f"s{n}", age=200, messages=messages)
        conn = sqlite3.connect(built)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        shutil.copy(built, path)
    return path


def test_export_to_full_disk_fails_cleanly(tmp_path, small_fs):
    db = _store(tmp_path / "state.db", sessions=60, messages=40)
    before = file_hash(db)
    ballast = small_fs / "ballast"
    ballast.write_bytes(b"x" * (2_500_000))
    result = run_subprocess("export", small_fs / "backup.jsonl", "--db", db)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in small_fs.iterdir()) == ["ballast"]  # no partial file, final or temporary
    assert "disk" in result.stderr.lower() or "space" in result.stderr.lower()
    assert file_hash(db) == before
    (small_fs / "ballast2").write_bytes(b"x" * max(0, shutil.disk_usage(small_fs).free - 30_000))
    md = run_subprocess("export", small_fs / "md", "--db", db, "--format", "md", "--source", "cli")
    assert md.returncode == 1 and len(md.stderr.strip().splitlines()) == 1
    leftovers = [p.name for p in small_fs.rglob("*") if ".partial" in p.name]
    assert leftovers == []  # files that fit are complete; the one that did not is gone


def test_vacuum_on_full_disk_rolls_back(small_fs):
    db = _store(small_fs / "state.db", sessions=12, messages=10)
    conn = __import__("sqlite3").connect(db)
    conn.execute("DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE id LIKE 's1%')")
    conn.commit()
    conn.close()
    count = query(db, "SELECT COUNT(*) FROM messages")
    free = shutil.disk_usage(small_fs).free
    (small_fs / "ballast").write_bytes(b"x" * max(0, free - 200_000))
    with open_store(db) as store:
        with pytest.raises(StoreError, match="disk full|not enough"):
            optimize(store, disk_usage=lambda p: Usage(10**12, 0, 10**12))  # get past our own space check
    os.unlink(small_fs / "ballast")
    assert query(db, "PRAGMA integrity_check") == [("ok",)]
    assert query(db, "SELECT COUNT(*) FROM messages") == count


def test_optimize_refuses_up_front_on_small_fs(small_fs):
    db = _store(small_fs / "state.db", sessions=10, messages=10)
    before = file_hash(db)
    result = run_subprocess("optimize", "--db", db)
    assert result.returncode == 1 and "not enough free space" in result.stderr and "bytes free" in result.stderr
    assert file_hash(db) == before


def test_read_only_store_and_folder(small_fs):
    db = _store(small_fs / "state.db", sessions=5, messages=3)
    before = file_hash(db)
    remount = subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], capture_output=True, text=True)
    if remount.returncode != 0:
        pytest.skip(f"this machine forbids remounting read-only: {remount.stderr.strip()}")
    try:
        for argv in (["prune", "--older-than", "1", "--yes"], ["archive", "--source", "cli", "--yes"],
                     ["optimize"], ["repair-prompts", "0", "--apply", "--yes"]):
            result = run_subprocess(*argv, "--db", db)
            assert result.returncode in (1, 2), (argv, result.stderr)
            assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
        out = run_subprocess("export", small_fs / "x.jsonl", "--db", db)
        assert out.returncode == 1 and "Traceback" not in out.stderr
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], capture_output=True)
    assert file_hash(db) == before


def _copy_wal_store(folder: Path, name: str, with_shm: bool) -> None:
    """A store whose last commit lives only in its -wal, copied as a live one would be (with -shm or without)."""
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        built = Path(tmp) / "state.db"
        with StoreBuilder(built) as b:
            for n in range(5):
                b.session(f"s{n}", age=200, messages=3)
        keep = sqlite3.connect(built)  # holds the WAL open: its frames are not checkpointed away
        keep.execute("PRAGMA wal_autocheckpoint=0")
        keep.execute("INSERT INTO sessions (id, source, started_at) VALUES ('only_in_wal', 'cli', 1)")
        keep.commit()
        for suffix in ("", "-wal") + (("-shm",) if with_shm else ()):
            shutil.copy(f"{built}{suffix}", folder / f"{name}{suffix}")
        keep.close()


def test_read_only_folder_still_reads_a_wal_store(small_fs):
    """In a folder we cannot write, stats, list and export still read the store, its WAL included."""
    _copy_wal_store(small_fs, "live.db", with_shm=True)
    _copy_wal_store(small_fs, "noshm.db", with_shm=False)
    plain = small_fs / "plain"
    plain.mkdir()
    _store(plain / "state.db", sessions=4, messages=2)  # checkpointed: no -wal, no -shm
    remount = subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], capture_output=True, text=True)
    if remount.returncode != 0:
        pytest.skip(f"this machine forbids remounting read-only: {remount.stderr.strip()}")
    try:
        stats = run_subprocess("stats", "--db", small_fs / "live.db", "--json")
        assert stats.returncode == 0, stats.stderr
        assert json.loads(stats.stdout)["sessions"] == 6  # the five, and the one only the WAL holds
        assert run_subprocess("list", "--db", small_fs / "live.db").returncode == 0
        exported = run_subprocess("export", "-", "--db", small_fs / "live.db")
        assert exported.returncode == 0 and "only_in_wal" in exported.stdout
        plain_stats = run_subprocess("stats", "--db", plain / "state.db", "--json")
        assert plain_stats.returncode == 0 and json.loads(plain_stats.stdout)["sessions"] == 4
        refused = run_subprocess("stats", "--db", small_fs / "noshm.db")
        assert refused.returncode == 1 and "its -wal holds commits but the folder is read-only" in refused.stderr
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], capture_output=True)


def test_a_store_on_a_full_disk_is_named_full_not_a_disk_io_error(small_fs, tmp_path):
    """Hostile try 12, P13: a WAL store at rest on a full filesystem cannot be read (no room for its -shm), and
    stats and doctor said "cannot open store (disk I/O error)": doctor could not name the one condition that
    stops Hermes too."""
    folder = small_fs / "s"
    folder.mkdir(mode=0o700)
    db = _store(folder / "state.db", sessions=5, messages=3)
    assert query(db, "PRAGMA journal_mode") == [("wal",)]
    for suffix in ("-wal", "-shm"):  # at rest: the first read has to make them
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    (small_fs / "ballast").write_bytes(b"x" * shutil.disk_usage(small_fs).free)
    assert shutil.disk_usage(small_fs).free == 0
    home = tmp_path / "home"
    home.mkdir()
    for argv in (["stats"], ["doctor"], ["list"]):
        result = run_subprocess(*argv, "--db", db, env={"HERMES_HOME": str(home)})
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip() == (f"hermes-maint: error: {db}: the filesystem holding the store is full: SQLite "
                                         f"cannot create {db}-shm to read it; free some space"), result.stderr


def test_a_dry_run_works_on_a_read_only_store(small_fs):
    db = _store(small_fs / "state.db", sessions=5, messages=3)
    remount = subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], capture_output=True, text=True)
    if remount.returncode != 0:
        pytest.skip(f"this machine forbids remounting read-only: {remount.stderr.strip()}")
    try:
        for argv in (["prune", "--dry-run"], ["archive", "--source", "cli", "--dry-run"]):
            result = run_subprocess(*argv, "--db", db, "--json")
            assert result.returncode == 0, (argv, result.stderr)
            assert json.loads(result.stdout)["matched"] == 5
        preview = run_subprocess("delete", "s0", "--dry-run", "--db", db, "--json")
        assert preview.returncode == 0 and json.loads(preview.stdout)["session_ids"] == ["s0"]
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], capture_output=True)


def test_backup_refused_up_front_when_the_dest_is_small(tmp_path, small_fs):
    db = _store(tmp_path / "state.db", sessions=20, messages=10)
    result = run_subprocess("backup", small_fs, "--db", db)
    assert result.returncode == 1 and "not enough free space" in result.stderr and "bytes free" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and list(small_fs.iterdir()) == []


def test_backup_that_fills_the_disk_leaves_nothing(tmp_path, small_fs):
    """Past our own check (fake figures), the filesystem fills for real: a clean error, no file left."""
    from maint.errors import MaintError
    from maint.ops.backup import take_snapshot

    db = tmp_path / "state.db"
    bulk_store(db, sessions=300, messages_per_session=10, content_bytes=600)
    before = file_hash(db)
    with pytest.raises(MaintError, match="disk full"):
        take_snapshot(db, small_fs, label="default", disk_usage=lambda p: Usage(10**12, 0, 10**12))
    assert list(small_fs.iterdir()) == [] and file_hash(db) == before


def test_backup_to_a_read_only_dest(tmp_path, small_fs):
    db = _store(tmp_path / "state.db", sessions=3, messages=2)
    remount = subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], capture_output=True, text=True)
    if remount.returncode != 0:
        pytest.skip(f"this machine forbids remounting read-only: {remount.stderr.strip()}")
    try:
        from maint.ops.backup import take_snapshot
        from maint.errors import MaintError

        with pytest.raises(MaintError, match="cannot write there"):
            take_snapshot(db, small_fs, label="default", disk_usage=lambda p: Usage(10**12, 0, 10**12))
        result = run_subprocess("backup", small_fs, "--db", db)
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], capture_output=True)
    assert list(small_fs.iterdir()) == []


@pytest.mark.parametrize("past_checks", [False, True])
@pytest.mark.parametrize("command", ["backup", "optimize"])
def test_a_file_size_limit_is_named_not_an_sqlite_io_error(tmp_path, command, past_checks):
    """Hostile try 3, F21: under `ulimit -f`, backup said "SQLite error (IOError: not an error)" and optimize
    --into "disk I/O error". The limit is checked first; met in the middle of a copy it is named."""
    from tests.conftest import run_size_limited

    db = tmp_path / "state.db"
    bulk_store(db, sessions=300, messages_per_session=10, content_bytes=600)
    out = tmp_path / "out"
    out.mkdir()
    args = ["backup", out] if command == "backup" else ["optimize", "--into", out / "c.db"]
    before = file_hash(db)
    r = run_size_limited(64 << 10, *args, "--db", db, past_checks=past_checks)
    assert r.returncode == 1, r.stderr
    line, = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and "ulimit -f" in line and "SQLite error" not in line, line
    assert file_hash(db) == before and os.listdir(out) == []


def test_a_salvage_that_fills_the_disk_names_the_disk(tmp_path, fs_7m):
    """Hostile try 12, P1: `recover --salvage NEW` of the demo store onto its own nearly full filesystem ended
    "SQLite error (cannot rollback - no transaction is active)": the rollback of what SQLite had already rolled
    back hid the cause."""
    (fs_7m / "s").mkdir(mode=0o700)
    assert run_subprocess("demo", tmp_path / "demo.db").returncode == 0
    db = fs_7m / "s" / "state.db"
    shutil.copy(tmp_path / "demo.db", db)
    before = file_hash(db)
    out = fs_7m / "out"
    out.mkdir(mode=0o700)
    result = run_subprocess("recover", "--salvage", out / "salvaged.db", "--db", db)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "disk full" in result.stderr, result.stderr
    assert list(out.iterdir()) == [] and file_hash(db) == before
