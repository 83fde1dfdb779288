"""SIGKILL inside delete, repair-routing --apply and archive --idle: each unit is all or nothing,
and a re-run finishes the job."""

import pytest

from tests.conftest import query, session_ids
from tests.crash.test_crash import assert_whole, run
from tests.storegen import DAY, StoreBuilder

ONE_TX = ["tx_begun:1", "tx_before_commit:1", "tx_committed:1"]


@pytest.mark.slow
@pytest.mark.parametrize("point", ONE_TX)
def test_delete_killed(tmp_path, point):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("p", age=5, messages=6)
        for n in range(5):
            b.session(f"c{n}", source="subagent", age=5, parent="p", model_config={"_delegate_from": "p"}, messages=4)
        b.session("other", age=1)
    result = run(["delete", "p", "--db", db, "--yes", "--json"], crash=point)
    assert result.returncode == -9, result.stderr
    assert_whole(db)
    family = {"p", *(f"c{n}" for n in range(5))}
    left = session_ids(db)
    assert family <= left or not (family & left)  # the session and its children go together
    if family <= left:
        assert run(["delete", "p", "--db", db, "--yes"]).returncode == 0
    assert session_ids(db) == {"other"}


@pytest.mark.slow
@pytest.mark.parametrize("point", ONE_TX + ["tx_before_commit:2", "tx_committed:2"])
def test_repair_routing_killed(tmp_path, point):
    home = tmp_path / "home"
    db = home / "state.db"
    with StoreBuilder(db, layout="v30") as b:
        for n in range(3):
            b.session(f"d{n}", source="telegram", age=10 * (n + 1), session_key=f"agent:main:telegram:dm:{n}",
                      user_id=str(n), ended=False)
            b.session(f"o{n}", source="telegram", age=10 * (n + 1) - 1, started_age=10 * (n + 1) - 60 / DAY,
                      user_id=str(n), ended=False)
    env = {"HERMES_HOME": str(home)}
    result = run(["repair-routing", "--db", db, "--apply", "--yes", "--json"], crash=point, env=env)
    assert result.returncode == -9, result.stderr
    assert_whole(db)
    for n in range(3):  # an adoption is whole: the orphan routed exactly when its predecessor is retired
        (key, reason), = query(db, f"SELECT o.session_key, d.end_reason FROM sessions o, sessions d "
                                   f"WHERE o.id = 'o{n}' AND d.id = 'd{n}'")
        assert (key is None) == (reason is None)
    again = run(["repair-routing", "--db", db, "--apply", "--yes", "--json"], env=env)
    assert again.returncode == 0, again.stderr
    assert query(db, "SELECT COUNT(*) FROM sessions WHERE id LIKE 'o%' AND session_key IS NULL") == [(0,)]


@pytest.mark.slow
@pytest.mark.parametrize("point", ["tx_before_commit:1", "tx_committed:1", "tx_before_commit:2"])
def test_archive_idle_killed(tmp_path, point):
    db = tmp_path / "state.db"
    with StoreBuilder(db, layout="v31") as b:
        for n in range(40):
            b.session(f"k{n}_a", age=30, end_reason="compression")
            b.session(f"k{n}_b", age=20, parent=f"k{n}_a")
    result = run(["archive", "--db", db, "--idle", "--yes", "--json"], crash=point)
    assert result.returncode == -9, result.stderr
    assert_whole(db)
    for n in range(40):  # a lineage is hidden whole or not at all
        flags = query(db, "SELECT archived FROM sessions WHERE id IN (?, ?)", f"k{n}_a", f"k{n}_b")
        assert len(set(flags)) == 1
    assert run(["archive", "--db", db, "--idle", "--yes"]).returncode == 0
    assert query(db, "SELECT COUNT(*) FROM sessions WHERE archived = 0 OR auto_archived = 0") == [(0,)]
