"""SIGKILL anywhere: the store stays whole, no lineage is half deleted, and a re-run finishes the job.

Each command runs as a real process on a fresh store and is killed at named points
(``HERMES_MAINT_CRASH_AT``: the n-th transaction begun, about to commit, committed, a file
written but not yet renamed, VACUUM starting, the journal switch) and at seeded random delays.
"""

import json
import os
import re
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, query, session_ids
from tests.storegen import StoreBuilder

POINTS = [f"{p}:{n}" for p in ("tx_before_commit", "tx_committed") for n in (1, 2, 3, 5, 8)]
TX_POINTS = POINTS + ["tx_begun:1", "tx_begun:4"]


def families(n=30):
    """Builds n families: a 2-segment compression chain with a delegate child, all old."""
    out = []
    for i in range(n):
        out.append({f"f{i}_a", f"f{i}_b", f"f{i}_sub"})
    return out


def make_store(path: Path, n=30, layout="v22"):
    with StoreBuilder(path, layout=layout) as b:
        for i in range(n):
            b.session(f"f{i}_a", age=300, end_reason="compression", messages=6)
            b.session(f"f{i}_b", age=200, parent=f"f{i}_a", messages=6)
            b.session(f"f{i}_sub", source="subagent", age=200, parent=f"f{i}_b",
                      model_config={"_delegate_from": f"f{i}_b"}, messages=4)
        b.session("keep_recent", age=1, messages=3)
        b.session("keep_open", age=300, ended=False, messages=3, source="telegram")
    return path


def make_family_store(path: Path, n=3):
    """Delegate families without compression: a verified delete takes a session with its children."""
    with StoreBuilder(path) as b:
        for i in range(n):
            b.session(f"f{i}_b", age=200, messages=6)
            b.session(f"f{i}_sub", source="subagent", age=200, parent=f"f{i}_b",
                      model_config={"_delegate_from": f"f{i}_b"}, messages=4)
        b.session("keep_recent", age=1, messages=3)
    return path


# Transactions of about a microsecond: a chunk of work is then one unit (a lineage, a session), whatever
# rate the batcher measures (it would need a million units a second for two), so a command makes one
# transaction per unit on any machine and the n-th transaction below is reached. (At 1 ms a machine twice
# as fast as this one archived 40 lineages in three transactions, and tx_committed:4 was never reached.)
BATCH_MS = "0.001"


def run(args, crash=None, env=None, timeout=120):
    full = dict(os.environ, HERMES_MAINT_BATCH_MS=BATCH_MS, **(env or {}))
    if crash:
        full["HERMES_MAINT_CRASH_AT"] = crash
    return subprocess.run([sys.executable, "-m", "maint", *map(str, args)], cwd=REPO, env=full,
                          capture_output=True, text=True, timeout=timeout)


def _start(args, env=None):
    """The command as a process at a lower priority (nice 10), so that on a loaded machine the test, looking
    for its open store every half millisecond, is not kept waiting behind it."""
    full = dict(os.environ, HERMES_MAINT_BATCH_MS=BATCH_MS, **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "maint", *map(str, args)], cwd=REPO, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=lambda: os.nice(10))


def _wait_until_open(proc, store: Path) -> bool:
    """Poll the process's open files until it has *store* open (its real work has begun): True; False when it
    finished (exit 0) between two looks, as on a loaded machine it can."""
    target = str(Path(store).resolve())
    while proc.poll() is None:
        try:
            fds = os.listdir(f"/proc/{proc.pid}/fd")
            if any(os.readlink(f"/proc/{proc.pid}/fd/{fd}") == target for fd in fds):
                return True
        except OSError:
            pass
        time.sleep(0.0005)
    assert proc.returncode == 0, f"{args_of(proc)} failed (code {proc.returncode}): {proc.stderr.read()!r}"
    return False


def args_of(proc) -> str:
    return " ".join(map(str, proc.args[3:]))


def work_seconds(args, store: Path, make, env=None) -> float:
    """How long *args* works once it has opened *store* (on a throw-away store built by *make*)."""
    for _ in range(10):
        make()
        proc = _start(args, env)
        if _wait_until_open(proc, store):
            opened = time.monotonic()
            assert proc.wait(timeout=120) == 0, proc.stderr.read()
            return time.monotonic() - opened
    raise AssertionError(f"{args_of(proc)} finished between two looks at its open files, ten times")


def run_killed_during(args, store: Path, seed: int, work: float, fresh, env=None):
    """SIGKILL the command at a seeded moment of its work on *store*, and insist it was killed, not finished.

    *fresh* rebuilds the store from scratch. A run that finishes before its kill (the machine was
    faster than the timing run, or the timing run was slowed by load) is repeated on a fresh store with half
    the delay, and at last with none: killed as soon as it has the store open. A run that finished before
    the store was even seen open is started again as it was.
    """
    delay = random.Random(seed).uniform(0.0, 0.6) * work
    for attempt in range(10):
        if attempt == 9:
            delay = 0.0
        fresh()
        proc = _start(args, env)
        if not _wait_until_open(proc, store):
            continue
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        if proc.returncode == -signal.SIGKILL:
            return proc
        delay /= 2
    raise AssertionError(f"{args_of(proc)} finished before every kill: {proc.stderr.read()!r}")


def rebuilt(path: Path, build):
    """A *fresh* callable: remove *path* (a store and its -wal/-shm, or a folder) and build it again."""
    import shutil

    def fresh():
        if path.is_dir():
            shutil.rmtree(path)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        build(path)

    return fresh


def assert_whole(db: Path):
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        for table in ("messages_fts", "messages_fts_trigram"):
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES('integrity-check', 1)")
        orphans = conn.execute("SELECT COUNT(*) FROM messages m WHERE NOT EXISTS "
                               "(SELECT 1 FROM sessions s WHERE s.id = m.session_id)").fetchone()
        assert orphans == (0,)
    finally:
        conn.close()


def assert_families_whole(db: Path, fams):
    present = session_ids(db)
    for fam in fams:
        assert fam <= present or not (fam & present), f"half-deleted family {sorted(fam)}"


def assert_chains_whole(db: Path, fams):
    """Prune's unit is a compression chain: its delegate child is judged on its own (upstream's family
    rule) and, kept while its parent goes, loses its parent link in the same transaction, never dangles."""
    assert_families_whole(db, [{sid for sid in fam if not sid.endswith("_sub")} for fam in fams])
    dangling = query(db, "SELECT id FROM sessions s WHERE parent_session_id IS NOT NULL AND NOT EXISTS "
                         "(SELECT 1 FROM sessions p WHERE p.id = s.parent_session_id)")
    assert dangling == []


@pytest.mark.slow
@pytest.mark.parametrize("point", TX_POINTS)
def test_prune_killed(tmp_path, point):
    db = make_store(tmp_path / "state.db")
    result = run(["prune", "--db", db, "--yes", "--json"], crash=point)
    assert result.returncode == -9, result.stderr
    assert_whole(db)
    assert_chains_whole(db, families())
    assert {"keep_recent", "keep_open"} <= session_ids(db)
    again = run(["prune", "--db", db, "--yes", "--json"])
    assert again.returncode == 0, again.stderr
    assert session_ids(db) == {"keep_recent", "keep_open"}
    assert_whole(db)


ARCHIVE_POINTS = [f"{p}:{n}" for p in ("tx_begun", "tx_before_commit", "tx_committed") for n in (1, 2, 3)] + [
    "tx_committed:4"]


@pytest.mark.slow
@pytest.mark.parametrize("point", ARCHIVE_POINTS)
def test_archive_killed(tmp_path, point):
    db = make_store(tmp_path / "state.db", n=40)
    result = run(["archive", "--db", db, "--older-than", "30", "--yes", "--json"], crash=point)
    assert result.returncode == -9, result.stderr
    assert_whole(db)
    for fam in families(40):  # a compression chain is archived whole or not at all
        flags = {r[1] for r in query(db, f"SELECT id, archived FROM sessions WHERE id IN "
                                         f"({','.join('?' * len(fam))}) AND source != 'subagent'", *sorted(fam))}
        assert len(flags) == 1
    again = run(["archive", "--db", db, "--older-than", "30", "--yes", "--json"])
    assert again.returncode == 0
    assert query(db, "SELECT COUNT(*) FROM sessions WHERE archived = 0 AND id LIKE 'f%'") == [(0,)]


@pytest.mark.slow
@pytest.mark.parametrize("point", TX_POINTS[:8] + ["vacuum:1", "tx_committed:12"])
def test_sweep_with_vacuum_killed(tmp_path, point):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    db = make_store(home / "state.db", n=40)
    env = {"HERMES_HOME": str(home)}
    result = run(["sweep", "--json"], crash=point, env=env)
    assert result.returncode == -9, result.stderr
    assert_whole(db)
    assert_chains_whole(db, families(40))
    again = run(["sweep", "--force", "--json"], env=env)
    assert again.returncode == 0, again.stderr
    assert session_ids(db) == {"keep_recent", "keep_open"}
    assert_whole(db)


def _optimize_store(db: Path) -> Path:
    make_store(db, n=150)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM messages WHERE session_id LIKE 'f1%' OR session_id LIKE 'f2%'")
    conn.commit()
    conn.close()
    return db


@pytest.fixture(scope="module")
def optimize_seconds(tmp_path_factory):
    db = tmp_path_factory.mktemp("timing") / "state.db"
    return work_seconds(["optimize", "--db", db], db, lambda: _optimize_store(db))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
def test_optimize_killed_at_random(tmp_path, seed, optimize_seconds):
    db = _optimize_store(tmp_path / "reference.db")
    before = query(db, "SELECT COUNT(*), SUM(LENGTH(content)) FROM messages")[0]
    db = tmp_path / "state.db"
    run_killed_during(["optimize", "--db", db], db, seed, optimize_seconds, rebuilt(db, _optimize_store))
    assert_whole(db)
    assert query(db, "SELECT COUNT(*), SUM(LENGTH(content)) FROM messages") == [before]
    assert run(["optimize", "--db", db]).returncode == 0
    assert_whole(db)


@pytest.fixture(scope="module")
def export_seconds(tmp_path_factory):
    folder = tmp_path_factory.mktemp("timing")
    db = folder / "state.db"
    return work_seconds(["export", folder / "bk", "--db", db, "--session-id", "f1_b", "--delete-after-verified",
                         "--yes", "--json"], db, lambda: make_family_store(db))


@pytest.mark.slow
@pytest.mark.parametrize("point", ["file_written:1", "file_written:2", "tx_begun:1", "tx_before_commit:1",
                                   "tx_committed:1"] + [f"delay:{seed}" for seed in range(5)])
def test_export_delete_killed(tmp_path, point, export_seconds):
    db = make_family_store(tmp_path / "state.db")
    out = tmp_path / "bk"
    args = ["export", out, "--db", db, "--session-id", "f1_b", "--delete-after-verified", "--yes", "--json"]
    if point.startswith("delay:"):
        run_killed_during(args, db, int(point.split(":")[1]), export_seconds,
                          rebuilt(db, make_family_store))
    else:
        result = run(args, crash=point)
        assert result.returncode == -9, result.stderr
    assert_whole(db)
    files = {p.name for p in out.iterdir()} if out.exists() else set()
    for name in files:  # a kill may leave our private temporary file; a final name is always complete
        if name.startswith("."):
            assert re.fullmatch(r"\.hermes_session_f1_(b|sub)\.jsonl\.[0-9a-f]{16}\.partial", name), name
        else:
            assert name in {"hermes_session_f1_b.jsonl", "hermes_session_f1_sub.jsonl"}, name
            json.loads((out / name).read_text())
    gone = {"f1_b", "f1_sub"} - session_ids(db)
    assert not gone or gone == {"f1_b", "f1_sub"}
    for sid in gone:  # nothing is deleted whose export was not written in full
        assert (out / f"hermes_session_{sid}.jsonl").exists()
        json.loads((out / f"hermes_session_{sid}.jsonl").read_text())
    again = run(args)
    if gone:
        assert again.returncode == 1  # already deleted: nothing left to export
    else:
        assert again.returncode == 0, again.stderr
        assert not {"f1_b", "f1_sub"} & session_ids(db)
        assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # what the kill left is cleared


@pytest.fixture(scope="module")
def journal_seconds(tmp_path_factory):
    db = tmp_path_factory.mktemp("timing") / "state.db"
    return work_seconds(["set-journal-mode", "delete", "--db", db], db, lambda: make_store(db, n=20))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
def test_set_journal_mode_killed(tmp_path, seed, journal_seconds):
    db = make_store(tmp_path / "state.db", n=20)
    count = query(db, "SELECT COUNT(*) FROM messages")
    if seed == 0:
        assert run(["set-journal-mode", "delete", "--db", db], crash="journal_switch:1").returncode == -9
    else:
        run_killed_during(["set-journal-mode", "delete", "--db", db], db, seed, journal_seconds,
                          rebuilt(db, lambda p: make_store(p, n=20)))
    assert_whole(db)
    assert query(db, "SELECT COUNT(*) FROM messages") == count
    assert run(["set-journal-mode", "delete", "--db", db]).returncode == 0
    with open(db, "rb") as fh:
        fh.seek(18)
        assert fh.read(2) == b"\x01\x01"


def _profiles_home(home: Path) -> Path:
    with StoreBuilder(home / "state.db") as b:
        for i in range(6):
            b.session(f"c{i}", session_key=f"agent:coder:telegram:dm:{i}", messages=3, age=1)
    with StoreBuilder(home / "profiles" / "coder" / "state.db") as b:
        b.session("own", age=1)
    return home


@pytest.fixture(scope="module")
def profiles_seconds(tmp_path_factory):
    home = tmp_path_factory.mktemp("timing") / "home"
    return work_seconds(["repair-profiles", "--apply", "--yes", "--json"], home / "state.db",
                        lambda: _profiles_home(home), env={"HERMES_HOME": str(home)})


@pytest.mark.slow
@pytest.mark.parametrize("point", [f"{p}:{n}" for p in ("tx_begun", "tx_before_commit", "tx_committed")
                                   for n in (1, 2)] + [f"delay:{seed}" for seed in range(4)])
def test_repair_profiles_killed(tmp_path, point, profiles_seconds):
    home = _profiles_home(tmp_path / "home")
    env = {"HERMES_HOME": str(home)}
    args = ["repair-profiles", "--apply", "--yes", "--json"]
    if point.startswith("delay:"):
        run_killed_during(args, home / "state.db", int(point.split(":")[1]), profiles_seconds,
                          rebuilt(home, _profiles_home), env=env)
    else:
        assert run(args, crash=point, env=env).returncode == -9
    default, coder = home / "state.db", home / "profiles" / "coder" / "state.db"
    assert_whole(default)
    assert_whole(coder)
    union = session_ids(default) | session_ids(coder)
    assert {f"c{i}" for i in range(6)} <= union  # a copy may be duplicated, never lost
    again = run(["repair-profiles", "--apply", "--yes", "--json"], env=env)
    assert again.returncode == 0, again.stderr
    assert not session_ids(default) and session_ids(coder) == {"own"} | {f"c{i}" for i in range(6)}
    for i in range(6):
        assert query(coder, "SELECT COUNT(*) FROM messages WHERE session_id = ?", f"c{i}") == [(3,)]


def _strays(db: Path, ids):
    conn = sqlite3.connect(db)
    for sid in ids:
        for i in range(3):
            conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', ?, ?)",
                         (sid, f"stranded {sid} {i}", 1.7e9 + i))
    conn.commit()
    conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("point", [f"{p}:{n}" for p in ("tx_begun", "tx_before_commit", "tx_committed")
                                   for n in (1, 3)])
def test_recover_killed(tmp_path, point):
    db = make_store(tmp_path / "state.db", n=2)
    ids = [f"lost_{i}" for i in range(5)]
    _strays(db, ids)
    assert run(["recover", "--db", db, "--apply", "--yes"], crash=point).returncode == -9
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    made = {r[0] for r in conn.execute("SELECT id FROM sessions WHERE source = 'recovered'")}
    conn.close()
    assert made <= set(ids) and len(made) == int(point.split(":")[1]) - (not point.startswith("tx_committed"))
    again = run(["recover", "--db", db, "--apply", "--yes", "--json"])
    assert again.returncode == 0, again.stderr
    assert sorted(json.loads(again.stdout)["recovered"]) == sorted(set(ids) - made)
    assert_whole(db)  # no message without its session row any more


@pytest.fixture(scope="module")
def into_seconds(tmp_path_factory):
    folder = tmp_path_factory.mktemp("timing")
    db, out = folder / "state.db", folder / "copy.db"
    return work_seconds(["optimize", "--db", db, "--into", out], db, lambda: _optimize_store(db))


@pytest.mark.slow
@pytest.mark.parametrize("point", ["vacuum_into:1", "seed:0", "seed:1", "seed:2", "seed:3"])
def test_optimize_into_killed(tmp_path, point, into_seconds):
    db, out = tmp_path / "state.db", tmp_path / "copy.db"
    before = query(_optimize_store(tmp_path / "reference.db"), "SELECT COUNT(*), SUM(LENGTH(content)) FROM messages")
    args = ["optimize", "--db", db, "--into", out]
    build = rebuilt(db, _optimize_store)

    def fresh():
        for p in tmp_path.iterdir():
            if p.name.startswith((".copy.db.", "copy.db")):
                p.unlink()
        build()

    if point.startswith("seed:"):
        run_killed_during(args, db, int(point.split(":")[1]), into_seconds, fresh)
    else:
        fresh()
        assert run(args, crash=point).returncode == -9
        assert [p for p in os.listdir(tmp_path) if p.startswith(".copy.db.")]  # killed with its temporary copy
    assert_whole(db)
    assert query(db, "SELECT COUNT(*), SUM(LENGTH(content)) FROM messages") == before
    if out.exists():  # killed after the link: what carries the final name is complete and verified
        assert query(out, "SELECT COUNT(*), SUM(LENGTH(content)) FROM messages") == before
        assert query(out, "PRAGMA integrity_check") == [("ok",)]
        out.unlink()
    again = run(args + ["--json"])
    assert again.returncode == 0, again.stderr
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".copy.db.")]  # the killed run's copy is gone
    assert query(out, "PRAGMA integrity_check") == [("ok",)]
    assert query(out, "SELECT COUNT(*), SUM(LENGTH(content)) FROM messages") == before


# -- backup, restore, import -------------------------------------------------------------------

def content(db: Path):
    """Every session id and message row: which store (old or new) a file holds."""
    return (query(db, "SELECT id FROM sessions ORDER BY id"),
            query(db, "SELECT id, session_id, role, content FROM messages ORDER BY id"))


def assert_snapshots_sound(folder: Path):
    """Whatever a kill left, every file under a snapshot's final name is one the sidecar vouches for."""
    from maint.ops.backup import list_snapshots

    for snap in list_snapshots(folder):
        assert snap.verified, (snap.path, snap.reason)
        assert query(snap.path, "PRAGMA integrity_check") == [("ok",)]


def _backup_home(home: Path) -> Path:
    from maint.ops.backup import FIRST_STEP_PAGES

    make_store(home / "state.db", n=200)
    # More pages than a first step (64) and a second (at most 4 times that) copy: backup_step:3 is reached
    # whatever the speed.
    assert query(home / "state.db", "PRAGMA page_count")[0][0] > FIRST_STEP_PAGES * (1 + 4)
    return home


@pytest.fixture(scope="module")
def backup_seconds(tmp_path_factory):
    home = tmp_path_factory.mktemp("timing") / "home"
    return work_seconds(["backup", "--json"], home / "state.db", lambda: _backup_home(home),
                        env={"HERMES_HOME": str(home)})


@pytest.mark.slow
@pytest.mark.parametrize("point", ["backup_step:1", "backup_step:3", "backup_written:1", "sidecar_partial:1",
                                   "backup_sidecar:1"]
                         + [f"delay:{seed}" for seed in range(4)])
def test_backup_killed(tmp_path, point, backup_seconds):
    home = _backup_home(tmp_path / "home")
    db = home / "state.db"
    env = {"HERMES_HOME": str(home)}
    args = ["backup", "--json"]
    if point.startswith("delay:"):
        run_killed_during(args, db, int(point.split(":")[1]), backup_seconds, rebuilt(home, _backup_home), env=env)
    else:
        assert run(args, crash=point, env=env).returncode == -9
    before = content(db)
    folder = home / "state-snapshots"
    assert_snapshots_sound(folder)
    again = run(args, env=env)
    assert again.returncode == 0, again.stderr
    assert content(db) == before  # the copy only reads the store
    snap = json.loads(again.stdout)["snapshot"]
    assert (snap["sessions"], snap["messages"]) == tuple(query(db, "SELECT (SELECT COUNT(*) FROM sessions), "
                                                                    "(SELECT COUNT(*) FROM messages)")[0])
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".partial")]
    assert all((folder / (p.name[:-5])).exists() for p in folder.iterdir() if p.name.endswith(".db.json"))
    assert_snapshots_sound(folder)


def _restore_home(home: Path) -> Path:
    """A store, a snapshot of it (home/snap.db), then two families deleted from the store."""
    import shutil

    from maint.ops.backup import FIRST_STEP_PAGES

    db = make_store(home / "state.db", n=60)
    assert query(db, "PRAGMA page_count")[0][0] > FIRST_STEP_PAGES  # the safety copy takes a second step
    made = run(["backup", "--json"], env={"HERMES_HOME": str(home)})
    assert made.returncode == 0, made.stderr
    shutil.copy(json.loads(made.stdout)["snapshot"]["path"], home / "snap.db")
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM messages WHERE session_id LIKE 'f1%' OR session_id LIKE 'f2%'")
    conn.execute("DELETE FROM sessions WHERE id LIKE 'f1%' OR id LIKE 'f2%'")
    conn.commit()
    conn.close()
    return home


@pytest.fixture(scope="module")
def restore_seconds(tmp_path_factory):
    home = tmp_path_factory.mktemp("timing") / "home"
    return work_seconds(["restore", home / "snap.db", "--yes", "--json"], home / "state.db",
                        lambda: _restore_home(home), env={"HERMES_HOME": str(home)})


@pytest.mark.slow
@pytest.mark.parametrize("point", ["backup_step:2", "sidecar_partial:1", "restore_safety_taken:1", "restore_copy:1",
                                   "restore_copied:1", "restore_checkpointed:1"]
                         + [f"delay:{seed}" for seed in range(5)])
def test_restore_killed(tmp_path, point, restore_seconds):
    old = content(_restore_home(tmp_path / "reference") / "state.db")  # the store as the kill may leave it
    home = _restore_home(tmp_path / "home")
    db = home / "state.db"
    env = {"HERMES_HOME": str(home)}
    args = ["restore", home / "snap.db", "--yes", "--json"]
    if point.startswith("delay:"):
        run_killed_during(args, db, int(point.split(":")[1]), restore_seconds, rebuilt(home, _restore_home),
                          env=env)
    else:
        assert run(args, crash=point, env=env).returncode == -9
    new = content(home / "snap.db")
    inode = db.stat().st_ino
    assert_whole(db)
    assert content(db) in (old, new)
    again = run(args, env=env)
    assert again.returncode == 0, again.stderr
    assert content(db) == new and db.stat().st_ino == inode
    assert_whole(db)
    assert_snapshots_sound(home / "state-snapshots")


def _import_store(db: Path) -> Path:
    """A store whose 30 families were exported to <db>.jsonl, then deleted."""
    make_store(db, n=30)
    exported = run(["export", "-", "--db", db])
    assert exported.returncode == 0, exported.stderr
    Path(f"{db}.jsonl").write_text(exported.stdout)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM messages WHERE session_id LIKE 'f%'")
    conn.execute("DELETE FROM sessions WHERE id LIKE 'f%'")
    conn.commit()
    conn.close()
    return db


@pytest.fixture(scope="module")
def import_seconds(tmp_path_factory):
    db = tmp_path_factory.mktemp("timing") / "state.db"
    return work_seconds(["import", f"{db}.jsonl", "--db", db, "--yes", "--json"], db, lambda: _import_store(db))


@pytest.mark.slow
@pytest.mark.parametrize("point", TX_POINTS + [f"delay:{seed}" for seed in range(4)])
def test_import_killed(tmp_path, point, import_seconds):
    db = _import_store(tmp_path / "state.db")
    args = ["import", f"{db}.jsonl", "--db", db, "--yes", "--json"]
    if point.startswith("delay:"):
        run_killed_during(args, db, int(point.split(":")[1]), import_seconds, rebuilt(db, _import_store))
    else:
        assert run(args, crash=point).returncode == -9
    assert_whole(db)
    assert_families_whole(db, families(30))  # a lineage with its subagent run: whole or absent
    again = run(args)
    assert again.returncode == 0, again.stderr
    assert {"keep_recent", "keep_open"} | set().union(*families(30)) == session_ids(db)
    assert_whole(db)
    exported = run(["export", "-", "--db", db]).stdout
    assert exported.splitlines() == Path(f"{db}.jsonl").read_text().splitlines()
