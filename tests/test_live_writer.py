"""prune of thousands of sessions while a real Hermes writer appends: nothing lost, nothing fails."""

import json
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, run_subprocess
from tests.storegen import bulk_store


@pytest.mark.serial
@pytest.mark.slow
def test_prune_beside_live_hermes_writer(tmp_path):
    db = tmp_path / "state.db"
    info = bulk_store(db, sessions=3000, messages_per_session=8, old_share=0.7, content_bytes=300)
    stop = tmp_path / "stop"
    writer = subprocess.Popen([sys.executable, "-m", "tests.hermes_writer", str(db), str(stop), "0.005"],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (tmp_path / "stop.ready").exists():
        assert time.time() < deadline and writer.poll() is None
        time.sleep(0.05)
    time.sleep(0.3)
    result = run_subprocess("prune", "--db", db, "--yes", "--json", timeout=600)
    time.sleep(0.3)
    stop.write_text("1")
    out, err = writer.communicate(timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    stats = json.loads(out.strip().splitlines()[-1])
    assert report["matched"] == info["old_sessions"] and report["transactions"] > 1
    assert stats["failed"] == 0, err
    assert stats["appended"] > 50
    conn = sqlite3.connect(db)
    stored = conn.execute("SELECT COUNT(*) FROM messages WHERE session_id = ?", (stats["session_id"],)).fetchone()[0]
    conn.close()
    assert stored == stats["appended"]
