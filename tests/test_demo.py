"""The demo store ships with the product: built with plain SQL in the current upstream layout."""

import json
import stat

from tests.conftest import query, run_subprocess


def test_demo_builds_a_store_every_command_reads(tmp_path):
    path = tmp_path / "demo" / "state.db"
    result = run_subprocess("demo", path, "--json")
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout)
    assert counts["sessions"] > 150 and counts["messages"] > counts["sessions"] * 5
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert query(path, "SELECT MAX(version) FROM schema_version") == [(30,)]
    sizes = sorted(n for (n,) in query(path, "SELECT COUNT(*) FROM messages GROUP BY session_id"))
    assert sizes[len(sizes) // 2] <= 12 and sizes[-1] >= 300  # most short, a few very long
    stats = json.loads(run_subprocess("stats", "--db", path, "--json").stdout)
    assert stats["pinned_sessions"] == 1 and stats["archived_sessions"] == 1 and stats["open_sessions"] >= 1
    plan = json.loads(run_subprocess("prune", "--db", path, "--dry-run", "--json").stdout)
    assert "demo_old_cli" in plan["session_ids"] and "demo_pinned_old" not in plan["session_ids"]
    assert "demo_open_old" not in plan["session_ids"]


def test_demo_never_overwrites(tmp_path):
    path = tmp_path / "state.db"
    path.write_text("my real store\n")
    result = run_subprocess("demo", path)
    assert result.returncode == 2 and "already exists" in result.stderr
    assert path.read_text() == "my real store\n"
