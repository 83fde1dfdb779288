"""prune's rules on real stores: what goes, what never goes, and how it asks."""

import json
import os
import sqlite3
import time

import pytest

from maint.store.batching import Batcher
from maint.selection.filters import parse_filters
from maint.ops.prune import execute_prune, plan_prune
from maint.store.connection import open_store
from tests.conftest import file_hash, query, run_json, session_ids
from tests.storegen import StoreBuilder


def q(path, sql, *params):
    return query(path, sql, *params)


def prune_yes(cli, path, *args):
    return run_json(cli, "prune", path, *args)


def test_bare_prune_deletes_ended_sessions_inactive_90_days(make_store, cli, layout):
    b = make_store(layout)
    b.session("old", age=91)
    b.session("young", age=89)
    b.session("long_running", age=3, started_age=400)  # started long ago, used recently
    b.close()
    report = prune_yes(cli, b.path)
    assert report["session_ids"] == ["old"] and report["matched"] == 1
    assert session_ids(b.path) == {"young", "long_running"}


def test_messages_fts_and_usage_rows_go(make_store, cli, layout):
    b = make_store(layout)
    b.session("old", age=200, messages=5)
    b.session("keep", age=1, messages=3)
    b.usage("old")
    b.usage("keep")
    b.close()
    prune_yes(cli, b.path)
    assert q(b.path, "SELECT COUNT(*) FROM messages WHERE session_id='old'") == [(0,)]
    assert q(b.path, "SELECT COUNT(*) FROM messages") == [(3,)]
    assert q(b.path, "SELECT session_id FROM session_model_usage") == [("keep",)]
    # both FTS indexes agree with the surviving messages
    assert q(b.path, "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'old'") == [(0,)]
    assert q(b.path, "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'keep'") == [(3,)]
    assert q(b.path, "SELECT COUNT(*) FROM messages_fts_trigram WHERE messages_fts_trigram MATCH 'of old'") == [(0,)]
    conn = sqlite3.connect(b.path)
    conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)")
    conn.close()


def test_open_sessions_never_deleted(make_store, cli):
    b = make_store()
    b.session("open_ancient", age=500, ended=False)
    b.close()
    assert prune_yes(cli, b.path, "--source", "cli")["matched"] == 0
    assert session_ids(b.path) == {"open_ancient"}


def test_compression_lock_or_turn_lease_holds_back(make_store, cli, layout):
    b = make_store(layout)
    b.session("locked", age=200)
    b.session("free", age=200)
    b.lock("locked")
    if layout == "v30":
        b.session("leased", age=200)
        b.raw.execute("INSERT INTO session_turn_leases VALUES ('leased', 'gw', ?, ?)", (b.now, b.now + 600))
    b.close()
    report = prune_yes(cli, b.path)
    assert report["session_ids"] == ["free"]
    assert report["held_back"]["in_progress"] == (2 if layout == "v30" else 1)


def test_archived_skipped_unless_included(make_store, cli):
    b = make_store()
    b.session("arch", age=200, archived=1)
    b.session("plain", age=200)
    b.close()
    assert prune_yes(cli, b.path)["session_ids"] == ["plain"]
    assert prune_yes(cli, b.path, "--include-archived")["session_ids"] == ["arch"]


def test_pinned_never_deleted_nor_continuations_after_it(make_store, cli):
    b = make_store("v30")
    b.session("pin", age=200, pinned=1)
    b.session("c1", age=300, end_reason="compression", pinned=1)
    b.session("c2", age=250, parent="c1")
    b.session("plain", age=200)
    b.close()
    report = prune_yes(cli, b.path, "--include-archived")
    assert report["session_ids"] == ["plain"]
    assert session_ids(b.path) == {"pin", "c1", "c2"}


def test_no_pin_column_means_nothing_pinned(make_store, cli):
    b = make_store("v22")
    b.session("x", age=200)
    b.close()
    assert prune_yes(cli, b.path)["session_ids"] == ["x"]


def test_compression_lineage_goes_only_whole(make_store, cli, layout):
    b = make_store(layout)
    b.session("live_1", age=300, end_reason="compression", title="proj")
    b.session("live_2", age=200, end_reason="compression", parent="live_1", title="proj #2")
    b.session("live_3", age=2, parent="live_2", title="proj #3")  # still in use
    b.session("dead_1", age=300, end_reason="compression")
    b.session("dead_2", age=150, parent="dead_1")
    b.close()
    report = prune_yes(cli, b.path)
    assert sorted(report["session_ids"]) == ["dead_1", "dead_2"]
    assert report["held_back"]["lineage_live"] == 1
    assert session_ids(b.path) == {"live_1", "live_2", "live_3"}


def test_old_delegate_children_match_on_their_own_branches_are_kept(make_store, cli, layout):
    b = make_store(layout)
    b.session("parent", age=200)
    b.session("sub", source="subagent", age=199, parent="parent", model_config={"_delegate_from": "parent"})
    b.session("subsub", source="subagent", age=199, parent="sub", model_config={"_delegate_from": "sub"})
    b.session("branch", age=1, parent="parent", model_config={"_branched_from": "parent"})
    b.close()
    report = prune_yes(cli, b.path)
    assert sorted(report["session_ids"]) == ["parent", "sub", "subsub"]
    assert session_ids(b.path) == {"branch"}
    assert q(b.path, "SELECT parent_session_id FROM sessions WHERE id='branch'") == [(None,)]


def test_open_delegate_child_is_kept_and_orphaned_its_parent_goes(make_store, cli):
    """Upstream's family rule: a child outside the selection is kept and loses its parent link."""
    b = make_store()
    b.session("parent", age=200)
    b.session("sub", source="subagent", age=199, parent="parent", model_config={"_delegate_from": "parent"},
              ended=False)
    b.close()
    report = prune_yes(cli, b.path)
    assert report["session_ids"] == ["parent"] and report["held_back"] == {"open": 1}
    assert session_ids(b.path) == {"sub"}
    assert q(b.path, "SELECT parent_session_id FROM sessions WHERE id='sub'") == [(None,)]


def test_unreferenced_prompts_go_shared_ones_stay(make_store, cli):
    b = make_store("v30")
    only = b.prompt("prompt only old uses")
    shared = b.prompt("shared prompt")
    pin = b.prompt('["terminal", "skill_manage"]')
    b.session("old", age=200, system_prompt_hash=only, tool_names=pin)
    b.session("old2", age=200, system_prompt_hash=shared)
    b.session("young", age=1, system_prompt_hash=shared)
    b.close()
    prune_yes(cli, b.path)
    assert {r[0] for r in q(b.path, "SELECT hash FROM system_prompts")} == {shared}


def test_dry_run_writes_nothing(make_store, cli):
    b = make_store()
    b.session("old", age=200, messages=4)
    b.close()
    before = file_hash(b.path)
    report = cli.json("prune", "--db", b.path, "--dry-run")
    assert report["dry_run"] and report["session_ids"] == ["old"] and report["messages"] == 4
    assert report["bytes"] > 0 and report["oldest"]["id"] == "old" and report["newest"]["id"] == "old"
    assert file_hash(b.path) == before
    text = cli("prune", "--db", b.path, "--dry-run")
    assert "Would delete 1 sessions, 4 messages" in text.stdout and "oldest: old" in text.stdout
    assert file_hash(b.path) == before


def test_without_yes_and_no_terminal_refuses_exit_2(make_store, cli):
    b = make_store()
    b.session("old", age=200)
    b.close()
    before = file_hash(b.path)
    result = cli("prune", "--db", b.path)
    assert result.exit_code == 2 and "not a terminal" in result.stderr and "--yes" in result.stderr
    assert file_hash(b.path) == before and session_ids(b.path) == {"old"}


def test_json_keys_are_stable(make_store, cli):
    b = make_store()
    b.session("old", age=200)
    b.close()
    dry = cli.json("prune", "--db", b.path, "--dry-run")
    real = prune_yes(cli, b.path)
    none = prune_yes(cli, b.path)
    assert set(dry) == set(real) == set(none)
    assert {"matched", "session_ids", "dry_run"} <= set(real)
    assert real["session_ids"] == ["old"] and none["matched"] == 0 and not real["dry_run"]


def test_batches_never_split_a_lineage(make_store):
    b = make_store()
    for n in range(12):
        b.session(f"p{n}_1", age=300, end_reason="compression", messages=3)
        b.session(f"p{n}_2", age=250, end_reason="compression", parent=f"p{n}_1", messages=3)
        b.session(f"p{n}_3", age=200, parent=f"p{n}_2", messages=3)
        b.session(f"p{n}_sub", source="subagent", age=200, parent=f"p{n}_3",
                  model_config={"_delegate_from": f"p{n}_3"}, messages=3)
    b.close()
    with open_store(b.path) as store:
        plan = plan_prune(store, parse_filters({"older_than": "90"}))
        # a chain is a unit; its delegate child is a unit of its own (upstream's family rule)
        assert sorted(len(u.session_ids) for u in plan.units) == [1] * 12 + [3] * 12
        seen_batches = []
        orig_write = store.write

        def spy():
            seen_batches.append(set(session_ids(b.path)))
            return orig_write()

        store.write = spy
        result = execute_prune(store, plan, batcher=Batcher(target_s=0, max_load=1))
    # one transaction a unit, plus any that only finish FTS5 merges (maint/store/fts_index.py)
    assert result.transactions >= 24 and len(result.deleted_ids) == 48
    for snapshot in seen_batches:  # before each transaction, every compression chain is whole or gone
        for n in range(12):
            family = {f"p{n}_1", f"p{n}_2", f"p{n}_3"}
            assert family <= snapshot or not (family & snapshot)


def two_old_sessions(make_store):
    """A store with two sessions old enough to prune, 'old' and 'old2'; its path."""
    b = make_store()
    b.session("old", age=200)
    b.session("old2", age=200)
    b.close()
    return b.path


def test_session_written_to_after_planning_is_kept(make_store):
    path = two_old_sessions(make_store)
    with open_store(path) as store:
        plan = plan_prune(store, None)
        store.conn.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                           "VALUES ('old', 'user', 'late', strftime('%s','now'))")
        result = execute_prune(store, plan)
    assert list(result.deleted_ids) == ["old2"]
    assert result.skipped_changed == ["old"] and session_ids(path) == {"old"}


def test_child_started_after_planning_keeps_its_parent(make_store):
    """A subagent run started under a planned session while the prompt waited used to lose its parent (the
    parent went, the child stayed with its link cleared); the re-check inside the transaction now sees it."""
    path = two_old_sessions(make_store)
    with open_store(path) as store:
        plan = plan_prune(store, None)
        other = sqlite3.connect(path)
        other.execute("INSERT INTO sessions (id, source, parent_session_id, model_config, started_at) "
                      "VALUES ('late_child', 'subagent', 'old', ?, ?)", ('{"_delegate_from": "old"}', time.time()))
        other.commit()
        other.close()
        result = execute_prune(store, plan)
    assert list(result.deleted_ids) == ["old2"] and result.skipped_changed == ["old"]
    assert session_ids(path) == {"old", "late_child"}
    assert q(path, "SELECT parent_session_id FROM sessions WHERE id = 'late_child'") == [("old",)]


def _session_files(home, sid):
    sessions = home / "sessions"
    sessions.mkdir(exist_ok=True)
    names = [f"{sid}.json", f"{sid}.jsonl", f"request_dump_{sid}_20260101_101010_123456.json",
             f"session_{sid}.json"]
    for name in names:
        (sessions / name).write_text("{}")
    return names


def test_prune_delete_and_sweep_remove_the_files_hermes_keeps_per_session(hermes_home, tmp_path):
    """Issue 25, item 1: Hermes's prune, delete and auto-prune remove sessions/<id>.json, <id>.jsonl and
    request_dump_<id>_*.json (a request dump holds a whole API request body); ours left all three."""
    from tests.conftest import run_subprocess

    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:
        b.session("old_a", age=200, messages=2)
        b.session("old_a_b", age=200, messages=2)  # a name that old_a's glob would also match in Hermes's remover
        b.session("kept", age=1, messages=2)
        b.session("gone_by_delete", age=1, messages=2)
    for sid in ("old_a", "old_a_b", "kept", "gone_by_delete"):
        _session_files(hermes_home, sid)
    victim = tmp_path / "victim.json"
    victim.write_text("keep")
    (hermes_home / "sessions" / "old_a.jsonl").unlink()
    (hermes_home / "sessions" / "old_a.jsonl").symlink_to(victim)  # a link is removed, never followed
    preview = json.loads(run_subprocess("prune", "--db", db, "--dry-run", "--json").stdout)
    assert "old_a.json" in preview["session_files"] and "kept.json" not in preview["session_files"]
    assert (hermes_home / "sessions" / "old_a.json").exists()  # a dry run removes nothing
    pruned = json.loads(run_subprocess("prune", "--db", db, "--yes", "--json").stdout)
    assert sorted(pruned["session_ids"]) == ["old_a", "old_a_b"]
    deleted = json.loads(run_subprocess("delete", "gone_by_delete", "--db", db, "--yes", "--json").stdout)
    assert len(deleted["removed_files"]) == 4
    left = sorted(p.name for p in (hermes_home / "sessions").iterdir())
    assert left == sorted(_session_files_names("kept")) and victim.read_text() == "keep"


@pytest.mark.parametrize("command", ["delete", "prune"])
def test_the_session_files_removed_are_beside_the_store_opened_not_where_its_path_leads_later(
        tmp_path, cli, monkeypatch, command):
    """Hostile try 10, M1: after the commit, the sessions folder was opened by the store's path again; the store's
    owner moved her folder away and put a link to another user's HERMES_HOME at its name meanwhile, and root's
    delete removed that user's files for the deleted ids. The folder is reached from the one the store was
    opened in."""
    from maint.ops import prune as prune_mod, sessions as sessions_mod
    from maint.store import delete as delete_mod

    home = tmp_path / "alice" / "home"
    db = home / "state.db"
    with StoreBuilder(db) as b:
        b.session("s1", age=200, messages=2)
    _session_files(home, "s1")
    bob = tmp_path / "bob"
    bob.mkdir()
    _session_files(bob, "s1")
    moved = tmp_path / "alice" / "moved"

    def swap():
        os.rename(home, moved)
        os.symlink(bob, home)

    if command == "delete":
        real = sessions_mod.remove_session_files
        monkeypatch.setattr(sessions_mod, "remove_session_files", lambda *a: (swap(), real(*a))[1])
        args = ["delete", "s1", "--yes", "--db", db]
    else:
        real_remove = delete_mod.SessionFileRemover.remove

        def remove(self, ids):
            if ids and not moved.exists():
                swap()
            return real_remove(self, ids)

        monkeypatch.setattr(prune_mod.SessionFileRemover, "remove", remove)
        args = ["prune", "--yes", "--db", db]
    result = cli(*args)
    # prune's next write (the FTS merges it finishes) sees the name moved, and stops there
    assert result.exit_code == 0 or "another file was moved to this name" in result.stderr, result.output
    assert "s1" not in session_ids(moved / "state.db")
    assert sorted(p.name for p in (bob / "sessions").iterdir()) == sorted(_session_files_names("s1"))
    assert list((moved / "sessions").iterdir()) == []  # alice's own files went, where the store was opened


def _session_files_names(sid):
    return [f"{sid}.json", f"{sid}.jsonl", f"request_dump_{sid}_20260101_101010_123456.json", f"session_{sid}.json"]


def test_prune_keeps_a_session_whose_id_is_not_utf8_and_deletes_the_rest(tmp_path, cli):
    """Finding 12 of issue 24: such an id stopped prune (plan, dry run and apply) with exit 2, naming nothing.
    The session is held back, named escaped; sessions with bad bytes in their text are pruned as any other."""
    from tests.test_export_stored_text import bad_store

    store = bad_store(tmp_path / "state.db")
    dry = cli("prune", "--db", store, "--dry-run", "--older-than", "1d")
    assert dry.exit_code == 0, dry.output
    assert "kept x\\xff: its id is not UTF-8 text" in dry.stdout
    report = run_json(cli, "prune", store, "--older-than", "1d")
    assert sorted(report["session_ids"]) == ["badmsg", "badtitle", "g0", "g1", "g2"]
    assert report["held_back"] == {"id_not_utf8": 1} and report["ids_not_utf8"] == ["x\\xff"]
    assert query(store, "SELECT CAST(id AS BLOB) FROM sessions") == [(b"x\xff",)]
    assert query(store, "SELECT COUNT(*) FROM messages") == [(2,)]


def test_a_prune_in_many_transactions_lists_the_request_dumps_once(hermes_home, monkeypatch):
    """Issue 28: after each commit the sessions folder was read again for request dumps (a folder of many
    files read once per transaction: 400 times in a 10 GB store's sweep). Every file still goes."""
    from maint.store import delete

    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:
        for n in range(10):
            b.session(f"old{n}", age=200, messages=2)
        b.session("kept", age=1, messages=2)
    for sid in [f"old{n}" for n in range(10)] + ["kept"]:
        _session_files(hermes_home, sid)
    listings = []
    real = delete._request_dumps
    monkeypatch.setattr(delete, "_request_dumps", lambda folder: listings.append(1) or real(folder))
    with open_store(db) as store:
        plan = plan_prune(store, parse_filters({"older_than": "90"}))
        result = execute_prune(store, plan, batcher=Batcher(target_s=0, max_load=1))
    assert result.transactions >= 10 and len(result.deleted_ids) == 10
    assert len(listings) == 1  # before: one a transaction
    left = sorted(p.name for p in (hermes_home / "sessions").iterdir())
    assert left == sorted(_session_files_names("kept")) and len(result.removed_files) == 40


def test_a_statement_that_never_ends_is_stopped_and_its_transaction_rolled_back(tmp_path):
    """Hostile try 10, M6: a trigger of the store's own that never ends (a BEFORE DELETE ON sessions counting an
    endless recursive CTE) kept prune's first delete running for good, holding the write lock: every Hermes write
    failed and a nightly loop over several stores stalled. Each write transaction is bounded in time."""
    from tests.conftest import run_subprocess

    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("old", age=200, messages=2)
        b.session("young", age=1, messages=2)
    conn = sqlite3.connect(db)
    conn.execute("CREATE TRIGGER spin BEFORE DELETE ON sessions BEGIN SELECT count(*) FROM (WITH RECURSIVE "
                 "r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r); END")
    conn.close()
    # a process of its own, whose timeout (far past the bound) turns a hang into a failure, not a stuck suite
    result = run_subprocess("prune", "--db", db, "--older-than", "100", "--yes",
                            env={"HERMES_MAINT_WRITE_LIMIT_S": "1"}, timeout=120)
    assert result.returncode == 1 and "a statement was still running 1 s into a transaction" in result.stderr, \
        result.stderr
    assert session_ids(db) == {"old", "young"}
