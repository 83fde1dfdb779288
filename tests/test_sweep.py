"""The scheduled sweep: shared marker, lock, orphan reaping, retention validation, VACUUM conditions."""

import json
import logging
import os
import sqlite3
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from maint.config import load_config
from maint.store.holders import Holder, HolderReport
from maint.store.locks import lock_path
from maint.store.connection import open_store
from maint.ops.sweep import MARKER_KEY, VACUUM_KEY, decide_vacuum, run_sweep
from tests.conftest import REPO, FlockAs, query, run_subprocess, session_ids
from tests.storegen import StoreBuilder

Usage = namedtuple("Usage", "total used free")
PLENTY = lambda p: Usage(10**12, 10**11, 9 * 10**11)  # noqa: E731
QUIET = lambda p: HolderReport()  # noqa: E731


def meta(path, key):
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None
    finally:
        conn.close()


@pytest.fixture
def home(hermes_home):
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("old", age=200, messages=4)
        b.session("young", age=2)
    return hermes_home


def sweep(home, **kw):
    kw.setdefault("holders", QUIET)
    kw.setdefault("disk_usage", PLENTY)
    return run_sweep(home / "state.db", load_config(), **kw)


def test_sweep_prunes_and_writes_marker_even_when_nothing_pruned(home):
    r = sweep(home)
    assert r["swept"] and r["pruned_ids"] == ["old"] and float(meta(home / "state.db", MARKER_KEY)) > 0
    again = sweep(home)
    assert not again["swept"] and "already swept" in again["skipped_reason"]
    forced = sweep(home, force=True)
    assert forced["swept"] and forced["pruned_ids"] == []
    assert json.loads(meta(home / "state.db", "hermes_maint.last_sweep_report"))["swept"] is True


def test_auto_prune_off_skips(hermes_home):
    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("old", age=200)
    r = sweep(hermes_home)
    assert not r["swept"] and "auto_prune" in r["skipped_reason"]
    assert session_ids(hermes_home / "state.db") == {"old"}


def test_corrupt_marker_counts_as_no_run(home):
    with open_store(home / "state.db") as store:
        store.set_meta(MARKER_KEY, "not-a-number")
    assert sweep(home)["swept"]


@pytest.mark.parametrize("value", ["-1", "'30'", "1.5", "true", "null", "[]"])
def test_invalid_retention_skips_with_warning(hermes_home, value, caplog):
    (hermes_home / "config.yaml").write_text(f"sessions:\n  auto_prune: true\n  retention_days: {value}\n")
    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("old", age=200)
    with caplog.at_level(logging.WARNING):
        r = sweep(hermes_home)
    assert not r["swept"] and "retention_days" in r["skipped_reason"]
    assert any("integer" in rec.message and ">= 0" in rec.message for rec in caplog.records)
    assert session_ids(hermes_home / "state.db") == {"old"} and meta(hermes_home / "state.db", MARKER_KEY) is None


def test_retention_zero_is_valid(hermes_home):
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 0\n")
    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("ended_recently", age=0.5)
        b.session("still_open", age=0.5, ended=False)
    r = sweep(hermes_home)
    assert r["pruned_ids"] == ["ended_recently"] and session_ids(hermes_home / "state.db") == {"still_open"}


def test_retention_zero_never_reaps_a_session_being_written(hermes_home):
    """Finding 14 (issue 24): with retention_days: 0 the sweep closed the session a live writer was appending
    to. A session written to within the guard's window is busy, not an orphan; one idle for a day is reaped."""
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 0\n")
    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("being_written", age=20 / 86400, started_age=1 / 24, ended=False)  # last message 20 s ago
        b.session("idle_orphan", age=1, ended=False)
    r = sweep(hermes_home)
    assert r["reaped_ids"] == ["idle_orphan"]
    assert query(hermes_home / "state.db", "SELECT id FROM sessions WHERE ended_at IS NULL") == [("being_written",)]


def test_reap_needs_an_old_start_too(hermes_home):
    """Upstream's rule: a fresh child that carries copied old activity is not an orphan."""
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 1\n")
    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("fresh_child", age=3, started_age=2 / 24, ended=False)  # started 2 h ago, activity 3 days old
        b.session("old_orphan", age=3, ended=False)
    assert sweep(hermes_home)["reaped_ids"] == ["old_orphan"]


def test_lock_held_skips_even_with_force(home):
    fd = os.open(lock_path(home / "state.db"), os.O_RDWR | os.O_CREAT)
    child = subprocess.Popen([sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1],'a');"
                              "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
                              str(lock_path(home / "state.db"))], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        r = sweep(home, force=True)
        assert not r["swept"] and "another process is sweeping" in r["skipped_reason"]
        assert session_ids(home / "state.db") == {"old", "young"}
    finally:
        child.stdin.close()
        child.wait(timeout=30)
        os.close(fd)
    assert sweep(home)["swept"]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can start a process as another user here")
def test_a_lock_another_user_holds_is_named_and_fails_the_sweep_and_doctor(home):
    """Hostile try 4, G15: the lock we created was 0644 and flock works on a read-only descriptor, so any
    user who could read the folder skipped every sweep, exit 0, holder unnamed. We create it 0600 now
    (group read-write only beside a group-writable store, for a Hermes of that group), and a holder that is
    not the store's owner, root or us is named: sweep exits 1, doctor reports a finding. A Hermes of the
    store's owner holding it is a plain skip, exit 0, as before."""
    db, lock = home / "state.db", lock_path(home / "state.db")
    env = {"HERMES_HOME": str(home)}
    assert run_subprocess("sweep", "--db", db, env=env).returncode == 0
    assert (os.stat(lock).st_mode & 0o777) == 0o600
    os.chmod(lock, 0o644)  # as Hermes makes it
    with FlockAs(lock, 1002) as pid:  # mallory
        r = run_subprocess("sweep", "--db", db, "--force", env=env)
        assert r.returncode == 1 and f"pid {pid} (uid 1002)" in r.stderr, (r.stdout, r.stderr)
        assert "another user holds the auto-maintenance lock" in r.stdout and "user mallory" in r.stdout
        assert len(r.stderr.strip().splitlines()) == 1
        doctor = run_subprocess("doctor", "--db", db, "--json", "--fail-on", "warning", env=env)
        found = {f["kind"]: f for f in json.loads(doctor.stdout)["findings"]}
        assert doctor.returncode == 1 and found["maintenance_lock"]["severity"] == "warning"
        assert found["maintenance_lock"]["data"] == {"pids": [pid], "uids": [1002]}
        assert session_ids(db) == {"young"}
    os.chown(db, 1001, 1001)  # alice's store: her own Hermes holding the lock is a plain skip
    with FlockAs(lock, 1001):
        r = run_subprocess("sweep", "--db", db, "--force", env=env)
        assert r.returncode == 0 and "another process is sweeping" in r.stdout and "uid 1001" in r.stdout, r.stderr
        doctor = run_subprocess("doctor", "--db", db, "--json", env=env)
        assert "maintenance_lock" not in {f["kind"] for f in json.loads(doctor.stdout)["findings"]}
    os.unlink(lock)
    os.chmod(db, 0o660)  # a store its group writes: the group's Hermes must still open the lock "a+b"
    assert run_subprocess("sweep", "--db", db, "--force", env=env).returncode == 0
    assert (os.stat(lock).st_mode & 0o777) == 0o660 and os.stat(lock).st_uid == 1001


def test_lock_holders_are_read_from_proc_locks_holders_only(tmp_path):
    """/proc/locks: a waiter (->) is no holder; another device number with the same inode counts only when no
    line matches device and inode both (btrfs, overlay list the superblock's)."""
    from maint.store.holders import flock_holders

    f = tmp_path / "l"
    f.write_text("")
    st = os.stat(f)
    here = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    other = f"{os.major(st.st_dev) + 1:02x}:00:{st.st_ino}"
    mine = os.getpid()
    locks = tmp_path / "locks"
    locks.write_text(f"1: FLOCK  ADVISORY  WRITE {mine} {here} 0 EOF\n"
                     f"1: -> FLOCK  ADVISORY  WRITE 999999 {here} 0 EOF\n"
                     f"2: POSIX  ADVISORY  WRITE 999998 {here} 0 EOF\n"
                     f"3: FLOCK  ADVISORY  WRITE 999997 {other} 0 EOF\n")
    assert [(h.pid, h.uid) for h in flock_holders(st, str(locks))] == [(mine, os.geteuid())]
    locks.write_text(f"3: FLOCK  ADVISORY  WRITE {mine} {other} 0 EOF\n")
    assert [h.pid for h in flock_holders(st, str(locks))] == [mine]
    assert flock_holders(st, str(tmp_path / "missing")) is None


def test_reaping_by_source_and_guards(hermes_home):
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 30\n")
    with StoreBuilder(hermes_home / "state.db", layout="v30") as b:
        for src in ("cli", "cron", "kanban", "acp", "api_server", "subagent", "tool", "recovered"):
            b.session(f"orphan_{src}", source=src, age=40, ended=False)
        for src in ("telegram", "discord", "tui", "desktop"):
            b.session(f"keep_{src}", source=src, age=40, ended=False)
        b.session("keep_pinned", source="cli", age=40, ended=False, pinned=1)
        b.session("keep_locked", source="cron", age=40, ended=False)
        b.lock("keep_locked")
        b.session("keep_recent", source="cli", age=5, ended=False)
    r = sweep(hermes_home)
    assert sorted(r["reaped_ids"]) == sorted(f"orphan_{s}" for s in
                                             ("cli", "cron", "kanban", "acp", "api_server", "subagent", "tool",
                                              "recovered"))
    assert r["pruned_ids"] == []  # reaped rows count again from their closing time
    conn = sqlite3.connect(hermes_home / "state.db")
    reasons = dict(conn.execute("SELECT id, end_reason FROM sessions"))
    conn.close()
    assert reasons["orphan_cron"] == "startup_orphan_reap" and reasons["keep_telegram"] is None
    assert all(reasons[k] is None for k in reasons if k.startswith("keep_"))


def test_four_processes_exactly_one_sweeps(home):
    procs = [subprocess.Popen([sys.executable, "-m", "maint", "sweep", "--json"], cwd=REPO,
                              env={**os.environ, "HERMES_HOME": str(home)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(5)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        reports.append(json.loads(out))
    assert sum(r["swept"] for r in reports) == 1
    assert sum(len(r["pruned_ids"]) for r in reports) == 1


HERMES_SWEEP = ("import json, sys; from pathlib import Path; from hermes_state import SessionDB;"
                "db = SessionDB(Path(sys.argv[1])); print(json.dumps(db.maybe_auto_prune_and_vacuum("
                "retention_days=90, min_interval_hours=24, vacuum=False))); db.close()")


def test_interop_with_hermes_marker(home):
    db = home / "state.db"
    first = subprocess.run([sys.executable, "-c", HERMES_SWEEP, str(db)], capture_output=True, text=True)
    assert json.loads(first.stdout)["pruned"] == 1
    assert not sweep(home)["swept"]  # Hermes swept within the interval: we skip
    with open_store(db) as store:
        store.set_meta(MARKER_KEY, str(0))
    assert sweep(home)["swept"]
    second = subprocess.run([sys.executable, "-c", HERMES_SWEEP, str(db)], capture_output=True, text=True)
    assert json.loads(second.stdout)["skipped"] is True  # and Hermes honours ours


# -- VACUUM conditions ---------------------------------------------------------------------------

@pytest.fixture
def sparse_store(make_store):
    """A store where pruning frees well over 25 % of its pages."""
    b = make_store()
    for n in range(60):
        b.session(f"old{n}", age=200, messages=30)
    b.session("young", age=1, messages=5)
    b.close()
    return b.path


def _pruned_store(path):
    from maint.ops.prune import execute_prune, plan_prune

    store = open_store(path)
    execute_prune(store, plan_prune(store, None))
    return store


def _decide(store, **kw):
    args = dict(deleted=10, enabled=True, min_interval_days=30, now=1e10, holders=QUIET, disk_usage=PLENTY)
    args.update(kw)
    return decide_vacuum(store, **args)


def test_vacuum_runs_when_every_condition_holds(sparse_store):
    with _pruned_store(sparse_store) as store:
        assert _decide(store).run


@pytest.mark.parametrize("change,needle", [
    ({"deleted": 0}, "nothing was deleted"),
    ({"enabled": False}, "vacuum_after_prune"),
    ({"holders": lambda p: HolderReport(holders=[Holder(4242, "hermes gateway", ["state.db"])])}, "4242"),
    ({"holders": lambda p: HolderReport(unknown=["pid 9: access denied"])}, "could not complete"),
    ({"disk_usage": lambda p: Usage(10**9, 10**9, 1000)}, "free space"),
])
def test_each_condition_alone_blocks_vacuum(sparse_store, change, needle):
    with _pruned_store(sparse_store) as store:
        decision = _decide(store, **change)
    assert not decision.run and needle in decision.reason


def test_recent_vacuum_blocks(sparse_store):
    with _pruned_store(sparse_store) as store:
        store.set_meta(VACUUM_KEY, str(1e10 - 86400))
        decision = _decide(store)
    assert not decision.run and "min_vacuum_interval_days" in decision.reason


def test_dense_store_blocks(make_store):
    b = make_store()
    for n in range(40):
        b.session(f"s{n}", age=1, messages=20)
    b.close()
    with open_store(b.path) as store:
        decision = _decide(store)
    assert not decision.run and "pages are free" in decision.reason


def test_sweep_vacuums_in_place_and_records_last_vacuum(hermes_home):
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:
        for n in range(60):
            b.session(f"old{n}", age=200, messages=30)
        b.session("young", age=1)
    inode = db.stat().st_ino
    r = sweep(hermes_home)
    assert db.stat().st_ino == inode and Path(str(db) + "-wal").exists()  # rewritten in place
    assert r["vacuumed"] and r["bytes_freed"] > 0 and float(meta(db, VACUUM_KEY)) > 0
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_sweep_cli_json_keys(home):
    result = run_subprocess("sweep", "--json", env={"HERMES_HOME": str(home)})
    r = json.loads(result.stdout)
    assert {"swept", "skipped_reason", "reaped_ids", "pruned_ids", "vacuumed", "vacuum_reason"} <= set(r)


def test_the_kept_report_is_the_printed_report_as_json_text(hermes_home):
    """The report goes into state_meta in pieces, into a text value of its exact byte size: many ids
    (several pieces of a thousand), ids outside ASCII, and a value SQL's JSON functions still read."""
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    with StoreBuilder(hermes_home / "state.db") as b:
        for n in range(2100):
            b.session(f"古い_{n:04d}" if n % 7 == 0 else f"old_{n:04d}", age=200, messages=1)
    report = sweep(hermes_home, force=True)
    assert len(report["pruned_ids"]) == 2100
    conn = sqlite3.connect(hermes_home / "state.db")
    try:
        kind, valid, count = conn.execute(
            "SELECT typeof(value), json_valid(value), json_array_length(value, '$.pruned_ids') FROM state_meta "
            "WHERE key = 'hermes_maint.last_sweep_report'").fetchone()
    finally:
        conn.close()
    assert (kind, valid, count) == ("text", 1, 2100)
    kept = json.loads(meta(hermes_home / "state.db", "hermes_maint.last_sweep_report"))
    assert kept == json.loads(json.dumps(report, default=list))


def _sweep_home(tmp_path, n=40):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    with StoreBuilder(home / "state.db") as b:
        for i in range(n):
            b.session(f"old{i}", age=200, messages=3)
        b.session("recent", age=1)
    return home


def test_a_killed_sweep_is_resumed_by_the_next_run_not_skipped(tmp_path):
    home = _sweep_home(tmp_path)
    # one session a transaction, however fast the machine (see BATCH_MS in tests/crash/test_crash.py)
    env = {"HERMES_HOME": str(home), "HERMES_MAINT_BATCH_MS": "0.001", "HERMES_MAINT_CRASH_AT": "tx_committed:3"}
    killed = run_subprocess("sweep", "--json", env=env)
    assert killed.returncode == -9
    left = session_ids(home / "state.db")
    assert "recent" in left and len(left) > 1  # part-way
    again = run_subprocess("sweep", "--json", env={"HERMES_HOME": str(home)})
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["swept"] and report["resumed"] and report["completed"] and not report["cancelled"]
    assert session_ids(home / "state.db") == {"recent"}
    third = json.loads(run_subprocess("sweep", "--json", env={"HERMES_HOME": str(home)}).stdout)
    assert third["swept"] is False and "already swept" in third["skipped_reason"]


def test_a_cancelled_sweep_says_so_and_is_resumed(tmp_path, monkeypatch):
    from maint.store import batching

    home = _sweep_home(tmp_path)
    monkeypatch.setenv("HERMES_HOME", str(home))
    batching.CANCEL.set()  # SIGTERM reached the job loop before the first batch
    try:
        report = run_sweep(home / "state.db", load_config())
    finally:
        batching.CANCEL.clear()
    assert report["swept"] and report["cancelled"] and not report["completed"]
    assert report["pruned_ids"] == [] and report["vacuumed"] is False
    resumed = run_sweep(home / "state.db", load_config())
    assert resumed["resumed"] and resumed["completed"] and len(resumed["pruned_ids"]) == 40


def test_a_hermes_claim_inside_the_interval_is_still_respected(tmp_path):
    import time

    home = _sweep_home(tmp_path)
    conn = sqlite3.connect(home / "state.db")
    conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES ('last_auto_prune', ?)", (str(time.time()),))
    conn.commit()
    conn.close()
    report = json.loads(run_subprocess("sweep", "--json", env={"HERMES_HOME": str(home)}).stdout)
    assert report["swept"] is False and "already swept" in report["skipped_reason"]
