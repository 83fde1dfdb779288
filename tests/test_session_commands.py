"""delete, rename, pin / unpin / pinned through the real CLI, on both layouts."""

import json

import pytest

from tests.conftest import file_hash, query, session_ids
from tests.storegen import StoreBuilder
from tests.test_cli_process import _run_on_pty

P = "20250305_091523_a1b2c3d4"  # a parent with delegate children, a branch child and a neighbour


@pytest.fixture
def family(make_store, layout):
    b = make_store(layout)
    b.session(P, age=5, messages=4, title="orchestrator")
    b.session("20250305_100000_c1", source="subagent", age=5, parent=P, model_config={"_delegate_from": P})
    b.session("20250305_100500_c1a", source="subagent", age=5, parent="20250305_100000_c1",
              model_config={"_delegate_from": "20250305_100000_c1"})
    b.session("20250306_080000_br", age=1, parent=P, model_config={"_branched_from": P})
    b.session("20250307_080000_x", age=1)
    b.close()
    return b


KIDS = ["20250305_100000_c1", "20250305_100500_c1a"]


def test_delete_takes_delegate_children_in_one_go(family, cli):
    path = family.path
    before = file_hash(path)
    preview = cli.json("delete", "20250305_0915", "--db", path, "--dry-run")
    assert preview["session_ids"] == [P, *KIDS] and preview["messages"] == 8 and preview["deleted"] == []
    assert file_hash(path) == before
    refused = cli("delete", P, "--db", path)  # no terminal, no --yes
    assert refused.exit_code == 2 and "--yes" in refused.stderr and file_hash(path) == before
    report = cli.json("delete", P, "--db", path, "--yes")  # with --yes: the whole id
    assert report["deleted"] == [P, *KIDS]
    assert session_ids(path) == {"20250306_080000_br", "20250307_080000_x"}
    assert query(path, "SELECT parent_session_id FROM sessions WHERE id = '20250306_080000_br'") == [(None,)]
    assert query(path, f"SELECT COUNT(*) FROM messages WHERE session_id IN ('{P}', '{KIDS[0]}', '{KIDS[1]}')") == [(0,)]
    assert query(path, "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'orchestrator'") == [(0,)]


def test_delete_refused_while_a_child_is_busy(family, cli):
    import sqlite3

    conn = sqlite3.connect(family.path)
    conn.execute("INSERT INTO compression_locks VALUES (?, 'test', strftime('%s','now'), strftime('%s','now') + 600)",
                 (KIDS[1],))
    conn.commit()
    conn.close()
    before = file_hash(family.path)
    result = cli("delete", P, "--db", family.path, "--yes")
    assert result.exit_code == 1 and KIDS[1] in result.stderr and "in progress" in result.stderr
    assert file_hash(family.path) == before


def test_delete_refuses_a_pinned_member_of_the_family_unless_included(make_store, cli, monkeypatch):
    """Hostile try 4, G17: `delete PARENT --yes` deleted a pinned delegate child the script never named, with
    only a warning, while export --delete-after-verified refused the same family. Now both refuse a pinned
    member (the named session or a child) unless --include-pinned, when planning and again in the write."""
    import sqlite3

    from maint.errors import MaintError
    from maint.ops import sessions
    from maint.store.connection import open_store

    b = make_store("v30")
    b.session(P, age=5, messages=4)
    b.session(KIDS[0], source="subagent", age=5, parent=P, model_config={"_delegate_from": P})
    b.session(KIDS[1], source="subagent", age=5, parent=KIDS[0], model_config={"_delegate_from": KIDS[0]})
    b.close()
    path = b.path

    def pin(*ids):
        conn = sqlite3.connect(path)
        conn.execute("UPDATE sessions SET pinned = (id IN (SELECT value FROM json_each(?)))", (json.dumps(ids),))
        conn.commit()
        conn.close()

    for pins, said in (([KIDS[1]], f"{KIDS[1]} is in its family"), ([P], "it is pinned")):
        pin(*pins)
        before = file_hash(path)
        for extra in (["--yes"], ["--dry-run"]):
            refused = cli("delete", P, "--db", path, *extra)
            assert refused.exit_code == 1 and said in refused.stderr and "--include-pinned" in refused.stderr, \
                refused.stderr
            assert len(refused.stderr.strip().splitlines()) == 1 and file_hash(path) == before
    pin()
    with open_store(path) as store:  # pinned between the confirmation and the write (Desktop, another terminal)
        plan = sessions.plan_delete(store, P)
        pin(KIDS[0])
        with pytest.raises(MaintError, match=f"refusing to delete {P}: {KIDS[0]} is in its family"):
            sessions.execute_delete(store, plan)
    assert session_ids(path) == {P, *KIDS}
    report = cli.json("delete", P, "--db", path, "--yes", "--include-pinned")
    assert report["deleted"] == [P, *KIDS] and session_ids(path) == set()
    assert any("pinned" in w for w in report["warnings"])


def test_delete_refused_under_a_turn_lease(make_store, cli):
    b = make_store("v30")
    b.session("busy", age=0.01, ended=False)
    b.raw.execute("INSERT INTO session_turn_leases VALUES ('busy', 'gw', strftime('%s','now'), "
                  "strftime('%s','now') + 600)")
    b.close()
    result = cli("delete", "busy", "--db", b.path, "--yes")
    assert result.exit_code == 1 and "in progress" in result.stderr and session_ids(b.path) == {"busy"}


def test_delete_open_session_warns(make_store, cli, layout):
    b = make_store(layout)
    b.session("live", age=0.01, ended=False)
    b.close()
    result = cli("delete", "live", "--db", b.path, "--yes", "--json")
    assert result.exit_code == 0
    assert "warning: live is open" in result.stderr and "recreate" in result.stderr
    assert json.loads(result.stdout)["warnings"][0].startswith("live is open")
    assert session_ids(b.path) == set()


def test_delete_bad_ids(family, cli):
    before = file_hash(family.path)
    missing = cli("delete", "nope", "--db", family.path, "--yes")
    assert missing.exit_code == 1 and "'nope'" in missing.stderr and "unique prefix" in missing.stderr
    ambiguous = cli("delete", "2025030", "--db", family.path, "--yes")
    assert ambiguous.exit_code == 1 and "ambiguous" in ambiguous.stderr
    assert cli("delete", P, "--all-profiles", "--yes").exit_code == 2
    assert file_hash(family.path) == before


def test_delete_confirmation_on_a_terminal_shows_what_goes(family):
    code, screen = _run_on_pty(["delete", P, "--db", family.path], b"n\n")
    assert code == 1 and f"{P}  orchestrator" in screen
    assert f"+ delegate child {KIDS[0]}" in screen and f"+ delegate child {KIDS[1]}" in screen
    assert "Delete 3 session(s), 8 messages?" in screen and "nothing was changed" in screen
    assert P in session_ids(family.path)


def test_rename(make_store, cli, layout):
    b = make_store(layout)
    b.session("20250305_091523_a1b2", age=1, title="old name")
    b.session("taken", age=1, title="debugging auth flow")
    b.session("k1", age=3, end_reason="compression", title="proj")
    b.session("k2", age=2, parent="k1")
    b.close()
    r = cli.json("rename", "20250305_09", "fixing", "the", "login", "--db", b.path)
    assert r["title"] == "fixing the login" and r["previous_title"] == "old name"
    assert query(b.path, "SELECT title FROM sessions WHERE id = '20250305_091523_a1b2'") == [("fixing the login",)]
    cleaned = cli.json("rename", "20250305_09", "tidy\u200b\x07  up\u202e", "now", "--db", b.path)
    assert cleaned["title"] == "tidy up now"
    before = file_hash(b.path)
    clash = cli("rename", "20250305_09", "debugging", "auth", "flow", "--db", b.path)
    assert clash.exit_code == 1 and "already used by session taken" in clash.stderr
    for bad in (["x" * 101], ["\u200b"], ["two\nlines"]):
        result = cli("rename", "20250305_09", *bad, "--db", b.path)
        assert result.exit_code == 2 and result.stderr.startswith("hermes-maint: error: title:"), result.stderr
    assert file_hash(b.path) == before
    assert cli.json("rename", "20250305_09", "y" * 100, "--db", b.path)["title"] == "y" * 100
    moved = cli.json("rename", "k2", "proj", "--db", b.path)  # the title moves off its compressed ancestor
    assert moved["transferred_from"] == "k1"
    assert query(b.path, "SELECT id, title FROM sessions WHERE id IN ('k1', 'k2') ORDER BY id") == [
        ("k1", None), ("k2", "proj")]


def test_rename_names_a_title_held_by_a_row_without_an_id(make_store, cli):
    """Hostile try 18 (U8's rest): a title held by a session row whose id is NULL passed rename's check (`id != ?`
    never matches NULL) and SQLite's unique index answered "a constraint refused the change". Named."""
    b = make_store("v30")
    b.session("mine", age=1, title="old")
    b.raw.execute("INSERT INTO sessions (source, started_at, title) VALUES ('cli', 1, 'Taken Title')")
    b.close()
    before = file_hash(b.path)
    clash = cli("rename", "mine", "Taken Title", "--db", b.path)
    assert clash.exit_code == 1 and "already used by a session row without an id (NULL)" in clash.stderr, clash.stderr
    assert file_hash(b.path) == before


def test_rename_keeps_the_canonical_bot_chat_and_records_a_user_title(make_store, cli):
    b = make_store("v30")
    b.session("bot", age=1, hidden=1, title="Bot Chat")
    b.session("s", age=1)
    b.close()
    result = cli("rename", "bot", "something", "else", "--db", b.path)
    assert result.exit_code == 1 and "Bot Chat" in result.stderr
    cli.json("rename", "s", "mine", "--db", b.path)
    assert query(b.path, "SELECT title, title_source FROM sessions WHERE id = 's'") == [("mine", "user")]


def test_pins_refused_on_a_schema_without_them(make_store, cli):
    b = make_store("v22")
    b.session("s", age=1)
    b.close()
    before = file_hash(b.path)
    for args in (["pin", "s"], ["unpin", "s"], ["pinned"]):
        result = cli(*args, "--db", b.path)
        assert result.exit_code == 1 and "version 22" in result.stderr and len(result.stderr.splitlines()) == 1
    assert file_hash(b.path) == before


def test_pin_unpin_pinned(make_store, cli):
    b = make_store("v30")
    b.session("20250305_k1", age=30, end_reason="compression", title="proj")
    b.session("20250306_k2", age=2, parent="20250305_k1", hidden=1, title="proj #2")
    b.session("20250307_solo", age=1, title="solo")
    b.session("bot", age=1, hidden=1, title="Bot Chat")
    b.close()
    before = file_hash(b.path)
    bad = cli("pin", "20250307", "nope", "--db", b.path)
    assert bad.exit_code == 1 and "'nope'" in bad.stderr and file_hash(b.path) == before  # all or nothing
    r = cli.json("pin", "20250305", "20250307", "bot", "--db", b.path)
    assert [s["lineage"] for s in r["sessions"]] == [["20250305_k1", "20250306_k2"], ["20250307_solo"], ["bot"]]
    assert query(b.path, "SELECT id, pinned, hidden FROM sessions ORDER BY id") == [
        ("20250305_k1", 1, 0), ("20250306_k2", 1, 0), ("20250307_solo", 1, 0), ("bot", 1, 1)]
    listed = cli.json("pinned", "--db", b.path)
    assert [p["id"] for p in listed["pinned"]] == ["20250306_k2", "20250307_solo", "bot"]  # sorted by id
    assert listed["pinned"][0]["session_ids"] == ["20250305_k1", "20250306_k2"]
    assert cli("pinned", "--db", b.path, "--json").stdout == cli("pinned", "--db", b.path, "--json").stdout
    cli.json("unpin", "20250306_k2", "--db", b.path)
    assert [p["id"] for p in cli.json("pinned", "--db", b.path)["pinned"]] == ["20250307_solo", "bot"]
    assert "proj" not in cli("pinned", "--db", b.path).stdout


def test_unpin_by_prefix_needs_a_confirmation_that_shows_the_whole_id(make_store, cli):
    """Hostile try 3, F19: `unpin demo_pinned </dev/null` unpinned demo_pinned_old, a session the script never
    named (the next sweep may then prune it). Unpin now follows the destructive commands' id rule."""
    b = make_store("v30")
    b.session("20250305_keep", age=300, title="keep me")
    b.session("20250306_other", age=300, title="other")
    b.close()
    cli.json("pin", "20250305", "20250306", "--db", b.path)
    before = file_hash(b.path)
    for args in (["20250305"], ["20250305", "--yes"], ["20250306_other", "20250305", "--yes"]):
        refused = cli("unpin", *args, "--db", b.path)  # no terminal (or --yes): whole ids only
        assert refused.exit_code == 2 and "'20250305' is not a whole session id" in refused.stderr, refused.stderr
        assert "unpin takes whole ids only" in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert file_hash(b.path) == before  # all or nothing: the whole id given with the prefix stayed pinned too
    code, screen = _run_on_pty(["unpin", "20250305", "--db", b.path], b"n\n")  # a terminal: the whole id shown
    assert code == 1 and "20250305_keep  keep me" in screen and "[y/N]" in screen, screen
    assert file_hash(b.path) == before
    code, screen = _run_on_pty(["unpin", "20250305", "--db", b.path], b"y\n")
    assert code == 0 and "Unpinned session 20250305_keep" in screen, screen
    cli.json("unpin", "20250306_other", "--db", b.path)  # a whole id: no question, as before
    assert query(b.path, "SELECT id, pinned FROM sessions ORDER BY id") == [("20250305_keep", 0),
                                                                           ("20250306_other", 0)]


def test_delete_refused_when_an_unknown_table_points_at_sessions(family, cli):
    import sqlite3

    conn = sqlite3.connect(family.path)
    conn.execute("CREATE TABLE plugin_notes (sid TEXT REFERENCES sessions(id), note TEXT)")
    conn.commit()
    conn.close()
    before = file_hash(family.path)
    result = cli("delete", P, "--db", family.path, "--yes")
    assert result.exit_code == 1 and "plugin_notes.sid -> sessions" in result.stderr
    assert file_hash(family.path) == before


def test_delete_with_yes_takes_a_whole_id_only(tmp_path, cli):
    """Finding 3 (issue 24): with --yes a prefix could match another session once the one meant was gone."""
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("20250305_091523_a1b2", age=30, messages=2)
        b.session("20250305_091523_a1b2c3", age=30, messages=2)
    refused = cli("delete", "20250305_091523_a1b2c", "--db", db, "--yes")
    assert refused.exit_code == 2 and "not a whole session id" in refused.stderr
    assert cli("delete", "20250305_091523_a1b2", "--db", db, "--yes").exit_code == 0
    again = cli("delete", "20250305_091523_a1b2", "--db", db, "--yes")  # the same command, run twice
    assert again.exit_code == 2 and "not a whole session id" in again.stderr
    assert session_ids(db) == {"20250305_091523_a1b2c3"}


def test_delete_shows_stored_control_characters_never_raw(tmp_path, cli):
    """Finding 19 (issue 24): delete printed a NUL from an id raw (and a title's escape reached the prompt)."""
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("bad\x00id", age=30, messages=0, title="\x1b]0;owned\x07 title")
    out = cli("delete", "bad\x00id", "--db", db, "--yes")
    assert out.exit_code == 0, out.output
    assert "\x00" not in out.stdout and "bad\\x00id" in out.stdout


def test_stored_bytes_that_are_not_utf8_are_shown_escaped_or_named(tmp_path, cli):
    """Finding 12 of issue 24: rename showed no previous title but 'give ids, titles and paths in UTF-8' (exit 2);
    a command that still cannot read past such bytes says so and points at doctor (exit 1), not at the operator."""
    from tests.test_export_stored_text import bad_store

    store = bad_store(tmp_path / "state.db")
    result = cli("rename", "badtitle", "fixed", "--db", store)
    assert result.exit_code == 0, result.output
    assert "previous title: A\\xc3" in result.stdout
    assert query(store, "SELECT title FROM sessions WHERE id = 'badtitle'") == [("fixed",)]
    prompts = cli("repair-prompts", "--db", store)
    assert prompts.exit_code == 0, prompts.output
    routing = cli("repair-routing", "--db", store)  # no gateway row lost its routing: nothing to read past
    assert routing.exit_code == 0, routing.output


def test_deleting_the_first_half_of_a_pinned_compressed_conversation_is_refused(tmp_path, cli):
    """Hostile try 6, I2: the pin check covered the session and its delegate children, not the compression lineage
    a pin keeps whole: `delete` of the ancestor of a pinned tip went through with no refusal. (The verified delete
    refuses to split a lineage at all.)"""
    from maint.demo import build_demo

    db = tmp_path / "s.db"
    build_demo(db)
    assert query(db, "SELECT end_reason FROM sessions WHERE id = 'demo_chain_1'") == [("compression",)]
    assert query(db, "SELECT parent_session_id FROM sessions WHERE id = 'demo_chain_2'") == [("demo_chain_1",)]
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET pinned = CASE id WHEN 'demo_chain_2' THEN 1 ELSE 0 END "
                     "WHERE id IN ('demo_chain_1', 'demo_chain_2')")
    conn.close()
    before = file_hash(db)
    args = ["delete", "demo_chain_1"]
    refused = cli(*args, "--db", db, "--yes")
    assert refused.exit_code == 1, refused.output
    assert "demo_chain_2" in refused.stderr and "--include-pinned" in refused.stderr, refused.stderr
    assert file_hash(db) == before and "demo_chain_1" in session_ids(db)
    done = cli(*args, "--db", db, "--yes", "--include-pinned")
    assert done.exit_code == 0, done.output
    assert "demo_chain_1" not in session_ids(db) and "demo_chain_2" in session_ids(db)


def test_deleting_a_parent_whose_delegate_child_starts_a_pinned_compressed_conversation_is_refused(tmp_path, cli):
    """Hostile try 7, J4: the lineage walk ran from the named session only. A subagent run that was compressed,
    its continuation pinned: `delete PARENT --yes` deleted the child (the first half of the pinned conversation)
    with its parent. Each session the delete takes is walked."""
    import sqlite3

    from maint.demo import build_demo

    db = tmp_path / "s.db"
    build_demo(db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET parent_session_id = 'demo_parent', "
                     "model_config = json_object('_delegate_from', 'demo_parent') WHERE id = 'demo_chain_1'")
        conn.execute("UPDATE sessions SET pinned = CASE id WHEN 'demo_chain_2' THEN 1 ELSE 0 END "
                     "WHERE id IN ('demo_chain_1', 'demo_chain_2', 'demo_parent')")
    conn.close()
    before = file_hash(db)
    refused = cli("delete", "demo_parent", "--db", db, "--yes")
    assert refused.exit_code == 1, refused.output
    assert "demo_chain_2" in refused.stderr and "--include-pinned" in refused.stderr, refused.stderr
    assert file_hash(db) == before and {"demo_parent", "demo_chain_1"} <= set(session_ids(db))


@pytest.mark.parametrize("command", ["delete", "verified"])
def test_a_delete_too_long_for_hermes_waits_while_others_hold_the_store(tmp_path, command):
    """Hostile try 11, N4: deleting a 156,020-message conversation (one transaction: a conversation is never split)
    held the write lock 17 s beside a running Hermes, whose append failed after its retries. As prune keeps such a
    unit, delete and the verified delete refuse it while other processes have the store open (max_unit_s, here
    made tiny so that a small conversation stands for a big one)."""
    import sqlite3

    from tests.conftest import run_subprocess

    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("big", age=200, messages=10)
    args = (["delete", "big"] if command == "delete"
            else ["export", f"{tmp_path / 'out'}/", "--session-id", "big", "--delete-after-verified"])
    env = {"HERMES_MAINT_MAX_UNIT_S": "0.001"}
    hermes = sqlite3.connect(db)  # a running Hermes: another process with the store open
    hermes.execute("SELECT COUNT(*) FROM sessions").fetchall()
    try:
        held = run_subprocess(*args, "--yes", "--db", db, env=env)
    finally:
        hermes.close()
    assert held.returncode == 1 and "past what Hermes waits" in held.stderr and "stop Hermes" in held.stderr, \
        held.stderr
    assert "big" in session_ids(db)
    alone = run_subprocess(*args, "--yes", "--db", db, env=env)
    assert alone.returncode == 0, alone.stderr
    assert "big" not in session_ids(db)
