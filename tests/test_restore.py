"""restore: what it refuses before it writes (the shared write preflight, the snapshot's schema, special files)."""

import json
import os
import sqlite3

from tests.conftest import file_hash, run_subprocess
from tests.storegen import StoreBuilder


def _store(path, layout="v22", n=4):
    with StoreBuilder(path, layout=layout) as b:
        for i in range(n):
            b.session(f"s{i}", age=10 + i, messages=3)
    return path


def _snapshot(home):
    result = run_subprocess("backup", "--json", env={"HERMES_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["snapshot"]["path"]


def restore(home, *args, expect=0):
    result = run_subprocess("restore", *map(str, args), "--json", env={"HERMES_HOME": str(home)}, timeout=60)
    assert result.returncode == expect, result.stderr
    return result


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


def test_restore_dry_run_beside_a_fifo_named_like_the_sidecar(hermes_home):
    """Finding 10: a FIFO at SNAP.json hung `restore SNAP --dry-run` on the sidecar read."""
    _store(hermes_home / "state.db")
    snap = _snapshot(hermes_home)
    os.unlink(snap + ".json")
    os.mkfifo(snap + ".json")
    dry = restore(hermes_home, snap, "--dry-run")
    assert json.loads(dry.stdout)["dry_run"] is True
