"""repair-profiles on a HERMES_HOME with several profiles seeded with each kind of mix-up."""

import json
import os
import sqlite3
import stat
import subprocess
import sys

import pytest

from tests.conftest import file_hash, query, run_subprocess
from tests.storegen import StoreBuilder


rows = query


@pytest.fixture
def home(hermes_home):
    default = hermes_home / "state.db"
    coder = hermes_home / "profiles" / "coder" / "state.db"
    writer = hermes_home / "profiles" / "writer" / "state.db"
    with StoreBuilder(default) as b:
        b.session("mine", session_key="agent:main:telegram:dm:7", age=1)
        b.session("c1", source="telegram", session_key="agent:coder:telegram:dm:1", age=1, messages=4)
        b.session("c1_sub", source="subagent", parent="c1", model_config={"_delegate_from": "c1"}, age=1)
        b.usage("c1")
        b.session("ghost1", source="telegram", session_key="agent:ghost:telegram:dm:9", age=1)
        b.db.save_gateway_routing_entry("agent:coder:telegram:dm:1", json.dumps({"session_id": "c1"}))
        b.db.apply_telegram_topic_migration()
        b.raw.execute("INSERT INTO telegram_dm_topic_bindings VALUES ('1', '5', 'u', 'agent:coder:telegram:dm:1', "
                      "'c1', 'auto', 1, 1)")
    with StoreBuilder(coder) as b:
        b.db.apply_telegram_topic_migration()
        b.session("own", session_key="agent:coder:discord:group:3", age=1)
        b.session("legacy1", source="discord", session_key="agent:main:discord:group:4", age=1, messages=2)
    with StoreBuilder(writer) as b:
        b.session("pn1", age=1, profile_name="coder", messages=3)
    return hermes_home


def cli_json(*args):
    result = run_subprocess("repair-profiles", "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def kinds(report):
    return {(f["kind"], f["store"], f["owner"], tuple(f["session_ids"]), f["action"]) for f in report["findings"]}


def test_report_only_writes_nothing(home):
    paths = list(home.rglob("state.db"))
    before = {p: file_hash(p) for p in paths}
    r = cli_json()
    found = kinds(r)
    assert ("stray_sessions", "default", "coder", ("c1", "c1_sub"), "move") in found
    assert ("missing_profile", "default", "ghost", ("ghost1",), "report") in found
    assert ("legacy_main", "coder", "default", ("legacy1",), "report") in found
    assert ("stray_sessions", "writer", "coder", ("pn1",), "move") in found
    assert any(f["kind"] == "stray_routing" and f["routing_keys"] == [["", "agent:coder:telegram:dm:1"]]
               for f in r["findings"])
    assert {p: file_hash(p) for p in paths} == before


def test_apply_moves_snapshots_and_is_idempotent(home):
    default, coder = home / "state.db", home / "profiles" / "coder" / "state.db"
    r = cli_json("--apply", "--yes")
    snap = r["snapshot"]
    for name in ("default", "coder", "writer"):
        conn = sqlite3.connect(f"{snap}/{name}.state.db")
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        conn.close()
    assert rows(f"{snap}/default.state.db", "SELECT COUNT(*) FROM sessions WHERE id='c1'") == [(1,)]
    assert rows(default, "SELECT id FROM sessions ORDER BY id") == [("ghost1",), ("mine",)]
    assert {r[0] for r in rows(coder, "SELECT id FROM sessions")} == {"own", "legacy1", "c1", "c1_sub", "pn1"}
    assert rows(coder, "SELECT COUNT(*) FROM messages WHERE session_id='c1'") == [(4,)]
    # search finds the moved messages in their new store (c1's 4 and c1_sub's 2)
    assert rows(coder, "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'c1'") == [(6,)]
    assert rows(coder, "SELECT parent_session_id FROM sessions WHERE id='c1_sub'") == [("c1",)]
    assert rows(coder, "SELECT session_id FROM session_model_usage") == [("c1",)]
    assert rows(coder, "SELECT session_key FROM gateway_routing") == [("agent:coder:telegram:dm:1",)]
    assert rows(default, "SELECT COUNT(*) FROM gateway_routing") == [(0,)]
    assert rows(coder, "SELECT session_id FROM telegram_dm_topic_bindings") == [("c1",)]
    assert rows(home / "profiles" / "writer" / "state.db", "SELECT COUNT(*) FROM sessions") == [(0,)]
    again = cli_json("--apply", "--yes")
    assert not [f for f in again["findings"] if f["action"] != "report"] and again["snapshot"] is None


def test_apply_refuses_a_snapshot_folder_that_is_a_link(home, tmp_path):
    """The snapshot folder rule of the file module (issue 24, finding 6) reaches repair-profiles too."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o755)
    (home / "state-snapshots").symlink_to(victim)
    paths = list(home.rglob("state.db"))
    before = {p: file_hash(p) for p in paths}
    result = run_subprocess("repair-profiles", "--apply", "--yes")
    assert result.returncode == 1 and "symbolic link" in result.stderr, result.stderr
    assert list(victim.iterdir()) == [] and {p: file_hash(p) for p in paths} == before


def test_legacy_main_rekey(home):
    coder = home / "profiles" / "coder" / "state.db"
    cli_json("--apply", "--yes", "--legacy-main", "rekey")
    assert rows(coder, "SELECT session_key FROM sessions WHERE id='legacy1'") == [("agent:coder:discord:group:4",)]
    assert not [f for f in cli_json()["findings"] if f["kind"] == "legacy_main"]


def test_legacy_main_move(home):
    coder, default = home / "profiles" / "coder" / "state.db", home / "state.db"
    cli_json("--apply", "--yes", "--legacy-main", "move")
    assert rows(coder, "SELECT COUNT(*) FROM sessions WHERE id='legacy1'") == [(0,)]
    assert rows(default, "SELECT session_key FROM sessions WHERE id='legacy1'") == [("agent:main:discord:group:4",)]


def test_apply_refused_while_a_store_is_held(home):
    writer = home / "profiles" / "writer" / "state.db"
    code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT 1 FROM sessions').fetchall();"
            "print('ready', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(writer)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        result = run_subprocess("repair-profiles", "--apply", "--yes")
        assert result.returncode == 1 and f"pid {proc.pid}" in result.stderr
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    assert rows(home / "state.db", "SELECT COUNT(*) FROM sessions WHERE id='c1'") == [(1,)]


def test_apply_without_terminal_or_yes_refused(home):
    result = run_subprocess("repair-profiles", "--apply")
    assert result.returncode == 2 and "not a terminal" in result.stderr


def test_move_that_would_drop_bindings_is_skipped(hermes_home):
    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("c1", session_key="agent:coder:telegram:dm:1", age=1)
        b.db.apply_telegram_topic_migration()
        b.raw.execute("INSERT INTO telegram_dm_topic_bindings VALUES ('1', '5', 'u', 'agent:coder:telegram:dm:1', "
                      "'c1', 'auto', 1, 1)")
    with StoreBuilder(hermes_home / "profiles" / "coder" / "state.db") as b:
        b.session("own", age=1)
    r = cli_json("--apply", "--yes")
    assert r["applied"][0]["skipped"] and "telegram_dm_topic_bindings" in r["applied"][0]["reason"]
    assert rows(hermes_home / "state.db", "SELECT session_id FROM telegram_dm_topic_bindings") == [("c1",)]


def test_repair_profiles_snapshots_are_private(hermes_home):
    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("c1", session_key="agent:coder:telegram:dm:1", messages=2, age=1)
    with StoreBuilder(hermes_home / "profiles" / "coder" / "state.db") as b:
        b.session("own", age=1)
    result = run_subprocess("repair-profiles", "--apply", "--yes", "--json", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    folder = json.loads(result.stdout)["snapshot"]
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    files = os.listdir(folder)
    assert files and all(stat.S_IMODE(os.stat(os.path.join(folder, f)).st_mode) == 0o600 for f in files)


def test_report_only_repair_profiles_goes_on_past_a_bad_store(hermes_home):
    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("c1", session_key="agent:coder:telegram:dm:1", messages=2, age=1)
    (hermes_home / "profiles" / "broken").mkdir(parents=True)
    (hermes_home / "profiles" / "broken" / "state.db").write_text("not sqlite\n")
    with StoreBuilder(hermes_home / "profiles" / "coder" / "state.db") as b:
        b.session("own", age=1)
    env = {"HERMES_HOME": str(hermes_home)}
    result = run_subprocess("repair-profiles", "--json", env=env)
    assert result.returncode == 0, result.stderr
    kinds = {f["kind"] for f in json.loads(result.stdout)["findings"]}
    assert kinds == {"unreadable_store", "stray_sessions"}
    before = file_hash(hermes_home / "state.db")
    applied = run_subprocess("repair-profiles", "--apply", "--yes", env=env)
    assert applied.returncode == 1 and "cannot be read" in applied.stderr
    assert file_hash(hermes_home / "state.db") == before


def test_a_session_written_to_after_its_copy_keeps_its_stray_copy(home, cli, monkeypatch):
    """A message Hermes appends to a stray session between the copy and the delete of the stray copy is in no
    copy but the stray one: it is checked inside the delete's transaction, the session is skipped and named,
    and the other moves go on (the check ran outside it, and its failure stopped the whole apply)."""
    from maint.ops import profiles

    default, coder = home / "state.db", home / "profiles" / "coder" / "state.db"
    copy = profiles._copy_sessions

    def copy_then_hermes_writes(src, dst, ids, rekey=None):
        had = copy(src, dst, ids, rekey)
        if "c1" in ids:
            with sqlite3.connect(default) as conn:
                conn.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                             "VALUES ('c1', 'user', 'written after the copy', 1)")
        return had

    monkeypatch.setattr(profiles, "_copy_sessions", copy_then_hermes_writes)
    result = cli("repair-profiles", "--apply", "--yes", "--json")
    assert result.exit_code == 0, result.output
    applied = {tuple(a["session_ids"]): a for a in json.loads(result.stdout)["applied"] if a["session_ids"]}
    assert applied[("c1", "c1_sub")].get("skipped") and "c1 was written to since it was copied" in \
        applied[("c1", "c1_sub")]["reason"]
    assert rows(default, "SELECT COUNT(*) FROM messages WHERE content = 'written after the copy'") == [(1,)]
    assert rows(default, "SELECT COUNT(*) FROM messages WHERE session_id = 'c1'") == [(5,)]
    assert not applied[("pn1",)].get("skipped") and "pn1" in {r[0] for r in rows(coder, "SELECT id FROM sessions")}


@pytest.mark.parametrize("legacy", [False, True])
def test_a_stray_session_whose_id_the_target_store_has_with_other_messages_is_kept(home, legacy):
    """Hostile try 12, P11: a profile's store made by copying a store, then written to apart, holds another
    conversation under a stray session's id (as many messages): the copy skipped the id, the count check passed,
    and the stray conversation was deleted: in no live store any more. Now both are kept and the clash named.
    With --legacy-main move, the same through the legacy path."""
    default, coder = home / "state.db", home / "profiles" / "coder" / "state.db"
    if legacy:
        src, dst, sid = coder, default, "legacy1"
        with StoreBuilder(default) as b:
            b.session("legacy1", source="discord", age=1, messages=2)
    else:
        src, dst, sid = default, coder, "c1"
        with StoreBuilder(coder) as b:
            b.session("c1", source="telegram", age=1, messages=4)
    conn = sqlite3.connect(dst)
    conn.execute("UPDATE messages SET content = 'ONLY THERE ' || id WHERE session_id = ?", (sid,))
    conn.commit()
    conn.close()
    mine = rows(src, "SELECT content FROM messages WHERE session_id = ? ORDER BY id", sid)
    theirs = rows(dst, "SELECT content FROM messages WHERE session_id = ? ORDER BY id", sid)
    r = cli_json("--apply", "--yes", *(["--legacy-main", "move"] if legacy else []))
    assert rows(src, "SELECT content FROM messages WHERE session_id = ? ORDER BY id", sid) == mine
    assert rows(dst, "SELECT content FROM messages WHERE session_id = ? ORDER BY id", sid) == theirs
    skipped = [d for d in r["applied"] if sid in d["session_ids"]]
    assert skipped and skipped[0]["skipped"] and "under one id" in skipped[0]["reason"], r["applied"]


def test_legacy_main_rekey_keeps_the_newer_routing_row_of_a_chat(home):
    """Hostile try 12, P17: the rekey renamed the legacy `agent:main:` routing row with UPDATE OR REPLACE over the
    profile's own, newer row for the same chat: after a restart the gateway resumed the chat in the old session.
    The newer row stays (as a move keeps it); an older profile row gives way to a newer legacy one."""
    coder = home / "profiles" / "coder" / "state.db"
    with StoreBuilder(coder) as b:
        b.db.save_gateway_routing_entry("agent:main:discord:group:4", json.dumps({"session_id": "legacy1"}))
        b.db.save_gateway_routing_entry("agent:coder:discord:group:4", json.dumps({"session_id": "own"}))
        b.db.save_gateway_routing_entry("agent:main:discord:group:5", json.dumps({"session_id": "legacy1"}))
        b.db.save_gateway_routing_entry("agent:coder:discord:group:5", json.dumps({"session_id": "own"}))
        b.raw.execute("UPDATE gateway_routing SET updated_at = 1000 WHERE session_key IN "
                      "('agent:main:discord:group:4', 'agent:coder:discord:group:5')")
        b.raw.execute("UPDATE gateway_routing SET updated_at = 2000 WHERE session_key IN "
                      "('agent:coder:discord:group:4', 'agent:main:discord:group:5')")
    cli_json("--apply", "--yes", "--legacy-main", "rekey")
    assert rows(coder, "SELECT session_key, entry_json FROM gateway_routing WHERE session_key LIKE '%discord%' "
                       "ORDER BY session_key") == [
        ("agent:coder:discord:group:4", json.dumps({"session_id": "own"})),
        ("agent:coder:discord:group:5", json.dumps({"session_id": "legacy1"}))]


@pytest.mark.parametrize("usage", [False, True])
def test_a_stray_session_whose_id_the_target_holds_with_the_same_messages_but_another_row_is_kept(home, usage):
    """Hostile try 13, Q6: the same messages under one id in both stores, but the stray row renamed, pinned and
    costed by the user after the copy: the stray row was deleted, its title, pin and figures gone. Q7: the text
    said "Applied 1 repair(s)" for a move that kept everything."""
    default, coder = home / "state.db", home / "profiles" / "coder" / "state.db"
    src = sqlite3.connect(default)
    cols = [r[1] for r in src.execute("PRAGMA table_info(messages)") if r[1] not in ("id",)]
    dst = sqlite3.connect(coder)
    have = {r[1] for r in dst.execute("PRAGMA table_info(sessions)")}
    scols = [r[1] for r in src.execute("PRAGMA table_info(sessions)") if r[1] in have]
    row = src.execute(f"SELECT {', '.join(scols)} FROM sessions WHERE id = 'c1'").fetchone()
    dst.execute(f"INSERT INTO sessions ({', '.join(scols)}) VALUES ({', '.join('?' * len(scols))})", row)
    for m in src.execute(f"SELECT {', '.join(cols)} FROM messages WHERE session_id = 'c1' ORDER BY id"):
        dst.execute(f"INSERT INTO messages ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", m)
    dst.commit()
    dst.close()
    if usage:  # hostile try 14, R4: the same row and messages, other usage rows
        dst = sqlite3.connect(coder)
        dst.execute("DELETE FROM session_model_usage WHERE session_id = 'c1'")
        dst.commit()
        dst.close()
        kept = rows(default, "SELECT * FROM session_model_usage WHERE session_id = 'c1'")
        assert kept
    else:
        src.execute("UPDATE sessions SET title = 'DEFAULT TITLE (renamed)', input_tokens = 999999 WHERE id = 'c1'")
        src.commit()
    src.close()
    result = run_subprocess("repair-profiles", "--apply", "--yes")
    assert result.returncode == 0, result.stderr
    if usage:
        assert rows(default, "SELECT * FROM session_model_usage WHERE session_id = 'c1'") == kept
        assert "kept [stray_sessions] c1" in result.stdout and "session_model_usage" in result.stdout, result.stdout
    else:
        assert rows(default, "SELECT title, input_tokens FROM sessions WHERE id = 'c1'") == [
            ("DEFAULT TITLE (renamed)", 999999)]
        assert "kept [stray_sessions] c1" in result.stdout and "another row" in result.stdout, result.stdout


@pytest.mark.parametrize("table", ["messages", "session_model_usage", "gateway_routing"])
def test_a_move_into_a_store_of_an_older_schema_keeps_what_it_has_no_column_for(home, table):
    """Hostile try 14, R8: the copy wrote only the columns both stores have, and the stray session was then deleted:
    the values of a column the profile's older store lacks were in no live store. Such a move is kept and named.
    Hostile try 15, S2: the same for a column of the usage rows (and the routing rows) the move carries."""
    default, coder = home / "state.db", home / "profiles" / "coder" / "state.db"
    where = "session_key = 'agent:coder:telegram:dm:1'" if table == "gateway_routing" else "session_id = 'c1'"
    conn = sqlite3.connect(default)
    conn.execute(f"ALTER TABLE {table} ADD COLUMN display_kind TEXT")
    conn.execute(f"UPDATE {table} SET display_kind = 'card' WHERE {where}")
    conn.commit()
    conn.close()
    held = rows(default, f"SELECT COUNT(*) FROM {table} WHERE {where} AND display_kind = 'card'")
    assert held[0][0] > 0
    r = cli_json("--apply", "--yes")
    kept = [d for d in r["applied"] if d.get("skipped") and f"{table}.display_kind" in d["reason"]]
    assert len(kept) == 1, r["applied"]
    assert ("c1" in kept[0]["session_ids"]) == (table != "gateway_routing")  # routing goes as a finding of its own
    assert rows(default, f"SELECT COUNT(*) FROM {table} WHERE {where} AND display_kind = 'card'") == held
    if table != "gateway_routing":
        assert rows(coder, "SELECT COUNT(*) FROM sessions WHERE id = 'c1'") == [(0,)]


def test_a_stop_while_the_stores_are_copied_leaves_no_partial_snapshot(home, cli, monkeypatch):
    """Hostile try 14, R7: a stop during repair-profiles' snapshot of every store (one uninterruptible copy each)
    left a `repair-profiles-<stamp>/` holding the first store only, under its final name: an incomplete set that
    looks like a snapshot. The copies go in steps and an interrupted set is removed."""
    from maint.errors import Terminated
    from maint.store import snapshots

    paths = list(home.rglob("state.db"))
    before = {p: file_hash(p) for p in paths}
    real, calls = snapshots.connect_checked, []

    def second_copy_stopped(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise Terminated(15)
        return real(*args, **kwargs)

    monkeypatch.setattr(snapshots, "connect_checked", second_copy_stopped)
    result = cli("repair-profiles", "--apply", "--yes")
    assert result.exit_code == 143, result.output
    assert not list((home / "state-snapshots").glob("repair-profiles-*")), list((home / "state-snapshots").iterdir())
    assert {p: file_hash(p) for p in paths} == before


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_the_snapshot_of_every_store_is_not_restarted_by_hermes_writing_meanwhile(hermes_home, monkeypatch, journal):
    """Hostile try 15, S5: the snapshot of every store (repair-profiles and repair-routing --apply) stepped the backup
    API with no read snapshot held: each commit of a live Hermes between two steps restarted the copy from page 1
    (a 1.2 GB store beside a writer committing every 0.45 s: not done after 180 s). A WAL store is now copied from
    one read snapshot; a rollback-journal one, whose readers would hold Hermes's writers off, is refused after a
    bounded number of restarts."""
    from maint.errors import MaintError
    from maint.store import snapshots

    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:
        for i in range(40):
            b.session(f"s{i}", age=1, messages=20)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA journal_mode={journal}")
    conn.commit()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    steps = []

    def hermes_commits():
        steps.append(1)
        assert len(steps) <= 10 * pages  # a copy restarted at every commit never ends
        conn.execute("INSERT INTO state_meta(key, value) VALUES (?, 'x')", (f"k{len(steps)}",))
        conn.commit()

    monkeypatch.setattr(snapshots, "COPY_STEP_PAGES", 1)
    monkeypatch.setattr(snapshots, "_after_step", hermes_commits)
    if journal == "delete":
        with pytest.raises(MaintError, match="changed 51 times"):
            snapshots.copy_stores({"default": db}, "repair-profiles")
        assert not list((hermes_home / "state-snapshots").glob("repair-profiles-*/*"))
        return
    folder = snapshots.copy_stores({"default": db}, "repair-profiles")
    assert len(steps) == pages
    copy = sqlite3.connect(folder / "default.state.db")
    assert copy.execute("PRAGMA quick_check").fetchone() == ("ok",)
    assert copy.execute("SELECT COUNT(*) FROM messages").fetchone() == (800,)
    assert copy.execute("SELECT COUNT(*) FROM state_meta WHERE key LIKE 'k%'").fetchone() == (0,)  # its moment


def test_a_snapshot_copy_sqlite_refuses_names_the_copy_not_the_store(home, cli, monkeypatch):
    """Hostile try 15, S6: a symlink the folder's owner planted at the copy's `-journal` was refused by SQLite (held),
    but the only line was "the store cannot be written or opened (not an error)": no file named, the copy called
    the store. The line names the copy and its store; the incomplete snapshot is removed."""
    import apsw

    from maint.store import snapshots

    def refused(src, dst, path):
        raise apsw.CantOpenError("not an error")

    paths = list(home.rglob("state.db"))
    before = {p: file_hash(p) for p in paths}
    monkeypatch.setattr(snapshots, "_copy", refused)
    result = cli("repair-profiles", "--apply", "--yes")
    assert result.exit_code == 1, result.output
    line, = result.stderr.strip().splitlines()
    assert "snapshot copy of" in line and ".state.db" in line and "not an error" not in line, line
    assert not list((home / "state-snapshots").glob("repair-profiles-*")) and {p: file_hash(p) for p in paths} == before


def test_a_snapshot_set_that_cannot_be_made_leaves_no_folder(hermes_home):
    """Hostile try 15, S8: a profile folder name too long to make its copy's name (ENAMETOOLONG) left an empty
    `repair-profiles-<stamp>/` each run: the clean-up's unlink of that name raised too, before the folder's rmdir."""
    from maint.store import snapshots

    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:
        b.session("s", age=1)
    with pytest.raises(OSError, match="too long"):
        snapshots.copy_stores({"default": db, "p" * 250: db}, "repair-profiles")
    assert not list((hermes_home / "state-snapshots").glob("repair-profiles-*"))


def test_a_stray_title_the_target_has_is_named_and_the_rest_of_the_run_goes_on(home):
    """Hostile try 15, S11: a stray session whose title another session of the profile's store has stopped the whole
    run at SQLite's unique index ("a constraint refused the change (sessions.title)"), no session named, every later
    finding undone. The clash is named with the other clash rules and the run goes on."""
    default, coder = home / "state.db", home / "profiles" / "coder" / "state.db"
    for path, sid in ((default, "c1"), (coder, "own")):
        conn = sqlite3.connect(path)
        conn.execute("UPDATE sessions SET title = 'Weekly plan' WHERE id = ?", (sid,))
        conn.commit()
        conn.close()
    result = run_subprocess("repair-profiles", "--apply", "--yes", "--json")
    assert result.returncode == 0, result.stderr
    applied = json.loads(result.stdout)["applied"]
    (kept,) = [d for d in applied if "c1" in d["session_ids"]]
    assert kept.get("skipped") and "'Weekly plan' is session own's" in kept["reason"], kept
    assert rows(default, "SELECT title FROM sessions WHERE id = 'c1'") == [("Weekly plan",)]
    assert rows(coder, "SELECT COUNT(*) FROM sessions WHERE id = 'pn1'") == [(1,)]  # the writer's stray went on


def test_a_copy_the_target_had_that_went_on_is_not_told_to_run_again(home):
    """Hostile try 15, S10: the profile's own copy of a stray session had gone on (7 messages against the stray's 4):
    every run said "was written to since it was copied … (run again to move it)", though this run copied nothing
    and no run ever would."""
    default, coder = home / "state.db", home / "profiles" / "coder" / "state.db"
    src = sqlite3.connect(default)
    dst = sqlite3.connect(coder)
    have = {r[1] for r in dst.execute("PRAGMA table_info(sessions)")}
    scols = [r[1] for r in src.execute("PRAGMA table_info(sessions)") if r[1] in have]
    dst.execute(f"INSERT INTO sessions ({', '.join(scols)}) VALUES ({', '.join('?' * len(scols))})",
                src.execute(f"SELECT {', '.join(scols)} FROM sessions WHERE id = 'c1'").fetchone())
    for i in range(7):
        dst.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES ('c1', 'user', ?, 1)",
                    (str(i),))
    dst.commit()
    src.close()
    dst.close()
    snapshots = []
    for _ in range(2):
        result = run_subprocess("repair-profiles", "--apply", "--yes", "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        (kept,) = [d for d in report["applied"] if "c1" in d["session_ids"]]
        assert kept.get("skipped") and "run again" not in kept["reason"] and "7 messages" in kept["reason"], kept
        snapshots.append(report["snapshot"])
    assert rows(default, "SELECT COUNT(*) FROM messages WHERE session_id = 'c1'") == [(4,)]
    # hostile try 14, R2: the second run has nothing but the kept copy, so it writes nothing and takes no snapshot
    assert snapshots[0] and snapshots[1] is None, snapshots
    assert len(list((home / "state-snapshots").glob("repair-profiles-*"))) == 1


def _damage_table(path, table):
    """Overwrite the root page of *table* in the store at *path* (checkpointed first) with garbage."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    (size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * size)
        f.write(b"\xff" * size)


def test_a_store_whose_pages_are_damaged_is_not_written(home, cli):
    """Hostile try 15, S9: a stray session was moved into a profile store that failed its integrity check (two
    pages overwritten) and deleted from the healthy default store, "Applied 1 repair(s)": the only live copy then
    sat in a damaged file. A store that fails quick_check (table by table, as the daily doctor checks) is not
    written: the moves into it are kept and named, and a run that writes nothing takes no snapshot."""
    default, coder = home / "state.db", home / "profiles" / "coder" / "state.db"
    _damage_table(coder, "async_delegations")
    before = file_hash(default)
    result = run_subprocess("repair-profiles", "--apply", "--yes", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    kept = [d for d in report["applied"] if d.get("to") == str(coder)]
    named = "fails PRAGMA quick_check (async_delegations:"
    assert kept and all(d.get("skipped") and named in d["reason"] for d in kept), kept
    assert {sid for d in kept for sid in d["session_ids"]} >= {"c1", "pn1"}
    assert file_hash(default) == before and report["snapshot"] is None
    assert not (home / "state-snapshots").exists() or not list((home / "state-snapshots").iterdir())
    text = cli("repair-profiles", "--apply", "--yes")
    assert "Nothing to write: no snapshot taken." in text.stdout and "kept [stray_sessions] c1" in text.stdout


@pytest.mark.parametrize("where", ["sessions", "gateway_routing"])
def test_a_key_that_is_not_text_stops_neither_the_repair_nor_doctor(home, cli, where):
    """Hostile try 15, S12: one session_key stored as a BLOB (in sessions or gateway_routing) of the default store of a
    home with profiles ended repair-profiles (every form) and doctor's profiles check (the daily job) in a TypeError
    traceback. A key that is not text names no profile; the rest of the check and the repair go on."""
    conn = sqlite3.connect(home / "state.db")
    if where == "sessions":
        conn.execute("UPDATE sessions SET session_key = X'ff' WHERE id = 'mine'")
    else:
        conn.execute("INSERT INTO gateway_routing(scope, session_key, entry_json, updated_at) "
                     "VALUES ('', X'ff', '{}', 1)")
    conn.commit()
    conn.close()
    report = cli("repair-profiles", "--json")
    assert report.exit_code == 0 and "c1" in report.stdout, report.output
    doctor = cli("doctor", "--all-profiles")
    assert "Traceback" not in doctor.output and not isinstance(doctor.exception, TypeError), doctor.output
    applied = cli("repair-profiles", "--apply", "--yes")
    assert applied.exit_code == 0, applied.output
    assert rows(home / "profiles" / "coder" / "state.db", "SELECT COUNT(*) FROM sessions WHERE id = 'c1'") == [(1,)]


@pytest.mark.parametrize("odd_id", ["X'ff69'", "CAST('plain' AS BLOB)", "NULL"])
def test_a_session_id_that_is_not_text_stops_neither_the_repair_nor_doctor(home, cli, odd_id):
    """Hostile try 16, T1 and T7: a session whose id is a BLOB or NULL (any sqlite3 client can write one; SQLite lets
    a TEXT primary key hold NULL) in the default store of a home with profiles ended doctor and repair-profiles in
    "'<' not supported between instances of 'bytes' and 'str'" (or 'NoneType'). Such a row is named, not scanned;
    the rest of the check and the repair go on."""
    conn = sqlite3.connect(home / "state.db")
    conn.execute(f"INSERT INTO sessions (id, source, started_at, session_key) VALUES ({odd_id}, 'telegram', 1, "
                 "'agent:coder:telegram:dm:8')")
    conn.commit()
    conn.close()
    report = cli("repair-profiles", "--json")
    assert report.exit_code == 0, report.output
    (odd,) = [f for f in json.loads(report.stdout)["findings"] if f["kind"] == "odd_ids"]
    assert odd["store"] == "default" and "1 session row(s) whose id is not text" in odd["reason"]
    doctor = cli("doctor", "--all-profiles")
    assert "Traceback" not in doctor.output and not isinstance(doctor.exception, TypeError), doctor.output
    assert "whose id is not text" in doctor.output, doctor.output
    applied = cli("repair-profiles", "--apply", "--yes")
    assert applied.exit_code == 0, applied.output
    assert rows(home / "profiles" / "coder" / "state.db", "SELECT COUNT(*) FROM sessions WHERE id = 'c1'") == [(1,)]


def test_a_profile_folder_whose_name_is_not_utf8_stops_no_repair(home, cli):
    """Hostile try 15, S13: a folder profiles/p\\xff (no name Hermes makes) stopped repair-profiles for the whole home
    ("a value is not valid UTF-8 text"), the real stray sessions neither reported nor moved. It is left out, as
    Hermes's own profile list leaves out a name it would not make."""
    import shutil

    odd = os.fsencode(home / "profiles") + b"/p\xff"
    os.mkdir(odd)
    shutil.copy(home / "profiles" / "writer" / "state.db", odd + b"/state.db")
    report = cli("repair-profiles", "--json")
    assert report.exit_code == 0 and "c1" in report.stdout, report.output


def test_a_moved_session_keeps_its_tool_pin(hermes_home):
    """Hostile try 16, T5: upstream's layout pins a session's tools as a hash into system_prompts (``tool_names``).
    The move copied only the system prompt's row, then the source's delete dropped the pin's row no session there
    referenced any more: the moved session pointed at a hash no store held. Every prompt reference goes with it."""
    default, work = hermes_home / "state.db", hermes_home / "profiles" / "work" / "state.db"
    with StoreBuilder(default, layout="v31") as b:
        b.session("stray", source="telegram", session_key="agent:work:telegram:dm:5", age=1, messages=2)
        pin, prompt = b.prompt('{"tools": ["terminal", "PIN-ONLY-HERE"]}'), b.prompt("You are the work agent.")
        b.set("stray", tool_names=pin, system_prompt_hash=prompt)
    with StoreBuilder(work, layout="v31") as b:
        b.session("own", session_key="agent:work:cli:1", age=1)
    result = run_subprocess("repair-profiles", "--apply", "--yes", "--json")
    assert result.returncode == 0, result.stderr
    assert rows(work, "SELECT tool_names, system_prompt_hash FROM sessions WHERE id = 'stray'") == [(pin, prompt)]
    assert rows(work, "SELECT hash FROM system_prompts WHERE hash IN (?, ?) ORDER BY hash",
                *sorted([pin, prompt])) == [(h,) for h in sorted([pin, prompt])]
    assert rows(default, "SELECT COUNT(*) FROM sessions WHERE id = 'stray'") == [(0,)]
