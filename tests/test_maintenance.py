"""optimize, the low-disk question, config write-back, and the job loop."""

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections import namedtuple

import pytest

from maint.config import load_config, set_session_key
from maint.ops.diskcheck import GB, DiskFigures, estimate, notice, should_ask
from maint.errors import MaintError, UsageError
from maint.jobs.scheduler import load_catalogue, load_job, next_runs
from maint.store.connection import open_store
from maint.ops.vacuum import content_fingerprint, optimize
from tests.conftest import REPO, LockHolder, run_subprocess
from tests.storegen import StoreBuilder

Usage = namedtuple("Usage", "total used free")


def _store_with_garbage(path, n=40):
    with StoreBuilder(path) as b:
        for i in range(n):
            b.session(f"s{i}", age=1 if i % 3 else 200, messages=20)
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE id LIKE 's%0')")
    conn.commit()
    conn.close()


def test_optimize_changes_no_data_and_reports_sizes(tmp_path, cli):
    db = tmp_path / "state.db"
    _store_with_garbage(db)
    with open_store(db) as store:
        before = content_fingerprint(store)
    inode = db.stat().st_ino
    r = cli.json("optimize", "--db", db)
    assert r["fts_optimized"] == ["messages_fts", "messages_fts_trigram"]
    assert r["bytes_after"] <= r["bytes_before"] and db.stat().st_ino == inode
    with open_store(db) as store:
        assert content_fingerprint(store) == before
        assert store.scalar("PRAGMA integrity_check") == "ok"
        store.conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)")


def test_optimize_refuses_without_space(tmp_path):
    db = tmp_path / "state.db"
    _store_with_garbage(db, 5)
    with open_store(db) as store, pytest.raises(MaintError) as err:
        optimize(store, disk_usage=lambda p: Usage(10**9, 10**9 - 1000, 1000))
    assert "1000 bytes free" in str(err.value) and "need about" in str(err.value)


def test_optimize_busy_exits_1(tmp_path):
    db = tmp_path / "state.db"
    _store_with_garbage(db, 5)
    with LockHolder(db):
        result = run_subprocess("optimize", "--db", db, env={"HERMES_MAINT_BUSY_MS": "300"}, timeout=120)
    assert result.returncode == 1 and "write lock" in result.stderr and "Traceback" not in result.stderr


class ReadHolder(LockHolder):
    """Another process keeping a read transaction open (WAL: its snapshot pins the -wal's frames)."""

    CODE = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
            "c.execute('BEGIN'); c.execute('SELECT COUNT(*) FROM messages').fetchone(); print('locked', flush=True);"
            "sys.stdin.read(); c.execute('COMMIT')")


def test_optimize_beside_a_reader_says_the_final_checkpoint_could_not_finish(tmp_path):
    """Hostile try 3, F16: with a reader holding a read transaction the report said "VACUUM done" and the store
    had grown; now it says the final checkpoint could not finish because a process holds a read transaction,
    naming the holder, and the rewritten store is in the -wal."""
    db = tmp_path / "state.db"
    _store_with_garbage(db, 20)
    with ReadHolder(db) as reader:
        result = run_subprocess("optimize", "--db", db, env={"HERMES_MAINT_BUSY_MS": "300"}, timeout=120)
        as_json = run_subprocess("optimize", "--db", db, "--json", env={"HERMES_MAINT_BUSY_MS": "300"}, timeout=120)
        pid = reader.proc.pid
    assert result.returncode == 0, result.stderr
    assert "VACUUM done" not in result.stdout
    assert "the final checkpoint could not finish: a process holds a read transaction" in result.stdout
    assert f"pid {pid}" in result.stdout
    assert f"pid {pid}" in json.loads(as_json.stdout)["checkpoint_blocked"]


def test_optimize_with_no_reader_says_vacuum_done(tmp_path):
    db = tmp_path / "state.db"
    _store_with_garbage(db, 5)
    result = run_subprocess("optimize", "--db", db)
    assert result.returncode == 0 and "VACUUM done" in result.stdout and "checkpoint" not in result.stdout


@pytest.mark.parametrize("free,total,low", [(1.9 * GB, 500 * GB, True), (2.1 * GB, 10 * GB, False),
                                            (2.1 * GB, 500 * GB, True),
                                            (15 * GB, 200 * GB, True), (15 * GB, 100 * GB, False),
                                            (25 * GB, 1000 * GB, False)])
def test_disk_thresholds(free, total, low):
    assert DiskFigures(total=int(total), free=int(free)).low is low


def test_question_only_while_key_absent(hermes_home):
    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:
        b.session("old", age=200)
    low = DiskFigures(total=100 * GB, free=1 * GB)
    with open_store(db) as store:
        assert should_ask(load_config(), store, low, time.time())
        assert not should_ask(load_config(), store, DiskFigures(total=100 * GB, free=50 * GB), time.time())
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: false\n")
    with open_store(db) as store:
        assert not should_ask(load_config(), store, low, time.time())


def test_notice_weights_bytes_and_says_when_pruning_will_not_help(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("old_big", age=200, messages=40)
        b.session("young", age=1, messages=2)
    with open_store(db) as store:
        est = estimate(store, 90)
    assert est["sessions"] == 1 and est["stored_bytes"] > 1000
    lines = notice(DiskFigures(total=100 * GB, free=1 * GB), est, 90)
    assert any("will not solve" in line for line in lines) and any("optimize" in line for line in lines)
    none = dict(est, sessions=0, stored_bytes=0)
    assert any("no ended session is older than 90 days" in line
               for line in notice(DiskFigures(total=100 * GB, free=1 * GB), none, 90))


def test_autoprune_on_keeps_comments_and_keys(hermes_home, cli):
    cfg = hermes_home / "config.yaml"
    cfg.write_text("# my hermes config\nmodel: gpt-5  # favourite\nsessions:\n  retention_days: 30  # a month\n")
    result = cli("autoprune", "on")
    assert result.exit_code == 0, result.output
    text = cfg.read_text()
    assert "# my hermes config" in text and "# favourite" in text and "# a month" in text
    assert load_config().session("auto_prune") is True and load_config().session("retention_days") == 30
    assert cli("autoprune", "off").exit_code == 0 and load_config().session("auto_prune") is False
    assert cli("autoprune", "sometimes").exit_code == 2


def test_autoprune_later_postpones_a_week(hermes_home, cli):
    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:
        b.session("x")
    assert cli("autoprune", "later").exit_code == 0
    low = DiskFigures(total=100 * GB, free=1 * GB)
    with open_store(db) as store:
        assert not should_ask(load_config(), store, low, time.time())
        assert should_ask(load_config(), store, low, time.time() + 8 * 86400)


def test_set_session_key_creates_missing_file(tmp_path):
    path = tmp_path / "config.yaml"
    set_session_key(path, "auto_prune", True)
    assert "auto_prune: true" in path.read_text()


# -- the job catalogue and loop -----------------------------------------------------------------

def test_shipped_catalogue():
    jobs = {j.name: j for j in load_catalogue()}
    assert jobs["nightly-sweep"].enabled and jobs["nightly-sweep"].trigger_text == "cron 30 3 * * *"
    assert not jobs["weekly-optimize"].enabled
    (sweep_next,) = [when for j, when in next_runs(list(jobs.values())) if j.name == "nightly-sweep"]
    assert (sweep_next.hour, sweep_next.minute) == (3, 30)


@pytest.mark.parametrize("body,field", [
    ("name: x\ncommand: [sweep]\ntrigger: {cron: '61 3 * * *'}\n", "trigger.cron"),
    ("name: x\ncommand: [explode]\ntrigger: {cron: '30 3 * * *'}\n", "command"),
    ("name: x\ncommand: [sweep]\ntrigger: {interval: {hours: -1}}\n", "trigger.interval"),
    ("name: x\ncommand: [sweep]\ntrigger: {every: 5}\n", "trigger"),
    ("command: [sweep]\ntrigger: {cron: '30 3 * * *'}\n", "name"),
    ("name: x\ncommand: [sweep]\ntrigger: {cron: '30 3 * * *'}\nenabled: maybe\n", "enabled"),
])
def test_bad_job_file_names_file_and_field(tmp_path, body, field):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(UsageError) as err:
        load_job(path)
    assert str(path) in str(err.value) and f"'{field}'" in str(err.value)


def test_bad_job_file_stops_loop_before_start(tmp_path):
    (tmp_path / "good.yaml").write_text("name: g\ncommand: [stats]\ntrigger: {interval: {seconds: 1}}\n")
    (tmp_path / "bad.yaml").write_text("name: b\ncommand: [stats]\ntrigger: {cron: 'nope'}\n")
    result = run_subprocess("jobs", "run", "--jobs-dir", tmp_path, timeout=60)
    assert result.returncode == 2 and "bad.yaml" in result.stderr and "trigger.cron" in result.stderr


def test_real_scheduler_fires_and_stops_on_sigterm(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("x")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "tick.yaml").write_text("name: tick\ncommand: [stats]\ntrigger: {interval: {seconds: 1}}\n")
    errlog = tmp_path / "loop.log"
    with open(errlog, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "maint", "jobs", "run", "--jobs-dir", str(jobs),
                                 "--db", str(db)], cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        deadline = time.time() + 120  # process start-up and two ticks on a loaded machine
        while time.time() < deadline and errlog.read_text().count("job tick finished with exit code 0") < 2:
            time.sleep(0.1)
        assert errlog.read_text().count("job tick finished with exit code 0") >= 2, errlog.read_text()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "job loop stopped" in errlog.read_text()
    assert "Total sessions: 1" in out


def test_jobs_list_json():
    result = run_subprocess("jobs", "list", "--json")
    rows = json.loads(result.stdout)["jobs"]
    assert {r["name"] for r in rows} >= {"nightly-sweep", "weekly-optimize"}


def test_notice_says_pruning_falls_short_when_prunable_history_is_far_below_the_shortfall():
    """Issue 25 item 6: a store that is a large share of a small disk, but whose prunable history is tiny,
    was offered pruning with no word that it cannot free what the disk lacks."""
    est = {"sessions": 3, "messages": 30, "stored_bytes": 10 * 10**6, "store_bytes": 2 * GB}
    figures = DiskFigures(total=10 * GB, free=GB // 2)
    assert figures.shortfall == int(1.5 * GB)
    lines = notice(figures, est, 90)
    short = [line for line in lines if "will not solve" in line]
    assert len(short) == 1 and "9.5 MiB" in short[0] and "1.4 GiB" in short[0], lines
    enough = dict(est, stored_bytes=3 * GB)
    assert not any("will not solve" in line for line in notice(figures, enough, 90))
