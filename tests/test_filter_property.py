"""Property test: the filter engine (Python predicate and its SQL form) against a row-by-row reference."""

import itertools
import shutil
import sqlite3
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from maint.store.catalog import catalog_sql
from maint.errors import UsageError
from maint.selection.filters import parse_filters
from maint.store.connection import open_store
from tests.reference_planner import load_sessions
from tests.storegen import StoreBuilder

NOW = time.time()
COUNTER = itertools.count()
DAY = 86400.0
SOURCES = ["cli", "telegram", "cron"]
MODELS = ["gpt-5", "GPT-5-mini", "claude-sonnet", None]
CWDS = ["/a/b", "/a/b/c", "/a/bc", None]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    path = tmp_path_factory.mktemp("prop") / "state.db"
    with StoreBuilder(path):
        pass
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return path


session_st = st.fixed_dictionaries({
    "source": st.sampled_from(SOURCES), "model": st.sampled_from(MODELS), "cwd": st.sampled_from(CWDS),
    "title": st.sampled_from([None, "Smoke test", "real work", "smoke", "ÄRGER mit Straße"]),
    "started_days": st.floats(0, 400), "msg_days": st.lists(st.floats(0, 400), max_size=4),
    "ended": st.booleans(), "tokens": st.integers(0, 2000), "cost": st.sampled_from([None, 0.0, 0.01, 0.5]),
    "tool_calls": st.integers(0, 5), "message_count": st.integers(0, 10),
})
filter_st = st.fixed_dictionaries({}, optional={
    "older_than": st.sampled_from(["30", "90", "12h", "2w"]), "newer_than": st.sampled_from(["100", "5d"]),
    "before": st.sampled_from(["200", "1w"]), "after": st.sampled_from(["300", "10d"]),
    "source": st.sampled_from(SOURCES), "title": st.sampled_from(["smoke", "WORK", "ärger"]),
    "model": st.sampled_from(["gpt-5", "sonnet"]), "cwd": st.sampled_from(["/a/b", "/a"]),
    "min_messages": st.sampled_from(["0", "3"]), "max_messages": st.sampled_from(["5", "10"]),
    "min_tokens": st.sampled_from(["100", "1000"]), "max_cost": st.sampled_from(["0.01", "1"]),
    "max_tool_calls": st.sampled_from(["0", "2"]),
})


def reference(rows, msgs, raw):
    """Row by row, straight from the documented rules."""
    def moment(v):
        unit = {"h": 3600, "d": DAY, "w": 7 * DAY}.get(v[-1])
        return NOW - (float(v[:-1]) * unit if unit else float(v) * DAY)

    out = set()
    for r in rows:
        stamps = [m for m in msgs.get(r["id"], [])]
        last = max(stamps) if stamps else r["started_at"]
        ok = True
        ok &= "older_than" not in raw or last <= moment(raw["older_than"])
        ok &= "newer_than" not in raw or last >= moment(raw["newer_than"])
        ok &= "before" not in raw or r["started_at"] < moment(raw["before"])
        ok &= "after" not in raw or r["started_at"] >= moment(raw["after"])
        ok &= "source" not in raw or r["source"] == raw["source"]
        ok &= "title" not in raw or raw["title"].lower() in (r["title"] or "").lower()
        ok &= "model" not in raw or raw["model"].lower() in (r["model"] or "").lower()
        ok &= "cwd" not in raw or (r["cwd"] is not None and (r["cwd"] == raw["cwd"]
                                                             or r["cwd"].startswith(raw["cwd"] + "/")))
        ok &= "min_messages" not in raw or r["message_count"] >= int(raw["min_messages"])
        ok &= "max_messages" not in raw or r["message_count"] <= int(raw["max_messages"])
        tokens = (r["input_tokens"] or 0) + (r["output_tokens"] or 0)
        ok &= "min_tokens" not in raw or tokens >= int(raw["min_tokens"])
        cost = r["actual_cost_usd"] if r["actual_cost_usd"] is not None else (r["estimated_cost_usd"] or 0)
        ok &= "max_cost" not in raw or cost <= float(raw["max_cost"])
        ok &= "max_tool_calls" not in raw or (r["tool_call_count"] or 0) <= int(raw["max_tool_calls"])
        if ok:
            out.add(r["id"])
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sessions=st.lists(session_st, min_size=1, max_size=8), raw=filter_st)
def test_engine_matches_reference(template, tmp_path, sessions, raw):
    db = tmp_path / f"p{next(COUNTER)}.db"
    shutil.copy(template, db)
    conn = sqlite3.connect(db)
    for i, s in enumerate(sessions):
        started = NOW - s["started_days"] * DAY
        conn.execute("INSERT INTO sessions (id, source, model, cwd, title, started_at, ended_at, input_tokens, "
                     "actual_cost_usd, tool_call_count, message_count) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                     (f"s{i}", s["source"], s["model"], s["cwd"], None if s["title"] is None else f"{s['title']} {i}",
                      started, NOW if s["ended"] else None, s["tokens"], s["cost"], s["tool_calls"],
                      s["message_count"]))
        for d in s["msg_days"]:
            conn.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, 'user', 'x', ?)",
                         (f"s{i}", NOW - d * DAY))
    conn.commit()
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT * FROM sessions")]
    msgs = {}
    for sid, ts in conn.execute("SELECT session_id, timestamp FROM messages"):
        msgs.setdefault(sid, []).append(ts)
    conn.close()
    try:
        spec = parse_filters(raw, NOW)
    except UsageError as exc:  # only an empty window may be refused
        assert "empty window" in str(exc)
        return
    with open_store(db, readonly=True) as store:
        got = {sid for sid, s in load_sessions(store, NOW).items() if spec.matches(s)}
        where, params = spec.sql()
        in_sql = {r[0] for r in store.conn.execute(f"SELECT id FROM ({catalog_sql(store, spec.columns)}) WHERE {where}",
                                                   {"now": NOW, **params})}
    expected = reference(rows, msgs, raw)
    assert got == expected
    assert in_sql == expected
