"""repair-routing: orphaned gateway rows, the evidence, the ambiguous cases, and --apply's guards."""

import json
import os
import stat
from pathlib import Path

import pytest

from tests.conftest import LockHolder, file_hash, query
from tests.storegen import DAY, StoreBuilder

M = 60 / DAY  # a minute, in days


def build(path, layout):
    with StoreBuilder(path, layout=layout) as b:
        tg = dict(source="telegram", user_id="42", chat_id="42", chat_type="dm", ended=False)
        b.session("tg_donor", age=1, started_age=2, session_key="agent:main:telegram:dm:42", **tg)
        b.session("tg_orphan", age=0.5, started_age=1 - M, messages=4, **tg)  # began a minute after
        b.session("dc_parent", source="discord", age=3, end_reason="compression",
                  session_key="agent:main:discord:group:7", chat_id="7", chat_type="group")
        b.session("dc_child", source="discord", age=2, started_age=2.9, parent="dc_parent")
        b.session("sl_a", source="slack", age=5, session_key="agent:main:slack:c:1")
        b.session("sl_b", source="slack", age=5 - 2 * M, session_key="agent:main:slack:c:2")
        b.session("sl_orphan", source="slack", age=4, started_age=5 - M)
        b.session("tg99", source="telegram", user_id="99", age=8, session_key="agent:main:telegram:dm:99")
        b.session("tg99_a", source="telegram", user_id="99", age=7.5, started_age=8 - M / 2)
        b.session("tg99_b", source="telegram", user_id="99", age=7.4, started_age=8 - M)
        b.session("wa_orphan", source="whatsapp", age=9.9, started_age=10)
        b.session("mx_donor", source="matrix", age=12, session_key="agent:coder:matrix:room:1", profile_name="coder")
        b.session("mx_orphan", source="matrix", age=11.5, started_age=12 - M, profile_name="default")
        b.session("cli_plain", source="cli", age=1)  # never routed: not a gateway row
        b.session("tg_branch", source="telegram", user_id="42", age=0.4, started_age=1 - M,
                  model_config={"_branched_from": "tg_donor"})
    return path


def report(cli, path, *args):
    result = cli("repair-routing", "--db", path, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_report_names_the_evidence_and_the_ambiguity(hermes_home, cli, layout):
    path = build(hermes_home / "state.db", layout)
    before = file_hash(path)
    r = report(cli, path)
    by_id = {f["orphan_id"]: f for f in r["findings"]}
    assert set(by_id) == {"tg_orphan", "dc_child", "sl_orphan", "tg99_a", "tg99_b", "wa_orphan", "mx_orphan"}
    assert (by_id["tg_orphan"]["donor_id"], by_id["tg_orphan"]["evidence"]) == ("tg_donor", "contiguity")
    assert by_id["tg_orphan"]["session_key"] == "agent:main:telegram:dm:42" and by_id["tg_orphan"]["message_count"] == 4
    assert (by_id["dc_child"]["donor_id"], by_id["dc_child"]["evidence"]) == ("dc_parent", "lineage")
    assert "sl_a and sl_b both went quiet" in by_id["sl_orphan"]["reason"]
    assert all("more than one unrouted session claims tg99" in by_id[o]["reason"] for o in ("tg99_a", "tg99_b"))
    assert "no routed session" in by_id["wa_orphan"]["reason"]
    assert "no routed session" in by_id["mx_orphan"]["reason"]  # another profile's row never adopts
    assert r["adoptable"] == 2 and not any(by_id[o]["adoptable"] for o in ("sl_orphan", "tg99_a", "wa_orphan"))
    assert file_hash(path) == before
    # 30 s: the orphans that began a minute after their predecessor drop out, and tg99_a (30 s) is alone.
    narrow = report(cli, path, "--max-gap-seconds", "30")
    assert {f["orphan_id"] for f in narrow["findings"] if f["adoptable"]} == {"dc_child", "tg99_a"}
    assert report(cli, path, "--dry-run")["findings"] == r["findings"]
    text = cli("repair-routing", "--db", path).stdout
    assert "tg_orphan  (telegram, 4 messages)" in text and "-> adopt into agent:main:telegram:dm:42" in text


def test_apply_guards_snapshot_and_idempotence(hermes_home, cli, layout):
    path = build(hermes_home / "state.db", layout)
    before = file_hash(path)
    assert cli("repair-routing", "--db", path, "--apply").exit_code == 2  # no terminal, no --yes
    with LockHolder(path):
        held = cli("repair-routing", "--db", path, "--apply", "--yes")
        assert held.exit_code == 1 and "stop the gateway first" in held.stderr
    assert file_hash(path) == before and not (hermes_home / "state-snapshots").exists()
    r = report(cli, path, "--apply", "--yes")
    assert sorted(a["orphan_id"] for a in r["adopted"]) == ["dc_child", "tg_orphan"] and r["not_adopted"] == []
    assert query(path, "SELECT id, session_key, chat_id, parent_session_id FROM sessions "
                       "WHERE id IN ('tg_orphan', 'dc_child') ORDER BY id") == [
        ("dc_child", "agent:main:discord:group:7", "7", "dc_parent"),
        ("tg_orphan", "agent:main:telegram:dm:42", "42", "tg_donor")]
    # The contiguity donor is retired; the lineage donor keeps the compression that makes the two one
    # conversation (retiring it would split the lineage, and prune would take the first segment alone).
    assert query(path, "SELECT id, end_reason FROM sessions WHERE id IN ('tg_donor', 'dc_parent') ORDER BY id") == [
        ("dc_parent", "compression"), ("tg_donor", "superseded_by_repair")]
    listed = json.loads(cli("list", "--db", path, "--json", "--source", "discord").stdout)["sessions"]
    assert [(row["root_id"], row["id"], row["segments"]) for row in listed] == [("dc_parent", "dc_child", 2)]
    assert query(path, "SELECT session_key FROM sessions WHERE id = 'sl_orphan'") == [(None,)]  # ambiguous: kept
    snap = Path(r["snapshot"]) / "default.state.db"
    assert snap.parent.parent == hermes_home / "state-snapshots" and stat.S_IMODE(os.stat(snap).st_mode) == 0o600
    assert query(snap, "SELECT session_key FROM sessions WHERE id = 'tg_orphan'") == [(None,)]
    again = report(cli, path, "--apply", "--yes")
    assert again["adoptable"] == 0 and again["adopted"] == [] and again["snapshot"] is None
    assert {f["orphan_id"] for f in again["findings"]} == {"sl_orphan", "tg99_a", "tg99_b", "wa_orphan", "mx_orphan"}


@pytest.mark.parametrize("value", ["-1", "soon", "nan", "inf"])
def test_bad_gap_and_contradicting_flags(hermes_home, cli, value):
    path = build(hermes_home / "state.db", "v30")
    result = cli("repair-routing", "--db", path, "--max-gap-seconds", value)
    assert result.exit_code == 2 and "--max-gap-seconds" in result.stderr and "Traceback" not in result.output
    assert cli("repair-routing", "--db", path, "--apply", "--dry-run").exit_code == 2


@pytest.mark.parametrize("value", ["yesterday", b"\x00\xff"], ids=["text", "blob"])
def test_a_start_time_that_is_not_a_number_is_read_as_the_last_activity(hermes_home, cli, value):
    """Hostile try 3, F20: a start time stored as text or bytes stopped repair-routing and doctor (which runs its
    check) with a TypeError when the orphans were sorted. The record reads it as the session's last activity."""
    import sqlite3

    path = build(hermes_home / "state.db", "v22")
    c = sqlite3.connect(path)
    c.execute("UPDATE sessions SET started_at = ?, ended_at = ? WHERE id = 'wa_orphan'", (value, value))
    c.commit()
    c.close()
    by_id = {f["orphan_id"]: f for f in report(cli, path)["findings"]}
    assert by_id["tg_orphan"]["donor_id"] == "tg_donor"
    assert isinstance(by_id["wa_orphan"]["started_at"], float) and not by_id["wa_orphan"]["adoptable"]
    doctor = cli("doctor", "--db", path, "--json")
    assert doctor.exit_code in (0, 1), doctor.output
    assert "orphan" in doctor.stdout


@pytest.mark.parametrize("column", ["title", "cwd", "id", "profile_name"])
def test_one_session_row_that_is_not_utf8_is_named_and_the_rest_examined(hermes_home, cli, column):
    """Hostile try 9, L7: one invalid byte in any text of one session's row (a cli session's title, its id ...)
    stopped repair-routing for the whole store ("this command cannot read past it"), with or without --apply.
    That session is left out and named; the orphans of the others are found and adopted as before."""
    import sqlite3

    path = build(hermes_home / "state.db", "v22")
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO sessions (id, source, started_at) VALUES ('bad1', 'cli', 5)")
        where = "id = 'bad1'"
        if column == "id":
            conn.execute(f"UPDATE sessions SET id = CAST(X'6261' || X'ff' AS TEXT) WHERE {where}")
        else:
            conn.execute(f"UPDATE sessions SET {column} = CAST(X'62ff' AS TEXT) WHERE {where}")
    r = report(cli, path)
    assert r["adoptable"] == 2 and len(r["skipped_not_utf8"]) == 1
    assert r["skipped_not_utf8"][0].startswith("ba")
    result = cli("repair-routing", "--db", path, "--apply", "--yes")
    assert result.exit_code == 0, result.output
    assert "its row holds text that is not UTF-8; not examined" in result.stderr
    assert query(path, "SELECT session_key FROM sessions WHERE id = 'tg_orphan'") == [("agent:main:telegram:dm:42",)]


def test_a_linked_profile_folder_is_still_that_profile(hermes_home, tmp_path, monkeypatch):
    """Hostile try 14, R9: the profile of a store was read from its resolved path: a profile whose folder is a
    link (profiles/p2 -> /data/p2) was none, which turned off the rule that a chat of another profile is not
    routed to this store. One answer for every module now, by the file's identity."""
    from maint.ops.routing import store_owner
    from maint.store.targets import profile_of

    real = tmp_path / "data" / "p2"
    real.mkdir(parents=True)
    (hermes_home / "profiles").mkdir(exist_ok=True)
    (hermes_home / "profiles" / "p2").symlink_to(real)
    store = hermes_home / "profiles" / "p2" / "state.db"
    with StoreBuilder(store) as b:
        b.session("s", age=1)
    with StoreBuilder(hermes_home / "state.db") as b:
        b.session("d", age=1)
    monkeypatch.chdir(real)
    for path in (store, real / "state.db", "state.db", hermes_home / "profiles" / "p2" / ".." / "p2" / "state.db"):
        assert store_owner(path) == "p2" and profile_of(path) == "p2", path
    assert store_owner(hermes_home / "state.db") == "default"
    assert store_owner(tmp_path / "elsewhere.db") == "default"  # its folder is its home (hostile try 16, T6)


@pytest.mark.parametrize("donor_row", ["named", "unnamed"])
@pytest.mark.parametrize("where", ["another home's profile", "no home"])
def test_a_donor_of_another_profile_is_refused_when_this_home_does_not_know_the_store(hermes_home, tmp_path, cli,
                                                                                     where, donor_row):
    """Hostile try 15, S7: the rule that another profile's chat is not routed here was off whenever the store was not
    one of $HERMES_HOME's (a cron without HERMES_HOME, another home): `repair-routing --db …/profiles/p1/state.db
    --apply` gave p1's orphan the key of a donor whose row and key name profile `other`. The rule holds with the
    owner unknown (by the rows), and a store in a `profiles/NAME/` folder is NAME's by its path. Try 16, T6: a donor
    row without profile_name (an older Hermes's) passed while the owner was unknown; any other store is its
    folder's default profile, so a key naming another profile is refused there too."""
    from maint.ops.routing import store_owner

    path = tmp_path / ("elsewhere/profiles/p1" if where == "another home's profile" else "loose") / "state.db"
    path.parent.mkdir(parents=True)
    with StoreBuilder(path) as b:
        tg = dict(source="telegram", user_id="42", chat_id="42", chat_type="dm", ended=False)
        b.session("other_donor", age=1, started_age=2, session_key="agent:other:telegram:dm:42",
                  **({"profile_name": "other"} if donor_row == "named" else {}), **tg)
        b.session("p1_orphan", age=0.5, started_age=1 - M, messages=4, **tg)
    assert store_owner(path) == ("p1" if where == "another home's profile" else "default")
    r = report(cli, path)
    (orphan,) = [o for o in r["findings"] if o["orphan_id"] == "p1_orphan"]
    assert not orphan["adoptable"] and orphan["donor_id"] is None, orphan
    result = cli("repair-routing", "--db", path, "--apply", "--yes")
    assert result.exit_code == 0, result.output
    assert query(path, "SELECT session_key FROM sessions WHERE id = 'p1_orphan'") == [(None,)]


def test_a_donor_that_ended_in_a_branch_keeps_its_end_reason(hermes_home, cli):
    """Hostile try 16, T8: adopt kept a donor's end_reason only when it was 'compression': a donor that ended
    'branched' (its branch child without the _branched_from marker, as rows written before the marker are) became
    'superseded_by_repair', and Hermes's session list then hid the repaired conversation as a continuation row."""
    path = hermes_home / "state.db"
    with StoreBuilder(path) as b:
        tg = dict(source="telegram", user_id="42", chat_id="42", chat_type="dm")
        b.session("donor", age=1, started_age=2, session_key="agent:main:telegram:dm:9", end_reason="branched", **tg)
        b.session("child", age=0.5, started_age=1, parent="donor", messages=3, ended=False, **tg)
    text = cli("repair-routing", "--db", path, "--apply", "--yes")
    assert text.exit_code == 0 and "child now owns agent:main:telegram:dm:9 (donor ended as branched)" in \
        text.stdout, text.output
    assert query(path, "SELECT id, end_reason FROM sessions ORDER BY id") == [("child", None), ("donor", "branched")]


def test_a_profile_run_as_hermes_runs_it_is_that_profile(hermes_home, monkeypatch):
    """Hostile try 17, U5: Hermes runs a profile with HERMES_HOME=~/.hermes/profiles/NAME (`hermes -p NAME`, its
    gateway and cron): the store of that HERMES_HOME was taken for the default profile's, so repair-routing refused
    the store's own donor and adopted the default profile's chat key. A store in profiles/NAME is NAME's."""
    from maint.ops.routing import store_owner

    work = hermes_home / "profiles" / "work"
    work.mkdir(parents=True)
    with StoreBuilder(work / "state.db") as b:
        b.session("s", age=1)
    monkeypatch.setenv("HERMES_HOME", str(work))
    assert store_owner(work / "state.db") == "work"
