"""Finding stores (--db, --profile, HERMES_HOME, --all-profiles) and reading config.yaml."""

import json

import pytest

from maint.config import load_config
from maint.errors import UsageError
from tests.storegen import StoreBuilder


def _store(path, sid):
    with StoreBuilder(path) as b:
        b.session(sid, age=200)


def test_default_store_is_hermes_home(hermes_home, cli):
    _store(hermes_home / "state.db", "default_old")
    assert cli.json("prune", "--dry-run")["session_ids"] == ["default_old"]


def test_profile_store(hermes_home, cli):
    _store(hermes_home / "profiles" / "work" / "state.db", "work_old")
    report = cli.json("prune", "--dry-run", "--profile", "work")
    assert report["session_ids"] == ["work_old"] and report["store"].endswith("profiles/work/state.db")


def test_all_profiles_runs_each_store(hermes_home, cli):
    _store(hermes_home / "state.db", "d")
    _store(hermes_home / "profiles" / "a" / "state.db", "a1")
    _store(hermes_home / "profiles" / "b" / "state.db", "b1")
    result = cli("prune", "--all-profiles", "--yes", "--json")
    assert result.exit_code == 0, result.output
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["profile"], r["session_ids"]) for r in reports] == [(None, ["d"]), ("a", ["a1"]), ("b", ["b1"])]


@pytest.mark.parametrize("flag", ["--profile", "--db", "--db through a linked profile folder",
                                  "--db through another link to a linked profile folder"])
def test_a_profiles_store_reads_its_own_config_whichever_flag_names_it(hermes_home, cli, flag, tmp_path):
    """Hostile try 12, P18: `sweep --force --db HOME/profiles/p1/state.db` (p1 without a config.yaml) obeyed the
    default profile's `auto_prune: true, retention_days: 1` and pruned p1's store; `--profile p1` skipped, as Hermes
    does for a profile without auto_prune. And `autoprune on --db` of it wrote the default's config."""
    (hermes_home / "config.yaml").write_text("sessions: {auto_prune: true, retention_days: 1}\n")
    (hermes_home / "config.yaml").chmod(0o600)
    store = hermes_home / "profiles" / "p1" / "state.db"
    if "linked" in flag:  # hostile try 13, Q1: profiles/p1 -> /data/p1 (same owner)
        real = tmp_path / "data" / "p1"
        real.mkdir(parents=True, mode=0o700)
        store.parent.parent.mkdir(parents=True, exist_ok=True)
        store.parent.symlink_to(real)
    _store(store, "p1_old")
    target = ["--profile", "p1"] if flag == "--profile" else ["--db", str(store)]
    if "another link" in flag:  # hostile try 14, R1: neither the path given nor the real one says "profiles"
        (tmp_path / "lnk").mkdir()
        (tmp_path / "lnk" / "p1").symlink_to(store.parent)
        target = ["--db", str(tmp_path / "lnk" / "p1" / "state.db")]
    report = cli.json("sweep", "--force", *target)
    assert not report["swept"] and "auto_prune is off" in report["skipped_reason"], report
    assert report["config"] == str(hermes_home / "profiles" / "p1" / "config.yaml") and report["pruned_ids"] == []
    assert cli("autoprune", "on", *target).exit_code == 0
    assert (hermes_home / "profiles" / "p1" / "config.yaml").exists()
    assert "retention_days: 1" in (hermes_home / "config.yaml").read_text()


@pytest.mark.parametrize("via", ["its path under profiles/", "the linked folder's own path", "a relative path"])
def test_a_folder_named_default_under_profiles_is_no_alias_of_the_home(hermes_home, cli, tmp_path, monkeypatch, via):
    """Hostile try 15, S1: profiles/default (a folder Hermes never makes: `default` is its name for the home) linked
    to /data/default: `sweep --force --db /data/default/state.db` took the store for the home's and pruned 160 of
    162 by the home's retention, while its path under profiles/ read its own folder's config. Now the folder
    decides, whatever the path; `--profile default` is the home itself, as Hermes's `-p default` is, and
    --all-profiles leaves the folder out, as Hermes's profile list does."""
    (hermes_home / "config.yaml").write_text("sessions: {auto_prune: true, retention_days: 1}\n")
    (hermes_home / "config.yaml").chmod(0o600)
    _store(hermes_home / "state.db", "home_old")
    real = tmp_path / "data" / "default"
    real.mkdir(parents=True, mode=0o700)
    (hermes_home / "profiles").mkdir(exist_ok=True)
    (hermes_home / "profiles" / "default").symlink_to(real)
    _store(real / "state.db", "other_old")
    db = {"its path under profiles/": str(hermes_home / "profiles" / "default" / "state.db"),
          "the linked folder's own path": str(real / "state.db"), "a relative path": "state.db"}[via]
    monkeypatch.chdir(hermes_home / "profiles" / "default")
    report = cli.json("sweep", "--force", "--db", db)
    assert not report["swept"] and report["pruned_ids"] == [], report
    assert report["config"] == str(hermes_home / "profiles" / "default" / "config.yaml")
    for name in ("default", "Default"):
        assert cli.json("prune", "--dry-run", "--profile", name)["session_ids"] == ["home_old"]
    result = cli("prune", "--dry-run", "--all-profiles", "--json")
    assert [json.loads(line)["session_ids"] for line in result.stdout.splitlines()] == [["home_old"]], result.output


def test_a_store_outside_the_home_never_reads_the_runners_config(hermes_home, cli, tmp_path):
    """Hostile try 15, S4: `--db` on a store outside $HERMES_HOME with no config.yaml beside it (another user's
    Hermes home, run on defaults) read the runner's $HERMES_HOME/config.yaml: root's `retention_days: 1` pruned
    160 of alice's 162 sessions. The store's own folder is its home: defaults when it has no config.yaml."""
    (hermes_home / "config.yaml").write_text("sessions: {auto_prune: true, retention_days: 1}\n")
    (hermes_home / "config.yaml").chmod(0o600)
    other = tmp_path / "alice" / ".hermes"
    other.mkdir(parents=True, mode=0o700)
    _store(other / "state.db", "alice_old")
    report = cli.json("sweep", "--force", "--db", str(other / "state.db"))
    assert not report["swept"] and report["pruned_ids"] == [], report
    assert report["config"] == str(other / "config.yaml")
    assert cli("autoprune", "on", "--db", str(other / "state.db")).exit_code == 0  # written where it is read
    assert (other / "config.yaml").exists() and "retention_days: 1" in (hermes_home / "config.yaml").read_text()


def test_conflicting_target_flags(hermes_home, cli, tmp_path):
    result = cli("stats", "--db", tmp_path / "x.db", "--profile", "a")
    assert result.exit_code == 2 and "mutually exclusive" in result.stderr


def test_missing_config_means_defaults(hermes_home):
    cfg = load_config()
    assert not cfg.exists and cfg.session("retention_days") == 90 and cfg.session("auto_prune") is False


def test_user_values_kept_missing_keys_default(hermes_home):
    (hermes_home / "config.yaml").write_text(
        "# mine\nsessions:\n  retention_days: 30  # keep a month\ndatabase:\n  journal_mode: WAL\n")
    cfg = load_config()
    assert cfg.session("retention_days") == 30 and cfg.session("min_interval_hours") == 24
    assert cfg.journal_mode == "wal"


def test_malformed_config_names_file_and_line(hermes_home):
    (hermes_home / "config.yaml").write_text("sessions:\n  retention_days: 30\n  bad: [unclosed\nx: 1\n")
    with pytest.raises(UsageError) as err:
        load_config()
    msg = str(err.value)
    assert "config.yaml:" in msg and "\n" not in msg
    line = int(msg.split("config.yaml:")[1].split(":")[0])
    assert 3 <= line <= 5
