"""Our run lock: one hermes-maint (and one job of a job loop) changes a store at a time; the lock file
is never followed, and a refusal names the holder."""

import json
import os
import subprocess
import sys
import threading

import pytest

from tests.conftest import REPO, file_hash, run_subprocess, session_ids
from tests.storegen import StoreBuilder, small_store


def test_a_second_writer_of_ours_is_refused_naming_the_first(tmp_path):
    store = small_store(tmp_path / "state.db")
    code = ("import sys; from maint.store.runlock import run_lock; lock = run_lock(sys.argv[1]);"
            "print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", code, str(store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = file_hash(store)
        for args in (["prune", "--yes"], ["archive", "--source", "cli", "--yes"], ["optimize"]):
            result = run_subprocess(*args, "--db", store)
            assert result.returncode == 1
            assert f"another hermes-maint (pid {holder.pid}) is working on this store" in result.stderr
        assert file_hash(store) == before
        assert run_subprocess("stats", "--db", store).returncode == 0  # readers are never refused
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert run_subprocess("prune", "--db", store, "--yes").returncode == 0


def test_two_prunes_at_once_never_report_the_same_session(tmp_path):
    store = tmp_path / "state.db"
    with StoreBuilder(store) as b:
        for i in range(300):
            b.session(f"s{i}", age=200, messages=4)
    results = []

    def prune():
        results.append(run_subprocess("prune", "--db", store, "--yes", "--json"))

    threads = [threading.Thread(target=prune) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reported = [set(json.loads(r.stdout)["session_ids"]) for r in results if r.returncode == 0]
    refused = [r for r in results if r.returncode == 1]
    assert all("another hermes-maint" in r.stderr for r in refused)
    assert len(reported) + len(refused) == 2
    assert set.union(*reported) == {f"s{i}" for i in range(300)}
    assert len(reported) == 1 or not (reported[0] & reported[1])
    assert session_ids(store) == set()


def test_our_lock_file_is_never_followed(tmp_path):
    store = small_store(tmp_path / "state.db")
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    os.symlink(victim, f"{store}.hermes-maint.lock")
    result = run_subprocess("prune", "--db", store, "--yes")
    assert result.returncode == 1 and "cannot create our run lock" in result.stderr
    assert victim.read_text() == "keep\n"


def test_two_jobs_of_one_process_never_change_one_store_at_once(tmp_path, monkeypatch):
    """The job loop runs jobs as threads of one process: the run lock is per thread within it, so an
    overlapping prune and sweep cannot both hold FTS5's settings or the index notes (each would
    save the other's held values as Hermes's); nested opens by one thread still share it. Another
    job waits for the store a while (a skipped sweep holds it only for its notice and history row),
    then is refused."""
    import maint.store.runlock as runlock
    from maint.store.connection import open_store
    from maint.store.runlock import RunLockHeld

    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("a", messages=2)
    seen = []

    def other_job():
        try:
            open_store(db).close()
            seen.append("opened")
        except RunLockHeld as exc:
            seen.append(str(exc))

    monkeypatch.setattr(runlock, "THREAD_WAIT_S", 0.05)
    with open_store(db) as store:
        with open_store(db):  # nested, same thread: shared
            pass
        t = threading.Thread(target=other_job)
        t.start()
        t.join()
        assert store.get_meta("x") is None
    assert len(seen) == 1 and "another job of this hermes-maint" in seen[0], seen
    monkeypatch.setattr(runlock, "THREAD_WAIT_S", 60.0)
    store = open_store(db)
    t = threading.Thread(target=other_job)  # waits while the store is held, opens once it is let go
    t.start()
    t.join(0.2)
    assert t.is_alive() and len(seen) == 1
    seen.append("released")
    store.close()
    t.join(60)
    assert seen[1:] == ["released", "opened"]


def test_a_lock_name_that_is_a_hard_link_to_another_file_is_never_written(tmp_path):
    """Hostile try 3, F3: a hard link planted as <store>.hermes-maint.lock (or Hermes's
    .auto-maintenance.lock) named any file on the disk; a root run truncated it, wrote its pid there and
    handed an empty one to the store's owner."""
    from maint.errors import MaintError
    from maint.store.locks import lock_path, maintenance_lock

    store = small_store(tmp_path / "state.db")
    victim = tmp_path / "victim.conf"
    victim.write_text("keep\n")
    before = file_hash(store)
    os.link(victim, f"{store}.hermes-maint.lock")
    result = run_subprocess("prune", "--yes", "--db", store)
    assert result.returncode == 1 and "cannot create our run lock" in result.stderr
    assert "hard link" in result.stderr
    assert victim.read_text() == "keep\n" and file_hash(store) == before
    os.link(victim, lock_path(store))
    with pytest.raises(MaintError, match="hard link"), maintenance_lock(store):
        pass
    assert victim.read_text() == "keep\n"


def test_a_lock_file_removed_between_open_and_flock_is_not_a_lock(tmp_path, monkeypatch):
    """A report's tidy-up removes a run lock file no one holds (hostile try 9, L2). A run that opened the file
    just before and locks it after holds a lock on a file no longer named: the next run would make a new one
    and lock it too. run_lock checks that the file it locked is still the one named, and takes the new one."""
    import fcntl as _fcntl

    from maint.store import runlock

    db = small_store(tmp_path / "state.db")
    real = _fcntl.flock
    removed = []

    def flock_after_a_tidy(fd, op):
        if not removed and op & _fcntl.LOCK_EX:
            removed.append(True)
            runlock.tidy_lock(db)  # the report of another process, between our open and our flock
        return real(fd, op)

    monkeypatch.setattr(runlock.fcntl, "flock", flock_after_a_tidy)
    lock = runlock.run_lock(db)
    try:
        held, named = os.fstat(lock.fd), os.stat(runlock.lock_path(db))
        assert removed and (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)
    finally:
        lock.release()
