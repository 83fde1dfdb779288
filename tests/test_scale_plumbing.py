"""The pieces that keep memory flat: packed id lists, JSON written in pieces, plans read from temp tables."""

import json

import pytest

from maint.commands.output import write_json
from maint.ops.archive import plan_archive
from maint.ops.prune import plan_prune
from maint.selection.filters import parse_filters
from maint.store.connection import open_store
from maint.store.sqlutil import IdList, Paged
from tests.conftest import run_subprocess


def test_id_list_is_a_sequence_of_the_ids_given():
    ids = ["20250305_091523_a1b2", "日本語_id", "", "with \"quotes\"", "x" * 300]
    packed = IdList(ids)
    assert len(packed) == 5 and list(packed) == ids and packed == ids
    assert packed[1] == "日本語_id" and packed[-1] == "x" * 300 and packed[1:3] == ids[1:3]
    packed.append("late")
    assert packed[5] == "late" and packed != ids
    with pytest.raises(IndexError):
        packed[6]


@pytest.mark.parametrize("n", [0, 1, 999, 1000, 1001, 2345])
def test_write_json_streams_what_json_dumps_writes(n):
    """Around the 1000-item batches: the text is exactly json.dumps's, so readers see no difference."""
    ids = [f"s{i}\"é" for i in range(n)]
    report = {"store": "/x", "session_ids": IdList(ids), "paged": Paged(n, lambda a, b: ids[a:b], page=300),
              "held_back": {"open": 1}, "oldest": None}
    pieces = []
    write_json(report, pieces.append)
    expected = json.dumps({**report, "session_ids": ids, "paged": ids}, ensure_ascii=False)
    assert "".join(pieces) == expected
    assert n < 1000 or max(len(p) for p in pieces) < len(expected) / 2  # never one string of the whole list


def test_a_plan_replaced_on_the_same_store_refuses_to_be_read(make_store):
    """Plans live in temp tables on the connection: reading an older one would read the newer one's rows."""
    b = make_store("v30")
    for n in range(5):
        b.session(f"old{n}", age=200)
    b.close()
    with open_store(b.path) as store:
        first = plan_prune(store, None)
        assert len(first.units) == 5
        plan_archive(store, parse_filters({"older_than": "30"}))
        with pytest.raises(RuntimeError, match="replaced"):
            first.units[0]


def test_dry_run_json_names_every_planned_session(make_store, tmp_path):
    """More ids than one streamed batch, through the real CLI: the JSON parses and names each one once."""
    b = make_store("v30")
    for n in range(1203):
        b.session(f"old_{n:04d}", age=100 + n % 50, messages=1)
    b.session("young", age=1)
    b.close()
    r = run_subprocess("prune", "--db", b.path, "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert sorted(report["session_ids"]) == [f"old_{n:04d}" for n in range(1203)]
    assert report["matched"] == 1203 and report["messages"] == 1203


def test_run_history_counts_and_cuts_packed_id_lists(make_store):
    """A sweep or archive report carries IdLists: the run history counts them and keeps the first 50 ids."""
    from maint.ops import history

    b = make_store("v30")
    b.close()
    ids = [f"s{n:03d}" for n in range(60)]
    with open_store(b.path) as store:
        entry = history.append(store, "archive", {"session_ids": IdList(ids)}, seconds=1.0)
        stored = json.loads(store.get_meta(history._key("archive", entry.seq)))
    assert entry.rows == 60
    assert stored["report"]["session_ids"] == ids[:50] and stored["report"]["truncated"] == {"session_ids": 60}


def test_planning_sorts_with_the_small_cache_and_gives_the_write_cache_back(make_store):
    b = make_store("v30")
    b.session("old", age=200)
    b.close()
    with open_store(b.path) as store:
        before = store.scalar("PRAGMA cache_size")
        with store.planning():
            during = store.scalar("PRAGMA cache_size")
        plan_prune(store, None)
        assert store.scalar("PRAGMA cache_size") == before
    assert before < during < 0  # negative sizes are KiB: the write cache is the bigger one


def test_the_scale_benchmark_builds_stores_with_hermes_indexes(tmp_path, monkeypatch):
    """Timings on a store without Hermes's indexes would flatter every plan that can use one: the
    benchmark's store has every index hermes-agent 0.19.0 creates, but those on columns or tables
    the upstream layout it builds lacks, each defined as Hermes defines it."""
    import sqlite3
    from pathlib import Path

    from hermes_state import SessionDB

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "bench"))
    import scale_bench

    def indexes(path):
        conn = sqlite3.connect(path)
        try:
            return {name: " ".join(sql.split()) for name, sql in conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")}
        finally:
            conn.close()

    scale_bench.build_store(tmp_path / "bench.db", 40)
    SessionDB(tmp_path / "hermes.db").close()
    ours, hermes = indexes(tmp_path / "bench.db"), indexes(tmp_path / "hermes.db")
    assert set(hermes) - set(ours) == {"idx_async_delegations_delivery", "idx_messages_platform_msg_id",
                                       "idx_sessions_handoff_state"}
    assert {name: ours[name] for name in hermes if name in ours} == {
        name: sql for name, sql in hermes.items() if name in ours}
