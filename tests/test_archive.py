"""archive: flag only, lineage through its tip, open skipped and counted, re-run is a no-op."""

from tests.conftest import file_hash, query, run_json


rows = query


def archive_yes(cli, path, *args):
    return run_json(cli, "archive", path, *args)


def test_bare_archive_is_refused(make_store, cli):
    b = make_store()
    b.session("x", age=1)
    b.close()
    before = file_hash(b.path)
    result = cli("archive", "--db", b.path, "--yes")
    assert result.exit_code == 2 and "at least one filter" in result.stderr
    assert file_hash(b.path) == before


def test_sets_only_the_archived_flag(make_store, cli, layout):
    b = make_store(layout)
    b.session("smoke1", age=0.05, title="smoke test 1", messages=3)
    b.session("other", age=0.05, title="real work", messages=3)
    b.close()
    before = rows(b.path, "SELECT * FROM messages ORDER BY id")
    report = archive_yes(cli, b.path, "--title", "smoke")
    assert report["session_ids"] == ["smoke1"] and report["matched"] == 1
    assert rows(b.path, "SELECT id, archived FROM sessions ORDER BY id") == [("other", 0), ("smoke1", 1)]
    assert rows(b.path, "SELECT * FROM messages ORDER BY id") == before
    assert rows(b.path, "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'smoke1'") == [(3,)]


def test_open_sessions_skipped_and_reported(make_store, cli):
    b = make_store()
    b.session("open_desktop", age=0.01, ended=False, title="Review Hermes")
    b.session("ended_one", age=0.01, title="Review Hermes docs")
    b.close()
    report = archive_yes(cli, b.path, "--title", "review hermes")
    assert report["session_ids"] == ["ended_one"] and report["skipped_open"] == 1
    report = archive_yes(cli, b.path, "--title", "review hermes", "--include-open")
    assert report["session_ids"] == ["open_desktop"] and report["skipped_open"] == 0


def test_lineage_archived_as_unit_through_live_tip(make_store, cli):
    b = make_store()
    b.session("c1", age=300, end_reason="compression", messages=4)
    b.session("c2", age=2, parent="c1", messages=4)  # live tip, recent
    b.session("d1", age=300, end_reason="compression", messages=4)
    b.session("d2", age=200, parent="d1", messages=4)
    b.close()
    report = archive_yes(cli, b.path, "--older-than", "90")
    assert sorted(report["session_ids"]) == ["d1", "d2"]  # c1 alone is old, but its tip is live
    report = archive_yes(cli, b.path, "--newer-than", "5d")
    assert sorted(report["session_ids"]) == ["c1", "c2"]


def test_rerun_is_a_no_op(make_store, cli):
    b = make_store()
    b.session("s", age=0.1, source="cron")
    b.close()
    assert archive_yes(cli, b.path, "--source", "cron")["matched"] == 1
    second = archive_yes(cli, b.path, "--source", "cron")
    assert second["matched"] == 0 and second["session_ids"] == []


def test_pinned_left_alone(make_store, cli):
    b = make_store("v30")
    b.session("p", age=1, pinned=1, source="cron")
    b.session("q", age=1, source="cron")
    b.close()
    report = archive_yes(cli, b.path, "--source", "cron")
    assert report["session_ids"] == ["q"] and report["skipped_pinned"] == 1


def test_dry_run_and_terminal_rules(make_store, cli):
    b = make_store()
    b.session("s", age=0.1, source="cron")
    b.close()
    before = file_hash(b.path)
    report = cli.json("archive", "--db", b.path, "--source", "cron", "--dry-run")
    assert report["dry_run"] and report["session_ids"] == ["s"]
    result = cli("archive", "--db", b.path, "--source", "cron")
    assert result.exit_code == 2 and "not a terminal" in result.stderr
    assert file_hash(b.path) == before
    keys = set(report)
    assert keys == set(archive_yes(cli, b.path, "--source", "cron"))
    assert {"matched", "session_ids", "skipped_open", "dry_run"} <= keys


def _plan_then_change(make_store, change):
    """Plan an archive of three ended lineages, let a second connection *change* the store, then execute."""
    import sqlite3

    from maint.ops.archive import execute_archive, plan_archive
    from maint.selection.filters import parse_filters
    from maint.store.connection import open_store

    b = make_store("v30")
    b.session("a1", age=300, end_reason="compression", messages=2)
    b.session("a2", age=200, parent="a1", messages=2)
    b.session("b1", age=200, messages=2)
    b.session("c1", age=200, messages=2)
    b.close()
    with open_store(b.path) as store:
        plan = plan_archive(store, parse_filters({"older_than": "90"}))
        assert sorted(plan.session_ids) == ["a1", "a2", "b1", "c1"]
        other = sqlite3.connect(b.path)
        with other:
            change(other)
        other.close()
        result = execute_archive(store, plan)
    return b.path, result


def test_session_pinned_after_planning_keeps_its_lineage(make_store):
    path, result = _plan_then_change(make_store, lambda c: c.execute("UPDATE sessions SET pinned = 1 WHERE id = 'a1'"))
    assert rows(path, "SELECT id FROM sessions WHERE archived = 1 ORDER BY id") == [("b1",), ("c1",)]
    assert sorted(result.archived_ids) == ["b1", "c1"] and sorted(result.skipped_changed) == ["a1", "a2"]


def test_session_reopened_after_planning_is_left_alone(make_store):
    path, result = _plan_then_change(make_store, lambda c: c.execute("UPDATE sessions SET ended_at = NULL "
                                                                     "WHERE id = 'b1'"))
    assert rows(path, "SELECT id FROM sessions WHERE archived = 1 ORDER BY id") == [("a1",), ("a2",), ("c1",)]
    assert sorted(result.archived_ids) == ["a1", "a2", "c1"] and result.skipped_changed == ["b1"]


def test_session_written_to_after_planning_is_left_alone(make_store):
    path, result = _plan_then_change(make_store, lambda c: c.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES ('c1', 'user', 'late', "
        "strftime('%s','now'))"))
    assert rows(path, "SELECT id FROM sessions WHERE archived = 1 ORDER BY id") == [("a1",), ("a2",), ("b1",)]
    assert sorted(result.archived_ids) == ["a1", "a2", "b1"] and result.skipped_changed == ["c1"]


def test_session_given_a_child_after_planning_keeps_its_lineage(make_store):
    """A compression continuation or subagent run started under a planned session while the prompt waited was
    left out of the re-check (hostile try): a half-archived conversation whose new tip is open."""
    import time

    path, result = _plan_then_change(make_store, lambda c: c.execute(
        "INSERT INTO sessions (id, source, parent_session_id, started_at) VALUES ('c2', 'cli', 'c1', ?)",
        (time.time(),)))
    assert rows(path, "SELECT id FROM sessions WHERE archived = 1 ORDER BY id") == [("a1",), ("a2",), ("b1",)]
    assert sorted(result.archived_ids) == ["a1", "a2", "b1"] and result.skipped_changed == ["c1"]


def test_archive_leaves_a_session_whose_id_is_not_utf8_and_archives_the_rest(tmp_path, cli):
    """Finding 12 of issue 24 (a second command through the same mechanism): such an id stopped archive."""
    from tests.test_export_stored_text import bad_store

    store = bad_store(tmp_path / "state.db", layout="v30")
    report = run_json(cli, "archive", store, "--older-than", "1d")
    assert sorted(report["session_ids"]) == ["badmsg", "badtitle", "g0", "g1", "g2"]
    assert query(store, "SELECT archived FROM sessions WHERE CAST(id AS BLOB) = x'78ff'") == [(0,)]
