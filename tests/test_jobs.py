"""Job files that could never work are refused at load, and the loop always stops (issue 18: 5, 7, 13)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, run_subprocess
from tests.storegen import StoreBuilder

GOOD_TRIGGER = "trigger: {cron: '30 3 * * *'}\n"


@pytest.mark.parametrize("body,needle", [
    # finding 7: numbers a timedelta cannot hold used to end in an OverflowError traceback
    ("name: x\ncommand: [sweep]\ntrigger: {interval: {weeks: 1e300}}\n", "field 'trigger.interval'"),
    ("name: x\ncommand: [sweep]\ntrigger: {interval: {seconds: .inf}}\n", "field 'trigger.interval'"),
    ("name: x\ncommand: [sweep]\ntrigger: {interval: {seconds: .nan}}\n", "field 'trigger.interval'"),
    ("name: x\ncommand: [sweep]\ntrigger: {interval: {days: 400}}\n", "field 'trigger.interval'"),
    # finding 13: accepted, but could never run (or never run right)
    ("name: x\ncommand: [sweep]\ntrigger: {cron: '30 3 31 2 *'}\n", "does not fire within the next 366 days"),
    ("name: x\ncommand: [sweep, --bogus]\n" + GOOD_TRIGGER, "No such option '--bogus'"),
    ("name: x\ncommand: [prune, --older-than, fortnight]\n" + GOOD_TRIGGER, "--older-than: bad value 'fortnight'"),
    ("name: x\ncommand: [list]\n" + GOOD_TRIGGER, "unknown command 'list'"),
    ("name: x\ncommand: [stats, --help]\n" + GOOD_TRIGGER, "only prints help"),
    ("name: x\ncommand: [stats, extra]\n" + GOOD_TRIGGER, "does not parse"),
    # the commands' own checks of their arguments, which used to pass the load and fail at every run
    ("name: x\ncommand: [archive]\n" + GOOD_TRIGGER, "archive needs at least one filter"),
    ("name: x\ncommand: [archive, --idle, --newer-than, 5h]\n" + GOOD_TRIGGER, "--idle is a selection of its own"),
    # hostile try 12, P5: weekday names were read by their first three letters ("fri#1", a first Friday in other
    # crons' syntax, ran every Friday)
    ("name: x\ncommand: [sweep]\ntrigger: {cron: '0 3 * * fri#1'}\n", "bad weekday 'fri#1'"),
    ("name: x\ncommand: [sweep]\ntrigger: {cron: '0 3 * * monkey'}\n", "bad weekday 'monkey'"),
    ("name: x\ncommand: [sweep]\ntrigger: {cron: '0 3 * * sunXX-tuesdayz'}\n", "bad weekday 'sunxx'"),
    ("name: x\ncommand: [sweep]\ntrigger: {cron: '0 3 * * \u0663'}\n", "bad weekday"),
])
def test_unworkable_job_file_is_refused_at_load(tmp_path, cli, body, needle):
    (tmp_path / "job.yaml").write_text(body)
    result = cli("jobs", "list", "--jobs-dir", tmp_path)
    assert result.exit_code == 2, (result.output, result.exception)
    line, = result.stderr.strip().splitlines()
    assert str(tmp_path / "job.yaml") in line and needle in line


def test_yaml_syntax_error_names_file_and_line(tmp_path, cli):
    (tmp_path / "job.yaml").write_text("name: x\ncommand: [sweep\n" + GOOD_TRIGGER)
    result = cli("jobs", "list", "--jobs-dir", tmp_path)
    assert result.exit_code == 2
    assert f"{tmp_path / 'job.yaml'}:3: malformed YAML" in result.stderr and "line 2" in result.stderr


def test_job_command_is_checked_with_the_loops_store_flags(tmp_path, cli):
    """The loop appends --db or --all-profiles to every job: a job naming its own store cannot run under it."""
    (tmp_path / "job.yaml").write_text("name: x\ncommand: [stats, --profile, work]\n" + GOOD_TRIGGER)
    assert cli("jobs", "list", "--jobs-dir", tmp_path).exit_code == 0
    result = cli("jobs", "run-once", "x", "--jobs-dir", tmp_path, "--db", tmp_path / "state.db")
    assert result.exit_code == 2 and "mutually exclusive" in result.stderr


@pytest.mark.parametrize("command", ["[archive, --idle, --yes]", "[archive, --older-than, 30d, --yes]"])
def test_commands_own_checks_pass_a_workable_job(tmp_path, cli, command):
    (tmp_path / "job.yaml").write_text(f"name: x\ncommand: {command}\n" + GOOD_TRIGGER)
    result = cli("jobs", "list", "--jobs-dir", tmp_path)
    assert result.exit_code == 0, (result.output, result.stderr)


def test_valid_options_pass_the_dry_parse_without_running(tmp_path, cli):
    db = tmp_path / "missing" / "state.db"  # parsing never opens the store
    (tmp_path / "job.yaml").write_text("name: x\ncommand: [prune, --older-than, 30d, --source, cli, --json]\n"
                                       + GOOD_TRIGGER)
    result = cli("jobs", "list", "--jobs-dir", tmp_path, "--json")
    assert result.exit_code == 0, result.output
    assert not db.parent.exists()


def test_shipped_catalogue_passes_every_check(cli):
    assert cli("jobs", "list").exit_code == 0


def test_bad_stop_grace_is_a_one_line_error(tmp_path):
    (tmp_path / "tick.yaml").write_text("name: tick\ncommand: [stats]\ntrigger: {interval: {seconds: 1}}\n")
    result = run_subprocess("jobs", "run", "--jobs-dir", tmp_path, "--db", tmp_path / "x.db",
                            env={"HERMES_MAINT_STOP_GRACE_S": "inf"}, timeout=60)
    assert result.returncode == 2 and "HERMES_MAINT_STOP_GRACE_S='inf'" in result.stderr
    assert "Traceback" not in result.stderr


def _start_loop(tmp_path, env=None):
    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        b.session("x")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "tick.yaml").write_text("name: tick\ncommand: [stats]\ntrigger: {interval: {seconds: 1}}\n")
    errlog = tmp_path / "loop.log"
    with open(errlog, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "maint", "jobs", "run", "--jobs-dir", str(jobs),
                                 "--db", str(db)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, **(env or {})})
    return proc, errlog


def _wait_for(errlog, text, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline and text not in errlog.read_text():
        time.sleep(0.05)
    assert text in errlog.read_text(), errlog.read_text()


def test_stuck_job_is_reported_and_the_loop_exits_anyway(tmp_path):
    """Finding 5: a job stuck in a system call (a FIFO as the store) used to keep the loop alive past SIGTERM.

    HERMES_MAINT_HANG_AT=job_started is a test seam (maint.crashpoints.hang_point): the job thread
    blocks for good, deaf to the cancel flag, as one blocked opening a FIFO does.
    """
    proc, errlog = _start_loop(tmp_path, {"HERMES_MAINT_HANG_AT": "job_started", "HERMES_MAINT_STOP_GRACE_S": "2"})
    try:
        _wait_for(errlog, "job tick starting")
        proc.send_signal(signal.SIGTERM)
        _wait_for(errlog, "received SIGTERM")
        proc.send_signal(signal.SIGTERM)  # a second signal during shutdown changes nothing
        started = time.monotonic()
        proc.wait(timeout=120)  # a hang
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    log = errlog.read_text()
    assert proc.returncode == 1, log
    assert "job tick did not stop within 2 s" in log and "exiting anyway" in log and "job loop stopped" in log
    assert "already stopping" in log and "Traceback" not in log
    assert took < 25, took  # the 2 s grace it was given and process exit, not the default 30 s


def test_sighup_stops_the_loop_as_sigterm_does(tmp_path):
    """Hostile try 12, P19: SIGHUP (the terminal or ssh session of a foreground loop closing) reached the
    process-wide handler: the loop ended at once (129) with the running job mid-write, its backup's partial
    snapshot left. Now it is the loop's stop: cancel, the stop grace, "job loop stopped"."""
    proc, errlog = _start_loop(tmp_path)
    try:
        _wait_for(errlog, "job tick finished with exit code 0")
        proc.send_signal(signal.SIGHUP)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = errlog.read_text()
    assert "received SIGHUP" in log and "job loop stopped" in log and "Traceback" not in log, log
    assert proc.returncode in (0, 128 + signal.SIGHUP) and "terminated by SIGHUP" not in log, log


def test_second_signal_while_stopping_is_idempotent(tmp_path):
    """Finding 7: a second SIGTERM during shutdown used to raise SchedulerNotRunningError with a traceback."""
    proc, errlog = _start_loop(tmp_path)
    try:
        _wait_for(errlog, "job tick finished with exit code 0")
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)  # a hang (a tick still running has the default 30 s grace)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = errlog.read_text()
    assert proc.returncode == 0, log
    assert "Traceback" not in log and "SchedulerNotRunningError" not in log and "job loop stopped" in log


@pytest.mark.parametrize(("dow", "weekdays"), [
    ("0", {"Sun"}), ("7", {"Sun"}), ("1-5", {"Mon", "Tue", "Wed", "Thu", "Fri"}), ("5-7", {"Fri", "Sat", "Sun"}),
    ("sat,sun", {"Sat", "Sun"}), ("7-7", {"Sun"}), ("0-0", {"Sun"}), ("FRI", {"Fri"}), ("monday-tue", {"Mon", "Tue"})])
def test_cron_weekdays_count_from_sunday_as_cron_does(dow, weekdays):
    """APScheduler's own crontab reader counts Monday = 0: the shipped Sunday job would run on Mondays."""
    from datetime import datetime, timedelta

    from maint.jobs.scheduler import cron_trigger

    trigger, when, seen = cron_trigger(f"0 4 * * {dow}"), datetime(2026, 12, 3, 12).astimezone(), set()
    for _ in range(14):
        when = trigger.get_next_fire_time(None, when + timedelta(minutes=1))
        seen.add(when.strftime("%a"))
    assert seen == weekdays


def test_shipped_weekly_job_runs_on_sunday(tmp_path, cli):
    import json

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "w.yaml").write_text("name: w\ncommand: [optimize]\ntrigger: {cron: '0 4 * * 0'}\nenabled: true\n")
    result = cli("jobs", "list", "--jobs-dir", jobs, "--json")
    assert result.exit_code == 0, result.output
    from datetime import datetime

    assert datetime.fromisoformat(json.loads(result.stdout)["jobs"][0]["next_run"]).strftime("%a") == "Sun"


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_job_file_that_is_not_a_regular_file_is_refused(kind, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    if kind == "fifo":
        os.mkfifo(jobs / "f.yaml")
    else:
        os.symlink("/dev/zero", jobs / "z.yaml")
    result = run_subprocess("jobs", "list", "--jobs-dir", jobs, timeout=30)
    assert result.returncode == 2 and "not a regular file" in result.stderr


def _fires(spec, start, days):
    from datetime import timedelta

    from maint.jobs.scheduler import cron_trigger

    trigger, out, when = cron_trigger(spec), [], start
    while True:
        when = trigger.get_next_fire_time(None, when + timedelta(seconds=1))
        if when is None or when >= start + timedelta(days=days):
            return out
        out.append(when.replace(tzinfo=None))


@pytest.mark.parametrize(("spec", "hour", "matches"), [
    ("0 3 1 * 1", 3, lambda d: d.day == 1 or d.weekday() == 0),  # both restricted: either matches
    ("0 3 1,15 * sat,sun", 3, lambda d: d.day in (1, 15) or d.weekday() >= 5),
    ("0 3 1 * *", 3, lambda d: d.day == 1),  # one field '*': the other alone decides
    ("0 3 * * 1", 3, lambda d: d.weekday() == 0),
    ("0 3 */2 * 1", 3, lambda d: d.day % 2 == 1 and d.weekday() == 0),  # Vixie: a field starting with '*' is '*'
])
def test_day_of_month_and_weekday_are_ored_as_cron_does(spec, hour, matches):
    from datetime import datetime, timedelta

    start = datetime(2026, 12, 3, 12).astimezone()
    days = [datetime(2026, 12, 4) + timedelta(days=i) for i in range(90)]
    assert _fires(spec, start, 91) == [d.replace(hour=hour) for d in days if matches(d)]


def test_feb_29_or_monday_is_listed_with_its_next_run(tmp_path, cli):
    import json
    from datetime import datetime

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "f.yaml").write_text("name: f\ncommand: [stats]\ntrigger: {cron: '0 0 29 2 1'}\nenabled: true\n")
    result = cli("jobs", "list", "--jobs-dir", jobs, "--json")
    assert result.exit_code == 0, result.output
    when = datetime.fromisoformat(json.loads(result.stdout)["jobs"][0]["next_run"])
    assert when.month == 2 and (when.day == 29 or when.weekday() == 0) and (when.hour, when.minute) == (0, 0)
    assert (when - datetime.now().astimezone()).days < 366


def test_a_jobs_own_store_is_never_retargeted_by_the_loops(tmp_path, cli):
    """Hostile try 3, F13: a job naming --db a.db, run by a loop given --db b.db, pruned b.db (click keeps the
    last of two values)."""
    a, b = (tmp_path / "a.db", tmp_path / "b.db")
    for db in (a, b):
        with StoreBuilder(db) as builder:
            builder.session("old", age=200, messages=2)
    (tmp_path / "pa.yaml").write_text(f'name: pa\ncommand: [prune, --older-than, "0", --db, {a}]\n'
                                      'trigger: {interval: {hours: 1}}\n')
    result = cli("jobs", "run-once", "pa", "--jobs-dir", tmp_path, "--db", b)
    assert result.exit_code == 2 and "--db was given more than once" in result.stderr, result.output
    from tests.conftest import session_ids
    assert session_ids(a) == {"old"} and session_ids(b) == {"old"}


# -- whose catalogue (hostile try 3, F27) ------------------------------------------------------------

JOB = "name: {name}\ncommand: [sweep]\ntrigger: {{cron: '30 3 * * *'}}\nenabled: true\n"


@pytest.mark.parametrize("mode", [0o777, 0o770])
def test_a_job_folder_others_may_write_to_is_refused(tmp_path, cli, mode, monkeypatch):
    """Hostile try 3, F27: a --jobs-dir any user could write to (mode 777) was obeyed: a job file linked in by
    another user was listed, and root's loop would run it. The folder is judged as OpenSSH judges the folders
    of its keys: writable by others without the sticky bit, it is refused before any job file is read."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "nightly.yaml").write_text(JOB.format(name="nightly"))
    os.chmod(jobs, mode)
    if mode == 0o770:  # group-writable: refused unless the group is its owner's private one (here: a shared one)
        from maint import files

        monkeypatch.setattr(files, "_private_group", lambda st: False)
    result = cli("jobs", "list", "--jobs-dir", jobs)
    who = "every user" if mode == 0o777 else "its group"
    assert result.exit_code == 2 and f"is writable by {who} without the sticky bit" in result.stderr, result.output
    assert len(result.stderr.strip().splitlines()) == 1
    os.chmod(jobs, 0o1777)  # sticky (as /tmp): others may add files but not replace ours; each file is judged
    assert cli("jobs", "list", "--jobs-dir", jobs).exit_code == 0
    os.chmod(jobs, 0o755)
    assert cli("jobs", "list", "--jobs-dir", jobs).exit_code == 0


def test_a_job_folder_inside_a_folder_others_may_write_to_is_refused(tmp_path, cli):
    open_parent = tmp_path / "shared"
    open_parent.mkdir()
    jobs = open_parent / "jobs"
    jobs.mkdir()
    (jobs / "nightly.yaml").write_text(JOB.format(name="nightly"))
    os.chmod(open_parent, 0o777)  # anyone could rename jobs/ away and put their own folder there
    result = cli("jobs", "list", "--jobs-dir", jobs)
    assert result.exit_code == 2 and f"lies in {open_parent}, which is writable by every user" in result.stderr, \
        result.output


def test_a_job_file_reached_through_another_users_link_is_refused(tmp_path, cli, monkeypatch):
    """Hostile try 3, F27: mallory's link wipe.yaml -> a root-owned job file elsewhere (another catalogue, a
    draft) was obeyed in a sticky shared folder: the target's owner is trusted, the link's was never asked."""
    elsewhere = tmp_path / "drafts"
    elsewhere.mkdir()
    (elsewhere / "wipe.yaml").write_text(JOB.format(name="wipe"))
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    os.chmod(jobs, 0o1777)
    link = jobs / "wipe.yaml"
    link.symlink_to(elsewhere / "wipe.yaml")
    assert cli("jobs", "list", "--jobs-dir", jobs).exit_code == 0  # our own link: followed
    real = os.lstat

    def lstat(path, *args, **kwargs):  # the link is another user's
        st = real(path, *args, **kwargs)
        if str(path) == str(link) and not kwargs.get("dir_fd"):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, 4321, 4321, *st[6:]))
        return st

    monkeypatch.setattr(os, "lstat", lstat)
    result = cli("jobs", "list", "--jobs-dir", jobs, "--json")
    assert result.exit_code == 2 and "a symbolic link owned by another user (uid 4321)" in result.stderr, result.output
    assert "wipe" not in result.stdout


def test_a_prune_the_loop_stops_part_way_says_so_and_ends_non_zero(tmp_path, monkeypatch, capsys):
    """Hostile try 3, F22: a prune the loop's SIGTERM stopped at a batch boundary was logged, recorded and
    measured as a complete run (exit 0, matched = what it got to). Now the job ends 143 with "stopped
    early ... N of M", its history row says status stopped, the metrics say so, and the loop ends 143."""
    from maint.cli import app
    from maint.jobs.commandline import run_jobs
    from maint.ops import history
    from maint.ops import prune as prune_mod
    from maint.store import batching
    from maint.store.connection import open_store

    db = tmp_path / "state.db"
    with StoreBuilder(db) as b:
        for n in range(8):
            b.session(f"old{n}", age=200 + n, messages=2)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "p.yaml").write_text("name: p\ncommand: [prune]\ntrigger: {interval: {seconds: 1}}\n")
    metrics = tmp_path / "hermes.prom"
    # One deletion unit per transaction, and the loop's SIGTERM arrives during the first one.
    monkeypatch.setattr(prune_mod, "Batcher", lambda: batching.Batcher(target_s=0.0, chunk_s=0.0))
    delete = prune_mod.delete_sessions

    def deleting(store, conn, ids):
        delete(store, conn, ids)
        if not batching.CANCEL.is_set():
            os.kill(os.getpid(), signal.SIGTERM)
            assert batching.CANCEL.wait(60)  # the loop's handler has run: the next boundary stops

    monkeypatch.setattr(prune_mod, "delete_sessions", deleting)
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = run_jobs(app, jobs, False, str(db), metrics)
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
        batching.reset_cancel()
    out, log = capsys.readouterr()
    assert code == 143, log
    assert "stopped early: 1 of 8 matching sessions deleted" in out
    assert "stopped early by SIGTERM" in log and "deleted 1 of 8 matching sessions" in log
    assert "job p finished with exit code 143" in log and "job p was stopped early" in log
    with open_store(db, readonly=True) as store:
        (entry,) = history.entries(store, "prune")
        left = store.scalar("SELECT COUNT(*) FROM sessions")
    assert entry.report["status"] == "stopped" and entry.report["deleted"] == 1 and entry.report["planned"] == 8
    assert left == 7
    assert 'hermes_maint_last_job_stopped{kind="prune"' in metrics.read_text()
    stopped_line = next(line for line in metrics.read_text().splitlines()
                        if line.startswith("hermes_maint_last_job_stopped{") and 'kind="prune"' in line)
    assert stopped_line.endswith(" 1")
