"""The SQL-built jsonl export writes exactly the bytes of today's renderer (tests/reference_jsonl.py).

Stores of both layouts carry the awkward values: floats whose shortest repr SQLite would print
otherwise, infinities, integers past 2**53, control characters, NUL, line separators, blobs, JSON
and not-JSON in tool_calls, empty and odd roles, prompts by hash. Sessions the SQL cannot vouch
for must take the reference way, and only those.
"""

import json
import sqlite3

import apsw
import pytest

from maint.export import render
from maint.export.fast_jsonl import write_sessions
from maint.store.connection import open_store
from tests.conftest import run_subprocess
from tests.reference_jsonl import jsonl_line
from tests.storegen import StoreBuilder

# Sessions the fast path must hand to the reference renderer, and why.
FALLBACK = {
    "text_ts": "a timestamp that is text",
    "inf_ts": "timestamps that are infinite (the gaps are NaN, which SQLite makes NULL)",
    "bad_calls": "an assistant's tool_calls that is not JSON",
    "nan_calls": "tool_calls Python parses (NaN) but strict JSON does not",
    "blob_calls": "an assistant's tool_calls that is a blob",
    "nul_calls": "tool_calls with a NUL: SQLite's JSON reading stops there, Python's does not",
    "deep_calls": "tool_calls with more brackets than json_text.MAX_DEPTH: Python decides how deep they nest",
    "bracket_calls": "tool_calls with many brackets inside strings: shallow, but only Python can tell",
}
FLOATS = [1e16, 1.0e15, 123456789012345.67, 1e-05, 0.1 + 0.2, 5e-324, 1.7976931348623157e308, -0.0,
          float("inf"), float("-inf"), 2.5, 1733212345.1234567, 0.30000000000000004, 100.0]
TEXTS = ["quote \" backslash \\ slash /", "\x00nul\x01\x08\t\n\x0b\x0c\r\x1f\x7f", "sep \u2028 \u2029",
         "emoji 😀 日本語 é \ufeff \ud7ff \ue000 \uffff", "", "'single'", "</script>"]


def _message(b, sid, role, content, ts, **extra):
    cols = {"session_id": sid, "role": role, "content": content, "timestamp": ts, **extra}
    b.raw.execute(f"INSERT INTO messages ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                  tuple(cols.values()))


def awkward_store(path, layout, more=None):
    with StoreBuilder(path, layout=layout) as b:
        if more is not None:
            more(b)
        b.session("plain", messages=6, title="plain one")
        b.session("empty", messages=0)
        b.session("floats", messages=0, estimated_cost_usd=1e16, actual_cost_usd=5e-324,
                  input_tokens=2**63 - 1, output_tokens=-2**63, cache_read_tokens=2**53 + 1)
        t0 = 1733212345.1234567
        for n, ts in enumerate([t0, t0 + 0.00025, t0 + 0.00025, t0 - 5, t0 + 0.1 + 0.2, t0 + 86400.000001,
                                1e16, 1e-05, 100.0]):
            _message(b, "floats", "user" if n % 2 else "assistant", f"f{n}", ts,
                     token_count=2**63 - 1 - n if n % 2 else n + 0.5)  # a float in an integer column stays one
        for n, value in enumerate(FLOATS):  # floats and infinities in a text-affinity column are kept as REAL
            _message(b, "floats", "tool", value, t0 + 200 + n, tool_call_id=value if n % 3 else None)
        for n, (model, value) in enumerate([("gpt-5", 1.1), ("claude \"q\"\n", 1e16), ("é😀", float("inf")),
                                            (b"\xffblob", "n/a"), ("", 2**63 - 1), ("t\x00nul", 0.1 + 0.2)]):
            # a session's per-model usage rows (hostile try 15, S17), sorted by every column, awkward values too
            b.raw.execute("INSERT INTO session_model_usage (session_id, model, task, input_tokens) VALUES "
                          "(?, ?, ?, ?)", ("floats", model, str(n % 2), value))
        b.raw.execute("INSERT INTO session_model_usage (session_id, model) VALUES ('plain', 'gpt-5')")
        b.session("ties", messages=0)  # gaps on and near a tie of round(x, 1): half-even, not half-up
        for n, ts in enumerate([0.0, 0.00025, 0.0005, 1.0, 1.00125, 1000.0, 1000.00015, 1000.00085]):
            _message(b, "ties", "user", f"t{n}", ts)
        b.session("texts", messages=0, title=TEXTS[1], cwd=TEXTS[3])
        for n, text in enumerate(TEXTS):
            _message(b, "texts", "user", text, 1700000000.0 + n * 1.5, tool_name=text, finish_reason=TEXTS[-1 - n])
        b.session("blobs", messages=0)
        b.set("blobs", model_config=b"\x00\xffraw")
        _message(b, "blobs", "user", b"\x80\x81 bytes", 1700000000.25)
        _message(b, "blobs", "assistant", "ok", 1700000001.75, tool_calls=None)
        b.session("tools", messages=0)
        calls = [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": '{"a": 1.10}'}}]
        # written as the JSON they hold (minified), or as the string (not a list or object, 1e400)
        for n, raw in enumerate([json.dumps(calls), json.dumps(calls * 3), '{"one": 1}', " [1, 2] ", "",
                                 "[]", '"text"', "7", json.dumps(calls, indent=2, ensure_ascii=False),
                                 '[{"x": "\\u00e9 é \\" \\\\ \\/", "n": -0.0e-0}]', "[1e400]", "[1E+308, 2e-3]",
                                 '[123456789012345678901234567890, "\\ud800"]', '{"a":1,"a":2}']):
            _message(b, "tools", "assistant", "calling", 1700000000.0 + n, tool_calls=raw)
        _message(b, "tools", "user", "not json here", 1700000100.0, tool_calls="{oops")
        _message(b, "tools", "tool", "out", 1700000101.0, tool_call_id="c1", tool_name="t")
        _message(b, "tools", "tool", "out", 1700000102.0, tool_calls=' [ {"on": "a tool row"} ] ')
        b.session("multimodal", messages=0)  # content behind Hermes's prefix: the parts, or the string
        for n, raw in enumerate([json.dumps([{"type": "text", "text": "é"}, {"type": "image_url", "image_url": {
                                     "url": "data:image/png;base64,iVBO"}}]), ' {"a" : [ 1 ]} ', '"text"', "{oops",
                                 "[1e400]", "[1, 2]\x00junk", "[" * 101 + "]" * 101, "", "[NaN]"]):
            _message(b, "multimodal", "user", "\x00json:" + raw, 1700000000.0 + n)
        for n, raw in enumerate(["json:[1]", "\x00json[1]", "\x00JSON:[1]", "x\x00json:[1]", "\x00json;[1]"]):
            _message(b, "multimodal", "user", raw, 1700000100.0 + n)
        b.session("roles", messages=0)
        for n, role in enumerate(["", "unknown", 5, "user", "", "Assistant", "assistant"]):
            _message(b, "roles", role, f"r{n}", 1700000000.0 + n)
        b.session("text_ts", messages=0)
        _message(b, "text_ts", "user", "when?", "yesterday")
        b.session("inf_ts", messages=0)
        for ts in (float("inf"), float("inf"), 1700000000.0):
            _message(b, "inf_ts", "user", "when?", ts)
        b.session("bad_calls", messages=0)
        _message(b, "bad_calls", "assistant", "x", 1700000000.0, tool_calls="{oops")
        b.session("nan_calls", messages=0)
        _message(b, "nan_calls", "assistant", "x", 1700000000.0, tool_calls="[NaN, 1]")
        b.session("blob_calls", messages=0)
        _message(b, "blob_calls", "assistant", "x", 1700000000.0, tool_calls=b"[1]")
        b.session("nul_calls", messages=0)
        _message(b, "nul_calls", "assistant", "x", 1700000000.0, tool_calls="[1,2]\x00junk")
        b.session("deep_calls", messages=0)
        for n, nesting in enumerate((101, 150, 1000, 5000)):  # past the bound: one call, as text that is not JSON
            _message(b, "deep_calls", "assistant", "x", 1700000000.0 + n,
                     tool_calls="[1, " + "[" * nesting + "]" * nesting + "]")
        _message(b, "deep_calls", "assistant", "x", 1700000010.0, tool_calls="[1, " + "[" * 100 + "]" * 100 + "]")
        b.session("bracket_calls", messages=0)
        _message(b, "bracket_calls", "assistant", "x", 1700000000.0, tool_calls=json.dumps([{"a": "[{" * 300}, 2]))
        b.session("quote'id\"\n", messages=2)
        if layout != "v22":
            ref = b.prompt("you are \"helpful\"\n😀")
            tools = b.prompt("tools: [a, b]")
            b.session("prompted", messages=2, system_prompt_hash=ref, tool_names=tools)
            b.session("prompt_gone", messages=1, system_prompt_hash="0" * 64, tool_names="")
            b.session("same_prompt", messages=1, system_prompt_hash=ref, tool_names=ref)
    return path


def _all_ids(db):
    conn = sqlite3.connect(db)
    try:
        return [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY started_at, id")]
    finally:
        conn.close()


def _expected(db, ids):
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        lines = [jsonl_line(conn, sid) for sid in ids]
    finally:
        conn.close()
    return "".join(line for line, _ in lines), sum(n for _, n in lines)


@pytest.mark.parametrize("layout", ["v22", "v31"])
def test_sql_lines_are_the_reference_bytes_and_only_unvouched_sessions_fall_back(tmp_path, layout):
    db = awkward_store(tmp_path / "state.db", layout)
    ids = _all_ids(db)
    out, fell_back = [], []

    with open_store(db, readonly=True) as store, store.snapshot():
        def reference(sid):
            fell_back.append(sid)
            return render.write_jsonl_session(store, sid, out.append, False)

        n = write_sessions(store, ids, lambda b: out.append(b.decode()), reference)
    expected, messages = _expected(db, ids)
    assert "".join(out) == expected
    assert n == messages
    assert set(fell_back) == set(FALLBACK)


def test_timestamp_floats_written_by_the_sql_are_python_repr_and_only_exact_ties_ask_python():
    """fast_jsonl._shortest: a float of [2**30, 2**31) (timestamps of 2004 to 2038) is written by SQL as repr()
    writes it; NULL (Python's way) only for the 128 fractions a second exactly between two 7-decimal units."""
    import math
    import random

    from maint.export.fast_jsonl import _shortest

    conn = apsw.Connection(":memory:")
    sql = "SELECT " + _shortest("?1", "NULL")
    rng = random.Random(27)
    whole = rng.randrange(2**30, 2**31)
    q = 2**22
    first = 2**14 * pow(5**7, -1, 2**15) % 2**15  # T = F * 10**7 = 2**21 (mod 2**22): F = this (mod 2**15)
    ties = [whole + f / q for f in range(first, q, 2**15)]
    assert len(ties) == 128 and all(f * 10**7 % q == q // 2 for f in range(first, q, 2**15))
    values = [whole + f / q for f in [*range(5000), *range(q - 5000, q)]]  # .0, the short ones, next to a carry
    values += [rng.uniform(2**30, 2**31) for _ in range(20000)]
    values += [round(rng.uniform(2**30, 2**31), rng.randint(0, 7)) for _ in range(20000)]  # shorter reprs
    values += [2.0**30, math.nextafter(2.0**31, 0), 1733212345.1234567, 1733212345.5]
    tie_set = set(ties)
    for x in values + ties:
        got = conn.execute(sql, (x,)).fetchall()[0][0]
        assert got == (None if x in tie_set else repr(x)), repr(x)
    for x in (math.nextafter(2.0**30, 0), 2.0**31, 1e16, 0.5, -1733212345.5, 5e-324):
        assert conn.execute(sql, (x,)).fetchall()[0][0] is None  # outside the binade: Python's way


@pytest.mark.parametrize("layout", ["v22", "v31"])
def test_redacted_sql_lines_are_the_redacted_reference_bytes(tmp_path, layout):
    """--redact goes the SQL way too, the redactor called from the SQL for each text and blob: the
    lines are byte for byte what the Python renderer writes with redaction, secrets and all."""
    from tests.secret_corpus import secret_cases

    cases = secret_cases()  # every case of the corpus: the SQL gates a row at once, which must miss none

    def secrets(b):
        b.session("secrets", messages=0, title=cases[0].text)
        b.set("secrets", model_config=cases[1].text.encode())
        for n, c in enumerate(cases):
            _message(b, "secrets", ["user", "assistant", "tool"][n % 3], c.text.encode() if c.blob else c.text,
                     1700000000.0 + n, tool_name=c.text[:30], finish_reason=c.text[-12:],
                     tool_calls=json.dumps([{"id": "c", "function": {"name": "w", "arguments": json.dumps(
                         {"content": c.text})}}]) if n % 3 == 1 else None)
        b.raw.execute("INSERT INTO session_model_usage (session_id, model, billing_provider) VALUES (?, ?, ?)",
                      ("secrets", cases[3].text, cases[4].text))  # usage rows are redacted as rows are
        if layout != "v22":
            b.session("prompted_secret", messages=1, system_prompt_hash=b.prompt(cases[2].text), tool_names="")

    db = awkward_store(tmp_path / "state.db", layout, secrets)
    ids = _all_ids(db)
    out, expected = [], []
    with open_store(db, readonly=True) as store, store.snapshot():
        for sid in ids:
            render.write_jsonl_session(store, sid, expected.append, True)
        n = write_sessions(store, ids, lambda b: out.append(b.decode()),
                           lambda sid: render.write_jsonl_session(store, sid, out.append, True), redact=True)
    assert "".join(out) == "".join(expected)
    assert n == _expected(db, ids)[1]
    assert cases[0].secret not in "".join(out) and "[REDACTED]" in "".join(out)


def test_a_prompt_hash_that_is_not_text_takes_the_reference_way(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v31") as b:
        b.session("numeric_hash", messages=1)
        b.session("text_hash", messages=1)
        b.raw.execute("DROP TABLE system_prompts")  # a layout whose hash column converts text to numbers
        b.raw.execute("CREATE TABLE system_prompts (hash NUMERIC PRIMARY KEY, prompt TEXT NOT NULL)")
        b.raw.execute("INSERT INTO system_prompts VALUES ('5', 'five'), ('abc', 'letters')")
        b.set("numeric_hash", system_prompt_hash="5")
        b.set("text_hash", system_prompt_hash="abc")
    out, fell_back = [], []
    with open_store(db, readonly=True) as store, store.snapshot():
        def reference(sid):
            fell_back.append(sid)
            return render.write_jsonl_session(store, sid, out.append, False)

        write_sessions(store, _all_ids(db), lambda b: out.append(b.decode()), reference)
    assert "".join(out) == _expected(db, _all_ids(db))[0]
    assert '"system_prompts": {"5": "five"}' in "".join(out)
    assert fell_back == ["numeric_hash"]


def test_rows_reaching_the_aggregate_out_of_id_order_are_caught(tmp_path, monkeypatch):
    from maint.export import fast_jsonl

    line_sql = fast_jsonl.line_sql
    # Sorted by timestamp, the rows come out of id order: "floats" goes back in time.
    monkeypatch.setattr(fast_jsonl, "line_sql", lambda store, redact=False: line_sql(store, redact).replace(
        "ORDER BY id) o", "ORDER BY timestamp) o"))
    db = awkward_store(tmp_path / "state.db", "v31")
    ids = _all_ids(db)
    out, fell_back = [], []
    with open_store(db, readonly=True) as store, store.snapshot():
        assert "ORDER BY id) o" in line_sql(store)

        def reference(sid):
            fell_back.append(sid)
            return render.write_jsonl_session(store, sid, out.append, False)

        write_sessions(store, ids, lambda b: out.append(b.decode()), reference)
    assert "".join(out) == _expected(db, ids)[0]
    assert "floats" in fell_back and set(fell_back) - {"floats"} <= set(FALLBACK) | {"ties"}


def test_a_session_too_big_to_build_whole_is_streamed_by_the_reference(tmp_path, monkeypatch):
    from maint.export import fast_jsonl

    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v31") as b:
        b.session("small", age=20, messages=2)
        b.session("big", age=10, messages=0)
        for n in range(5):
            _message(b, "big", "user", "x" * 10_000, 1700000000.0 + n)
    monkeypatch.setattr(fast_jsonl, "LINE_BYTES", 40_000)
    ids = _all_ids(db)
    out, fell_back = [], []
    with open_store(db, readonly=True) as store, store.snapshot():
        def reference(sid):
            fell_back.append(sid)
            return render.write_jsonl_session(store, sid, out.append, False)

        n = write_sessions(store, ids, lambda b: out.append(b.decode()), reference)
    assert "".join(out) == _expected(db, ids)[0] and n == 7
    assert fell_back == ["big"]


def test_a_batch_returned_out_of_order_stops_the_export(tmp_path, monkeypatch):
    from maint.export import fast_jsonl

    line_sql = fast_jsonl.line_sql
    monkeypatch.setattr(fast_jsonl, "line_sql",
                        lambda store, redact=False: line_sql(store, redact) + " ORDER BY j.key DESC")
    db = awkward_store(tmp_path / "state.db", "v31")
    with open_store(db, readonly=True) as store, store.snapshot():
        with pytest.raises(RuntimeError, match="in place of"):
            write_sessions(store, ["plain", "texts"], [].append, lambda sid: 0)


def test_batches_and_chunks_keep_order_across_statements_and_the_writing_thread(tmp_path, monkeypatch):
    from maint.export import fast_jsonl

    db = awkward_store(tmp_path / "state.db", "v31")
    monkeypatch.setattr(fast_jsonl, "BATCH", 3)
    monkeypatch.setattr(fast_jsonl, "CHUNK", 1)  # every line its own hand-over to the writing thread
    ids = list(reversed(_all_ids(db)))  # any order the plan gives is kept
    out = []
    with open_store(db, readonly=True) as store, store.snapshot():
        write_sessions(store, ids, lambda b: out.append(b.decode()),
                       lambda sid: render.write_jsonl_session(store, sid, out.append, False))
    assert "".join(out) == _expected(db, ids)[0]


@pytest.mark.parametrize("spoil, error", [
    ("UPDATE messages SET content = CAST(x'61ff62eda080' AS TEXT) WHERE session_id = 'broken'", UnicodeDecodeError),
], ids=["not-utf8"])
def test_what_the_reference_cannot_write_fails_the_same_after_the_lines_before_it(tmp_path, spoil, error):
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v31") as b:
        b.session("before", age=30, messages=2)
        b.session("broken", age=20, messages=1)
        b.session("after", age=10, messages=2)
        b.raw.execute(spoil)
    ids = _all_ids(db)
    assert ids == ["before", "broken", "after"]
    out, partial = [], []
    with open_store(db, readonly=True) as store, store.snapshot():
        with pytest.raises(error):
            render.write_jsonl_session(store, "broken", partial.append, False)
        with pytest.raises(error):
            write_sessions(store, ids, lambda b: out.append(b.decode()),
                           lambda sid: render.write_jsonl_session(store, sid, out.append, False))
    assert "".join(out) == _expected(db, ["before"])[0] + "".join(partial)  # the file is then discarded


def test_a_session_gone_from_the_store_fails_as_the_reference_does(tmp_path):
    db = awkward_store(tmp_path / "state.db", "v31")
    with open_store(db, readonly=True) as store, store.snapshot():
        with pytest.raises(IndexError):
            render.write_jsonl_session(store, "nope", [].append, False)
        with pytest.raises(IndexError):
            write_sessions(store, ["plain", "nope"], [].append,
                           lambda sid: render.write_jsonl_session(store, sid, [].append, False))


@pytest.mark.parametrize("layout", ["v22", "v31"])
@pytest.mark.parametrize("args", [(), ("--older-than", "0"), ("--source", "cli", "--older-than", "0")],
                         ids=["everything", "filtered", "two-filters"])
def test_cli_export_file_is_the_reference_bytes(tmp_path, layout, args):
    db = awkward_store(tmp_path / "state.db", layout)
    out = tmp_path / "out.jsonl"
    result = run_subprocess("export", out, "--db", db, *args)
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    ids = [json.loads(line)["id"] for line in data.split(b"\n") if line]  # not splitlines: U+2028 is in a text
    assert set(FALLBACK) - {"inf_ts"} <= set(ids) and "texts" in ids  # both ways were taken (inf_ts is never old)
    assert data == _expected(db, ids)[0].encode("utf-8")


def test_cli_single_session_and_stdout_are_the_reference_bytes(tmp_path):
    db = awkward_store(tmp_path / "state.db", "v31")
    folder = tmp_path / "exports"
    folder.mkdir()
    for sid in ("floats", "texts", "bad_calls"):
        result = run_subprocess("export", str(folder) + "/", "--db", db, "--session-id", sid)
        assert result.returncode == 0, result.stderr
        assert (folder / f"hermes_session_{sid}.jsonl").read_bytes() == _expected(db, [sid])[0].encode("utf-8")
    result = run_subprocess("export", "-", "--db", db)
    assert result.returncode == 0, result.stderr
    assert result.stdout == _expected(db, _all_ids(db))[0]


def test_a_blob_role_goes_the_reference_way_and_is_written_as_it_writes_it(tmp_path):
    """A role stored as a BLOB is given back by the SQL (roles that are not text); the reference counts it under
    its shown bytes (it used to stop on it: hostile try 3, F20), and the line is the reference's."""
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v31") as b:
        b.session("before", age=30, messages=2)
        b.session("blobrole", age=20, messages=1)
        b.raw.execute("UPDATE messages SET role = x'75736572ff' WHERE session_id = 'blobrole'")
    ids = _all_ids(db)
    out, reference = [], []
    with open_store(db, readonly=True) as store, store.snapshot():
        write_sessions(store, ids, lambda b: out.append(b.decode()),
                       lambda sid: render.write_jsonl_session(store, sid, out.append, False))
        for sid in ids:
            render.write_jsonl_session(store, sid, reference.append, False)
    assert "".join(out) == "".join(reference)
    assert '"role_counts": {"user\\\\xff": 1}' in "".join(out)


def _clean_session_store(path, n, text_timestamp=False):
    with StoreBuilder(path, layout="v31") as b:
        b.session("clean", messages=0)
        for i in range(n):
            _message(b, "clean", "user", f"nothing to hide in message number {i} of this session", 1733212345.25 + i,
                     token_count=987654)
        if text_timestamp:
            _message(b, "clean", "user", "a timestamp that is text", "1733212345.75 as text")
    return path


def test_a_row_the_gate_clears_costs_one_python_call_in_a_redacted_export(tmp_path):
    """The rows the gate lets through are bound to the line SQL, which tells them apart itself: each more clean
    row costs the gate's call and nothing while SQLite builds its line (a Python call per row to ask whether it
    was let through cost as much as the question)."""
    import sys

    def calls(n):
        db = _clean_session_store(tmp_path / f"clean{n}.db", n)
        count = 0

        def profile(frame, event, arg):
            nonlocal count
            count += event == "call"
        out = []
        with open_store(db, readonly=True) as store, store.snapshot():
            sys.setprofile(profile)
            try:
                write_sessions(store, ["clean"], out.append,
                               lambda sid: render.write_jsonl_session(store, sid, out.append, True), redact=True)
            finally:
                sys.setprofile(None)
        assert b"nothing to hide in message number" in b"".join(out)
        return count

    assert calls(60) - calls(10) == 50


def test_the_gate_reads_a_rows_texts_not_its_numbers(tmp_path, monkeypatch):
    """Numbers are written by SQLite and never redacted: the gate is given a row's texts and blobs only (a text
    in a column of numeric affinity still is)."""
    from maint.export import fast_jsonl

    db = _clean_session_store(tmp_path / "state.db", 3, text_timestamp=True)
    fast_jsonl._load_redactor()
    seen = []
    gate = fast_jsonl.gate
    monkeypatch.setattr(fast_jsonl, "_load_redactor", lambda: None)
    monkeypatch.setattr(fast_jsonl, "gate", lambda texts: seen.append(texts) or gate(texts))
    with open_store(db, readonly=True) as store, store.snapshot():
        write_sessions(store, ["clean"], lambda b: None, lambda sid: 0, redact=True)
    rows = [t for t in seen if b"nothing to hide" in t or b"a timestamp" in t]
    assert len(rows) == 4
    assert not any(b"987654" in t or b"1733212345.25" in t for t in rows)
    assert any(b"1733212345.75 as text" in t for t in rows)
