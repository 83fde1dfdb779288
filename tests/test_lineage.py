"""Lineage classification follows Hermes's markers and legacy heuristics."""

from maint.store import lineage as lin
from maint.store.catalog import load_sessions
from maint.store.connection import open_store


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
    with open_store(b.path) as store:
        sessions = load_sessions(store)
    tree = lin.build(sessions)
    k = tree.kind
    assert k["root"] == lin.ROOT and k["cont"] == lin.COMPRESSION
    assert k["forked"] == lin.BRANCH and k["legacy_branch"] == lin.BRANCH
    assert k["legacy_reset"] == lin.RESET and k["marked_reset"] == lin.RESET
    assert k["sub"] == lin.DELEGATE and k["sub_cont"] == lin.COMPRESSION
    assert k["tool_child"] != lin.COMPRESSION and k["untagged"] == lin.OTHER
    chain = tree.chains[tree.chain_of["cont"]]
    assert chain.ids == ["root", "cont"] and chain.tip == "cont"
    sub_chain = tree.chain_of["sub_cont"]
    assert tree.chains[sub_chain].ids == ["sub_cont_parent", "sub_cont"]
    assert tree.chains[sub_chain].delegate_parent == tree.chain_of["root2"]
    assert set(tree.subtree_session_ids(tree.chain_of["root"])) == {"root", "cont", "sub"}


def test_delegate_cycle_does_not_loop(make_store):
    b = make_store()
    b.session("a", age=200, model_config={"_delegate_from": "b"})
    b.session("b", age=200, parent="a", model_config={"_delegate_from": "a"})
    b.raw.execute("UPDATE sessions SET parent_session_id = 'b' WHERE id = 'a'")
    b.close()
    with open_store(b.path) as store:
        tree = lin.build(load_sessions(store))
    keys = {tree.chain_of["a"], tree.chain_of["b"]}
    assert any(tree.chains[key].delegate_parent is None for key in keys)
