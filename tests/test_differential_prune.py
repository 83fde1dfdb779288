"""prune against Hermes's own code (issue 25, item 6).

1. hermes-agent 0.19.0 (the test dependency) is the oracle on stores its own ``SessionDB`` builds, one message
   at a time: two byte-identical copies, ``SessionDB.prune_sessions`` on one, our planner and delete on the
   other; the surviving sessions, messages and parent links must be equal wherever the newer doc and upstream
   agree with 0.19.0 (the started-time window, source, cwd and message-count filters, archived rows, delegate
   and branch children kept and orphaned). Where they do not, the documented difference is asserted:
   0.19.0 ages ``older_than_days`` by start time (the doc and upstream: by last activity), and deletes a
   compressed-away segment while its continuation lives (the doc: a conversation goes only as a whole).
2. Upstream's current rules, restated in ``tests/reference_upstream_prune.py``, against our planner on random
   v31 stores: equal, after the two documented differences of ours (a compression conversation goes whole or
   not at all; a turn or compression in progress keeps its conversation).
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from maint.ops.prune import execute_prune, plan_prune
from maint.selection.filters import Filters
from maint.store.connection import open_store
from tests import reference_upstream_prune as upstream
from tests.storegen import DAY, StoreBuilder

CWDS = ("/home/u/scratch", "/home/u/scratch/deep", "/home/u/work", "/home/u/scratchy", None)
SOURCES = ("cli", "cron", "telegram", "subagent")


def copy_store(src: Path, dst: Path) -> Path:
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    a.close()
    b.close()
    return dst


def state(path: Path) -> tuple[dict, list]:
    """(id -> parent link, sorted (session, role, content, timestamp) of every message)."""
    conn = sqlite3.connect(path)
    parents = dict(conn.execute("SELECT id, parent_session_id FROM sessions"))
    messages = sorted(conn.execute("SELECT session_id, role, content, timestamp FROM messages"))
    conn.close()
    return parents, messages


def ours(path: Path, filters: Filters, *, now: float, include_archived: bool = False,
         include_pinned: bool = False) -> list[str]:
    with open_store(path) as store:
        plan = plan_prune(store, filters, include_archived=include_archived, include_pinned=include_pinned, now=now)
        return list(execute_prune(store, plan).deleted_ids)


# -- 1. hermes-agent 0.19.0 as the oracle --------------------------------------------------------------------

def build_family_store(path: Path, rng: random.Random) -> tuple[float, list[str]]:
    """Roots with delegate, branch and plain children (no compression: 0.19.0 departs from the doc there)."""
    ids: list[str] = []
    with StoreBuilder(path, layout="v22") as b:
        for i in range(rng.randint(6, 14)):
            sid = f"s{i:02d}"
            parent = rng.choice(ids) if ids and rng.random() < 0.6 else None
            relation = rng.choice(("delegate", "branch", "plain")) if parent else None
            marker = {"delegate": {"_delegate_from": parent}, "branch": {"_branched_from": parent}}.get(relation)
            age = rng.choice((1, 5, 30, 60, 120, 200))
            b.session(sid, source="subagent" if relation == "delegate" else rng.choice(SOURCES), age=age,
                      started_age=age + rng.choice((0.5, 3, 40)), parent=parent, model_config=marker,
                      ended=rng.random() < 0.85, messages=rng.randint(0, 4), cwd=rng.choice(CWDS),
                      archived=int(rng.random() < 0.2))
            ids.append(sid)
        return b.now, ids


def random_filters(rng: random.Random, now: float) -> tuple[dict, Filters]:
    """The same selection for 0.19.0's prune_sessions (kwargs) and ours (Filters)."""
    kw: dict = {}
    if rng.random() < 0.7:
        kw["started_before"] = now - rng.choice((10, 50, 100)) * DAY
    if rng.random() < 0.3:
        kw["started_after"] = now - rng.choice((150, 250)) * DAY
    if rng.random() < 0.3:
        kw["source"] = rng.choice(SOURCES)
    if rng.random() < 0.4:
        kw["cwd_prefix"] = "/home/u/scratch"
    if rng.random() < 0.3:
        kw["max_messages"] = rng.randint(0, 3)
    if not kw:
        kw["started_before"] = now - 30 * DAY
    ours_f = Filters(started_before=kw.get("started_before"), started_after=kw.get("started_after"),
                     source=kw.get("source"), cwd=kw.get("cwd_prefix"), max_messages=kw.get("max_messages"))
    return kw, ours_f


@pytest.mark.parametrize("seed", range(8))
def test_equal_to_hermes_0_19_prune_where_doc_and_upstream_agree(tmp_path, seed):
    from hermes_state import SessionDB

    rng = random.Random(seed)
    built = tmp_path / "built.db"
    now, ids = build_family_store(built, rng)
    theirs_path, ours_path = copy_store(built, tmp_path / "theirs.db"), copy_store(built, tmp_path / "ours.db")
    assert state(theirs_path) == state(ours_path)
    for round_ in range(3):  # successive prunes on the same pair, as a user would run them
        kw, filters = random_filters(rng, now)
        include_archived = rng.random() < 0.5
        db = SessionDB(theirs_path)
        try:
            n = db.prune_sessions(older_than_days=None, archived=None if include_archived else False, **kw)
        finally:
            db.close()
        deleted = ours(ours_path, filters, now=now, include_archived=include_archived)
        assert len(deleted) == n, (seed, round_, kw)
        assert state(ours_path) == state(theirs_path), (seed, round_, kw)


def test_family_rule_agrees_with_hermes_0_19(tmp_path):
    """The issue's case on a SessionDB store: --cwd selects the parent; children elsewhere are kept, orphaned."""
    from hermes_state import SessionDB

    built = tmp_path / "built.db"
    with StoreBuilder(built, layout="v22") as b:
        b.session("orch", age=30, cwd="/home/u/scratch")
        for n in range(3):
            b.session(f"sub{n}", source="subagent", age=30, parent="orch", cwd="/home/u/work",
                      model_config={"_delegate_from": "orch"})
        now = b.now
    theirs_path, ours_path = copy_store(built, tmp_path / "theirs.db"), copy_store(built, tmp_path / "ours.db")
    db = SessionDB(theirs_path)
    db.prune_sessions(older_than_days=None, started_before=now - 20 * DAY, cwd_prefix="/home/u/scratch")
    db.close()
    assert ours(ours_path, Filters(started_before=now - 20 * DAY, cwd="/home/u/scratch"), now=now) == ["orch"]
    assert state(ours_path) == state(theirs_path)
    assert state(ours_path)[0] == {"sub0": None, "sub1": None, "sub2": None}


def test_documented_difference_age_is_last_activity_not_start(tmp_path):
    """0.19.0's older_than_days bounds started_at; the doc (and upstream now) bound the last activity."""
    from hermes_state import SessionDB

    built = tmp_path / "built.db"
    with StoreBuilder(built, layout="v22") as b:
        b.session("long_running", age=3, started_age=400)  # started long ago, used this week
        b.session("old", age=200)
        now = b.now
    theirs_path, ours_path = copy_store(built, tmp_path / "theirs.db"), copy_store(built, tmp_path / "ours.db")
    db = SessionDB(theirs_path)
    db.prune_sessions(older_than_days=90)
    db.close()
    assert set(state(theirs_path)[0]) == set()  # 0.19.0 deletes the conversation used three days ago
    assert ours(ours_path, Filters(active_before=now - 90 * DAY), now=now) == ["old"]
    assert set(state(ours_path)[0]) == {"long_running"}


def test_documented_difference_a_compression_conversation_goes_whole(tmp_path):
    """0.19.0 deletes an old compressed-away segment under a live continuation; the doc keeps the earlier
    segments while a later one stays (and upstream's whole_lineages agrees)."""
    from hermes_state import SessionDB

    built = tmp_path / "built.db"
    with StoreBuilder(built, layout="v22") as b:
        b.session("seg1", age=300, started_age=301, end_reason="compression")
        b.session("seg2", age=2, started_age=299, parent="seg1")
        now = b.now
    theirs_path, ours_path = copy_store(built, tmp_path / "theirs.db"), copy_store(built, tmp_path / "ours.db")
    db = SessionDB(theirs_path)
    db.prune_sessions(older_than_days=None, started_before=now - 300 * DAY)
    db.close()
    assert state(theirs_path)[0] == {"seg2": None}
    assert ours(ours_path, Filters(started_before=now - 300 * DAY), now=now) == []
    assert state(ours_path)[0] == {"seg1": None, "seg2": "seg1"}
    assert upstream.select(built, {"started_before": now - 300 * DAY}) == set()


# -- 2. upstream's current rules on v31 stores ---------------------------------------------------------------

def build_v31_store(path: Path, rng: random.Random) -> tuple[float, list[str]]:
    ids: list[str] = []
    with StoreBuilder(path, layout="v31") as b:
        for i in range(rng.randint(8, 20)):
            sid = f"s{i:02d}"
            parent = rng.choice(ids) if ids and rng.random() < 0.65 else None
            relation = rng.choice(("compression", "compression", "delegate", "branch", "reset", "tool", "plain")) \
                if parent else None
            marker = {"delegate": {"_delegate_from": parent}, "branch": {"_branched_from": parent},
                      "reset": {"_reset_from": parent}}.get(relation)
            if relation == "compression":
                b.set(parent, end_reason="compression")
            age = rng.choice((1, 5, 30, 60, 91, 120, 200))
            ended = rng.random() < 0.85
            b.session(sid, source="tool" if relation == "tool" else rng.choice(SOURCES), age=age,
                      started_age=age + rng.choice((0.5, 3, 40)), parent=parent, model_config=marker, ended=ended,
                      end_reason=rng.choice(("done", "done", "startup_orphan_reap")), messages=rng.randint(0, 3),
                      cwd=rng.choice(CWDS), archived=int(rng.random() < 0.15), pinned=int(rng.random() < 0.1))
            roll = rng.random()
            if roll < 0.15:
                b.set(sid, last_activity_at=b.now - rng.choice((0.5, 10, 100, 300)) * DAY)
            elif roll < 0.2:
                b.set(sid, last_activity_at=rng.choice((5e246, -1e12)))  # a garbage cell: skipped
            elif roll < 0.23:
                b.set(sid, started_at=5e246, last_activity_at=None)  # nothing to date it by
            if rng.random() < 0.05:
                b.lock(sid)
            ids.append(sid)
        return b.now, ids


def upstream_filters(rng: random.Random, now: float) -> tuple[dict, Filters]:
    kw: dict = {}
    if rng.random() < 0.6:
        kw["last_active_before"] = now - rng.choice((0, 20, 90, 150)) * DAY
    if rng.random() < 0.25:
        kw["started_before"] = now - rng.choice((10, 100)) * DAY
    if rng.random() < 0.2:
        kw["started_after"] = now - rng.choice((150, 250)) * DAY
    if rng.random() < 0.25:
        kw["source"] = rng.choice(SOURCES)
    if rng.random() < 0.3:
        kw["cwd_prefix"] = "/home/u/scratch"
    if rng.random() < 0.2:
        kw["min_messages"] = rng.randint(1, 3)
    if not kw:
        kw["last_active_before"] = now - 90 * DAY  # the bare rule
    f = Filters(active_before=kw.get("last_active_before"), started_before=kw.get("started_before"),
                started_after=kw.get("started_after"), source=kw.get("source"), cwd=kw.get("cwd_prefix"),
                min_messages=kw.get("min_messages"))
    return kw, f


def expected_ours(path: Path, chosen: set[str], now: float) -> set[str]:
    """Upstream's selection after our two documented differences: a compression conversation goes only as a
    whole (upstream may take a matching later part while an unmatched earlier segment stays), and one with a
    turn or compression in progress stays (upstream's manual prune does not check the guards)."""
    conn = sqlite3.connect(path)
    locked = {r[0] for r in conn.execute("SELECT session_id FROM compression_locks WHERE expires_at > ?", (now,))}
    conn.close()
    out: set[str] = set()
    for group in upstream.components(path):
        if group <= chosen and not group & locked:
            out |= group
    return out


@pytest.mark.parametrize("seed", range(25))
def test_equal_to_upstreams_current_rules_on_v31_stores(tmp_path, seed):
    rng = random.Random(1000 + seed)
    path = tmp_path / "state.db"
    now, _ids = build_v31_store(path, rng)
    for _ in range(4):
        kw, filters = upstream_filters(rng, now)
        include_archived, include_pinned = rng.random() < 0.5, rng.random() < 0.3
        want = upstream.select(path, {**kw, "archived": None if include_archived else False},
                               include_pinned=include_pinned)
        with open_store(path, readonly=True) as store:
            plan = plan_prune(store, filters, include_archived=include_archived, include_pinned=include_pinned,
                              now=now)
            got = set(plan.session_ids)
        assert got == expected_ours(path, want, now), (seed, kw, include_archived, include_pinned)


@pytest.mark.parametrize("seed", range(6))
def test_applied_prune_orphans_what_it_keeps_on_v31_stores(tmp_path, seed):
    rng = random.Random(2000 + seed)
    path = tmp_path / "state.db"
    now, _ids = build_v31_store(path, rng)
    before, _ = state(path)
    kw, filters = upstream_filters(rng, now)
    want = expected_ours(path, upstream.select(path, {**kw, "archived": False}), now)
    deleted = set(ours(path, filters, now=now))
    after, messages = state(path)
    assert deleted == want and set(after) == set(before) - want
    # every survivor keeps its parent link unless the parent went (then NULL, as upstream does)
    assert after == {sid: (None if before[sid] in want else before[sid]) for sid in after}
    assert not any(sid in want for sid, *_ in messages)


def test_ghost_repair_equal_to_hermes_0_19(tmp_path):
    """The sweep's one-time ghost repair deletes what 0.19.0's prune_empty_ghost_sessions deletes. The one
    difference: 0.19.0 fails outright (a foreign-key error) on a ghost that has a child; ours orphans the child,
    as every delete here does."""
    from hermes_state import SessionDB

    from maint.ops.ghosts import prune_ghosts_once

    built = tmp_path / "built.db"
    with StoreBuilder(built, layout="v22") as b:
        b.session("ghost", source="tui", age=2, messages=0)
        b.session("ghost2", source="tui", age=5, messages=0)
        b.session("ghost_young", source="tui", age=0.1, started_age=0.2, messages=0)
        b.session("ghost_open", source="tui", age=2, messages=0, ended=False)
        b.session("tui_used", source="tui", age=2)
        b.session("titled", source="tui", age=2, messages=0, title="named")
        b.session("cli_empty", source="cli", age=2, messages=0)
        now = b.now
    theirs_path, ours_path = copy_store(built, tmp_path / "theirs.db"), copy_store(built, tmp_path / "ours.db")
    db = SessionDB(theirs_path)
    assert db.prune_empty_ghost_sessions() == 2
    db.close()
    with open_store(ours_path) as store:
        assert prune_ghosts_once(store, now) == ["ghost", "ghost2"]
    assert state(theirs_path) == state(ours_path)
    # a ghost with a child
    with StoreBuilder(tmp_path / "child.db", layout="v22") as b:
        b.session("ghost", source="tui", age=2, messages=0)
        b.session("child", source="subagent", age=2, parent="ghost", model_config={"_delegate_from": "ghost"})
    theirs_path = copy_store(tmp_path / "child.db", tmp_path / "theirs_child.db")
    ours_path = copy_store(tmp_path / "child.db", tmp_path / "ours_child.db")
    db = SessionDB(theirs_path)
    with pytest.raises(sqlite3.IntegrityError):
        db.prune_empty_ghost_sessions()
    db.close()
    with open_store(ours_path) as store:
        assert prune_ghosts_once(store, now) == ["ghost"]
    assert state(ours_path)[0] == {"child": None}
