"""One store-target contract: every command honours --db/--profile/--all-profiles or refuses the flag.

With --all-profiles each store gets its own report (one JSON line each), a bad store is reported
by name while the others still run, and the command exits 1.
"""

import json
import os

import pytest

from tests.conftest import run_subprocess, session_ids
from tests.storegen import StoreBuilder, small_store

# command line (without store flags) -> a key every per-store report carries
PER_STORE = {
    "prune": (["prune", "--dry-run"], "matched"),
    "archive": (["archive", "--dry-run", "--title", "x"], "matched"),
    "stats": (["stats"], "sessions"),
    "list": (["list"], "sessions"),
    "optimize": (["optimize"], "bytes_after"),
    "sweep": (["sweep"], "swept"),
    "autoprune status": (["autoprune", "status"], "auto_prune"),
    "autoprune later": (["autoprune", "later"], "message"),
    "set-journal-mode": (["set-journal-mode", "wal"], "after"),
    "repair-prompts": (["repair-prompts"], "verified"),
    "backup": (["backup"], "snapshot"),
}


def _stores(home, bad: bool = False, empty_profile: bool = False):
    """The default store and profiles a and b (b a text file when *bad*), plus an empty profile c."""
    paths = [home / "state.db", home / "profiles" / "a" / "state.db", home / "profiles" / "b" / "state.db"]
    for i, path in enumerate(paths):
        if bad and i == 2:
            path.parent.mkdir(parents=True)
            path.write_text("not a database\n")
            continue
        with StoreBuilder(path) as b:
            b.session(f"s{i}", age=200)
    if empty_profile:
        (home / "profiles" / "c").mkdir()
    return paths


@pytest.mark.parametrize("name", PER_STORE)
def test_all_profiles_reaches_every_store(name, hermes_home):
    args, key = PER_STORE[name]
    paths = _stores(hermes_home)
    result = run_subprocess(*args, "--all-profiles", "--json", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["store"] for r in reports] == [str(p) for p in paths]
    assert [r["profile"] for r in reports] == [None, "a", "b"]
    assert all(key in r for r in reports)


@pytest.mark.parametrize("name", PER_STORE)
def test_profile_flag_reaches_that_store_only(name, hermes_home):
    args, key = PER_STORE[name]
    paths = _stores(hermes_home)
    result = run_subprocess(*args, "--profile", "a", "--json", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["store"] for r in reports] == [str(paths[1])] and key in reports[0]


@pytest.mark.parametrize("name", ["prune", "stats", "list", "repair-prompts", "set-journal-mode", "sweep"])
def test_bad_store_is_reported_and_the_rest_still_run(name, hermes_home):
    args, key = PER_STORE[name]
    paths = _stores(hermes_home, bad=True, empty_profile=True)
    result = run_subprocess(*args, "--all-profiles", "--json", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 1, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["store"] for r in reports] == [str(p) for p in paths] + [str(hermes_home / "profiles/c/state.db")]
    assert key in reports[0] and key in reports[1]
    assert str(paths[2]) in reports[2]["error"] and "not a SQLite database" in reports[2]["error"]
    assert "no state.db yet" in reports[3]["skipped"]
    assert "1 of 4 stores failed" in result.stderr and "Traceback" not in result.stderr


def test_bad_store_in_text_mode_names_it_and_goes_on(hermes_home):
    paths = _stores(hermes_home, bad=True)
    result = run_subprocess("stats", "--all-profiles", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 1
    assert f"hermes-maint: error: {paths[2]}: not a SQLite database" in result.stderr
    assert result.stdout.count("Total sessions: 1") == 2


@pytest.mark.parametrize("args", [
    ["export", "--all-profiles"],
    ["export", "-", "--all-profiles", "--format", "md", "--session-id", "s0"],
    ["repair-profiles", "--db", "x.db"],
    ["repair-prompts", "s0", "--all-profiles"],
    ["stats", "--db", "x.db", "--profile", "a"],
    ["stats", "--profile", "a", "--all-profiles"],
    ["jobs", "run", "--db", "x.db", "--all-profiles"],
    ["restore", "snap.db", "--all-profiles", "--yes"],
    ["import", "all.jsonl", "--all-profiles", "--yes"],
])
def test_flags_that_cannot_apply_are_refused(args, hermes_home):
    _stores(hermes_home)
    before = sorted(p.stat().st_mtime_ns for p in hermes_home.rglob("*") if p.is_file())
    result = run_subprocess(*args, env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("hermes-maint: error:")
    assert sorted(p.stat().st_mtime_ns for p in hermes_home.rglob("*") if p.is_file()) == before


def test_empty_db_path_is_a_usage_error(hermes_home):
    result = run_subprocess("stats", "--db", "")
    assert result.returncode == 2 and "--db: empty path" in result.stderr


def test_db_help_does_not_claim_to_override():
    result = run_subprocess("stats", "--help")
    assert "overrides" not in result.stdout and "--db PATH" in result.stdout


def test_each_profile_sweeps_by_its_own_config(hermes_home):
    """A profile is a Hermes home of its own: its config.yaml, not the default one, sets its retention."""
    paths = _stores(hermes_home)
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n  retention_days: 30\n")
    (hermes_home / "profiles" / "a" / "config.yaml").write_text("sessions:\n  auto_prune: false\n")
    (hermes_home / "profiles" / "b" / "config.yaml").write_text("sessions:\n  auto_prune: yes\n"
                                                                "  retention_days: 3650\n")
    result = run_subprocess("sweep", "--all-profiles", "--json", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["config"] for r in reports] == [str(hermes_home / "config.yaml"),
                                              str(hermes_home / "profiles/a/config.yaml"),
                                              str(hermes_home / "profiles/b/config.yaml")]
    assert reports[0]["pruned_ids"] == ["s0"]
    assert reports[1]["swept"] is False and "auto_prune is off" in reports[1]["skipped_reason"]
    assert reports[2]["swept"] is True and reports[2]["pruned_ids"] == []  # YAML 1.1 "yes", 10 years kept
    assert session_ids(paths[1]) == {"s1"} and session_ids(paths[2]) == {"s2"}


def test_autoprune_on_edits_the_profiles_own_config(hermes_home):
    _stores(hermes_home)
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: false\n")
    result = run_subprocess("autoprune", "on", "--profile", "a", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    assert "auto_prune: true" in (hermes_home / "profiles" / "a" / "config.yaml").read_text()
    assert (hermes_home / "config.yaml").read_text() == "sessions:\n  auto_prune: false\n"


def test_all_profiles_reports_what_it_cannot_look_at(hermes_home):
    small_store(hermes_home / "profiles" / "good" / "state.db")
    os.symlink(hermes_home / "nowhere", hermes_home / "state.db")  # a dangling default store
    os.symlink("loop", hermes_home / "profiles" / "loop")  # a profile folder that is a link loop
    result = run_subprocess("stats", "--all-profiles", "--json", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 1
    reports = {r["profile"]: r for r in map(json.loads, result.stdout.splitlines())}
    assert set(reports) == {None, "good", "loop"}
    assert "error" in reports[None] and "broken or looping link" in reports["loop"]["error"]
    assert reports["good"]["sessions"] == 4
