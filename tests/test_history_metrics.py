"""Run history in state_meta (bounded per kind) and the Prometheus textfile every job and doctor write."""

import json
import os
import stat

import pytest
from prometheus_client.parser import text_string_to_metric_families

from maint.ops import history
from maint.ops.history import KEEP, LIST_CAP, PREFIX
from maint.store.connection import open_store
from tests.conftest import FlockAs, file_hash, query, run_subprocess
from tests.storegen import StoreBuilder


@pytest.fixture
def store(hermes_home):
    db = hermes_home / "state.db"
    with StoreBuilder(db) as b:
        for n in range(6):
            b.session(f"old{n}", age=200, messages=4)
        b.session("young", age=1, messages=2)
    return db


def parse(path):
    """Every sample through prometheus_client's own parser: {(name, frozenset(labels)): value}."""
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        assert family.type == "gauge" and family.documentation
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples, name, **labels):
    matches = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(matches) == 1, (name, labels, matches)
    return matches[0]


# -- history ----------------------------------------------------------------------------------------

def test_history_keeps_the_last_100_runs_of_each_kind(store):
    with open_store(store) as st:
        for i in range(KEEP + 5):
            history.append(st, "sweep", {"swept": True, "n": i}, now=1000 + i)
        for i in range(3):
            history.append(st, "prune", {"deleted": i}, now=5000 + i)
        sweeps = history.entries(st, "sweep")
        assert len(sweeps) == KEEP and [e.report["n"] for e in sweeps[:2]] == [KEEP + 4, KEEP + 3]
        assert sweeps[-1].report["n"] == 5 and sweeps[0].seq == KEEP + 5
        assert [e.kind for e in history.entries(st, limit=4)] == ["prune", "prune", "prune", "sweep"]
    keys = [k for (k,) in query(store, "SELECT key FROM state_meta WHERE key LIKE 'hermes_maint.history.%'")]
    assert len(keys) == KEEP + 3 and all(k.startswith(PREFIX) for k in keys)


def test_long_lists_are_cut_but_counted(store):
    ids = [f"s{i}" for i in range(LIST_CAP * 3)]
    with open_store(store) as st:
        entry = history.append(st, "prune", {"deleted": len(ids), "session_ids": ids})
        stored = history.entries(st, "prune")[0]
    assert entry.rows == len(ids) and stored.rows == len(ids)
    assert stored.report["session_ids"] == ids[:LIST_CAP] and stored.report["truncated"] == {"session_ids": len(ids)}


def test_rows_affected_per_kind():
    assert history.rows_affected("sweep", {"reaped_ids": ["a"], "pruned_ids": ["b", "c"]}) == 3
    assert history.rows_affected("backup", {"snapshot": {"sessions": 7}}) == 7
    assert history.rows_affected("backup", {"snapshot": None}) == 0
    assert history.rows_affected("optimize", {"bytes_freed": 10}) == 0
    assert history.rows_affected("repair-routing", {"adopted": [{"orphan_id": "a"}, {"orphan_id": "b"}]}) == 2


def test_a_damaged_history_row_is_skipped(store):
    with open_store(store) as st:
        history.append(st, "archive", {"session_ids": ["a"]})
        st.set_meta(PREFIX + "archive.000000000002", "{not json")
        assert [e.seq for e in history.entries(st, "archive")] == [1]
        assert history.append(st, "archive", {"session_ids": []}).seq == 3


def test_history_reads_only_the_rows_it_shows_and_skips_an_oversized_one_unread(store, cli, monkeypatch, caplog):
    """Hostile try 12, P16: every stored run was parsed before the newest were kept (300,000 rows: 6.7 s and
    513 MB to show one). The key carries the sequence: the newest are read first and the read stops at the
    limit; a row past the size bound is named and skipped, not parsed. Counted, not timed."""
    import sqlite3

    conn = sqlite3.connect(store)
    conn.executemany("INSERT INTO state_meta(key, value) VALUES (?, ?)",
                     ((f"{PREFIX}prune.{i:012d}", json.dumps({"at": 1000.0 + i, "rows": i, "report": {"n": i}}))
                      for i in range(1, 501)))
    conn.executemany("INSERT INTO state_meta(key, value) VALUES (?, ?)",
                     ((f"{PREFIX}sweep.{i:012d}", json.dumps({"at": 500.0 + i, "rows": i, "report": {}}))
                      for i in range(1, 201)))
    big = json.dumps({"at": 9999.0, "rows": 1, "report": {"x": "y" * (2 << 20)}})
    conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?)", (f"{PREFIX}prune.{501:012d}", big))
    conn.commit()
    conn.close()
    parsed = []
    real = history._parse
    monkeypatch.setattr(history, "_parse", lambda key, value: parsed.append(key) or real(key, value))
    with open_store(store, readonly=True) as st:
        assert [e.seq for e in history.entries(st, "prune", 2)] == [500, 499]
        assert parsed == [f"{PREFIX}prune.{i:012d}" for i in (500, 499)]  # not the big one, nor the 498 older
        parsed.clear()
        assert [(e.kind, e.seq) for e in history.entries(st, limit=3)] == [("prune", 500), ("prune", 499),
                                                                           ("prune", 498)]
        assert len(parsed) == 6  # three of each kind present, at most
        parsed.clear()
        assert history.latest(st, "prune").seq == 500 and len(parsed) == 1
    result = cli("history", "--db", store, "--kind", "prune", "--limit", "1", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [r["seq"] for r in report["runs"]] == [500]
    assert report["skipped"] == [{"key": f"{PREFIX}prune.{501:012d}", "bytes": len(big)}]
    assert f"history row '{PREFIX}prune.{501:012d}': {len(big)} bytes" in caplog.text


@pytest.mark.parametrize("value", [
    '{"at": 1.0, "rows": 1e400, "report": {}}',          # rows read as inf
    '{"at": 1e400, "rows": 1, "report": {}}',            # a time read as inf
    '{"at": NaN, "rows": 1, "report": {}}',
    '{"at": 1.0, "rows": -1e400, "report": {}}',
    '{"at": 1.0, "rows": 1, "seconds": 1e400, "report": {}}',
    '{"at": 1.0, "rows": 1, "seconds": "slow", "report": {}}',
    '{"at": "yesterday", "rows": 1, "report": {}}',
    '{"at": 1.0, "rows": 1, "report": ["not", "a", "mapping"]}',
    '{"at": 1.0, "rows": 2.5, "report": {}}',
    '[1, 2]',
])
def test_a_history_row_with_a_number_out_of_range_is_skipped(store, cli, value):
    """Hostile try 3, F11: a row whose rows (or at) was 1e400 killed `history` with an OverflowError
    traceback (int(inf)); such a row is damaged, and a damaged row is skipped."""
    with open_store(store) as st:
        history.append(st, "prune", {"deleted": 3})
        st.set_meta(PREFIX + "prune.000000000099", value)
        assert [e.seq for e in history.entries(st, "prune")] == [1]
    result = cli("history", "--db", store)
    assert result.exit_code == 0, result.output
    assert "rows 3" in result.output and result.output.count("prune") == 1
    assert [r["seq"] for r in cli.json("history", "--db", store)["runs"]] == [1]


def test_prune_records_its_run_and_dry_run_records_nothing(store, cli):
    before = file_hash(store)
    r = cli.json("prune", "--db", store, "--dry-run")
    assert r["matched"] == 6 and file_hash(store) == before
    cli.json("prune", "--db", store, "--yes")
    out = cli.json("history", "--db", store, "--kind", "prune")
    [run] = out["runs"]
    assert run["kind"] == "prune" and run["rows"] == 6 and run["report"]["deleted"] == 6 and run["seconds"] >= 0
    assert cli.json("history", "--db", store)["runs"][0]["seq"] == 1


def test_sweep_records_only_runs_that_swept(store, hermes_home, cli):
    cli.json("sweep")  # auto_prune off: skipped, nothing recorded
    assert cli.json("history", "--kind", "sweep")["runs"] == []
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    cli.json("sweep")
    [run] = cli.json("history", "--kind", "sweep")["runs"]
    assert run["report"]["swept"] and run["rows"] == 6


def test_history_text_and_bad_kind(store, cli):
    cli.json("archive", "--db", store, "--title", "nothing-matches", "--yes")
    result = cli("history", "--db", store)
    assert result.exit_code == 0 and " archive " in result.output and "matched=0" in result.output
    bad = run_subprocess("history", "--db", store, "--kind", "vacuum")
    assert bad.returncode == 2 and "--kind" in bad.stderr and "sweep" in bad.stderr


def test_the_job_loop_logs_each_runs_report(store, hermes_home):
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    result = run_subprocess("jobs", "run-once", "nightly-sweep", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    line = next(ln for ln in result.stderr.splitlines() if "job report sweep" in ln)
    logged = json.loads(line.split(": ", 2)[2])
    assert logged["kind"] == "sweep" and logged["report"]["swept"] and len(logged["report"]["pruned_ids"]) == 6


# -- metrics ----------------------------------------------------------------------------------------

def test_doctor_metrics_parse_and_carry_every_figure(store, hermes_home, tmp_path):
    prom = tmp_path / "hermes.prom"
    result = run_subprocess("doctor", "--metrics-file", prom, env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    samples = parse(prom)
    labels = {"profile": "default", "store": str(store)}
    assert value(samples, "hermes_maint_sessions", **labels) == 7
    assert value(samples, "hermes_maint_messages", **labels) == 26
    assert value(samples, "hermes_maint_store_bytes", **labels) == store.stat().st_size
    assert 0 <= value(samples, "hermes_maint_free_page_ratio", **labels) < 1
    counts = {s: value(samples, "hermes_maint_doctor_findings", severity=s, **labels)
              for s in ("ok", "warning", "critical")}
    r = json.loads(run_subprocess("doctor", "--json", env={"HERMES_HOME": str(hermes_home)}).stdout)
    assert counts == {k: float(v) for k, v in r["counts"].items()}
    assert stat.S_IMODE(prom.stat().st_mode) == 0o644
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".partial") or ".tmp-" in p]  # no temporary file


def test_a_job_refreshes_its_figures_and_keeps_doctor_findings(store, hermes_home, tmp_path, cli):
    prom = tmp_path / "hermes.prom"
    run_subprocess("doctor", "--metrics-file", prom, env={"HERMES_HOME": str(hermes_home)})
    doctor_ok = value(parse(prom), "hermes_maint_doctor_findings", severity="ok")
    inode = prom.stat().st_ino
    cli.json("prune", "--yes", "--metrics-file", prom)
    samples = parse(prom)
    assert prom.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert value(samples, "hermes_maint_sessions") == 1
    assert value(samples, "hermes_maint_doctor_findings", severity="ok") == doctor_ok
    assert value(samples, "hermes_maint_last_job_rows_affected", kind="prune") == 6
    assert value(samples, "hermes_maint_last_job_duration_seconds", kind="prune") >= 0
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    cli.json("sweep", "--metrics-file", prom)
    marker = float(query(store, "SELECT value FROM state_meta WHERE key = 'last_auto_prune'")[0][0])
    assert value(parse(prom), "hermes_maint_last_sweep_timestamp_seconds") == marker


def test_other_stores_lines_survive_a_run_on_one_store(store, hermes_home, tmp_path, cli):
    coder = hermes_home / "profiles" / "coder" / "state.db"
    with StoreBuilder(coder) as b:
        b.session("c1", age=300, messages=2)
    prom = tmp_path / "all.prom"
    assert cli("doctor", "--all-profiles", "--metrics-file", prom).exit_code == 0
    assert value(parse(prom), "hermes_maint_sessions", profile="coder") == 1
    cli.json("prune", "--profile", "coder", "--yes", "--metrics-file", prom)
    samples = parse(prom)
    assert value(samples, "hermes_maint_sessions", profile="coder") == 0
    assert value(samples, "hermes_maint_sessions", profile="default") == 7
    assert value(samples, "hermes_maint_doctor_findings", profile="default", severity="critical") == 0


def test_config_key_names_the_metrics_file(store, hermes_home, tmp_path, cli):
    prom = tmp_path / "from-config.prom"
    (hermes_home / "config.yaml").write_text(f"hermes_maint:\n  metrics_file: {prom}\n")
    cli.json("archive", "--title", "nothing", "--yes")
    assert value(parse(prom), "hermes_maint_sessions") == 7


def test_label_values_are_escaped(hermes_home, tmp_path, cli):
    odd = tmp_path / 'we"ird\\dir'
    odd.mkdir()
    db = odd / "state.db"
    with StoreBuilder(db) as b:
        b.session("x", age=1)
    prom = tmp_path / "odd.prom"
    cli.json("doctor", "--db", db, "--metrics-file", prom)
    assert value(parse(prom), "hermes_maint_sessions", store=str(db), profile="") == 1


@pytest.mark.parametrize("kind,needle", [("suffix", "must end in .prom"), ("symlink", "not a regular file"),
                                         ("fifo", "not a regular file"), ("folder", "does not exist")])
def test_bad_metrics_paths_refused_before_any_work(store, tmp_path, kind, needle):
    target = tmp_path / "m.prom"
    if kind == "suffix":
        target = tmp_path / "m.txt"
    elif kind == "symlink":
        target.symlink_to(tmp_path / "elsewhere.prom")
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target = tmp_path / "missing" / "m.prom"
    before = file_hash(store)
    result = run_subprocess("prune", "--db", store, "--yes", "--metrics-file", target)
    assert result.returncode == 2 and needle in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert file_hash(store) == before and not (tmp_path / "elsewhere.prom").exists()


def test_a_metrics_failure_warns_and_never_undoes_the_job(tmp_path, capsys):
    from maint.commands.recording import write_metrics
    from maint.store.targets import StoreTarget

    prom = tmp_path / "m.prom"
    write_metrics(prom, [StoreTarget(tmp_path / "gone" / "state.db", None)])
    err = capsys.readouterr().err
    assert "warning: metrics not written" in err and "no such store" in err and not prom.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can start a process as another user here")
def test_a_metrics_lock_another_user_holds_is_named_and_fails_the_run(store, hermes_home, tmp_path):
    """Hostile try 5, H3: the metrics lock was a flock on the textfile folder, which node_exporter needs
    readable by all, so any user could hold it: every root run dropped its figures after the wait, warned,
    exit 0. The lock is now a file of ours beside the metrics file (0600, owned as that file is), taken as the
    auto-maintenance lock is: a holder of another user than the file's owner, root or us is named and the run
    fails (exit 1, in the job loop too); the owner's own run holding it is the bounded wait and a warning."""
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    folder = tmp_path / "textfile"
    folder.mkdir()
    os.chmod(folder, 0o755)
    os.chown(folder, 1001, 1001)  # alice's textfile folder: what we create there is hers
    prom, lock = folder / "hermes.prom", folder / ".hermes.prom.lock"
    env = {"HERMES_HOME": str(hermes_home)}
    prune = ("prune", "--older-than", "9999d", "--yes", "--metrics-file", prom)
    with FlockAs(folder, 1002):  # mallory holds the folder: no lock of ours any more
        r = run_subprocess(*prune, env=env)
        assert r.returncode == 0 and "metrics not written" not in r.stderr, r.stderr
    assert value(parse(prom), "hermes_maint_sessions") == 7
    st = os.lstat(lock)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert (st.st_uid, os.stat(prom).st_uid) == (1001, 1001)
    before = file_hash(prom)
    with FlockAs(lock, 1002) as pid:  # mallory with a descriptor of it (an older 0644 lock, say)
        r = run_subprocess(*prune, env=env)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert f"error: metrics not written to {prom}" in r.stderr and f"pid {pid} (uid 1002, user mallory" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        job = run_subprocess("jobs", "run-once", "nightly-sweep", "--metrics-file", prom, env=env)
        assert job.returncode == 1 and f"pid {pid} (uid 1002" in job.stderr, (job.stdout, job.stderr)
    assert file_hash(prom) == before
    with FlockAs(lock, 1001):  # alice, whose file it is: waited for, then a warning, the job's result stands
        r = run_subprocess(*prune, env=env)
        assert r.returncode == 0 and "warning: metrics not written" in r.stderr and "uid 1001" in r.stderr, r.stderr
    assert file_hash(prom) == before
    r = run_subprocess(*prune, env=env)  # the lock is kept (it is the lock) and used again
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert os.lstat(lock).st_ino == st.st_ino and sorted(p.name for p in folder.iterdir()) == [lock.name, prom.name]


def test_job_loop_passes_the_metrics_file_to_jobs_and_runs_doctor(store, hermes_home, tmp_path):
    (hermes_home / "config.yaml").write_text("sessions:\n  auto_prune: true\n")
    prom = tmp_path / "loop.prom"
    env = {"HERMES_HOME": str(hermes_home)}
    swept = run_subprocess("jobs", "run-once", "nightly-sweep", "--metrics-file", prom, env=env)
    assert swept.returncode == 0, swept.stderr
    assert value(parse(prom), "hermes_maint_last_job_rows_affected", kind="sweep") == 6
    checked = run_subprocess("jobs", "run-once", "daily-doctor", "--metrics-file", prom, env=env)
    assert checked.returncode == 0 and checked.stdout.startswith(f"hermes-maint doctor {store}: ")
    samples = parse(prom)
    assert value(samples, "hermes_maint_doctor_findings", severity="critical") == 0
    assert value(samples, "hermes_maint_last_job_rows_affected", kind="sweep") == 6


@pytest.mark.skipif(os.geteuid() != 0, reason="the root run is the one another user's config could steer")
def test_a_metrics_path_in_another_users_config_is_written_only_where_that_user_writes(store, hermes_home,
                                                                                        tmp_path):
    """A user's config.yaml naming a file in root's folders must not make root's nightly run create or replace
    it (hostile try: another exporter's .prom replaced by a root sweep)."""
    user = 4321
    for path in (hermes_home, store):
        os.chown(path, user, user)
    theirs, roots = tmp_path / "theirs", tmp_path / "roots"
    theirs.mkdir()
    roots.mkdir()
    os.chown(theirs, user, user)
    victim = roots / "node.prom"
    victim.write_text("# another exporter's metrics\n")
    before = file_hash(victim)
    cfg = hermes_home / "config.yaml"
    cfg.write_text(f"hermes_maint:\n  metrics_file: {victim}\n")
    os.chown(cfg, user, user)
    result = run_subprocess("archive", "--title", "nothing", "--yes", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 2, result.stderr
    assert "hermes_maint.metrics_file" in result.stderr and str(victim) in result.stderr
    assert run_subprocess("doctor", env={"HERMES_HOME": str(hermes_home)}).returncode == 0  # its finding, not a stop
    assert file_hash(victim) == before and sorted(p.name for p in roots.iterdir()) == ["node.prom"]
    allowed = theirs / "hermes.prom"
    cfg.write_text(f"hermes_maint:\n  metrics_file: {allowed}\n")
    result = run_subprocess("archive", "--title", "nothing", "--yes", env={"HERMES_HOME": str(hermes_home)})
    assert result.returncode == 0, result.stderr
    assert value(parse(allowed), "hermes_maint_sessions") == 7


def test_a_metrics_path_from_another_users_config_is_judged_on_the_folder_opened_at_the_end(tmp_path):
    """Hostile try 4, G4: the folder of a metrics_file named in alice's config was checked at the start of root's
    run and written at the end through whatever the name pointed to by then (her folder swapped for a link to a
    root folder). The write now checks that the folder it opened is the config owner's."""
    from maint.errors import MaintError
    from maint.ops import metrics

    folder = tmp_path / "m"
    folder.mkdir()
    other = os.stat(folder).st_uid + 4321  # the config's owner: not the owner of the folder opened
    with pytest.raises(MaintError, match="is not uid"):
        metrics.write(folder / "x.prom", [], [], keep_doctor=False, owner=other)
    assert list(folder.iterdir()) == []
    metrics.write(folder / "x.prom", [], [], keep_doctor=False, owner=os.stat(folder).st_uid)
    assert (folder / "x.prom").exists()
