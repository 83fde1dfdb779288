"""set-journal-mode against the Hermes that opens the store next (issue 25 item 5)."""

import json

from maint.store.connection import header_journal_mode
from tests.storegen import StoreBuilder


def _v22_store(tmp_path):
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v22") as b:
        b.session("s1", age=3, messages=2)
    return db


def test_delete_on_a_0_19_store_says_hermes_switches_it_back_and_it_does(tmp_path, cli, hermes_home):
    """0.19.0 has no database.journal_mode and sets WAL on every open: we reported plain success."""
    db = _v22_store(tmp_path)
    result = cli("set-journal-mode", "delete", "--db", db)
    assert result.exit_code == 0, result.output
    assert "until Hermes next opens it" in result.stdout
    assert "without a database.journal_mode setting" in result.stdout
    assert header_journal_mode(db) == "delete"
    report = json.loads(cli("set-journal-mode", "delete", "--db", db, "--json").stdout)
    assert report["sticks"] is False and "0.19" in report["reverts_on_open"]

    from hermes_state import SessionDB  # the oracle: 0.19.0 itself opening the store

    SessionDB(db).close()
    assert header_journal_mode(db) == "wal"


def test_delete_on_a_current_store_sticks_and_names_the_setting(tmp_path, cli, hermes_home):
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v30") as b:
        b.session("s1", age=3, messages=2)
    report = json.loads(cli("set-journal-mode", "delete", "--db", db, "--json").stdout)
    assert report["sticks"] is True and report["reverts_on_open"] is None
    assert "journal_mode: delete" in report["config_advice"]


def test_wal_on_a_0_19_store_sticks(tmp_path, cli, hermes_home):
    db = _v22_store(tmp_path)
    cli("set-journal-mode", "delete", "--db", db)
    report = json.loads(cli("set-journal-mode", "wal", "--db", db, "--json").stdout)
    assert report["sticks"] is True and report["after"] == "wal"


def test_the_setting_to_add_is_shown_as_yaml_lines(tmp_path, cli, hermes_home):
    """The advice ends with the YAML to add, our own lines: each is written as a line of its own (every other
    write is one line, a break inside it a value's: hostile try 4, G11)."""
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v30") as b:
        b.session("s1", age=3, messages=2)
    lines = cli("set-journal-mode", "delete", "--db", db).stdout.splitlines()
    assert lines[-2:] == ["  database:", "    journal_mode: delete"] and lines[-3].endswith(" Set:"), lines
