"""Lineage classification follows Hermes's markers and legacy heuristics (computed in SQLite temp tables)."""

import time

from maint.store import lineage as lin
from maint.store.connection import open_store


def graph(path):
    """{kind}, {chain_of}, {key: (ids oldest first, tip, delegate parent)} as the temp tables hold them."""
    with open_store(path) as store, store.snapshot():
        lin.build(store, time.time())
        kind = dict(store.conn.execute("SELECT id, kind FROM maint_s").fetchall())
        chain_of = dict(store.conn.execute("SELECT id, chain FROM maint_s").fetchall())
        chains = {}
        for key, tip, dparent in store.conn.execute("SELECT key, tip, dparent FROM maint_c").fetchall():
            ids = [r[0] for r in store.conn.execute(
                "SELECT id FROM maint_s WHERE chain = ? ORDER BY started_at, id", (key,))]
            chains[key] = (ids, tip, dparent)
    return kind, chain_of, chains


def test_kinds(make_store, layout):
    b = make_store(layout)
    b.session("root", age=10, end_reason="compression", session_key="k1")
    b.session("cont", age=9, parent="root", session_key="k1")
    b.session("forked", age=8, parent="root", model_config={"_branched_from": "root"})
    b.session("bp", age=10, end_reason="branched")
    b.session("legacy_branch", age=1, started_age=2, parent="bp")
    b.session("rp", age=10, end_reason="session_reset", session_key="chat:1")
    b.session("legacy_reset", age=1, parent="rp", session_key="chat:1")
    b.session("marked_reset", age=1, parent="rp", model_config={"_reset_from": "rp"})
    b.session("sub", source="subagent", age=5, parent="cont", model_config={"_delegate_from": "cont"})
    b.session("root2", age=5)
    b.session("sub_cont_parent", source="subagent", age=5, parent="root2", end_reason="compression",
              model_config={"_delegate_from": "root2"})
    b.session("sub_cont", source="subagent", age=4, parent="sub_cont_parent",
              model_config={"_delegate_from": "root2"})  # inherited marker: a continuation
    b.session("tool_child", source="tool", age=1, parent="root")
    b.session("untagged", age=1, parent="root2")
    b.close()
    k, chain_of, chains = graph(b.path)
    assert k["root"] == lin.ROOT and k["cont"] == lin.COMPRESSION
    assert k["forked"] == lin.BRANCH and k["legacy_branch"] == lin.BRANCH
    assert k["legacy_reset"] == lin.RESET and k["marked_reset"] == lin.RESET
    assert k["sub"] == lin.DELEGATE and k["sub_cont"] == lin.COMPRESSION
    assert k["tool_child"] == lin.OTHER and k["untagged"] == lin.OTHER
    assert chains[chain_of["cont"]][:2] == (["root", "cont"], "cont")
    assert chains[chain_of["sub_cont"]][0] == ["sub_cont_parent", "sub_cont"]
    assert chains[chain_of["sub_cont"]][2] == chain_of["root2"]
    assert chains[chain_of["sub"]][2] == chain_of["root"]


def test_tip_prefers_a_continuation_still_in_use(make_store):
    """Two continuations of one segment: the one still compressing wins over an ended, fresher one."""
    b = make_store("v30")
    b.session("a", age=10, end_reason="compression")
    b.session("b_ended", age=1, parent="a")
    b.session("b_compressing", age=5, parent="a", end_reason="compression")
    b.session("c", age=4, parent="b_compressing", ended=False)
    b.close()
    _, chain_of, chains = graph(b.path)
    ids, tip, _ = chains[chain_of["a"]]
    assert sorted(ids) == ["a", "b_compressing", "b_ended", "c"] and tip == "c"


def test_parent_loop_of_continuations_is_one_chain(make_store):
    """A damaged store whose continuations point at each other still groups them (no endless walk)."""
    b = make_store("v30")
    b.session("x", age=10, end_reason="compression")
    b.session("y", age=9, end_reason="compression", parent="x")
    b.session("z", age=8, parent="y")
    b.raw.execute("UPDATE sessions SET parent_session_id = 'y' WHERE id = 'x'")
    b.close()
    k, chain_of, chains = graph(b.path)
    assert k["x"] == k["y"] == k["z"] == lin.COMPRESSION
    assert chain_of["x"] == chain_of["y"] == chain_of["z"] == "x"
    assert chains["x"][1] == "z"


def test_delegate_cycle_does_not_loop(make_store):
    b = make_store()
    b.session("a", age=200, model_config={"_delegate_from": "b"})
    b.session("b", age=200, parent="a", model_config={"_delegate_from": "a"})
    b.raw.execute("UPDATE sessions SET parent_session_id = 'b' WHERE id = 'a'")
    b.close()
    _, chain_of, chains = graph(b.path)
    keys = {chain_of["a"], chain_of["b"]}
    assert sum(chains[key][2] is None for key in keys) == 1


def test_delegate_loops_are_found_in_work_linear_in_the_chain(tmp_path, monkeypatch):
    """Hostile try 19, W6: the search for chains that are their own delegate ancestor walked every chain up to its
    root in SQL, N^2/2 rows for a delegate chain of N (5,000 in a store: a prune plan of 102 s, archive 94 s). The
    chains a root reaches going down are found once each. Measured in SQLite's own steps (a progress handler every
    100 virtual-machine instructions), not in time: twice the chain is about twice the steps, not four times."""
    from maint.store.lineage import build
    from tests.storegen import StoreBuilder

    steps = {}
    real = lin._break_delegate_loops

    def counted(store):
        count = [0]
        store.conn.set_progress_handler(lambda: count.__setitem__(0, count[0] + 1) or 0, 100)
        try:
            real(store)
        finally:
            store.conn.set_progress_handler(None)
        steps[n] = count[0]

    monkeypatch.setattr(lin, "_break_delegate_loops", counted)
    for n in (200, 400):
        db = tmp_path / f"chain{n}.db"
        with StoreBuilder(db) as b:
            b.session("d0", age=100)
            for i in range(1, n):
                b.session(f"d{i}", age=100, parent=f"d{i - 1}", model_config={"_delegate_from": f"d{i - 1}"})
        with open_store(db) as store, store.snapshot():
            build(store, time.time())
    assert steps[400] < 3 * steps[200], steps
