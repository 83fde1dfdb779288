"""sessions.auto_archive (the idle sweep) in `sweep` and as `archive --idle`, upstream's rules:
lineages judged by their live tip, pinned / busy / hand-archived / canonical Bot Chat untouched,
`auto_archived` stamped only on what it hides, refused on stores without that column."""

import json

import pytest

from tests.conftest import file_hash, query, run_subprocess
from tests.storegen import StoreBuilder


def write_config(home, text):
    (home / "config.yaml").write_text("sessions:\n" + text)


def build_idle_store(path, layout):
    with StoreBuilder(path, layout=layout) as b:
        b.session("idle_ended", age=10)
        b.session("idle_open", age=10, ended=False)
        b.session("fresh", age=1)
        b.session("pinned_idle", age=10, pinned=1)
        b.session("busy_idle", age=10, ended=False)
        b.lock("busy_idle")
        b.session("hand", age=10, archived=1)
        b.session("live1", age=10, end_reason="compression")
        b.session("live2", age=1, parent="live1")  # tip active yesterday: the lineage stays
        b.session("old1", age=20, end_reason="compression")
        b.session("old2", age=10, parent="old1")
        b.session("bot", age=10, hidden=1, title="Bot Chat")


def flags(path):
    return {sid: (a, aa) for sid, a, aa in query(path, "SELECT id, archived, auto_archived FROM sessions")}


def test_sweep_runs_the_idle_sweep_with_its_own_marker(hermes_home, cli):
    write_config(hermes_home, "  auto_archive: true\n")  # auto_prune absent: the idle sweep still runs
    path = hermes_home / "state.db"
    build_idle_store(path, "v31")
    result = cli("sweep", "--db", path, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert sorted(report["auto_archived_ids"]) == ["idle_ended", "idle_open", "old1", "old2"]
    assert report["auto_archive_skipped_reason"] is None and not report["swept"]
    f = flags(path)
    assert {sid for sid, (a, aa) in f.items() if aa} == {"idle_ended", "idle_open", "old1", "old2"}
    assert f["hand"] == (1, 0)  # a hand archive keeps its provenance
    for untouched in ("fresh", "pinned_idle", "busy_idle", "live1", "live2", "bot"):
        assert f[untouched] == (0, 0), untouched
    assert float(query(path, "SELECT value FROM state_meta WHERE key = 'last_auto_archive'")[0][0]) > 0
    again = json.loads(cli("sweep", "--db", path, "--json").stdout)
    assert again["auto_archived_ids"] == [] and "already ran" in again["auto_archive_skipped_reason"]
    text = cli("sweep", "--db", path).stdout
    assert "Idle sweep: idle sweep already ran" in text


@pytest.mark.parametrize("layout,schema", [("v22", 22), ("v30", 30)])
def test_stores_without_the_column_are_reported_and_left_alone(hermes_home, cli, layout, schema):
    write_config(hermes_home, "  auto_archive: true\n")
    path = hermes_home / "state.db"
    with StoreBuilder(path, layout=layout) as b:
        b.session("idle_ended", age=10)
    columns = query(path, "SELECT name FROM pragma_table_info('sessions')")
    report = json.loads(cli("sweep", "--db", path, "--json").stdout)
    assert report["auto_archived_ids"] == []
    assert "auto_archived column" in report["auto_archive_skipped_reason"]
    assert f"schema {schema}" in report["auto_archive_skipped_reason"]
    assert query(path, "SELECT archived FROM sessions") == [(0,)]
    assert query(path, "SELECT name FROM pragma_table_info('sessions')") == columns  # schema untouched
    before = file_hash(path)
    result = cli("archive", "--db", path, "--idle", "--yes")
    assert result.exit_code == 1 and f"schema {schema}" in result.stderr
    assert file_hash(path) == before


def test_invalid_idle_days_skips_the_idle_sweep(hermes_home, cli):
    write_config(hermes_home, "  auto_archive: true\n  auto_archive_days: -2\n")
    path = hermes_home / "state.db"
    build_idle_store(path, "v31")
    report = json.loads(cli("sweep", "--db", path, "--json").stdout)
    assert report["auto_archived_ids"] == [] and "auto_archive_days -2" in report["auto_archive_skipped_reason"]
    result = cli("archive", "--db", path, "--idle", "--yes")
    assert result.exit_code == 2 and "auto_archive_days" in result.stderr


def test_archive_idle_by_hand(hermes_home, cli):
    write_config(hermes_home, "  auto_archive_days: 5\n")
    path = hermes_home / "state.db"
    build_idle_store(path, "v31")
    before = file_hash(path)
    preview = cli.json("archive", "--db", path, "--idle", "--dry-run")
    assert sorted(preview["session_ids"]) == ["idle_ended", "idle_open", "old1", "old2"]
    assert preview["idle_days"] == 5 and preview["skipped_pinned"] == 1 and preview["skipped_busy"] == 1
    assert file_hash(path) == before
    refused = cli("archive", "--db", path, "--idle")
    assert refused.exit_code == 2 and "--yes" in refused.stderr and file_hash(path) == before
    mixed = cli("archive", "--db", path, "--idle", "--title", "x", "--yes")
    assert mixed.exit_code == 2 and "--idle" in mixed.stderr
    done = cli.json("archive", "--db", path, "--idle", "--yes")
    assert sorted(done["session_ids"]) == ["idle_ended", "idle_open", "old1", "old2"]
    assert {sid for sid, (a, aa) in flags(path).items() if aa} == {"idle_ended", "idle_open", "old1", "old2"}


def test_hand_archive_never_sets_auto_archived(make_store, cli):
    b = make_store("v31")
    b.session("mine", age=1, title="smoke one")
    b.session("swept1", age=30, end_reason="compression", archived=1, auto_archived=1, title="smoke two")
    b.session("swept2", age=20, parent="swept1", archived=1, auto_archived=1, title="smoke two #2")
    b.close()
    report = cli.json("archive", "--db", b.path, "--title", "smoke", "--yes")
    assert sorted(report["session_ids"]) == ["mine", "swept1", "swept2"]
    # The idle sweep's lineage became a hand archive: it no longer comes back on resume.
    assert query(b.path, "SELECT id, archived, auto_archived FROM sessions ORDER BY id") == [
        ("mine", 1, 0), ("swept1", 1, 0), ("swept2", 1, 0)]
    again = cli.json("archive", "--db", b.path, "--title", "smoke", "--yes")
    assert again["matched"] == 0


def test_auto_archived_sessions_go_at_retention(hermes_home, cli):
    write_config(hermes_home, "  auto_prune: true\n  retention_days: 90\n")
    path = hermes_home / "state.db"
    with StoreBuilder(path, layout="v31") as b:
        b.session("auto_old", age=200, archived=1, auto_archived=1)
        b.session("auto_recent", age=30, archived=1, auto_archived=1)
        b.session("pinned_auto_old", age=200, archived=1, auto_archived=1, pinned=1)
    report = json.loads(cli("sweep", "--db", path, "--force", "--json").stdout)
    assert report["pruned_ids"] == ["auto_old"]
    assert {r[0] for r in query(path, "SELECT id FROM sessions")} == {"auto_recent", "pinned_auto_old"}


def test_a_nan_idle_threshold_archives_nothing(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text("sessions:\n  auto_archive: true\n  auto_archive_days: .nan\n")
    with StoreBuilder(home / "state.db", layout="v31") as b:
        b.session("fresh", age=1)
    result = run_subprocess("sweep", "--json", env={"HERMES_HOME": str(home)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["auto_archived_ids"] == []
    assert query(home / "state.db", "SELECT archived FROM sessions WHERE id = 'fresh'") == [(0,)]
    idle = run_subprocess("archive", "--idle", "--dry-run", env={"HERMES_HOME": str(home)})
    assert idle.returncode == 2 and "auto_archive_days: bad value" in idle.stderr
