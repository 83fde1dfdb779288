"""prune, archive, sweep and optimize while several real Hermes writers append and a reader searches."""

import pytest

from tests.conftest import query, run_subprocess
from tests.live import PATIENT, LiveHermes
from tests.storegen import bulk_store


@pytest.mark.slow
def test_jobs_beside_live_writers_and_reader(tmp_path):
    """Each job through the CLI, with its own knobs, while three Hermes writers (with a patience no load uses
    up) append and a reader searches: every job does its work, no append or search fails, every appended
    message is there. (The writers' worst wait beside each job is bench/load_bench.py's.)"""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 200\n")
    db = home / "state.db"
    bulk_store(db, sessions=1500, messages_per_session=14, old_share=0.7, content_bytes=300)
    assert query(db, "SELECT COUNT(*) FROM sessions WHERE started_at < strftime('%s', 'now') - 301 * 86400")[0][0]
    env = {"HERMES_HOME": str(home)}

    def older_than(days, where="1"):
        return query(db, f"SELECT COUNT(*) FROM sessions WHERE {where} AND started_at < strftime('%s', 'now') - ?",
                     (days + 1) * 86400)[0][0]

    # Each job, then what it leaves: sessions are `age` days old at their last message, started a day before.
    jobs = [(["prune", "--db", db, "--older-than", "300", "--yes"], lambda: older_than(300)),
            (["archive", "--db", db, "--older-than", "30", "--yes"], lambda: older_than(30, "archived = 0")),
            (["sweep", "--force"], lambda: older_than(200)),  # retention_days: 200
            (["optimize", "--db", db], lambda: 0)]
    with LiveHermes(db, writers=3, interval=0.005, writer_env=PATIENT) as live:
        for args, left in jobs:
            result = run_subprocess(*args, env=env, timeout=600)
            assert result.returncode == 0, (args, result.stderr)
            assert left() == 0, args
        figures = live.finish()
    assert query(db, "PRAGMA integrity_check") == [("ok",)]
    for w in figures["writers"]:
        assert w["failed"] == 0 and w["appended"] >= 1, figures["errors"]
        assert figures["stored"][w["session_id"]] == w["appended"]  # every message each writer wrote is there
    assert figures["reader"]["failed"] == 0 and figures["reader"]["searches"] >= 1
