"""What the sweep counts as old: reaped rows age from their reaping, every session ages on its own (upstream's
family rule: a child outside the selection is kept and orphaned),
and archived sessions (hidden, not kept) go at retention like any other while pinned ones stay."""

import json
import sqlite3

import pytest

from tests.conftest import query, session_ids
from tests.storegen import DAY, StoreBuilder


def sweep_json(cli, path):
    result = cli("sweep", "--db", path, "--force", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def shift_end(path, sid, seconds):
    """Move a session's ended_at back in time, as if the sweep that reaped it ran that long ago."""
    conn = sqlite3.connect(path)
    conn.execute("UPDATE sessions SET ended_at = ended_at - ? WHERE id = ?", (seconds, sid))
    conn.commit()
    conn.close()


@pytest.fixture
def config(hermes_home):
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 90\n")
    return hermes_home


def test_reaped_rows_get_a_whole_retention_their_old_parent_goes(config, cli, layout):
    path = config / "state.db"
    with StoreBuilder(path, layout=layout) as b:
        b.session("orch", age=200, messages=4)
        b.session("sub", source="subagent", age=200, ended=False, parent="orch",
                  model_config={"_delegate_from": "orch"})
        b.session("lone", source="cron", age=200, ended=False)
    first = sweep_json(cli, path)
    # upstream: the ended parent goes at retention; its open child is kept, orphaned, and reaped
    assert sorted(first["reaped_ids"]) == ["lone", "sub"] and first["pruned_ids"] == ["orch"]
    assert query(path, "SELECT parent_session_id FROM sessions WHERE id = 'sub'") == [(None,)]
    # The exact report: `sweep --force` a minute after the reap.
    shift_end(path, "sub", 60)
    shift_end(path, "lone", 60)
    second = sweep_json(cli, path)
    assert second["reaped_ids"] == [] and second["pruned_ids"] == []
    assert session_ids(path) == {"sub", "lone"}
    assert query(path, "SELECT end_reason FROM sessions WHERE id = 'sub'") == [("startup_orphan_reap",)]
    # A whole further retention period after the reap, the reaped rows go.
    shift_end(path, "sub", 91 * DAY)
    shift_end(path, "lone", 91 * DAY)
    third = sweep_json(cli, path)
    assert sorted(third["pruned_ids"]) == ["lone", "sub"] and session_ids(path) == set()


def test_recently_active_child_is_kept_its_old_parent_goes_in_prune(make_store, cli, layout):
    """The same rule for the bare prune: a child active last week stays (orphaned); its old parent goes."""
    b = make_store(layout)
    b.session("orch", age=200)
    b.session("sub", source="subagent", age=7, parent="orch", model_config={"_delegate_from": "orch"})
    b.session("orch2", age=200)
    b.session("sub2", source="subagent", age=150, parent="orch2", model_config={"_delegate_from": "orch2"})
    b.close()
    result = cli("prune", "--db", b.path, "--yes", "--json")
    report = json.loads(result.stdout)
    assert sorted(report["session_ids"]) == ["orch", "orch2", "sub2"]
    assert report["held_back"] == {}
    assert session_ids(b.path) == {"sub"}
    assert query(b.path, "SELECT parent_session_id FROM sessions WHERE id = 'sub'") == [(None,)]


def test_archived_sessions_go_at_retention_pinned_stay(config, cli, layout):
    path = config / "state.db"
    with StoreBuilder(path, layout=layout) as b:
        b.session("arch_old", age=200, archived=1)
        b.session("arch_recent", age=10, archived=1)
        b.session("plain_old", age=200)
        if layout != "v22":  # v22 has no pinned column
            b.session("pinned_arch_old", age=200, archived=1, pinned=1)
    report = sweep_json(cli, path)
    assert sorted(report["pruned_ids"]) == ["arch_old", "plain_old"]
    assert session_ids(path) == ({"arch_recent"} | ({"pinned_arch_old"} if layout != "v22" else set()))
