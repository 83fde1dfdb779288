"""backup through the real CLI: verified snapshots, rotation, paced steps, refusals (restore: tests/test_restore.py)."""

import fcntl
import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from maint.errors import MaintError
from maint.ops.backup import FIRST_STEP_PAGES, MAX_RESTARTS, list_snapshots, take_snapshot
from tests.conftest import query, run_subprocess
from tests.live import PATIENT, LiveHermes
from tests.storegen import StoreBuilder, bulk_store

Usage = namedtuple("Usage", "total used free")
NAME = re.compile(r"^state-default-\d{8}T\d{6}Z\.db$")


def _store(path, layout="v22", n=6):
    with StoreBuilder(path, layout=layout) as b:
        for i in range(n):
            b.session(f"s{i}", age=10 + i, messages=4)
        b.session("old", age=200, messages=3)
    return path


def backup(home, *args, expect=0, env=None):
    result = run_subprocess("backup", *args, "--json", env={"HERMES_HOME": str(home), **(env or {})})
    assert result.returncode == expect, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()] if expect == 0 else result


def counts(db):
    return query(db, "SELECT (SELECT COUNT(*) FROM sessions), (SELECT COUNT(*) FROM messages)")[0]


def rows(db):
    """Everything but our own bookkeeping (state_meta's hermes_maint.* keys)."""
    return (query(db, "SELECT * FROM sessions ORDER BY id"), query(db, "SELECT * FROM messages ORDER BY id"),
            query(db, "SELECT * FROM state_meta WHERE key NOT LIKE 'hermes_maint.%' ORDER BY key"))


def test_backup_makes_one_verified_private_file(hermes_home, layout):
    db = _store(hermes_home / "state.db", layout)
    before = rows(db)
    (report,) = backup(hermes_home)
    snap = Path(report["snapshot"]["path"])
    folder = hermes_home / "state-snapshots"
    assert snap.parent == folder and NAME.match(snap.name)  # profile and UTC time in the name
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(snap.stat().st_mode) == 0o600
    assert sorted(p.name for p in folder.iterdir()) == [snap.name, snap.name + ".json"]  # no -wal, -shm, partial
    assert snap.read_bytes()[18:20] == b"\x01\x01"  # opens as one self-contained file
    assert query(snap, "PRAGMA integrity_check") == [("ok",)] and counts(snap) == counts(db)
    assert (report["snapshot"]["sessions"], report["snapshot"]["messages"]) == counts(db)
    meta = json.loads((folder / (snap.name + ".json")).read_text())
    assert meta["quick_check"] == "ok" and meta["inode"] == snap.stat().st_ino and meta["store"] == str(db)
    assert rows(db) == before  # the copy only reads; afterwards the run goes into the run history
    assert query(db, "SELECT COUNT(*) FROM state_meta WHERE key LIKE 'hermes_maint.history.backup.%'") == [(1,)]


def test_backup_dest_profiles_and_dry_run(hermes_home, tmp_path):
    _store(hermes_home / "state.db")
    _store(hermes_home / "profiles" / "coder" / "state.db", n=2)
    dest = tmp_path / "bk"
    dry = backup(hermes_home, dest, "--all-profiles", "--dry-run")
    assert [r["dry_run"] for r in dry] == [True, True] and not dest.exists()
    reports = backup(hermes_home, dest, "--all-profiles")
    assert [r["profile"] for r in reports] == [None, "coder"]
    names = sorted(Path(r["snapshot"]["path"]).name for r in reports)
    assert names[0].startswith("state-coder-") and names[1].startswith("state-default-")
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    assert counts(reports[1]["snapshot"]["path"]) == counts(hermes_home / "profiles" / "coder" / "state.db")


def test_keep_removes_only_our_verified_snapshots_of_this_store(hermes_home, tmp_path):
    db = _store(hermes_home / "state.db")
    other = _store(tmp_path / "elsewhere" / "kanban.db", n=1)
    folder = hermes_home / "state-snapshots"
    first = [Path(backup(hermes_home)[0]["snapshot"]["path"]) for _ in range(3)]
    theirs = Path(backup(hermes_home, "--db", other)[0]["snapshot"]["path"])
    foreign = folder / "state-default-20200101T000000Z.db"  # our pattern, not our file
    foreign.write_bytes(first[0].read_bytes())
    copied = folder / "state-default-20200102T000000Z.db"  # a copy with a copied sidecar: another inode
    copied.write_bytes(first[0].read_bytes())
    side = json.loads((folder / (first[0].name + ".json")).read_text())
    (folder / (copied.name + ".json")).write_text(json.dumps({**side, "file": copied.name}))
    (latest,) = backup(hermes_home, "--keep", "2")
    newest = Path(latest["snapshot"]["path"])
    assert sorted(latest["removed"]) == sorted(map(str, first[:2]))
    left = {p.name for p in folder.iterdir() if p.suffix == ".db"}
    assert left == {first[2].name, newest.name, theirs.name, foreign.name, copied.name}
    assert backup(hermes_home, "--keep", "1")[0]["removed"] == [str(first[2]), str(newest)]
    assert theirs.exists() and counts(db) == counts(Path(backup(hermes_home)[0]["snapshot"]["path"]))


def test_keep_counts_no_snapshot_another_user_could_have_written(hermes_home, tmp_path):
    """Hostile try 3, F6: in a shared backup folder, files planted with sidecars that claim to be this store's
    newest verified snapshots made --keep remove the owner's real ones. A snapshot or sidecar that someone
    else owns, or that others may write, is never counted nor removed (the ownership rule of config.yaml)."""
    _store(hermes_home / "state.db")
    folder = hermes_home / "state-snapshots"
    ours = [Path(backup(hermes_home)[0]["snapshot"]["path"]) for _ in range(2)]
    side = json.loads((folder / (ours[0].name + ".json")).read_text())
    planted = []
    for year in (2098, 2099):
        fake = folder / f"state-default-{year}0101T000000Z.db"
        fake.write_bytes(ours[0].read_bytes())
        st = fake.stat()
        (folder / (fake.name + ".json")).write_text(json.dumps(
            {**side, "file": fake.name, "inode": st.st_ino, "bytes": st.st_size, "created_ns": year * 10**16}))
        os.chmod(fake, 0o666)  # anyone may have written it
        planted.append(fake)
    (latest,) = backup(hermes_home, "--keep", "3")
    assert latest["removed"] == []
    assert all(p.exists() for p in [*ours, *planted])
    assert sorted(latest["unverified_kept"]) == sorted(map(str, planted))


def test_a_sidecar_with_fields_of_the_wrong_type_is_listed_not_counted(hermes_home):
    """Hostile try 3, F30: a sidecar whose created_ns was text stopped backup --keep with a TypeError traceback
    after the new snapshot was made."""
    _store(hermes_home / "state.db")
    folder = hermes_home / "state-snapshots"
    first = Path(backup(hermes_home)[0]["snapshot"]["path"])
    odd = folder / "state-default-20990101T000000Z.db"
    odd.write_bytes(first.read_bytes())
    side = json.loads((folder / (first.name + ".json")).read_text())
    (folder / (odd.name + ".json")).write_text(json.dumps(
        {**side, "file": odd.name, "inode": odd.stat().st_ino, "created_ns": "later"}))
    (latest,) = backup(hermes_home, "--keep", "1")
    assert latest["removed"] == [str(first)] and odd.exists()
    assert str(odd) in latest["unverified_kept"]


def test_keep_must_be_positive(hermes_home):
    _store(hermes_home / "state.db")
    result = backup(hermes_home, "--keep", "0", expect=2)
    assert "--keep" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (hermes_home / "state-snapshots").exists()


def test_compact_snapshot_is_smaller_and_verified(hermes_home):
    db = _store(hermes_home / "state.db", n=40)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM messages WHERE session_id IN ('s1', 's2', 's3', 's4', 's5', 's6', 's7', 's8')")
    conn.commit()
    conn.close()
    full = backup(hermes_home)[0]["snapshot"]
    small = backup(hermes_home, "--compact")[0]["snapshot"]
    assert small["method"] == "vacuum-into" and small["bytes"] < full["bytes"]
    assert (small["sessions"], small["messages"]) == counts(db)
    assert not [p for p in (hermes_home / "state-snapshots").iterdir() if "partial" in p.name]


def test_disk_preflight_names_both_figures_and_writes_nothing(tmp_path):
    db = _store(tmp_path / "state.db")
    folder = tmp_path / "snaps"
    folder.mkdir()
    with pytest.raises(MaintError) as err:
        take_snapshot(db, folder, label="default", disk_usage=lambda p: Usage(10**9, 10**9 - 5000, 5000))
    assert "5000 bytes free" in str(err.value) and "need about" in str(err.value)
    assert list(folder.iterdir()) == []


def test_stale_partials_removed_running_ones_kept(hermes_home):
    _store(hermes_home / "state.db")
    folder = hermes_home / "state-snapshots"
    folder.mkdir(mode=0o700)
    dead = folder / ".state-default-20200101T000000Z.db.partial"
    dead.write_bytes(b"half")
    busy = folder / ".state-default-20200101T000001Z.db.partial"
    busy.write_bytes(b"half")
    orphan = folder / "state-default-20200101T000002Z.db.json"
    orphan.write_text(json.dumps({"made_by": "hermes-maint"}))
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'rb'); "
                               "fcntl.flock(f, fcntl.LOCK_EX); print('ready', flush=True); sys.stdin.read()",
                               str(busy)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        (report,) = backup(hermes_home)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert sorted(report["removed_partials"]) == [dead.name, orphan.name]
    assert busy.exists() and not dead.exists() and not orphan.exists()


def test_bad_dest(hermes_home, tmp_path):
    _store(hermes_home / "state.db")
    afile = tmp_path / "afile"
    afile.write_text("x")
    for dest in (afile, tmp_path / "no" / "such" / "dir"):
        result = backup(hermes_home, dest, expect=2)
        assert "DEST" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert afile.read_text() == "x" and not (tmp_path / "no").exists()


def fewest_backup_steps(pages: int) -> int:
    """The fewest steps copy_online can copy *pages* pages in, however fast the machine: FIRST_STEP_PAGES first,
    then each step at most 4 times the one before (the growth cap on the measured time per step)."""
    steps, step, copied = 1, FIRST_STEP_PAGES, FIRST_STEP_PAGES
    while copied < pages:
        step *= 4
        copied += step
        steps += 1
    return steps


def page_count(db) -> int:
    return query(db, "PRAGMA page_count")[0][0]


def test_rollback_journal_store_backs_up_in_paced_steps(hermes_home):
    db = hermes_home / "state.db"
    bulk_store(db, sessions=400, messages_per_session=6, content_bytes=300)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    least = fewest_backup_steps(page_count(db))
    assert least >= 4  # 64 + 256 + 1024 pages are not enough for this store
    (report,) = backup(hermes_home)
    snap = report["snapshot"]
    assert snap["source_journal_mode"] == "delete" and snap["steps"] >= least and snap["restarts"] == 0
    assert (snap["sessions"], snap["messages"]) == counts(db)


@pytest.mark.slow
def test_backup_beside_live_writers_loses_nothing(tmp_path):
    """Both backups of a WAL store, each in bounded steps, while Hermes writers append: no restart (the copy
    reads one snapshot), counts that match the copy, and no append failed or lost (writers with a patience no
    load uses up; their worst wait is bench/backup_bench.py's)."""
    db = tmp_path / "state.db"
    bulk_store(db, sessions=800, messages_per_session=10, content_bytes=600)
    least = fewest_backup_steps(page_count(db))  # the store only grows while the writers append
    assert least >= 5
    home = tmp_path / "home"
    home.mkdir()
    with LiveHermes(db, writers=2, interval=0.01, writer_env=PATIENT) as live:
        result = run_subprocess("backup", "--db", db, "--compact", "--json", env={"HERMES_HOME": str(home)})
        plain = run_subprocess("backup", "--db", db, "--json", env={"HERMES_HOME": str(home)})
        figures = live.finish()
    for r in (result, plain):
        assert r.returncode == 0, r.stderr
        snap = json.loads(r.stdout)["snapshot"]
        assert snap["restarts"] == 0 and snap["steps"] >= least
        assert query(snap["path"], "PRAGMA integrity_check") == [("ok",)]
        assert (snap["sessions"], snap["messages"]) == counts(snap["path"])
    assert all(w["failed"] == 0 and w["appended"] >= 1 for w in figures["writers"]), figures["errors"]
    assert all(figures["stored"][w["session_id"]] == w["appended"] for w in figures["writers"])


LOCKSTEP_WRITER = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
assert c.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
print("ready", flush=True)
for n, _ in enumerate(sys.stdin, 1):
    c.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES ('bulk_000001', 'user', 'x', 0)")
    print(n, flush=True)
"""


@pytest.mark.parametrize("every", [1, 2])
def test_rollback_store_changed_between_steps_is_refused_not_locked(tmp_path, monkeypatch, every):
    """A rollback-journal store another process commits to between the steps of the copy: refused after
    MAX_RESTARTS restarts, no file kept. The writer commits in lock-step with the copy (after every step or every
    second one: hostile try 15, S5, a commit after each step of a copy whose steps keep their size restarted it
    unseen, as the pages left stayed the same: a step that leaves no fewer is a restart), and each of its commits
    goes through at once, as the copy holds no lock between steps."""
    db = tmp_path / "state.db"
    bulk_store(db, sessions=150, messages_per_session=6, content_bytes=300)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    monkeypatch.setenv("HERMES_MAINT_BATCH_MS", "0.001")  # after the first step, steps of 8 pages
    folder = tmp_path / "snaps"
    folder.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", LOCKSTEP_WRITER, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    steps = []

    def commit_after_every_second_step(done, total):
        steps.append(done)
        assert len(steps) < 1000, "the copy was neither refused nor finished"
        if len(steps) % every == 0:
            writer.stdin.write("commit\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == str(len(steps) // every), "the writer could not commit"

    try:
        assert writer.stdout.readline().strip() == "ready"
        with pytest.raises(MaintError, match=f"changed {MAX_RESTARTS + 1} times.*quiet"):
            take_snapshot(db, folder, label="default", on_step=commit_after_every_second_step)
    finally:
        writer.stdin.close()
        writer.wait(timeout=60)
    assert writer.returncode == 0
    assert list(folder.iterdir()) == []
    assert len(steps) >= every * (MAX_RESTARTS + 1)
    assert query(db, "SELECT COUNT(*) FROM messages WHERE content = 'x'") == [(len(steps) // every,)]


def test_snapshot_being_written_is_locked_against_cleanup(tmp_path):
    """The lock the cleanup tests for is the one a running backup holds on its partial file."""
    db = _store(tmp_path / "state.db")
    folder = tmp_path / "snaps"
    folder.mkdir()
    seen = []

    def look(done, total):
        for p in folder.iterdir():
            if p.name.endswith(".partial"):
                fd = os.open(p, os.O_RDONLY)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    seen.append("unlocked")
                except BlockingIOError:
                    seen.append("locked")
                finally:
                    os.close(fd)

    take_snapshot(db, folder, label="default", on_step=look)
    assert seen and set(seen) == {"locked"}


def test_nightly_backup_job_ships_disabled_and_runs_before_the_sweep(hermes_home):
    from maint.jobs.scheduler import load_catalogue, next_runs

    jobs = {j.name: j for j in load_catalogue()}
    job = jobs["nightly-backup"]
    assert not job.enabled and job.command == ["backup", "--keep", "7"]
    # From a fixed hour of the day, not the clock: run between 03:00 and 03:30 the next backup is tomorrow's
    # and the next sweep today's, and the order would fail (a CI run saw it).
    noon = __import__("datetime").datetime.now().astimezone().replace(hour=12, minute=0, second=0, microsecond=0)
    fire = job.trigger.get_next_fire_time(None, noon)
    sweep = dict((j.name, w) for j, w in next_runs(list(jobs.values()), now=noon))["nightly-sweep"]
    assert (fire.hour, fire.minute) == (3, 0) and fire < sweep and fire > noon
    db = _store(hermes_home / "state.db")
    result = run_subprocess("jobs", "run-once", "nightly-backup", "--db", db, env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    (snap,) = [s for s in list_snapshots(hermes_home / "state-snapshots")]
    assert snap.verified and snap.meta["messages"] == counts(db)[1]


def test_runs_go_into_the_store_run_history(hermes_home, tmp_path):
    """backup, restore and import each leave one report in the store's run history (read by metrics)."""
    db = _store(hermes_home / "state.db")

    def runs(kind):
        return query(db, "SELECT COUNT(*) FROM state_meta WHERE key LIKE ?", f"hermes_maint.history.{kind}.%")[0][0]

    snap = backup(hermes_home)[0]["snapshot"]["path"]
    backup(hermes_home, "--dry-run")
    assert runs("backup") == 1  # a dry run records nothing
    restored = run_subprocess("restore", snap, "--yes", env={"HERMES_HOME": str(hermes_home)})
    assert restored.returncode == 0, restored.stderr
    assert runs("restore") == 1 and runs("backup") == 0  # the restored store holds the snapshot's own history
    export = tmp_path / "alone.jsonl"
    export.write_text(run_subprocess("export", "-", "--db", db, "--session-id", "s1").stdout)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM messages WHERE session_id = 's1'")
    conn.execute("DELETE FROM sessions WHERE id = 's1'")
    conn.commit()
    conn.close()
    assert run_subprocess("import", export, "--db", db, "--yes").returncode == 0
    assert run_subprocess("import", export, "--db", db, "--yes").returncode == 0
    assert runs("import") == 1  # the second import changed nothing and wrote nothing


def _uid(name):
    import pwd

    return pwd.getpwnam(name).pw_uid


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another user here")
@pytest.mark.parametrize("where, owner, mode, refused", [
    ("dest", "mallory", 0o755, "is owned by another user"),  # a shared DEST in mallory's folder
    ("dest", "root", 0o777, "is writable by every user without the sticky bit"),
    ("inside", "mallory", 0o755, "is owned by another user"),  # DEST made inside mallory's folder
    ("default", "mallory", 0o700, "is owned by another user"),  # $HERMES_HOME/state-snapshots given to mallory
    ("dest", "root", 0o1777, "lets every user create files in it (mode 1777)"),  # L4: their FIFO at -journal
    ("dest", "alice", 0o700, None),  # the store's owner's folder
    ("default", "alice", 0o700, None),
])
def test_backup_refuses_a_snapshot_folder_another_user_controls(hermes_home, tmp_path, where, owner, mode, refused):
    """Hostile try 5, H11: backup wrote alice's snapshot into mallory's folder (rc 0, "verified"); she then put
    her own database under the snapshot's name, and restore put it into alice's store. The snapshot folder gets
    export --delete-after-verified's OUTPUT rule: one line, before anything is written, dry run included."""
    db = _store(hermes_home / "state.db")
    os.chown(db, _uid("alice"), _uid("alice"))
    folder = hermes_home / "state-snapshots" if where == "default" else tmp_path / "shared"
    folder.mkdir()
    os.chown(folder, _uid(owner), _uid(owner))
    os.chmod(folder, mode)
    args = [] if where == "default" else [folder / "new" if where == "inside" else folder]
    before = rows(db)
    for extra in (["--dry-run"], []):
        r = backup(hermes_home, *args, *extra, expect=1 if refused else 0)
        if refused:
            assert refused in r.stderr and str(folder) in r.stderr and "no snapshot was made" in r.stderr, r.stderr
            assert len(r.stderr.strip().splitlines()) == 1
    if refused:
        assert list(folder.iterdir()) == [] and rows(db) == before
    else:
        (snap,) = [s for s in list_snapshots(folder, _uid("alice")) if s.verified]
        assert counts(snap.path) == counts(db) and len(snap.meta["sha256"]) == 64


def test_the_sidecar_records_the_snapshots_sha256(hermes_home):
    import hashlib

    _store(hermes_home / "state.db")
    (report,) = backup(hermes_home)
    snap = Path(report["snapshot"]["path"])
    meta = json.loads(Path(f"{snap}.json").read_text())
    assert meta["version"] == 2 and meta["sha256"] == hashlib.sha256(snap.read_bytes()).hexdigest()


def test_rotation_removes_through_the_folder_it_listed_not_where_its_name_leads_later(hermes_home, tmp_path, cli,
                                                                                     monkeypatch):
    """Hostile try 10, M3: rotation listed DEST, then opened each snapshot's folder again by path to remove it;
    the folder's owner moved DEST away in between and put a link to another user's snapshot folder at its name,
    and root's rotation removed that user's snapshot of the same name. Listing and removal share one descriptor."""
    from maint.ops import backup as backup_mod

    _store(hermes_home / "state.db")
    dest = tmp_path / "dest"
    first = cli.json("backup", dest, "--json")["snapshot"]["path"]
    name = Path(first).name
    bob = tmp_path / "bob"
    bob.mkdir()
    for suffix in ("", ".json"):
        (bob / (name + suffix)).write_bytes(Path(first + suffix).read_bytes())
    moved = tmp_path / "dest.moved"
    real = backup_mod._rotatable

    def list_then_swap(*args, **kwargs):
        listed = real(*args, **kwargs)
        if not moved.exists():
            os.rename(dest, moved)
            os.symlink(bob, dest)
        return listed

    monkeypatch.setattr(backup_mod, "_rotatable", list_then_swap)
    result = cli("backup", dest, "--keep", "1", "--json")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in bob.iterdir()) == sorted([name, name + ".json"])  # bob's are untouched
    assert not (moved / name).exists() and not (moved / (name + ".json")).exists()  # ours went
