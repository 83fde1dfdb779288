"""The file module (maint/files.py): each rule once, and a second command that gets it by using the module.

Rules: no link followed where we create; no FIFO or device read; temporary files removed on failure,
SIGTERM/SIGHUP, and by the next run after a kill; what a root run creates belongs to the folder's (or
the store's) owner; a lock another user can take is waited for a bounded time only.
"""

import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from maint import files
from maint.errors import MaintError
from tests.conftest import REPO, run_subprocess
from tests.storegen import StoreBuilder


def _store(path, n=4, age=200):
    with StoreBuilder(path) as b:
        for i in range(n):
            b.session(f"s{i}", age=age + i, messages=3)
    return path


# -- no link followed where we create --------------------------------------------------------------

def test_a_folder_we_create_by_name_is_never_followed_when_it_is_a_link(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    (tmp_path / "ours").symlink_to(victim)
    with pytest.raises(files.FileRefused, match="symbolic link"):
        files.Folder.open(tmp_path / "ours", create=True)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755 and list(victim.iterdir()) == []


def test_a_file_is_never_created_through_a_link(tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep")
    (tmp_path / "link").symlink_to(target)
    with files.Folder.open(tmp_path) as folder:
        with pytest.raises(files.FileRefused, match="symbolic link"):
            folder.create("link", exclusive=False)
        with pytest.raises(FileExistsError):
            folder.create("link")
        with pytest.raises(files.FileRefused):
            with folder.atomic("link") as fh:
                fh.write(b"x")
    assert target.read_text() == "keep" and (tmp_path / "link").is_symlink()


def test_backup_refuses_a_snapshot_folder_that_is_a_link(hermes_home, tmp_path):
    """Finding 6: a root-run backup followed $HERMES_HOME/state-snapshots -> /etc, chmod'ed it 0700, wrote there."""
    _store(hermes_home / "state.db")
    victim = tmp_path / "etc"
    victim.mkdir(mode=0o755)
    (hermes_home / "state-snapshots").symlink_to(victim)
    result = run_subprocess("backup", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 1 and "symbolic link" in result.stderr, result.stderr
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755 and list(victim.iterdir()) == []


def test_export_refuses_its_default_folder_when_it_is_a_link(hermes_home, tmp_path):
    """The same rule reaches a second command: export's default folder ($HERMES_HOME/session-exports)."""
    db = _store(hermes_home / "state.db")
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    (hermes_home / "session-exports").symlink_to(victim / "missing")  # a dangling link: "absent" to exists()
    result = run_subprocess("export", "--db", db, "--format", "md", "--session-id", "s0",
                            env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 1 and "symbolic link" in result.stderr, result.stderr
    assert list(victim.iterdir()) == []


# -- no FIFO read ----------------------------------------------------------------------------------

def test_reading_a_fifo_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(files.FileRefused, match="FIFO"):
        files.read_regular(tmp_path / "pipe")
    with files.Folder.open(tmp_path) as folder, pytest.raises(files.FileRefused, match="FIFO"):
        folder.read("pipe")


@pytest.mark.parametrize("args", [["--keep", "1"], []], ids=["rotation", "stale-file clean-up"])
def test_backup_never_waits_on_a_fifo_named_like_a_sidecar(hermes_home, tmp_path, args):
    """Finding 10: a FIFO named state-...db.json hung rotation and the stale-file clean-up."""
    _store(hermes_home / "state.db")
    dest = tmp_path / "snaps"
    first = run_subprocess("backup", dest, "--json", env={"HERMES_HOME": str(hermes_home)})
    assert first.returncode == 0, first.stderr
    snap = json.loads(first.stdout)["snapshot"]["path"]
    os.unlink(snap + ".json")
    os.mkfifo(snap + ".json")
    os.mkfifo(dest / "state-default-20200101T000000Z.db.json")  # a sidecar whose snapshot is gone
    result = run_subprocess("backup", dest, *args, "--json", env={"HERMES_HOME": str(hermes_home)}, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["removed"] == [] and snap in report["unverified_kept"]  # a FIFO vouches for nothing


# -- temporary files -------------------------------------------------------------------------------

def test_a_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), files.atomic_file(tmp_path / "out.txt") as fh:
        fh.write(b"half")
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_leftovers_of_a_killed_run_are_cleared_by_the_next_write_but_a_live_writers_are_kept(tmp_path):
    dead = tmp_path / ".out.txt.0123456789abcdef.partial"
    dead.write_bytes(b"left by a kill")
    live = tmp_path / ".out.txt.fedcba9876543210.partial"
    live.write_bytes(b"being written")
    holder = os.open(live, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        with files.atomic_file(tmp_path / "out.txt") as fh:
            fh.write(b"whole")
    finally:
        os.close(holder)
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "out.txt"]


def test_leftovers_go_with_the_journals_sqlite_left_beside_them(tmp_path):
    """Hostile try 4, G7: a killed `backup --compact` left `.NAME.partial-journal`; the next run removed the
    `.partial` and never the journal. One function clears both, for every command's temporary names."""
    dead = ".out.txt.0123456789abcdef.partial"
    live = ".out.txt.fedcba9876543210.partial"
    orphan = ".out.txt.00000000000000aa.partial"  # its temporary file already gone
    for name in (dead, f"{dead}-journal", f"{dead}-wal", f"{dead}-shm", live, f"{live}-journal",
                 f"{orphan}-wal", ".other.txt.0123456789abcdef.partial-journal"):
        (tmp_path / name).write_bytes(b"x")
    os.mkfifo(tmp_path / f"{orphan}-shm")  # a special file with such a name is never touched
    holder = os.open(tmp_path / live, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        with files.Folder.open(tmp_path) as folder:
            removed = folder.clear_leftovers("out.txt")
    finally:
        os.close(holder)
    assert sorted(removed) == sorted([dead, f"{dead}-journal", f"{dead}-wal", f"{dead}-shm", f"{orphan}-wal"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live, f"{live}-journal", f"{orphan}-shm", ".other.txt.0123456789abcdef.partial-journal"])


def test_a_killed_compact_backups_journal_goes_with_its_partial(hermes_home):
    """The same through backup's own names (`.state-…Z.db.partial`), as `backup --compact` found them."""
    from maint.ops.backup import remove_stale_partials

    folder = hermes_home / "state-snapshots"
    folder.mkdir(mode=0o700)
    partial = folder / ".state-default-20200101T000000Z.db.partial"
    for name in (partial.name, partial.name + "-journal", ".state-default-20200101T000001Z.db.partial-journal"):
        (folder / name).write_bytes(b"half")
    assert sorted(remove_stale_partials(folder)) == sorted(
        [partial.name, partial.name + "-journal", ".state-default-20200101T000001Z.db.partial-journal"])
    assert list(folder.iterdir()) == []


def _wait_for(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)



def _default_signals() -> None:
    """In the child: SIGTERM and SIGHUP as a fresh shell has them (nohup leaves SIGHUP ignored, and an ignored
    signal is one we must keep ignoring)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_export_terminated_mid_write_removes_its_temporary_file(tmp_path, signum):
    """Finding 18: SIGTERM or SIGHUP during export left .NAME.<hex>.partial files no later run removed."""
    db = _store(tmp_path / "state.db")
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "maint", "export", str(out / "all.jsonl"), "--db", str(db)],
                            cwd=REPO, env={**os.environ, "HERMES_MAINT_HANG_AT": "file_written",
                                           "HERMES_MAINT_HANG_SAY": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_signals)  # a suite run under nohup passes SIGHUP ignored
    try:
        assert proc.stderr.readline() == "hanging at file_written\n"  # past the write, the file still partial
        assert any(p.name.endswith(".partial") for p in out.iterdir())
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    assert "terminated" in err and list(out.iterdir()) == []


def test_a_failed_metrics_rename_leaves_no_temporary_file(tmp_path, monkeypatch):
    """Finding 18: a failed metrics rename left .hermes.prom.tmp-* behind every run."""
    from maint.ops import metrics

    def refuse(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(OSError):
        metrics.write(tmp_path / "hermes.prom", [], [], keep_doctor=False)
    assert [p.name for p in tmp_path.iterdir()] == [".hermes.prom.lock"]  # the lock stays: it is no temporary file


def _no_hard_links(monkeypatch):
    """What vfat, exFAT and CIFS without unix extensions answer to link(2)."""
    def eperm(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", eperm)


@pytest.mark.parametrize("command", ["backup", "optimize --into", "recover --salvage"])
def test_a_file_is_published_on_a_filesystem_without_hard_links(tmp_path, monkeypatch, cli, command):
    """Hostile try 12, P10: files are published by link(2), never over an existing name; on a filesystem without
    hard links (a USB stick) `backup DEST` always failed "cannot write there (Operation not permitted)", as did
    optimize --into and recover --salvage. Now a rename that refuses an existing name takes the link's place."""
    db = _store(tmp_path / "state.db")
    out = tmp_path / "stick"
    out.mkdir(mode=0o700)
    _no_hard_links(monkeypatch)
    args = {"backup": ["backup", out], "optimize --into": ["optimize", "--into", out / "c.db"],
            "recover --salvage": ["recover", "--salvage", out / "c.db"]}[command]
    result = cli(*args, "--db", db)
    assert result.exit_code == 0, result.output
    made = [p.name for p in out.iterdir()]
    assert not [n for n in made if "partial" in n], made
    if command == "backup":
        assert len([n for n in made if n.endswith(".db")]) == 1 and len([n for n in made if n.endswith(".json")]) == 1
    else:
        assert made == ["c.db"]


def test_without_hard_links_an_existing_name_is_still_never_replaced(tmp_path, monkeypatch):
    _no_hard_links(monkeypatch)
    (tmp_path / "taken").write_bytes(b"theirs")
    with files.Folder.open(tmp_path) as folder:
        temp, fd = folder.temporary("taken")
        os.write(fd, b"ours")
        os.close(fd)
        with pytest.raises(FileExistsError):
            folder.publish(temp, "taken")
        folder.publish(temp, "free")
    with files.atomic_file(tmp_path / "new", replace=False) as fh:  # the file module's own writes (a new config)
        fh.write(b"made")
    assert (tmp_path / "taken").read_bytes() == b"theirs" and (tmp_path / "free").read_bytes() == b"ours"
    assert (tmp_path / "new").read_bytes() == b"made" and stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["free", "new", "taken"]


# -- owned like the folder (or the store) after a root run ----------------------------------------

class Chowns:
    def __init__(self, monkeypatch):
        self.calls = []
        monkeypatch.setattr(files, "_as_root", lambda: True)
        monkeypatch.setattr(os, "fchown", lambda fd, uid, gid: self.calls.append((os.fstat(fd).st_ino, uid, gid)))

    def owners(self, path):
        ino = os.lstat(path).st_ino
        return [(uid, gid) for i, uid, gid in self.calls if i == ino]


def test_a_root_run_hands_what_it_creates_to_the_folders_owner(tmp_path, monkeypatch):
    chowns = Chowns(monkeypatch)
    with files.Folder.open(tmp_path, owner=(1234, 5678)) as folder:
        sub = folder.subfolder("made", create=True)
        sub.close()
        with folder.atomic("file.txt") as fh:
            fh.write(b"x")
    assert chowns.owners(tmp_path / "made") == [(1234, 5678)]
    assert chowns.owners(tmp_path / "file.txt") == [(1234, 5678)]


def test_a_root_run_leaves_the_run_lock_and_snapshot_folder_to_the_stores_owner(hermes_home, monkeypatch):
    """Finding 7: after one root run, <db>.hermes-maint.lock and state-snapshots/ stayed root-owned, and every
    later run by the store's owner failed with Permission denied."""
    from maint.ops.backup import prepare_folder, take_snapshot
    from maint.store.connection import open_store

    db = _store(hermes_home / "state.db")
    real_stat = os.stat

    def owned_by_user(path, *args, **kwargs):  # the store and its home as a user's, the rest as they are
        st = real_stat(path, *args, **kwargs)
        if str(path).startswith(str(hermes_home)) and not kwargs.get("dir_fd"):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 1000, 1000, *st[6:]))
        return st

    chowns = Chowns(monkeypatch)
    monkeypatch.setattr(os, "stat", owned_by_user)
    monkeypatch.setattr(files.Folder, "__init__", _owner_from_stat(files.Folder.__init__, owned_by_user))
    with open_store(db):
        pass
    folder = prepare_folder(None, store=db)
    snap = take_snapshot(db, folder, label="default")
    assert chowns.owners(f"{db}.hermes-maint.lock") == [(1000, 1000)]
    assert chowns.owners(folder) == [(1000, 1000)]
    assert (1000, 1000) in chowns.owners(snap.path)


def _owner_from_stat(init, stat_fn):
    """Folder owners read through *stat_fn* (fstat of a descriptor cannot be faked; its path can)."""

    def wrapped(self, path, fd, owner=None, store_owner=None):
        init(self, path, fd, owner, store_owner)
        if owner is None:
            st = stat_fn(str(path))
            self.owner = (st.st_uid, st.st_gid)

    return wrapped


# -- bounded waits ---------------------------------------------------------------------------------

HOLD_LOCK = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600);"
             "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()")


@pytest.mark.parametrize("command", [["prune", "--yes"], ["doctor"]])
def test_a_held_metrics_lock_never_stalls_a_run(tmp_path, command):
    """Finding 5: the metrics lock held elsewhere hung prune after its deletes, and doctor. Now it is waited for
    a few seconds, then the figures are skipped with a warning (a holder of our own user: hostile try 5, H3 in
    test_history_metrics.py for another user's)."""
    db = _store(tmp_path / "state.db")
    prom = tmp_path / "metrics"
    prom.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(prom / ".hermes.prom.lock")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = run_subprocess(*command, "--db", db, "--metrics-file", prom / "hermes.prom", timeout=60)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert result.returncode in (0, 1) and "metrics not written" in result.stderr, result.stderr
    assert "lock" in result.stderr and not (prom / "hermes.prom").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user here")
def test_leftovers_of_another_users_are_never_ours_to_clear(tmp_path):
    """Hostile try 9, L15: another user's files under our temporary names (predictable: the snapshot label, the
    export's target) in a shared folder stopped every backup and export with EPERM, and a root run removed them.
    Only files of ours, or of the user we hand what we create to, are leftovers."""
    folder_path = tmp_path / "shared"
    folder_path.mkdir()
    theirs = ".out.txt.0123456789abcdef.partial"
    mine = ".out.txt.fedcba9876543210.partial"
    for name in (theirs, f"{theirs}-journal", f"{theirs}-wal", mine, f"{mine}-journal"):
        (folder_path / name).write_bytes(b"x")
    for name in (theirs, f"{theirs}-journal", f"{theirs}-wal"):
        os.chown(folder_path / name, 5555, 5555)
    with files.Folder.open(folder_path) as folder:
        removed = folder.clear_leftovers("out.txt")
    assert sorted(removed) == sorted([mine, f"{mine}-journal"])
    assert sorted(p.name for p in folder_path.iterdir()) == sorted([theirs, f"{theirs}-journal", f"{theirs}-wal"])


def test_leftover_clearing_never_removes_a_metrics_lock(tmp_path):
    """Our lock beside a metrics file stays (it is the lock, held or not); only our temporary names go."""
    from maint.ops.metrics import lock_name

    lock = tmp_path / lock_name("hermes.prom")
    lock.write_text("")
    (tmp_path / ".hermes.prom.0123456789abcdef.partial").write_text("left by a killed run")
    held = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        with files.Folder.open(tmp_path) as folder:
            assert folder.clear_leftovers("hermes.prom") == [".hermes.prom.0123456789abcdef.partial"]
        fcntl.flock(held, fcntl.LOCK_UN)
        with files.Folder.open(tmp_path) as folder:
            assert folder.clear_leftovers() == [] and folder.clear_leftovers("hermes.prom") == []
    finally:
        os.close(held)
    assert sorted(p.name for p in tmp_path.iterdir()) == [lock.name]


def test_lock_gives_up_at_its_deadline(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    other = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(other, fcntl.LOCK_EX)
        assert files.lock(fd, 0.05) is False
        fcntl.flock(other, fcntl.LOCK_UN)
        assert files.lock(fd, 0.05) is True
    finally:
        os.close(fd)
        os.close(other)


# -- what another process wrote is never printed raw --------------------------------------------------

def test_a_foreign_lock_files_bytes_never_reach_the_terminal(tmp_path):
    """Finding 9: the first bytes of a lock file held by another process were printed raw (an OSC escape)."""
    db = _store(tmp_path / "state.db")
    code = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600);"
            "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'\\x1b]0;owned\\x07 99'); print('held', flush=True);"
            "sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code, f"{db}.hermes-maint.lock"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = run_subprocess("prune", "--db", db, "--yes")
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert result.returncode == 1 and "another hermes-maint (pid unknown)" in result.stderr, result.stderr
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr


def test_read_regular_refuses_past_its_limit(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 2048)
    with pytest.raises(MaintError, match="larger than"):
        files.read_regular(tmp_path / "big", limit=1024)


def test_only_the_file_module_creates_files_and_folders():
    """A new file or folder created anywhere else would miss the module's rules (hostile review: Hermes's
    auto-maintenance lock was still opened by hand, and a root sweep left it root-owned)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "maint"
    creating = re.compile(r"O_CREAT|\.mkdir\(|os\.makedirs|\.write_text\(|\.write_bytes\(|\bopen\([^)]*['\"][wax]")
    offenders = [f"{p.relative_to(root)}:{n}" for p in root.rglob("*.py") if p.name != "files.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1) if creating.search(line)]
    assert offenders == []


def test_a_root_sweep_leaves_hermes_maintenance_lock_to_the_stores_owner(hermes_home, monkeypatch):
    """Hostile review F4: a root sweep left <db>.auto-maintenance.lock root-owned 0644, and the owner's next
    sweep failed with Permission denied."""
    from maint.store.locks import lock_path, maintenance_lock

    db = _store(hermes_home / "state.db")
    real_stat = os.stat

    def owned_by_user(path, *args, **kwargs):
        st = real_stat(path, *args, **kwargs)
        if str(path) == str(db) and not kwargs.get("dir_fd"):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 1000, 1000, *st[6:]))
        return st

    chowns = Chowns(monkeypatch)
    monkeypatch.setattr(os, "stat", owned_by_user)
    with maintenance_lock(db):
        pass
    assert chowns.owners(lock_path(db)) == [(1000, 1000)]


# -- a store's content never goes through another user's link, nor to a third user ------------------

def _fake_owner(monkeypatch, name, uid, *paths):
    """`os.<name>` (stat / lstat) reporting *uid* as the owner of *paths*; everything else as it is."""
    real = getattr(os, name)
    wanted = {str(p) for p in paths}

    def fake(path, *args, **kwargs):
        st = real(path, *args, **kwargs)
        if str(path) in wanted and not kwargs.get("dir_fd"):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, uid, uid, *st[6:]))
        return st

    monkeypatch.setattr(os, name, fake)


@pytest.mark.parametrize("command", [["backup", "{out}"], ["export", "{out}/e.jsonl"],
                                     ["export", "--format", "md", "--source", "cli", "{out}/md"],
                                     ["optimize", "--into", "{out}/c.db"]])
def test_a_root_run_refuses_a_destination_reached_through_another_users_link(tmp_path, monkeypatch, cli, command):
    """Hostile try 3, F23: mallory's link /tmp/h3backups -> /home/mallory/loot received root's backup, export
    and optimize --into of alice's store, each chowned to mallory. As root, a DEST/OUTPUT reached through a
    link owned by anyone but root or the store's owner is now refused, as stores themselves are."""
    db = _store(tmp_path / "state.db")
    loot = tmp_path / "loot"
    loot.mkdir()
    planted = tmp_path / "backups"
    planted.symlink_to(loot)
    Chowns(monkeypatch)  # a run as root (the chown recorded, not made)
    _fake_owner(monkeypatch, "lstat", 4321, planted)  # the link is another user's
    args = [a.replace("{out}", str(planted)) for a in command]
    result = cli(*args, "--db", db)
    assert result.exit_code != 0 and f"reached through {planted}, a symbolic link owned by uid 4321" in result.stderr, \
        result.output
    assert len(result.stderr.strip().splitlines()) == 1 and list(loot.iterdir()) == []


def test_a_link_of_root_or_the_stores_owner_is_followed_and_a_users_run_is_unchanged(tmp_path, monkeypatch, cli):
    db = _store(tmp_path / "state.db")
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "mine").symlink_to(real)
    assert cli.json("export", tmp_path / "mine" / "a.jsonl", "--db", db)["files"]  # as whoever runs the tests
    Chowns(monkeypatch)
    _fake_owner(monkeypatch, "lstat", 0, tmp_path / "mine")  # root's link, followed by a root run
    assert cli.json("export", tmp_path / "mine" / "b.jsonl", "--db", db)["files"]
    assert sorted(p.name for p in real.iterdir()) == ["a.jsonl", "b.jsonl"]


def test_a_stores_content_is_never_handed_to_a_third_user_who_owns_the_folder(tmp_path, monkeypatch, cli):
    """Hostile try 3, F23: a root run handed what it made to the owner of the folder it landed in, so a copy
    of alice's store in mallory's folder became mallory's. Now it goes to the store's owner (root's folder:
    kept root's; the store owner's folder: hers, as before)."""
    home = tmp_path / "home"
    home.mkdir()
    db = _store(home / "state.db")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    chowns = Chowns(monkeypatch)
    _fake_owner(monkeypatch, "stat", 1000, db)  # alice's store
    real_fstat, folder_ino = os.fstat, os.stat(theirs).st_ino

    def fstat(fd):  # mallory's folder
        st = real_fstat(fd)
        if st.st_ino == folder_ino:
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 4321, 4321, *st[6:]))
        return st

    monkeypatch.setattr(os, "fstat", fstat)
    snap = cli.json("backup", theirs, "--db", db)["snapshot"]["path"]
    cli.json("export", theirs / "e.jsonl", "--db", db)
    cli.json("optimize", "--into", theirs / "c.db", "--db", db)
    made = [snap, f"{snap}.json", theirs / "e.jsonl", theirs / "c.db"]
    assert all(chowns.owners(p) and set(chowns.owners(p)) == {(1000, 1000)} for p in made), \
        {str(p): chowns.owners(p) for p in made}
    assert not any(uid == 4321 for _, uid, _ in chowns.calls)


@pytest.mark.parametrize("name, command", [
    ("e.jsonl", ["export", "{out}"]), ("e.md", ["export", "--format", "md", "--session-id", "s1", "{out}"]),
    ("e.html", ["export", "--format", "html", "--session-id", "s1", "{out}"])])
def test_a_stores_content_never_replaces_a_file_a_third_user_made_first(tmp_path, monkeypatch, cli, name, command):
    """Hostile try 4, G1: a replaced file keeps its owner, so mallory's file at the OUTPUT name (made first, in a
    shared sticky folder) received root's export of alice's store, still mallory's. Replacing a file of anyone
    but root, the store's owner or us with a store's content is refused; the file is left as it was."""
    db = _store(tmp_path / "state.db")
    out = tmp_path / "share" / name
    out.parent.mkdir()
    out.write_text("mallory's\n")
    _fake_owner(monkeypatch, "stat", 1000, db)  # alice's store
    alices_stat, mallorys = os.stat, os.stat(out).st_ino

    def stat(path, *args, **kwargs):  # the name in the shared folder is mallory's
        st = alices_stat(path, *args, **kwargs)
        if st.st_ino == mallorys:
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 4321, 4321, *st[6:]))
        return st

    monkeypatch.setattr(os, "stat", stat)
    result = cli(*[a.replace("{out}", str(out)) for a in command], "--db", db)
    assert result.exit_code != 0 and "belongs to uid 4321, neither root nor the store's owner" in result.stderr, \
        result.output
    assert out.read_text() == "mallory's\n"
    assert sorted(p.name for p in out.parent.iterdir()) == [name]


def test_no_module_but_the_file_module_opens_a_path_by_name_for_reading():
    """Hostile try 4, G2: a check through the file module, then a second open by name with a blocking open(),
    let a FIFO swapped in between hang the run. Every read of a path goes through `maint.files` (O_NONBLOCK,
    regular files only); the only bare opens left read the kernel's /proc and our own package's templates."""
    import ast

    from tests.conftest import REPO

    allowed = {("maint/store/holders.py", "open"), ("maint/store/fifowatch.py", "open"),
               ("maint/ops/journal.py", "read_bytes"), ("maint/export/render.py", "read_text")}
    found = set()
    for path in sorted((REPO / "maint").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel == "maint/files.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            bare_open = isinstance(func, ast.Name) and name == "open"
            if bare_open or name in ("read_text", "read_bytes") or (name == "open" and isinstance(func, ast.Attribute)
                                                                   and getattr(func.value, "id", "") == "io"):
                found.add((rel, name))
    assert found == allowed, found - allowed


@pytest.mark.parametrize("command", [["backup", "{out}"], ["export", "{out}/e.jsonl"],
                                     ["export", "--format", "md", "--source", "cli", "{out}/md"],
                                     ["optimize", "--into", "{out}/c.db"]])
def test_a_root_run_writes_through_the_store_owners_link_only_where_that_user_may_write(tmp_path, monkeypatch, cli,
                                                                                        command):
    """Hostile try 4, G14: alice's link ~/exp -> /etc/h4demo made root's export and backup of her store create
    root-owned files there, with lines she wrote. A link of the store's owner is followed by a root run only to
    a folder that user could write herself."""
    db = _store(tmp_path / "state.db")
    target = tmp_path / "etc"
    target.mkdir(mode=0o755)
    link = tmp_path / "exp"
    link.symlink_to(target)
    Chowns(monkeypatch)  # a run as root
    _fake_owner(monkeypatch, "stat", 4321, db)  # the store is uid 4321's ...
    _fake_owner(monkeypatch, "lstat", 4321, link)  # ... and so is the link; the folder is ours, 0755
    result = cli(*[a.replace("{out}", str(link)) for a in command], "--db", db)
    assert result.exit_code != 0 and "a symbolic link of the store's owner (uid 4321) to a folder that user may " \
        "not write" in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and list(target.iterdir()) == []


def test_a_group_another_user_has_as_primary_group_is_not_private(monkeypatch):
    """Hostile try 9, L9 (by reading): a group counted as its owner's private one when it listed no members,
    but the users whose primary group it is are members without being listed (Debian: nobody and _apt share
    nogroup). A 0770 folder of such an owner is writable by the others."""
    import grp
    import pwd
    from types import SimpleNamespace as NS

    users = [NS(pw_name="alice", pw_uid=1001, pw_gid=1001), NS(pw_name="nobody", pw_uid=65534, pw_gid=65534),
             NS(pw_name="_apt", pw_uid=42, pw_gid=65534)]
    monkeypatch.setattr(pwd, "getpwall", lambda: users)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: next(u for u in users if u.pw_uid == uid))
    monkeypatch.setattr(grp, "getgrgid", lambda gid: NS(gr_name=str(gid), gr_gid=gid, gr_mem=[]))
    folder = os.stat_result((stat.S_IFDIR | 0o770, 0, 0, 2, 65534, 65534, 0, 0, 0, 0))
    assert files.others_may_create(folder) == "its group"
    own = os.stat_result((stat.S_IFDIR | 0o770, 0, 0, 2, 1001, 1001, 0, 0, 0, 0))
    assert files.others_may_create(own) is None  # alice's own group, nobody else's primary one
