"""An external-content search index out of step with its messages (hostile try 5, H6): found by FTS5's check
against the content (repair-fts; doctor never writes, and the check is a write), rebuilt by repair-fts --apply,
named when a delete runs into it; and the demo layout keeps its indexes through an update of a message, as
upstream's triggers do."""

import json
import os
import sqlite3

import pytest

from maint.config import load_config
from maint.demo import build_demo
from maint.ops.doctor import run_doctor
from maint.store.holders import HolderReport
from tests.conftest import file_hash, query, run_subprocess

TOOL_CALLS = json.dumps([{"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": "{}"}}])
INDEXES = ("messages_fts", "messages_fts_trigram")


def content_ok(db, table):
    conn = sqlite3.connect(db)
    try:
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
        return True
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.close()


def update_messages(db, *, drop_trigger=False):
    """What an older tool or a hand fix-up does: an UPDATE of indexed columns, with no update trigger to follow."""
    conn = sqlite3.connect(db)
    if drop_trigger:
        conn.execute("DROP TRIGGER IF EXISTS messages_fts_update")
    conn.execute("UPDATE messages SET tool_calls = ?, content = content || ' zzyzx' "
                 "WHERE session_id = 'demo_old_cli' AND role = 'assistant'", (TOOL_CALLS,))
    conn.commit()
    conn.close()


@pytest.fixture
def out_of_step(tmp_path):
    db = tmp_path / "state.db"
    build_demo(db)
    update_messages(db, drop_trigger=True)
    assert not content_ok(db, "messages_fts")
    return db


def test_the_demo_layout_keeps_both_indexes_through_an_update_of_a_message(tmp_path):
    db = tmp_path / "state.db"
    build_demo(db)
    update_messages(db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE messages SET role = 'tool' WHERE id = (SELECT MIN(id) FROM messages WHERE "
                 "session_id = 'demo_old_cli' AND role = 'assistant')")  # leaves the trigram index, as upstream's
    conn.commit()
    conn.close()
    assert all(content_ok(db, t) for t in INDEXES)
    hits = query(db, "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'zzyzx'")[0][0]
    assert hits == query(db, "SELECT count(*) FROM messages WHERE content LIKE '%zzyzx'")[0][0] > 0
    r = run_subprocess("delete", "demo_old_cli", "--yes", "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert all(content_ok(db, t) for t in INDEXES)


def test_repair_fts_finds_it_and_apply_rebuilds_it(out_of_step):
    db = out_of_step
    r = run_subprocess("repair-fts", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    assert list(json.loads(r.stdout)["damaged"]) == ["messages_fts"]
    r = run_subprocess("repair-fts", "--apply", "--yes", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rebuilt"] == ["messages_fts"]
    assert all(content_ok(db, t) for t in INDEXES)
    r = run_subprocess("delete", "demo_old_cli", "--yes", "--db", str(db))
    assert r.returncode == 0, r.stderr


def test_doctor_full_never_writes_and_points_to_repair_fts(out_of_step, tmp_path):
    """FTS5 runs its content check as a write, holding Hermes's writers for its whole read (minutes on a 10 GB
    store): doctor, which never writes, leaves it to repair-fts and says so."""
    db = out_of_step
    report = run_doctor(db, load_config(), full=True, holders=lambda p: HolderReport())
    fts = {f["data"]["table"]: f for f in report["findings"] if f["kind"] == "fts_index"}
    assert set(fts) == set(INDEXES)
    assert all("its check against the messages: repair-fts" in f["what"] for f in fts.values())
    assert sorted(os.listdir(db.parent)) == ["state.db"]


def test_a_delete_through_it_names_the_index_and_its_fix_not_a_corrupt_store(out_of_step):
    before = query(out_of_step, "SELECT count(*) FROM messages")
    r = run_subprocess("delete", "demo_old_cli", "--yes", "--db", str(out_of_step))
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "out of step with its messages" in r.stderr and "repair-fts --apply" in r.stderr
    assert "corrupt" not in r.stderr
    assert query(out_of_step, "SELECT count(*) FROM messages") == before


def test_a_prune_keeps_the_unit_the_index_refuses_names_it_and_deletes_the_rest(out_of_step):
    db = out_of_step
    want = run_subprocess("prune", "--older-than", "30d", "--dry-run", "--json", "--db", str(db))
    planned = set(json.loads(want.stdout)["session_ids"])
    assert "demo_old_cli" in planned and len(planned) > 10
    r = run_subprocess("prune", "--older-than", "30d", "--yes", "--json", "--db", str(db))
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["skipped_out_of_step"] == ["demo_old_cli"] and "malformed" in report["out_of_step"]
    assert set(report["session_ids"]) == planned - {"demo_old_cli"}
    left = {sid for (sid,) in query(db, "SELECT id FROM sessions")}
    assert "demo_old_cli" in left and not (planned - {"demo_old_cli"}) & left
    assert query(db, "SELECT count(*) FROM messages WHERE session_id = 'demo_old_cli'")[0][0] > 0
    assert content_ok(db, "messages_fts_trigram")  # the rolled-back unit left the healthy index whole
    r = run_subprocess("prune", "--older-than", "30d", "--yes", "--db", str(db))
    assert "repair-fts --apply" in r.stderr and "demo_old_cli" in r.stderr
    assert run_subprocess("repair-fts", "--apply", "--yes", "--db", str(db)).returncode == 0
    r = run_subprocess("prune", "--older-than", "30d", "--yes", "--json", "--db", str(db))
    assert json.loads(r.stdout)["session_ids"] == ["demo_old_cli"]


def test_a_sweep_names_the_unit_the_index_refuses_and_goes_on(out_of_step, tmp_path):
    (tmp_path / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 30\n")
    r = run_subprocess("sweep", "--db", str(out_of_step), "--force", "--json", env={"HERMES_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["skipped_out_of_step"] == ["demo_old_cli"] and len(report["pruned_ids"]) > 10
    assert query(out_of_step, "SELECT id FROM sessions WHERE id = 'demo_old_cli'") == [("demo_old_cli",)]


def test_the_daily_doctor_leaves_the_check_out_and_the_reports_leave_no_wal_files(tmp_path):
    """The check is a write (FTS5 takes it as an INSERT): doctor, daily or --full, never opens the store for writing
    (its folder stays as found: no run lock either); repair-fts, which runs it on a store nobody holds, leaves no
    -wal or -shm beside a store at rest, nor our run lock (hostile try 9, L2: it stayed after a report or
    --dry-run), and the store's bytes as they were."""
    db = tmp_path / "state.db"
    build_demo(db)
    before = file_hash(db)
    assert run_subprocess("doctor", "--db", str(db)).returncode == 0
    assert sorted(os.listdir(tmp_path)) == ["state.db"]
    assert run_subprocess("doctor", "--full", "--db", str(db)).returncode == 0
    assert sorted(os.listdir(tmp_path)) == ["state.db"]
    for args in (["--json"], ["--dry-run"]):
        r = run_subprocess("repair-fts", "--db", str(db), *args)
        assert r.returncode == 0, r.stderr
        assert sorted(os.listdir(tmp_path)) == ["state.db"]
    assert json.loads(run_subprocess("repair-fts", "--db", str(db), "--json").stdout)["content_check"] == "ran"
    assert file_hash(db) == before


@pytest.mark.parametrize("apply", [False, True])
def test_a_content_view_that_never_ends_is_stopped_at_its_bound(tmp_path, apply):
    """Hostile try 11, N2: repair-fts reads an external-content index's messages through the store's own view
    (`messages_fts_src`, upstream's layout); a view that never ends spun for good, and `--apply` held the write
    lock meanwhile (the rebuild was exempt from the write bound). Both are bounded (write_limit_s per GB)."""
    db = tmp_path / "state.db"
    build_demo(db)
    conn = sqlite3.connect(db)
    conn.execute("DROP VIEW messages_fts_src")
    conn.execute("CREATE VIEW messages_fts_src AS WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                 "SELECT m.id, m.content, m.tool_name, m.tool_calls FROM messages m, (SELECT x FROM r WHERE x < 0)")
    conn.close()
    args = ["--apply", "--yes"] if apply else []
    r = run_subprocess("repair-fts", "--db", str(db), *args, env={"HERMES_MAINT_WRITE_LIMIT_S": "2"}, timeout=120)
    assert "a statement was still running 2 s into a transaction" in r.stdout + r.stderr, (r.stdout, r.stderr)
