"""The SQL planner against the Python planner it replaced, on random stores of both layouts.

Stores are built by hermes-agent's own SessionDB (v22) or in the current upstream layout (v30, and v31
with the idle sweep's ``auto_archived`` column),
with every relation the planners know: compression chains (and their ties and forks), delegate
children (with orphaned and inherited markers), branch and reset children, tool children, open,
pinned, hidden, archived, locked and leased sessions, reaped orphans, dangling parents and the
parent loops only a damaged store has. Every planner must choose exactly what
``tests/reference_planner.py`` chooses: prune's units and held-back reasons (with and without
archived sessions, with sessions just reaped), archive's lineages in order and its skip counts,
list's rows and total in both orders (by start: without an index on it in the v30/v31 stores, with
Hermes's ``idx_sessions_started`` in SessionDB's; with and without a source, a limit, a workspace),
the idle sweep's lineages, the pinned list,
export's selection, latest session and logical groups, the delegate family of every session, and
sweep's orphans to reap.
"""

import itertools
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from maint.errors import UsageError
from maint.export.pipeline import _groups
from maint.export.selection import latest_session, select_sessions
from maint.ops.archive import plan_archive
from maint.ops.auto_archive import _marks, plan_idle_archive
from maint.ops.listing import _preview, list_conversations
from maint.ops.prune import plan_prune
from maint.ops.reap import reap_candidates
from maint.ops.sessions import pinned_sessions
from maint.selection.filters import parse_filters
from maint.store.connection import open_store
from maint.store import lineage, lineage_records
from maint.store.catalog import load_sessions
from maint.store.lineage import delegate_family
from tests import reference_planner as ref
from tests.storegen import DAY, StoreBuilder

COUNTER = itertools.count()
RELATIONS = ("compression", "compression", "compression", "delegate", "delegate", "delegate_orphan", "inherited",
             "branch", "reset", "legacy", "tool", "plain")
END_REASONS = ("done", "compression", "compression", "compression", "branched", "session_reset", "idle",
               "startup_orphan_reap")


@st.composite
def sessions_st(draw):
    """A list of session specs; parents point at earlier sessions, now and then at a later one or a ghost."""
    n = draw(st.integers(1, 22))
    out = []
    for i in range(n):
        roll = draw(st.integers(0, 99))
        if i == 0 or roll < 25:
            parent = None
        elif roll < 60:
            parent = i - 1  # long chains
        elif roll < 90:
            parent = draw(st.integers(0, i - 1))
        elif roll < 97:
            parent = draw(st.integers(0, n - 1))  # may be later, or itself: loops
        else:
            parent = "ghost"
        out.append({
            "parent": parent,
            "relation": draw(st.sampled_from(RELATIONS)),
            "source": draw(st.sampled_from(["cli", "cli", "telegram", "cron", "subagent", "tool"])),
            "age": draw(st.sampled_from([0.2, 3.0, 40.0, 89.0, 91.0, 91.0, 150.0, 150.0, 400.0, 400.0])),
            "started_extra": draw(st.sampled_from([0.0, 0.5, 2.0, 30.0])),
            "ended": draw(st.integers(0, 9)) > 2,
            "end_reason": draw(st.sampled_from(END_REASONS)),
            "session_key": draw(st.sampled_from([None, "k1", "k2"])),
            "messages": draw(st.integers(0, 3)),
            "archived": draw(st.integers(0, 9)) == 0,
            "pinned": draw(st.integers(0, 14)) == 0,
            "hidden": draw(st.integers(0, 14)) == 0,
            "lock": draw(st.sampled_from([None, None, None, None, "live", "expired"])),
            "lease": draw(st.integers(0, 14)) == 0,
            "activity": draw(st.sampled_from([None, None, 1.0, 100.0])),
            "title": draw(st.sampled_from([None, "smoke", "Real work", "Bot Chat"])),
            "auto_archived": draw(st.integers(0, 4)) == 0,
            "cwd": draw(st.sampled_from([None, "/home/u/proj", "/home/u/proj/sub", " "])),
            "repo": draw(st.sampled_from([None, None, "/repo/Hermes", ""])),
        })
    return out


filters_st = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "older_than": st.sampled_from(["30", "90", "1h"]), "newer_than": st.sampled_from(["100", "5d"]),
    "source": st.sampled_from(["cli", "telegram", "subagent"]), "title": st.sampled_from(["SMOKE", "work"]),
    "min_messages": st.sampled_from(["1", "2"]), "before": st.sampled_from(["60", "1w"]),
}))


def build_store(path, layout, specs):
    ids = [f"s{i:02d}" for i in range(len(specs))]
    bot_chat = False
    with StoreBuilder(path, layout=layout) as b:
        for i, (sid, s) in enumerate(zip(ids, specs)):
            parent = s["parent"]
            parent_id = None if parent is None else "ghost" if parent == "ghost" else ids[parent]
            target = parent_id or ids[(i * 7 + 3) % len(ids)]
            marker = {"compression": None, "plain": None, "legacy": None, "tool": None,
                      "delegate": {"_delegate_from": target}, "branch": {"_branched_from": target},
                      "reset": {"_reset_from": target}, "delegate_orphan": {"_delegate_from": ids[0]},
                      "inherited": {"_delegate_from": ids[(i * 5 + 1) % len(ids)]}}[s["relation"]]
            source = "tool" if s["relation"] == "tool" else s["source"]
            title = None if s["title"] is None else f"{s['title']} {sid}"  # v22: titles are unique
            if s["title"] == "Bot Chat" and not bot_chat:  # Bot Mode's canonical chat, once per store
                title, bot_chat = "Bot Chat", True
            b.session(sid, source=source, age=s["age"], started_age=s["age"] + s["started_extra"],
                      ended=s["ended"], end_reason=s["end_reason"], messages=s["messages"], model_config=marker,
                      session_key=s["session_key"], title=title, archived=int(s["archived"]), cwd=s["cwd"],
                      git_repo_root=s["repo"])
            b.raw.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (parent_id, sid))
            if s["lock"]:
                b.lock(sid, minutes=10 if s["lock"] == "live" else -10)
            if layout in ("v30", "v31"):
                b.set(sid, pinned=int(s["pinned"]), hidden=int(s["hidden"]),
                      last_activity_at=None if s["activity"] is None else b.now - s["activity"] * DAY)
            if layout == "v31":
                b.set(sid, auto_archived=int(s["auto_archived"] and s["archived"]))
                if s["lease"]:
                    b.raw.execute("INSERT INTO session_turn_leases VALUES (?, 'gw', ?, ?)", (sid, b.now, b.now + 600))
        return b.now, ids


def unit_sets(units):
    return sorted(sorted(u) for u in units)


def check_everything(store, now, ids, raw, include_archived, keep):
    try:
        filters = None if raw is None else parse_filters(raw, now)
    except UsageError:
        return
    # prune
    plan = plan_prune(store, filters, include_archived=include_archived, now=now, keep=keep)
    expected = ref.plan_prune(store, filters, include_archived=include_archived, now=now, keep=keep)
    assert unit_sets(u.session_ids for u in plan.units) == unit_sets(expected["units"])
    assert plan.held_back == expected["held_back"]
    assert plan.implicit_days == expected["implicit_days"]
    chosen = [sid for u in expected["units"] for sid in u]
    assert plan.sessions == len(chosen)
    assert plan.messages == sum(store.scalar("SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,))
                                for sid in chosen)
    firsts = [-1 if u.first_message_id is None else u.first_message_id for u in plan.units]
    assert firsts == sorted(firsts)
    # archive (needs a filter)
    if filters is not None and not filters.is_empty:
        for include_open in (False, True):
            got = plan_archive(store, filters, include_open=include_open, now=now)
            want = ref.plan_archive(store, filters, include_open=include_open, now=now)
            assert [list(x) for x in got.lineages] == want["lineages"]
            assert (got.skipped_open, got.skipped_pinned) == (want["skipped_open"], want["skipped_pinned"])
        # export's bulk selection and its logical groups
        selected = list(select_sessions(store, None, filters, now=now))
        assert selected == ref.select_sessions(store, filters, now=now)
        assert _groups(store, selected, "logical") == ref.logical_groups(store, selected, now=now)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=sessions_st(), raw=filters_st, include_archived=st.booleans(), keep_every=st.integers(0, 5))
@pytest.mark.parametrize("layout", ["v22", "v30", "v31"])
def test_sql_planner_selects_what_the_python_planner_selected(tmp_path, layout, specs, raw, include_archived,
                                                              keep_every):
    path = tmp_path / f"d{next(COUNTER)}.db"
    now, ids = build_store(path, layout, specs)
    keep = frozenset(ids[::keep_every]) if keep_every else frozenset()
    with open_store(path) as store:
        check_everything(store, now, ids, raw, include_archived, keep)
        for sort, (source, limit, workspace) in itertools.product(
                ("started", "last-active"),
                ((None, 0, None), (None, 1, None), (None, 3, None), ("cli", 0, None), ("cli", 2, None),
                 (None, 2, "proj"), (None, 0, "hermes"))):
            want, want_total, cut = ref.list_conversations(store, source=source, limit=limit, workspace=workspace,
                                                           now=now, sort=sort)
            for row in want:
                row["preview"] = _preview(store, row["root_id"])  # the preview query did not change
            got = list_conversations(store, source=source, limit=limit, workspace=workspace, now=now, sort=sort)
            assert got == (want, want_total, want_total > len(want) + cut, cut)
            # Without the count (text output): the same rows, and whether any is left out, from a walk
            # that stops early.
            uncounted = list_conversations(store, source=source, limit=limit, workspace=workspace, now=now,
                                           sort=sort, count=False)
            assert uncounted == (want, None, want_total > len(want) + cut, cut)
        if store.has_column("sessions", "auto_archived"):
            for days in (0.0, 3.0, 100.0):
                idle = plan_idle_archive(store, days, now)
                want = ref.plan_idle_archive(store, days, now)
                assert [(u.member_ids, u.flip_ids) for u in idle.units] == want["units"]
                assert (idle.skipped_pinned, idle.skipped_busy) == (want["skipped_pinned"], want["skipped_busy"])
                assert all(u.marks == _marks(store, u.member_ids) for u in idle.units)
        if store.has_column("sessions", "pinned"):
            assert pinned_sessions(store, now) == ref.pinned_sessions(store, now)
        assert latest_session(store, now) == ref.latest_session(store, now)
        assert_records_lineage_agrees(store, now)
        for sid in ids:
            assert delegate_family(store, sid) == ref.family(store, sid)
        for days in (0, 30, 95):
            assert reap_candidates(store, days, now) == ref.reap_candidates(store, days, now)


def assert_records_lineage_agrees(store, now):
    """The in-memory rules the importer applies to an export file's records group, tip and nest like SQL."""
    with store.snapshot():
        lineage.build(store, now)
        kinds = dict(store.conn.execute("SELECT id, kind FROM maint_s").fetchall())
        chain_of = dict(store.conn.execute("SELECT id, chain FROM maint_s").fetchall())
        chains = {key: (tip, dparent) for key, tip, dparent in store.conn.execute(
            "SELECT key, tip, dparent FROM maint_c").fetchall()}
    tree = lineage_records.build(load_sessions(store, now))
    assert tree.kind == kinds and tree.chain_of == chain_of
    assert {k: (c.tip, c.delegate_parent) for k, c in tree.chains.items()} == chains


def test_every_kind_and_both_kinds_of_loop(tmp_path):
    """Fixed cases the random stores reach only now and then: every kind, a loop of continuations, and a
    delegate chain hanging off a loop of delegates (where the old planner's cut depended on table order)."""
    specs = [
        {"parent": None, "relation": "plain", "end_reason": "compression"},
        {"parent": 0, "relation": "compression", "end_reason": "done"},
        {"parent": 0, "relation": "delegate", "end_reason": "done"},
        {"parent": 0, "relation": "branch", "end_reason": "done"},
        {"parent": 0, "relation": "reset", "end_reason": "done"},
        {"parent": 0, "relation": "tool", "end_reason": "done"},
        {"parent": 7, "relation": "compression", "end_reason": "compression"},
        {"parent": 6, "relation": "compression", "end_reason": "compression"},
        {"parent": 9, "relation": "delegate", "end_reason": "done"},  # hangs off the loop below
        {"parent": 10, "relation": "delegate", "end_reason": "done"},
        {"parent": 9, "relation": "delegate", "end_reason": "done"},
        {"parent": None, "relation": "plain", "end_reason": "compression"},  # s11..s13: one chain whose
        {"parent": 11, "relation": "compression", "end_reason": "compression", "lock": "live"},  # later
        {"parent": 12, "relation": "compression", "end_reason": "done", "archived": True},  # segments hold
    ]
    base = {"source": "cli", "age": 100.0, "started_extra": 1.0, "ended": True, "session_key": None,
            "messages": 1, "archived": False, "pinned": False, "hidden": False, "lock": None, "lease": False,
            "activity": None, "title": None, "auto_archived": False, "cwd": None, "repo": None}
    path = tmp_path / "kinds.db"
    now, ids = build_store(path, "v30", [{**base, **s} for s in specs])
    conn = sqlite3.connect(path, isolation_level=None)  # a marker key written with an escape is still the marker
    conn.execute("""UPDATE sessions SET model_config = '{"_reset\\u005ffrom": "s00"}' WHERE id = 's04'""")
    conn.close()
    with open_store(path) as store:
        sessions = ref.load_sessions(store, now)
        tree = ref.build(sessions)
        kinds = set(tree.kind.values())
        assert kinds == {ref.ROOT, ref.COMPRESSION, ref.DELEGATE, ref.BRANCH, ref.RESET, ref.OTHER}
        assert tree.kind["s06"] == tree.kind["s07"] == ref.COMPRESSION  # a loop of continuations
        assert tree.kind["s04"] == ref.RESET
        # The old planner cut the hanging chain s08 and the loop's first chain s09, and kept s10 under s09.
        parents = {key: tree.chains[key].delegate_parent for key in ("s08", "s09", "s10")}
        assert parents == {"s08": None, "s09": None, "s10": "s09"}
        with store.snapshot():
            lineage.build(store, now)
            got = dict(store.conn.execute(
                "SELECT key, dparent FROM maint_c WHERE key IN ('s08', 's09', 's10')").fetchall())
            kinds = dict(store.conn.execute("SELECT id, kind FROM maint_s").fetchall())
        assert got == parents
        assert kinds == tree.kind
        check_everything(store, now, ids, None, False, frozenset())
        check_everything(store, now, ids, {"older_than": "30"}, True, frozenset({"s10"}))
        assert_records_lineage_agrees(store, now)
