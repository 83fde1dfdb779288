"""prune, archive, sweep and optimize while several real Hermes writers append and a reader searches."""

import pytest

from tests.conftest import run_subprocess
from tests.live import LiveHermes
from tests.storegen import bulk_store


@pytest.mark.serial
@pytest.mark.slow
def test_jobs_beside_live_writers_and_reader(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 200\n")
    db = home / "state.db"
    bulk_store(db, sessions=1500, messages_per_session=14, old_share=0.7, content_bytes=300)
    env = {"HERMES_HOME": str(home)}
    with LiveHermes(db, writers=3, interval=0.005) as live:
        for args in (["prune", "--db", db, "--older-than", "300", "--yes"],
                     ["archive", "--db", db, "--older-than", "30", "--yes"],
                     ["sweep", "--force"],
                     ["optimize", "--db", db]):
            result = run_subprocess(*args, env=env, timeout=600)
            assert result.returncode == 0, (args, result.stderr)
        figures = live.finish()
    for w in figures["writers"]:
        assert w["failed"] == 0 and w["appended"] > 20
        assert figures["stored"][w["session_id"]] == w["appended"]  # every message each writer wrote is there
    assert figures["reader"]["failed"] == 0 and figures["reader"]["searches"] > 10
