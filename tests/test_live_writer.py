"""prune of thousands of sessions through the CLI while a real Hermes writer appends: nothing lost, nothing fails."""

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, run_subprocess, session_ids
from tests.live import PATIENT
from tests.storegen import bulk_store


@pytest.mark.slow
def test_prune_beside_live_hermes_writer(tmp_path):
    """The CLI prune with its own knobs (transactions ended by the clock) beside a Hermes writer whose patience
    no load uses up: every old session goes, every other stays, no append fails or is lost. (The transaction
    structure is checked with pinned knobs in test_batching.py and test_prune.py; the writer's worst append is
    bench/prune_bench.py's.)"""
    db = tmp_path / "state.db"
    info = bulk_store(db, sessions=1500, messages_per_session=8, old_share=0.7, content_bytes=300)
    before = session_ids(db)
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-m", "tests.hermes_writer", str(db), str(stop), "0.005"],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **PATIENT})
    try:
        deadline = time.time() + 120
        while not (tmp_path / "stop.ready").exists():
            assert time.time() < deadline and writer.poll() is None
            time.sleep(0.05)
        result = run_subprocess("prune", "--db", db, "--yes", "--json", timeout=600)
    finally:
        stop.write_text("1")
        out, err = writer.communicate(timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    stats = json.loads(out.strip().splitlines()[-1])
    deleted = set(report["session_ids"])
    assert report["matched"] == report["deleted"] == len(deleted) == info["old_sessions"] and deleted <= before
    assert session_ids(db) == before - deleted | {stats["session_id"]}
    assert stats["failed"] == 0, err
    assert stats["appended"] >= 1
    conn = sqlite3.connect(db)
    stored = conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (stats["session_id"],)).fetchone()[0]
    conn.close()
    assert stored == stats["appended"]
