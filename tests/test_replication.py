"""The replication guard: no in-place VACUUM under Litestream; optimize --into writes a compacted copy instead."""

import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections import namedtuple

import pytest

from maint.config import load_config
from maint.ops.prune import execute_prune, plan_prune
from maint.ops.sweep import decide_vacuum, run_sweep
from maint.store.connection import header_journal_mode, open_store
from maint.store.holders import find_holders
from tests.conftest import file_hash, query, run_subprocess
from tests.storegen import StoreBuilder

Usage = namedtuple("Usage", "total used free")
PLENTY = lambda p: Usage(10**12, 10**11, 9 * 10**11)  # noqa: E731


class Litestream:
    """A real process whose name is ``litestream`` (a script run through its shebang) holding the store open."""

    def __init__(self, db, folder):
        self.db = db
        self.script = folder / "litestream"
        self.script.write_text(f"#!{sys.executable}\n" + textwrap.dedent("""\
            import sqlite3, sys
            conn = sqlite3.connect(sys.argv[2])
            conn.execute("SELECT COUNT(*) FROM sessions").fetchall()
            print("ready", flush=True)
            sys.stdin.read()
            """))
        self.script.chmod(0o755)

    def __enter__(self):
        self.proc = subprocess.Popen([str(self.script), "replicate", str(self.db)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *exc):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def sparse(hermes_home):
    """A store in $HERMES_HOME where a prune frees well over 25 % of the pages."""
    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:
        for n in range(60):
            b.session(f"old{n}", age=200, messages=30)
        b.session("young", age=1, messages=5)
    return db


def test_litestream_process_is_found_as_the_replicator(sparse, tmp_path):
    with Litestream(sparse, tmp_path) as ls:
        holders = find_holders(sparse)
        mine = [h for h in holders.holders if h.pid == ls.proc.pid]
        assert mine and mine[0].name == "litestream"


def test_optimize_refused_in_place_with_litestream_holding_the_store(sparse, tmp_path):
    before = file_hash(sparse)
    with Litestream(sparse, tmp_path) as ls:
        result = run_subprocess("optimize", "--db", sparse)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1
    assert f"replicated by Litestream (pid {ls.proc.pid}" in line and "optimize --into PATH" in line
    assert file_hash(sparse) == before


def test_sweep_holds_back_vacuum_naming_the_replicator(sparse, tmp_path):
    with open_store(sparse) as store:
        execute_prune(store, plan_prune(store, None))
        with Litestream(sparse, tmp_path):
            decision = decide_vacuum(store, deleted=60, enabled=True, min_interval_days=30, now=1e10,
                                     holders=find_holders, disk_usage=PLENTY)
    assert not decision.run and "replicated by Litestream" in decision.reason and "--into" in decision.reason


def test_full_sweep_prunes_but_does_not_vacuum_under_litestream(sparse, hermes_home, tmp_path):
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    with Litestream(sparse, tmp_path):
        r = run_sweep(sparse, load_config(), disk_usage=PLENTY)
    assert r["swept"] and len(r["pruned_ids"]) == 60
    assert not r["vacuumed"] and "replicated by Litestream" in r["vacuum_reason"]


def test_litestream_folder_beside_the_store_refuses(sparse):
    (sparse.parent / ".state.db-litestream").mkdir()
    before = file_hash(sparse)
    result = run_subprocess("optimize", "--db", sparse)
    assert result.returncode == 1 and ".state.db-litestream exists" in result.stderr
    assert file_hash(sparse) == before


def test_config_setting_refuses(sparse, hermes_home):
    (hermes_home / "config.yaml").write_text("hermes_maint:\n  replicated: true\n")
    result = run_subprocess("optimize", "--db", sparse, env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 1 and "hermes_maint.replicated" in result.stderr


def test_optimize_into_writes_a_verified_compacted_copy_under_litestream(sparse, tmp_path, cli):
    with open_store(sparse) as store:
        execute_prune(store, plan_prune(store, None))
    out = tmp_path / "compact.db"
    with Litestream(sparse, tmp_path):
        before = file_hash(sparse)
        r = cli.json("optimize", "--db", sparse, "--into", out)
        assert file_hash(sparse) == before  # the live store was only read
    assert r["into"] == str(out) and r["bytes_after"] < r["bytes_before"] / 2
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and header_journal_mode(out) == "wal"
    assert query(out, "PRAGMA integrity_check") == [("ok",)]
    assert query(out, "SELECT id FROM sessions") == [("young",)] and r["sessions"] == 1
    assert query(out, "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'topic1'")[0][0] > 0
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".partial") or ".tmp-" in p]  # no temporary file


@pytest.mark.parametrize("make", ["file", "symlink", "missing_dir"])
def test_optimize_into_never_overwrites(sparse, tmp_path, make):
    target = tmp_path / "out.db"
    if make == "file":
        target.write_text("keep me")
    elif make == "symlink":
        target.symlink_to(tmp_path / "elsewhere.db")
    else:
        target = tmp_path / "nope" / "out.db"
    result = run_subprocess("optimize", "--db", sparse, "--into", target)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1 and "--into" in result.stderr
    if make == "file":
        assert target.read_text() == "keep me"
    assert not (tmp_path / "elsewhere.db").exists()


@pytest.mark.parametrize("suffix", ["-journal", ".hermes-maint.lock"])
def test_optimize_into_never_takes_a_name_the_store_keeps_beside_it(sparse, suffix):
    """Hostile try 3, F4 (optimize): the copy was written at the store's -journal name (the next open dropped
    it) or at our run lock's name (the next run truncated it)."""
    target = sparse.parent / f"{sparse.name}{suffix}"
    result = run_subprocess("optimize", "--db", sparse, "--into", target)
    assert result.returncode == 2 and "--into" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not target.exists()


def test_compacted_copy_swaps_in_and_hermes_opens_it(sparse, tmp_path, cli):
    out = tmp_path / "compact.db"
    cli.json("optimize", "--db", sparse, "--into", out)
    os.replace(out, sparse)
    for suffix in ("-wal", "-shm"):
        (sparse.parent / f"state.db{suffix}").unlink(missing_ok=True)
    from hermes_state import SessionDB

    db = SessionDB(sparse)
    try:
        assert db.get_session("young") is not None
    finally:
        db.close()
    assert sqlite3.connect(sparse).execute("PRAGMA journal_mode").fetchone() == ("wal",)


def _hot_journal(db) -> bytes:
    """A hot rollback journal that, rolled back over any file, makes it *db* (a planted one, as a local user
    can write beside our temporary name in a shared folder)."""
    import struct

    src = db.read_bytes()
    ps = struct.unpack(">H", src[16:18])[0]
    n, nonce, sector = len(src) // ps, 0x12345678, 512
    out = bytearray(bytes.fromhex("d9d505f920a163d7") + struct.pack(">IIIII", n, nonce, n, sector, ps))
    out += b"\0" * (sector - len(out))
    for p in range(1, n + 1):
        data, ck, i = src[(p - 1) * ps: p * ps], nonce, ps - 200
        while i > 0:
            ck, i = (ck + data[i]) & 0xffffffff, i - 200
        out += struct.pack(">I", p) + data + struct.pack(">I", ck)
    return bytes(out)


def planted_journal(tmp_path) -> bytes:
    """The hot journal another user would plant: rolled back over any file, it makes it their database (one
    session, MALLORY_INJECTED)."""
    theirs = tmp_path / "theirs.db"
    with StoreBuilder(theirs) as b:
        b.session("MALLORY_INJECTED", age=1)
    conn = sqlite3.connect(theirs)
    conn.execute("PRAGMA journal_mode=delete")
    conn.close()
    return _hot_journal(theirs)


def test_optimize_into_never_rolls_a_planted_journal_into_its_copy(sparse, tmp_path, cli, monkeypatch):
    """Hostile try 4, G8: after VACUUM INTO, the copy was opened read-write by name to set its journal mode and
    verify it; a -journal another user planted beside our temporary name was rolled back into it, and the
    "verified" copy handed to the operator was their database. The copy is now read back exactly as written."""
    journal = planted_journal(tmp_path)
    share = tmp_path / "share"
    share.mkdir()
    real_lstat = os.lstat

    def lstat(path, *args, **kwargs):  # the moment VACUUM INTO has written our temporary file
        name = os.path.basename(str(path))
        if not args and not kwargs and name.endswith(".partial") and not os.path.exists(f"{path}-journal"):
            with open(f"{path}-journal", "wb") as fh:
                fh.write(journal)
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    out = share / "c.db"
    r = cli.json("optimize", "--db", sparse, "--into", out)
    monkeypatch.undo()
    assert r["sessions"] == query(sparse, "SELECT COUNT(*) FROM sessions")[0][0]
    assert query(out, "SELECT id FROM sessions WHERE id = 'MALLORY_INJECTED'") == []
    assert query(out, "SELECT COUNT(*) FROM sessions") == query(sparse, "SELECT COUNT(*) FROM sessions")
    assert header_journal_mode(out) == "wal" and query(out, "PRAGMA integrity_check") == [("ok",)]


@pytest.mark.parametrize("mode", [0o1777, 0o777])
def test_optimize_into_a_folder_others_may_add_names_to_is_refused(sparse, tmp_path, cli, mode):
    """Hostile try 9, L4/L5: in a shared folder another user watched for the copy's temporary name and put a FIFO
    (or any file) at its -journal or -wal: SQLite's open of the copy hung past SIGTERM, or the clean-up of those
    names failed after the copy was linked. Like a store's own folder, such a folder is refused before anything
    is written."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    result = cli("optimize", "--db", sparse, "--into", shared / "copy.db")
    assert result.exit_code == 1 and f"{shared}: lets every user create files in it" in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and os.listdir(shared) == []
