"""clean-markers as upstream's purge_stale_tool_call_markers (issue 25 item 7)."""

import json
import os
import sqlite3

import pytest

from tests.conftest import query
from tests.storegen import StoreBuilder

CALLS = json.dumps([{"id": "c1", "type": "function", "function": {"name": "memory", "arguments": "{}"}}])


@pytest.fixture
def marked(tmp_path, layout, hermes_home):
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout=layout) as b:
        b.session("s1", age=3, messages=2)
        b.session("s2", age=3, messages=2)
        rows = [("s1", "assistant", "[memory]", CALLS),          # a marker
                ("s2", "assistant", "  [skill_manage]\n", CALLS),  # a marker, padded
                ("s1", "assistant", "[memory]", None),            # no tool calls: kept
                ("s1", "assistant", "see [memory] below", CALLS),  # not bare: kept
                ("s1", "user", "[memory]", CALLS)]                # not an assistant row: kept
        for sid, role, content, calls in rows:
            b.raw.execute("INSERT INTO messages (session_id, role, content, tool_calls, timestamp) "
                          "VALUES (?,?,?,?,?)", (sid, role, content, calls, b.now - 3 * 86400))
    return db


def _fts_ok(db):
    conn = sqlite3.connect(db)
    try:
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE name IN ('messages_fts', "
                                    "'messages_fts_trigram')"):
            conn.execute(f"INSERT INTO {name}({name}, rank) VALUES('integrity-check', 1)")
    finally:
        conn.close()


def test_dry_run_lists_the_bare_markers_and_writes_nothing(marked, cli):
    before = query(marked, "SELECT id, content FROM messages ORDER BY id")
    r = cli("clean-markers", "--db", marked, "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert [row["content"].strip() for row in report["rows"]] == ["[memory]", "[skill_manage]"]
    assert report["sessions"] == 2 and report["cleared"] == [] and report["backup"] is None
    assert query(marked, "SELECT id, content FROM messages ORDER BY id") == before


def test_without_a_terminal_or_yes_it_refuses_with_exit_2(marked, cli):
    before = query(marked, "SELECT id, content FROM messages ORDER BY id")
    r = cli("clean-markers", "--db", marked)
    assert r.exit_code == 2, r.output
    assert query(marked, "SELECT id, content FROM messages ORDER BY id") == before


def test_yes_clears_only_the_text_keeps_search_right_and_takes_a_snapshot(marked, cli, hermes_home, layout):
    calls_before = query(marked, "SELECT id, role, tool_calls FROM messages ORDER BY id")
    report = json.loads(cli("clean-markers", "--db", marked, "--yes", "--json").stdout)
    assert len(report["cleared"]) == 2 and report["backup"]
    assert (hermes_home / "state-snapshots").is_dir() and report["backup"].startswith(str(hermes_home))
    cleared = query(marked, f"SELECT content FROM messages WHERE id IN ({','.join(map(str, report['cleared']))})")
    assert cleared == [("",), ("",)]
    assert query(marked, "SELECT id, role, tool_calls FROM messages ORDER BY id") == calls_before
    kept = query(marked, "SELECT content FROM messages WHERE content LIKE '%[memory]%' ORDER BY id")
    assert kept == [("[memory]",), ("see [memory] below",), ("[memory]",)]
    _fts_ok(marked)
    hits = query(marked, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'skill_manage'")
    assert hits == []
    again = json.loads(cli("clean-markers", "--db", marked, "--yes", "--json").stdout)
    assert again["rows_found"] == 0 and again["cleared"] == [] and again["backup"] is None
    if layout == "v22":
        from hermes_state import SessionDB  # 0.19.0 reads the store back

        db = SessionDB(marked)
        try:
            assert len(db.get_messages("s2")) == 3
        finally:
            db.close()


def test_no_backup_skips_the_snapshot(marked, cli, hermes_home):
    report = json.loads(cli("clean-markers", "--db", marked, "--yes", "--json", "--no-backup").stdout)
    assert len(report["cleared"]) == 2 and report["backup"] is None
    assert not (hermes_home / "state-snapshots").exists() or not list((hermes_home / "state-snapshots").iterdir())


@pytest.mark.parametrize("trigger", [
    # An END in a comment: the pattern took the comment into the body ("...; /* END */;" after joining).
    "CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages WHEN old.role <> 'tool' BEGIN\n"
    " INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name) VALUES ('delete', old.id, "
    "old.content, old.tool_name); /* END */ END",
    # A BEGIN in a string of the WHEN clause: the pattern split the trigger there.
    "CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages WHEN old.role NOT IN ('tool', 'BEGIN x') "
    "BEGIN\n INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name) VALUES ('delete', "
    "old.id, old.content, old.tool_name); END",
], ids=["end-in-a-comment", "begin-in-a-string"])
def test_a_trigger_text_the_pattern_cannot_split_is_refused_naming_it(tmp_path, hermes_home, cli, trigger):
    """Hostile try 3, F29: this gave "SQLite error (SQLError: syntax error)", naming no cause."""
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v30") as b:
        b.session("s1", age=3, messages=2)
        b.raw.execute("INSERT INTO messages (session_id, role, content, tool_calls, timestamp) VALUES "
                      "('s1', 'assistant', '[memory]', ?, ?)", (CALLS, b.now - 3 * 86400))
        for name in ("messages_fts_update", "messages_fts_trigram_update"):  # no update trigger: one is derived
            b.raw.execute(f"DROP TRIGGER {name}")
        b.raw.execute("DROP TRIGGER messages_fts_trigram_delete")
        b.raw.execute(trigger)
    before = query(db, "SELECT id, content FROM messages ORDER BY id")
    r = cli("clean-markers", "--db", db, "--yes", "--no-backup")
    assert r.exit_code == 1, r.output
    assert "cannot derive an update trigger from messages_fts_trigram_delete and messages_fts_trigram_insert" \
        in r.stderr
    assert "repair-fts" in r.stderr and "syntax error" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert query(db, "SELECT id, content FROM messages ORDER BY id") == before


@pytest.mark.parametrize("layout", ["v30"])
def test_an_index_without_an_update_trigger_is_kept_right_by_a_derived_one(marked, cli, layout):
    """A layout reduced to insert and delete triggers (an older build, a hand-made store): clean-markers makes
    an update trigger of them for its transaction, so the index follows the new text."""
    conn = sqlite3.connect(marked)
    for name in ("messages_fts_update", "messages_fts_trigram_update"):
        conn.execute(f"DROP TRIGGER {name}")
    conn.commit()
    conn.close()
    report = json.loads(cli("clean-markers", "--db", marked, "--yes", "--json", "--no-backup").stdout)
    assert len(report["cleared"]) == 2
    _fts_ok(marked)
    assert query(marked, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'skill_manage'") == []


@pytest.mark.parametrize("layout", ["v30"])
def test_the_snapshot_folder_rule_holds_for_clean_markers_too(marked, cli, hermes_home):
    """Hostile try 5, H11's rule (a snapshot folder another user controls is refused) lives in the snapshot
    folder itself, for every command that takes a snapshot: clean-markers' pre-change snapshot gets it too."""
    import pwd

    folder = hermes_home / "state-snapshots"
    folder.mkdir()
    mallory = pwd.getpwnam("mallory").pw_uid
    os.chown(folder, mallory, mallory)
    before = query(marked, "SELECT id, content FROM messages ORDER BY id")
    result = cli("clean-markers", "--db", marked, "--yes")
    assert result.exit_code == 1 and "is owned by another user" in result.stderr, result.output
    assert query(marked, "SELECT id, content FROM messages ORDER BY id") == before
    assert list(folder.iterdir()) == []


def test_more_markers_than_sqlite_has_variables_are_all_cleared(tmp_path, hermes_home, cli):
    """Hostile try 11, N5: 84,000 marker rows stopped clean-markers with "too many SQL variables" (an IN-list of
    every id), exit 1, nothing cleaned."""
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("s1", age=3, messages=0)
        b.raw.executemany("INSERT INTO messages (session_id, role, content, tool_calls, timestamp) VALUES "
                          "('s1', 'assistant', '[memory]', ?, ?)", [(CALLS, b.now - 3 * 86400)] * 33_000)
    result = cli("clean-markers", "--db", db, "--yes", "--no-backup")
    assert result.exit_code == 0, result.output
    assert query(db, "SELECT COUNT(*) FROM messages WHERE content = '[memory]'") == [(0,)]
