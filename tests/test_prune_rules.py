"""prune's selection rules where they follow upstream's ``hermes_state_maintenance.py`` (issue 25 items 3, 4, 6, 7).

* the family rule: children outside the selection are kept and lose their parent link, never cascade-deleted;
* the age bound is strict (``last_active < cutoff``) and a time outside the epoch window dates nothing;
* ``--include-pinned`` and ``--never-active`` as upstream's CLI defines them;
* the sweep runs Hermes's one-time empty TUI ghost repair under Hermes's own latch;
* a prune that deleted nothing writes no history row.
"""

import json
import sqlite3

import pytest

from maint.ops.prune import plan_prune
from maint.selection.filters import Filters
from maint.store.connection import open_store
from tests.conftest import query, run_json, session_ids
from tests.storegen import DAY, StoreBuilder


def parent_of(path, sid):
    return query(path, "SELECT parent_session_id FROM sessions WHERE id = ?", sid)[0][0]


def delegate(b, sid, parent, **kw):
    kw.setdefault("source", "subagent")
    return b.session(sid, parent=parent, model_config={"_delegate_from": parent}, **kw)


# -- the family rule ---------------------------------------------------------------------------------------

def test_cwd_filter_keeps_delegate_children_elsewhere_and_orphans_them(make_store, cli, layout, tmp_path):
    """The issue's report: `prune --cwd ~/scratch --older-than 20` deleted subagents whose cwd is elsewhere."""
    scratch, work = str(tmp_path / "scratch"), str(tmp_path / "work")
    b = make_store(layout)
    b.session("orch", age=30, cwd=scratch)
    for n in range(3):
        delegate(b, f"sub{n}", "orch", age=30, cwd=work)
    delegate(b, "sub_in", "orch", age=30, cwd=scratch + "/deeper")
    b.session("elsewhere", age=30, cwd=work)
    b.close()
    report = run_json(cli, "prune", b.path, "--cwd", scratch, "--older-than", "20")
    assert sorted(report["session_ids"]) == ["orch", "sub_in"]
    assert session_ids(b.path) == {"sub0", "sub1", "sub2", "elsewhere"}
    assert all(parent_of(b.path, f"sub{n}") is None for n in range(3))
    assert query(b.path, "SELECT COUNT(*) FROM messages WHERE session_id LIKE 'sub%'") == [(6,)]


def test_started_window_keeps_children_outside_it(make_store, cli, layout):
    """--after/--before: a child started outside the window stays (orphaned); a parent outside it stays too."""
    b = make_store(layout)
    b.session("in_parent", age=9, started_age=10)
    delegate(b, "late_child", "in_parent", age=1, started_age=2)  # started after the window
    delegate(b, "in_child", "in_parent", age=9, started_age=9.5)
    b.session("out_parent", age=20, started_age=21)
    delegate(b, "child_in_window", "out_parent", age=9, started_age=9.5)
    b.close()
    report = run_json(cli, "prune", b.path, "--after", "11", "--before", "5")
    assert sorted(report["session_ids"]) == ["child_in_window", "in_child", "in_parent"]
    assert session_ids(b.path) == {"late_child", "out_parent"}
    assert parent_of(b.path, "late_child") is None


def test_branch_and_reset_children_are_kept_and_orphaned(make_store, cli, layout):
    b = make_store(layout)
    b.session("root", age=200)
    b.session("branch", age=200, parent="root", model_config={"_branched_from": "root"}, cwd="/elsewhere")
    b.session("reset", age=1, parent="root", model_config={"_reset_from": "root"})
    b.close()
    report = run_json(cli, "prune", b.path, "--older-than", "100")
    assert sorted(report["session_ids"]) == ["branch", "root"]
    assert session_ids(b.path) == {"reset"} and parent_of(b.path, "reset") is None


def test_a_matching_child_goes_while_its_parent_stays(make_store, cli, layout):
    """Each session is judged on its own: an old subagent run of a recent parent goes; the parent keeps none."""
    b = make_store(layout)
    b.session("recent", age=1)
    delegate(b, "old_run", "recent", age=200)
    b.close()
    assert run_json(cli, "prune", b.path)["session_ids"] == ["old_run"]
    assert session_ids(b.path) == {"recent"}


def test_sweep_auto_prune_orphans_children_outside_retention(hermes_home, cli, layout):
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 90\n")
    path = hermes_home / "state.db"
    with StoreBuilder(path, layout=layout) as b:
        b.session("orch", age=200)
        delegate(b, "young", "orch", age=3)
        delegate(b, "old", "orch", age=150)
    report = cli.json("sweep", "--db", path, "--force")
    assert sorted(report["pruned_ids"]) == ["old", "orch"]
    assert session_ids(path) == {"young"} and parent_of(path, "young") is None


def test_delete_of_one_named_session_still_cascades_to_delegates(make_store, cli):
    b = make_store()
    b.session("orch", age=1)
    delegate(b, "sub", "orch", age=1)
    b.session("other", age=1)
    b.close()
    assert cli("delete", "orch", "--db", b.path, "--yes").exit_code == 0
    assert session_ids(b.path) == {"other"}


# -- activity and the age bound ---------------------------------------------------------------------------

def test_age_bound_is_strict(make_store):
    b = make_store("v30")
    b.session("exact", age=100, messages=0)
    b.session("older", age=100, messages=0)
    b.close()
    with sqlite3.connect(b.path) as c:
        c.execute("UPDATE sessions SET started_at = 1000000000.0, last_activity_at = NULL WHERE id = 'exact'")
        c.execute("UPDATE sessions SET started_at = 999999999.0, last_activity_at = NULL WHERE id = 'older'")
    with open_store(b.path) as store:
        plan = plan_prune(store, Filters(active_before=1000000000.0), now=1100000000.0)
        assert list(plan.session_ids) == ["older"]  # last_active == cutoff is not older than it


def test_freshest_of_activity_message_and_start(make_store, cli):
    """A heartbeat newer than the last message keeps a session, and so does a message newer than the heartbeat."""
    b = make_store("v30")
    b.session("heartbeat", age=200, last_activity_at=b.now - 2 * DAY)
    b.session("message", age=2, last_activity_at=b.now - 200 * DAY)
    b.session("old", age=200, last_activity_at=b.now - 199 * DAY)
    b.session("no_messages", age=200, started_age=200, messages=0)
    b.close()
    assert sorted(run_json(cli, "prune", b.path)["session_ids"]) == ["no_messages", "old"]


@pytest.mark.parametrize("garbage", [5e246, -1e12, 1e17])
def test_a_time_outside_the_epoch_window_falls_back(make_store, cli, garbage):
    """Upstream's #91536: a garbage double in last_activity_at or a message must not pin the session's
    recency; the remaining sane times date it (here: old, so it goes)."""
    b = make_store("v30")
    b.session("bad_activity", age=200, last_activity_at=garbage)
    b.session("bad_message", age=200)
    b.session("young", age=1, last_activity_at=garbage)
    b.close()
    with sqlite3.connect(b.path) as c:
        c.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES ('bad_message', 'user', 'x', ?)",
                  (garbage,))
    assert sorted(run_json(cli, "prune", b.path)["session_ids"]) == ["bad_activity", "bad_message"]
    assert session_ids(b.path) == {"young"}


def test_a_session_that_cannot_be_dated_matches_no_activity_bound(make_store, cli):
    """No time inside the window at all: upstream's last activity is NULL and matches neither --older-than nor
    --newer-than (ours counted it as active now, so --newer-than deleted it)."""
    b = make_store("v30")
    b.session("undated", age=1, messages=0)
    b.session("recent", age=0.01, started_age=0.02, messages=0)
    b.close()
    with sqlite3.connect(b.path) as c:
        c.execute("UPDATE sessions SET started_at = 5e246, last_activity_at = -1 WHERE id = 'undated'")
    assert run_json(cli, "prune", b.path, "--newer-than", "5h", "--dry-run")["session_ids"] == ["recent"]
    assert run_json(cli, "prune", b.path, "--older-than", "0")["session_ids"] == ["recent"]
    assert session_ids(b.path) == {"undated"}


def test_reap_needs_an_old_start_too(hermes_home, cli):
    """A fresh child carrying copied old activity is not an orphan (upstream's started_at predicate)."""
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 90\n")
    path = hermes_home / "state.db"
    with StoreBuilder(path, layout="v30") as b:
        b.session("fresh_child", source="cron", age=200, started_age=1, ended=False)
        b.session("stale", source="cron", age=200, ended=False)
    report = cli.json("sweep", "--db", path, "--force")
    assert report["reaped_ids"] == ["stale"]


def test_reap_spares_the_continuations_of_a_pinned_segment(hermes_home, cli):
    """A pin covers its whole conversation: the sweep does not close an open continuation of a pinned segment
    (upstream's exclude_pinned with _PINNED_TAIL_SQL)."""
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 90\n")
    path = hermes_home / "state.db"
    with StoreBuilder(path, layout="v30") as b:
        b.session("pinned_seg", source="cron", age=300, end_reason="compression", pinned=1)
        b.session("tail", source="cron", age=250, parent="pinned_seg", ended=False)
        b.session("mid", source="cron", age=250, parent="pinned_seg", end_reason="compression")
        b.session("tail2", source="cron", age=200, parent="mid", ended=False)  # two continuations down
        b.session("plain_seg", source="cron", age=300, end_reason="compression")
        b.session("plain_tail", source="cron", age=200, parent="plain_seg", ended=False)
    report = cli.json("sweep", "--db", path, "--force")
    assert report["reaped_ids"] == ["plain_tail"]


# -- --include-pinned ---------------------------------------------------------------------------------------

def test_include_pinned(make_store, cli):
    b = make_store("v30")
    b.session("pinned_old", age=200, pinned=1)
    b.session("chain_1", age=300, end_reason="compression", pinned=1)
    b.session("chain_2", age=200, parent="chain_1")  # a pin covers its whole conversation
    b.session("plain_old", age=200)
    b.close()
    first = run_json(cli, "prune", b.path)
    assert first["session_ids"] == ["plain_old"] and first["held_back"] == {"pinned": 2}
    second = run_json(cli, "prune", b.path, "--include-pinned")
    assert sorted(second["session_ids"]) == ["chain_1", "chain_2", "pinned_old"]
    assert session_ids(b.path) == set()


def test_include_pinned_still_keeps_open_and_busy(make_store, cli):
    b = make_store("v30")
    b.session("pinned_open", age=200, pinned=1, ended=False)
    b.session("pinned_locked", age=200, pinned=1)
    b.lock("pinned_locked")
    b.close()
    assert run_json(cli, "prune", b.path, "--include-pinned")["session_ids"] == []


# -- --never-active -------------------------------------------------------------------------------------------

ROUTING = "CREATE TABLE gateway_routing (scope TEXT NOT NULL, session_key TEXT NOT NULL, entry_json TEXT, " \
          "updated_at REAL, PRIMARY KEY (scope, session_key))"


def never_active_store(make_store):
    b = make_store("v30")
    opts = dict(ended=False, messages=0, session_key="agent:main:telegram:dm:1")
    b.session("dead", age=40, **opts)
    b.session("dead_routed", age=40, **{**opts, "session_key": "agent:main:telegram:dm:2"})
    b.session("young", age=10, **opts)
    b.session("titled", age=40, title="kept", **opts)
    b.session("pinned", age=40, pinned=1, **opts)
    b.session("used", age=40, api_call_count=1, **opts)
    b.session("unkeyed", age=40, ended=False, messages=0)
    b.session("ended", age=40, messages=0, session_key="agent:main:telegram:dm:3")
    b.session("with_messages", age=40, ended=False, session_key="k")
    b.set("with_messages", message_count=0)
    b.raw.execute(ROUTING)
    b.raw.execute("INSERT INTO gateway_routing VALUES ('main', 'agent:main:telegram:dm:2', ?, 0)",
                  (json.dumps({"session_id": "dead_routed"}),))
    b.raw.execute("INSERT INTO gateway_routing VALUES ('main', 'other', ?, 0)", (json.dumps({"session_id": "used"}),))
    b.close()
    return b.path


def test_never_active_deletes_only_unused_keyed_rows_and_their_routing(make_store, cli):
    path = never_active_store(make_store)
    dry = cli.json("prune", "--db", path, "--never-active", "--dry-run")
    assert dry["session_ids"] == ["dead", "dead_routed"] and dry["deleted"] == 0
    report = run_json(cli, "prune", path, "--never-active")
    assert sorted(report["session_ids"]) == ["dead", "dead_routed"] and report["routing_deleted"] == 1
    assert session_ids(path) == {"young", "titled", "pinned", "used", "unkeyed", "ended", "with_messages"}
    assert query(path, "SELECT session_key FROM gateway_routing") == [("other",)]


def test_never_active_age_bound(make_store, cli):
    path = never_active_store(make_store)
    report = run_json(cli, "prune", path, "--never-active", "--older-than", "5d")
    assert sorted(report["session_ids"]) == ["dead", "dead_routed", "young"]


@pytest.mark.parametrize("extra", [["--source", "cli"], ["--include-pinned"], ["--newer-than", "2d"]])
def test_never_active_refuses_other_filters(make_store, cli, extra):
    path = never_active_store(make_store)
    result = cli("prune", "--db", path, "--never-active", "--yes", *extra)
    assert result.exit_code == 2 and "--never-active takes only --older-than" in result.output
    assert "Traceback" not in result.output and "dead" in session_ids(path)


# -- the sweep's one-time ghost repair ----------------------------------------------------------------------

def test_sweep_prunes_empty_tui_ghosts_once_under_hermes_latch(hermes_home, cli):
    """Upstream's prune_empty_ghost_sessions, run first and whatever auto_prune says, latched by Hermes's key."""
    path = hermes_home / "state.db"
    with StoreBuilder(path, layout="v30") as b:
        b.session("ghost", source="tui", age=2, messages=0)
        b.session("ghost_young", source="tui", age=0.1, started_age=0.2, messages=0)
        b.session("ghost_titled", source="tui", age=2, messages=0, title="named")
        b.session("ghost_open", source="tui", age=2, messages=0, ended=False)
        b.session("ghost_pinned", source="tui", age=2, messages=0, pinned=1)
        b.session("tui_used", source="tui", age=2)
        b.session("cli_empty", source="cli", age=2, messages=0)
        delegate(b, "ghost_child", "ghost", age=2)
    (hermes_home / "sessions").mkdir()
    (hermes_home / "sessions" / "ghost.json").write_text("{}")
    first = cli.json("sweep", "--db", path, "--force")  # auto_prune is off: the repair still runs, as in Hermes
    assert first["ghost_pruned_ids"] == ["ghost"] and first["pruned_ids"] == []
    assert "ghost" not in session_ids(path) and parent_of(path, "ghost_child") is None
    assert not (hermes_home / "sessions" / "ghost.json").exists()
    assert query(path, "SELECT value FROM state_meta WHERE key = 'ghost_session_prune_v1'") == [("1",)]
    with sqlite3.connect(path) as c:  # a later ghost: the one-time repair does not run again
        c.execute("INSERT INTO sessions (id, source, started_at, ended_at) VALUES ('ghost2', 'tui', 1e9, 1e9)")
    second = cli.json("sweep", "--db", path, "--force")
    assert second["ghost_pruned_ids"] == [] and "ghost2" in session_ids(path)


def test_sweep_leaves_a_store_hermes_already_repaired(hermes_home, cli):
    path = hermes_home / "state.db"
    with StoreBuilder(path, layout="v30") as b:
        b.session("ghost", source="tui", age=2, messages=0)
        b.raw.execute("INSERT INTO state_meta VALUES ('ghost_session_prune_v1', '1')")
    assert cli.json("sweep", "--db", path, "--force")["ghost_pruned_ids"] == []
    assert session_ids(path) == {"ghost"}


# -- history --------------------------------------------------------------------------------------------------

def test_a_prune_that_deleted_nothing_writes_no_history_row(make_store, cli):
    b = make_store()
    b.session("young", age=1)
    b.close()
    assert run_json(cli, "prune", b.path)["deleted"] == 0
    assert cli.json("history", "--db", b.path, "--kind", "prune")["runs"] == []
    b2 = make_store(name="other.db")
    b2.session("old", age=200)
    b2.close()
    assert run_json(cli, "prune", b2.path)["deleted"] == 1
    assert len(cli.json("history", "--db", b2.path, "--kind", "prune")["runs"]) == 1
