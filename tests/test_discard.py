"""discard: acknowledging gateway turns lost in a crash, on upstream's admission ledger (issue 25 items 6, 4)."""

import json
import sqlite3
import time

import pytest

from tests.conftest import query
from tests.storegen import StoreBuilder

# Upstream's gateway runtime ledger, with the columns hermes_state_runtime.py reads and writes.
RUNTIME_LEDGER = """
ALTER TABLE sessions ADD COLUMN runtime_generation INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN runtime_revision INTEGER NOT NULL DEFAULT 0;
CREATE TABLE runtime_epoch (singleton INTEGER PRIMARY KEY CHECK (singleton = 1), epoch INTEGER NOT NULL,
    instance_id TEXT NOT NULL);
CREATE TABLE session_admissions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, admission_id TEXT NOT NULL UNIQUE, request_id TEXT NOT NULL,
    principal_id TEXT NOT NULL, target_session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE RESTRICT,
    lineage_json TEXT NOT NULL, payload_json TEXT NOT NULL, payload_digest TEXT NOT NULL,
    intent TEXT NOT NULL DEFAULT 'queue', status TEXT NOT NULL, outcome TEXT, owner_epoch INTEGER,
    generation INTEGER);
CREATE TABLE worker_executions (
    execution_id TEXT PRIMARY KEY, session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE RESTRICT,
    kind TEXT NOT NULL, owner_epoch INTEGER NOT NULL, generation INTEGER NOT NULL, status TEXT NOT NULL,
    adoption_digest TEXT NOT NULL, last_sequence INTEGER NOT NULL DEFAULT 0);
INSERT INTO runtime_epoch VALUES (1, 2, 'gateway-2');
"""

LOST = "a9b59ad3ee914d75967def2a33435c88"


def _admit(raw, aid, sid, status, *, generation=None, epoch=1, outcome=None, text="hi", lineage=None):
    raw.execute("INSERT INTO session_admissions (admission_id, request_id, principal_id, target_session_id, "
                "lineage_json, payload_json, payload_digest, intent, status, outcome, owner_epoch, generation) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (aid, "r-" + aid, "owner", sid, json.dumps(lineage or [sid]), json.dumps({"text": text}), "d",
                 "queue", status, outcome, epoch, generation))


@pytest.fixture
def ledger(tmp_path, hermes_home):
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v31") as b:
        b.session("20250305_091523_a1b2c3d4", age=1, ended=False, title="debugging auth flow")
        b.session("other", age=1, messages=2)
        b.raw.executescript(RUNTIME_LEDGER)
        sid = "20250305_091523_a1b2c3d4"
        b.raw.execute("UPDATE sessions SET runtime_generation = 3 WHERE id = ?", (sid,))
        _admit(b.raw, "done1", sid, "terminal", generation=2, outcome="completed")
        _admit(b.raw, LOST, sid, "unknown", generation=3, text="deploy the staging branch")
        _admit(b.raw, "next1", sid, "queued", text="next question")
        _admit(b.raw, "elsewhere", "other", "unknown", generation=1)
        for wid, gen in (("w-lost", 3), ("w-old", 2)):
            b.raw.execute("INSERT INTO worker_executions (execution_id, session_id, kind, owner_epoch, generation, "
                          "status, adoption_digest) VALUES (?,?,?,?,?,?,?)",
                          (wid, sid, "compute", 1, gen, "unknown" if gen == 3 else "terminal", "x"))
    return db


def _state(db):
    return (query(db, "SELECT admission_id, status, outcome FROM session_admissions ORDER BY seq"),
            query(db, "SELECT execution_id, status FROM worker_executions ORDER BY execution_id"),
            query(db, "SELECT id, runtime_revision FROM sessions ORDER BY id"))


def test_a_layout_without_the_ledger_is_refused_in_one_line(tmp_path, cli, hermes_home):
    """hermes-agent 0.19.0's schema has no admission ledger: nothing to acknowledge there."""
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v22") as b:
        b.session("s1", age=1)
    r = cli("discard", "s1", "--db", db, "--yes")
    assert r.exit_code == 1, r.output
    line, = r.stderr.strip().splitlines()
    assert "no gateway admission ledger" in line and "schema (version 22)" in line


def test_dry_run_lists_the_lost_turn_and_what_waits_behind_it(ledger, cli):
    before = _state(ledger)
    report = json.loads(cli("discard", "20250305_091523_a1b2c3d4", "--db", ledger, "--dry-run", "--json").stdout)
    assert [a["admission_id"] for a in report["lost"]] == [LOST]
    assert report["lost"][0]["text"] == "deploy the staging branch" and report["waiting"] == ["next1"]
    assert report["discarded"] == [] and _state(ledger) == before


def test_without_a_terminal_or_yes_it_refuses_with_exit_2(ledger, cli):
    before = _state(ledger)
    r = cli("discard", "20250305_091523_a1b2c3d4", "--db", ledger)
    assert r.exit_code == 2, r.output
    assert _state(ledger) == before


def test_yes_takes_no_prefix(ledger, cli):
    before = _state(ledger)
    r = cli("discard", "20250305_091523", "--db", ledger, "--yes")
    assert r.exit_code == 2 and "not a whole session id" in r.stderr, r.output
    assert _state(ledger) == before


def test_yes_by_title_settles_the_lost_turn_as_upstream_does(ledger, cli):
    report = json.loads(cli("discard", "debugging auth flow", "--db", ledger, "--yes", "--json").stdout)
    assert report["session_id"] == "20250305_091523_a1b2c3d4" and report["discarded"] == [LOST]
    admissions, workers, sessions = _state(ledger)
    assert admissions == [("done1", "terminal", "completed"), (LOST, "terminal", "interrupted"),
                          ("next1", "queued", None), ("elsewhere", "unknown", None)]
    assert workers == [("w-lost", "terminal"), ("w-old", "terminal")]
    assert dict(sessions) == {"20250305_091523_a1b2c3d4": 1, "other": 0}
    # upstream's claim_session_input blocks on any unknown admission or worker: none is left here
    assert query(ledger, "SELECT COUNT(*) FROM session_admissions WHERE target_session_id = ? AND status = "
                         "'unknown'", "20250305_091523_a1b2c3d4") == [(0,)]
    again = json.loads(cli("discard", "20250305_091523_a1b2c3d4", "--db", ledger, "--yes", "--json").stdout)
    assert again["lost"] == [] and again["discarded"] == []


@pytest.mark.parametrize("aid, needle", [("next1", "is queued, not lost"), ("nope", "no admission of session")])
def test_admission_must_be_a_lost_turn_of_that_session(ledger, cli, aid, needle):
    before = _state(ledger)
    r = cli("discard", "20250305_091523_a1b2c3d4", "--admission", aid, "--db", ledger, "--yes")
    assert r.exit_code == 2 and needle in r.stderr and aid in r.stderr, r.output
    assert _state(ledger) == before


def test_only_the_named_admission_goes(ledger, cli):
    with _Raw(ledger) as raw:
        _admit(raw, "lost2", "20250305_091523_a1b2c3d4", "unknown", generation=4)
    report = json.loads(cli("discard", "20250305_091523_a1b2c3d4", "--admission", "lost2", "--db", ledger,
                            "--yes", "--json").stdout)
    assert report["discarded"] == ["lost2"]
    assert query(ledger, "SELECT status FROM session_admissions WHERE admission_id = ?", LOST) == [("unknown",)]


def test_a_live_turn_lease_is_refused(ledger, cli):
    before = _state(ledger)
    with _Raw(ledger) as raw:
        raw.execute("INSERT INTO session_turn_leases VALUES (?, 'gw', ?, ?)",
                    ("20250305_091523_a1b2c3d4", time.time(), time.time() + 600))
    r = cli("discard", "20250305_091523_a1b2c3d4", "--db", ledger, "--yes")
    assert r.exit_code == 1 and "in progress" in r.stderr, r.output
    assert _state(ledger) == before


class _Raw:
    def __init__(self, path):
        import sqlite3

        self.conn = sqlite3.connect(path, isolation_level=None)

    def __enter__(self):
        return self.conn

    def __exit__(self, *exc):
        self.conn.close()


def test_json_nested_past_any_parser_in_the_ledger_is_taken_as_text(ledger, cli):
    """Hostile try 3, F2: a payload_json or lineage_json nested 100,000 deep stopped discard with a
    RecursionError traceback; it is text that is not JSON (no preview, lineage falls back to the target)."""
    sid = "20250305_091523_a1b2c3d4"
    deep = "[" * 100_000 + "]" * 100_000
    with _Raw(ledger) as raw:
        raw.execute("UPDATE session_admissions SET payload_json = ?, lineage_json = ? WHERE admission_id = ?",
                    ('{"text": ' + deep + "}", deep, LOST))
    shown = cli("discard", sid, "--db", ledger, "--dry-run", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["lost"][0]["text"] == ""
    done = cli("discard", sid, "--db", ledger, "--yes", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["discarded"] == [LOST]
    assert query(ledger, "SELECT status FROM worker_executions WHERE execution_id = 'w-lost'") == [("terminal",)]


def _sql(db, statement):
    conn = sqlite3.connect(db)
    conn.execute(statement)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("mode", [["--dry-run"], ["--yes"]])
def test_an_exact_title_wins_over_an_id_prefix_in_every_mode(ledger, cli, mode):
    """Hostile try 3, F9: 'other' is titled "2025", which is also the beginning of another session's id. The dry
    run previewed the prefix's session; --yes refused the same ref as "not a whole session id"."""
    _sql(ledger, "UPDATE sessions SET title = '2025' WHERE id = 'other'")
    r = cli("discard", "2025", "--db", ledger, "--json", *mode)
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["session_id"] == "other" and [a["admission_id"] for a in report["lost"]] == ["elsewhere"]
    admissions = dict((a, s) for a, s, _ in _state(ledger)[0])
    assert admissions[LOST] == "unknown"  # the prefix's session is never touched
    assert admissions["elsewhere"] == ("unknown" if mode == ["--dry-run"] else "terminal")


def test_a_title_several_sessions_share_is_ambiguous_in_every_mode(ledger, cli):
    _sql(ledger, "UPDATE sessions SET title = 'twin'")
    before = _state(ledger)
    for mode in (["--dry-run"], ["--yes"]):
        r = cli("discard", "twin", "--db", ledger, *mode)
        assert r.exit_code == 1 and "names several sessions" in r.stderr, r.output
    assert _state(ledger) == before
