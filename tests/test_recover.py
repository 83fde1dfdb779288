"""recover (stray messages get a 'recovered' placeholder) and repair-fts (a damaged search index rebuilt)."""

import json
import sqlite3

import pytest

from maint.config import load_config
from maint.ops.sweep import run_sweep
from tests.conftest import LockHolder, file_hash, query, run_subprocess
from tests.storegen import DAY, StoreBuilder
from tests.test_sweep import PLENTY, QUIET


def _stray(db, sid, n, ts):
    conn = sqlite3.connect(db)  # foreign keys off, as a crashed or careless writer leaves them
    for i in range(n):
        conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                     (sid, "user" if i % 2 == 0 else "assistant", f"stranded {sid} word{i}", ts + i))
    conn.commit()
    conn.close()


@pytest.fixture
def stray_store(hermes_home, layout):
    db = hermes_home / "state.db"
    with StoreBuilder(db, layout=layout) as b:
        b.session("kept", age=1, messages=2)
        now = b.now
    _stray(db, "lost_a", 3, now - 200 * DAY)
    _stray(db, "lost_b", 2, now - 2 * DAY)
    return db, now


def test_report_only_writes_nothing(stray_store):
    db, _ = stray_store
    before = file_hash(db)
    result = run_subprocess("recover", "--db", db, "--json")
    r = json.loads(result.stdout)
    assert result.returncode == 0 and file_hash(db) == before
    assert [s["session_id"] for s in r["stray_sessions"]] == ["lost_a", "lost_b"] and r["stray_messages"] == 5
    assert r["recovered"] == [] and r["apply"] is False


def test_apply_needs_a_terminal_or_yes(stray_store):
    db, _ = stray_store
    before = file_hash(db)
    result = run_subprocess("recover", "--db", db, "--apply")
    assert result.returncode == 2 and "--yes" in result.stderr and file_hash(db) == before
    assert run_subprocess("recover", "--db", db, "--apply", "--dry-run").returncode == 2


def test_apply_creates_open_recovered_placeholders(stray_store, layout):
    db, now = stray_store
    result = run_subprocess("recover", "--db", db, "--apply", "--yes", "--json")
    r = json.loads(result.stdout)
    assert r["recovered"] == ["lost_a", "lost_b"] and r["recovered_messages"] == 5
    rows = query(db, "SELECT id, source, ended_at, end_reason, started_at, message_count FROM sessions "
                     "WHERE source = 'recovered' ORDER BY id")
    assert [(x[0], x[1], x[2], x[3], x[5]) for x in rows] == [("lost_a", "recovered", None, None, 3),
                                                              ("lost_b", "recovered", None, None, 2)]
    assert rows[0][4] == pytest.approx(now - 200 * DAY)
    if layout == "v30":
        assert query(db, "SELECT last_activity_at FROM sessions WHERE id = 'lost_a'")[0][0] == pytest.approx(
            now - 200 * DAY + 2)
    exported = run_subprocess("export", "-", "--db", db, "--session-id", "lost_a")
    assert exported.returncode == 0 and "stranded lost_a word2" in exported.stdout
    again = json.loads(run_subprocess("recover", "--db", db, "--apply", "--yes", "--json").stdout)
    assert again["stray_sessions"] == [] and again["recovered"] == []


def test_the_sweep_reaps_a_placeholder_then_prunes_it_a_retention_later(stray_store, hermes_home):
    db, now = stray_store
    run_subprocess("recover", "--db", db, "--apply", "--yes")
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 90\n")
    first = run_sweep(db, load_config(), now=now, holders=QUIET, disk_usage=PLENTY)
    assert first["reaped_ids"] == ["lost_a"] and "lost_a" not in first["pruned_ids"]
    assert query(db, "SELECT end_reason FROM sessions WHERE id = 'lost_a'") == [("startup_orphan_reap",)]
    later = run_sweep(db, load_config(), now=now + 91 * DAY, holders=QUIET, disk_usage=PLENTY, force=True)
    assert "lost_a" in later["pruned_ids"]
    assert query(db, "SELECT COUNT(*) FROM messages WHERE session_id = 'lost_a'") == [(0,)]


def test_one_transaction_per_session_id(stray_store):
    db, _ = stray_store
    killed = run_subprocess("recover", "--db", db, "--apply", "--yes", env={"HERMES_MAINT_CRASH_AT": "tx_committed:1"})
    assert killed.returncode == -9
    assert query(db, "SELECT id FROM sessions WHERE source = 'recovered'") == [("lost_a",)]
    assert query(db, "PRAGMA integrity_check") == [("ok",)]
    done = json.loads(run_subprocess("recover", "--db", db, "--apply", "--yes", "--json").stdout)
    assert done["recovered"] == ["lost_b"]


# -- repair-fts ------------------------------------------------------------------------------------

@pytest.fixture
def damaged(hermes_home):
    db = hermes_home / "state.db"
    with StoreBuilder(db, layout="v30") as b:
        for n in range(10):
            b.session(f"s{n}", age=1, messages=6)
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM messages_fts_trigram_data WHERE id = (SELECT MAX(id) FROM messages_fts_trigram_data)")
    conn.commit()
    conn.close()
    return db


def test_repair_fts_reports_without_writing(damaged):
    before = file_hash(damaged)
    result = run_subprocess("repair-fts", "--db", damaged, "--json")
    r = json.loads(result.stdout)
    assert result.returncode == 0 and file_hash(damaged) == before
    assert list(r["damaged"]) == ["messages_fts_trigram"] and r["rebuilt"] == []


def test_repair_fts_refuses_while_held(damaged):
    before = file_hash(damaged)
    with LockHolder(damaged) as holder:
        result = run_subprocess("repair-fts", "--db", damaged, "--apply", "--yes")
        assert result.returncode == 1 and f"pid {holder.proc.pid}" in result.stderr
    assert file_hash(damaged) == before


def test_repair_fts_rebuilds_and_records_the_run(damaged, cli):
    r = json.loads(run_subprocess("repair-fts", "--db", damaged, "--apply", "--yes", "--json").stdout)
    assert r["rebuilt"] == ["messages_fts_trigram"]
    assert query(damaged, "PRAGMA quick_check") == [("ok",)]
    [run] = cli.json("history", "--db", damaged, "--kind", "repair-fts")["runs"]
    assert run["rows"] == 1


def test_incomplete_inline_index_is_refilled_as_hermes_indexes(hermes_home):
    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:  # hermes-agent 0.19: inline-content indexes
        for n in range(5):
            b.session(f"s{n}", age=1, messages=4)
    conn = sqlite3.connect(db)
    hermes_row = conn.execute("SELECT content FROM messages_fts WHERE rowid = 3").fetchone()
    conn.execute("DELETE FROM messages_fts WHERE rowid IN (1, 2, 3)")
    conn.commit()
    conn.close()
    r = json.loads(run_subprocess("repair-fts", "--db", db, "--json").stdout)
    assert r["damaged"] == {"messages_fts": ["messages_fts holds 17 of the 20 messages it should index"]}
    done = json.loads(run_subprocess("repair-fts", "--db", db, "--apply", "--yes", "--json").stdout)
    assert done["how"] == {"messages_fts": "refill"}
    assert query(db, "SELECT content FROM messages_fts WHERE rowid = 3") == [hermes_row]
    assert query(db, "SELECT COUNT(*) FROM messages_fts") == [(20,)]
    assert query(db, "PRAGMA quick_check") == [("ok",)]
