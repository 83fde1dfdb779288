"""The job loop: a foreground APScheduler loop over the job catalogue.

Each job is one small YAML file (name, command, cron or interval trigger, enabled). A file is
checked whole before the loop starts, naming file and field (YAML errors: file and line): the
trigger must fire within the next year and the command line must parse as the CLI would parse
it. Jobs run coalesced, one instance at a time, with an hour of misfire grace so a host that
slept through 03:30 still sweeps when it wakes. SIGTERM/SIGINT cancel the running job at its
next batch boundary and stop the loop; a job that has not stopped within the grace period
(setting ``stop_grace_s``, default 30 s) is reported and the loop exits anyway (exit 1).
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from apscheduler.executors.base import BaseExecutor, run_job
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from maint.crashpoints import hang_point
from maint.errors import EXIT_FAILED, UsageError
from maint.store import batching

log = logging.getLogger("hermes_maint.jobs")

CATALOGUE = "maint.jobs.catalogue"  # package data: the top-level jobs/ folder
RUNNABLE = {"sweep", "optimize", "prune", "archive", "stats", "doctor", "backup"}
UNIT_SECONDS = {"weeks": 604800, "days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}
INTERVAL_UNITS = tuple(UNIT_SECONDS)
MISFIRE_GRACE_S = 3600
HORIZON = timedelta(days=366)  # every trigger must fire within this of now


@dataclass
class Job:
    name: str
    command: list[str]
    trigger: Any
    trigger_text: str
    enabled: bool
    source: Path


DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
FULL_DAY_NAMES = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")


def cron_trigger(spec: str) -> BaseTrigger:
    """A crontab line read as cron reads it.

    APScheduler's ``from_crontab`` numbers weekdays from Monday = 0, so ``0 4 * * 0`` would fire on
    Mondays and ``1-5`` on Tuesday to Saturday. Standard cron counts Sunday = 0 (and 7); the weekday
    field is turned into day names first, which APScheduler reads unambiguously.

    APScheduler also requires the day of month AND the weekday to match; cron fires when either
    does if both are restricted (``0 3 1 * 1``: the 1st and every Monday). As in Vixie cron, a field
    starting with ``*`` (``*``, ``*/2``) is unrestricted and the two are then ANDed; otherwise the
    trigger is the union of the two single-field triggers.
    """
    fields = spec.split()
    if len(fields) != 5:
        raise ValueError(f"expected 5 fields (minute hour day month weekday), got {len(fields)}")
    minute, hour, day, month, weekday = fields
    names = _weekday_names(weekday)
    if day.startswith("*") or weekday.startswith("*"):
        return CronTrigger(minute=minute, hour=hour, day=day, month=month, day_of_week=names)
    return OrTrigger([CronTrigger(minute=minute, hour=hour, day=day, month=month, day_of_week="*"),
                      CronTrigger(minute=minute, hour=hour, day="*", month=month, day_of_week=names)])


def _weekday_names(field: str) -> str:
    days: set[int] = set()
    for part in field.lower().split(","):
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text.isdigit() and int(step_text) > 0 else None
        if step_text and step is None:
            raise ValueError(f"bad weekday step {part!r}")
        if base == "*":
            lo, hi = 0, 6
        elif "-" in base:
            lo_text, hi_text = base.split("-", 1)
            lo, hi = _weekday(lo_text, end=True), _weekday(hi_text, end=True)  # 7-7 is Sunday, not 0-7
            if lo > hi:
                raise ValueError(f"bad weekday range {part!r}")
        else:
            lo = hi = _weekday(base)
            if step:
                hi = 6
        days.update(d % 7 for d in range(lo, hi + 1, step or 1))
    if days == set(range(7)):
        return "*"
    return ",".join(DAY_NAMES[d] for d in sorted(days))


def _weekday(text: str, end: bool = False) -> int:
    """0-7 (0 and 7 = Sunday) or a day name; a range may end on 7 (Sunday)."""
    if text.isascii() and text.isdigit() and 0 <= int(text) <= 7:
        n = int(text)
        return n if end or n != 7 else 0
    # a name whole, as cron reads it: "fri#1" (a first Friday elsewhere) or "monkey" is no day (hostile try 12, P5)
    name = text.lower()
    for i, day in enumerate(DAY_NAMES):
        if name == day or name == FULL_DAY_NAMES[i]:
            return i
    raise ValueError(f"bad weekday {text!r} (expected 0-7, sun..sat or sunday..saturday)")


def _bad(path: Path, field: str, problem: str) -> UsageError:
    return UsageError(f"{path}: field '{field}': {problem}")


def load_job(path: Path, check_command: Callable[[list[str]], None] | None = None,
             now: datetime | None = None) -> Job:
    """One job file, checked whole: a job that could never run, or never run right, is refused here.

    The file is read as config.yaml is (:func:`maint.config.read_trusted`, :func:`maint.config.parse_yaml`):
    a regular file we may trust, YAML within bounds; never through a link another user owns. *check_command*
    dry-parses the command line (the CLI passes its own parser, so a job is held to exactly the options an
    operator could type); it raises :class:`UsageError` with the reason.
    """
    from maint.config import parse_yaml, read_trusted

    data = parse_yaml(read_trusted(path, "job file", foreign_links="refuse")[0], path, what="job file", safe=True)
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a job file must be a mapping with name, command, trigger, enabled")
    unknown = set(data) - {"name", "command", "trigger", "enabled"}
    if unknown:
        raise _bad(path, sorted(unknown)[0], "unknown field (expected name, command, trigger, enabled)")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _bad(path, "name", "must be a non-empty string")
    command = data.get("command")
    if isinstance(command, str):
        command = command.split()
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise _bad(path, "command", "must be a list of strings, e.g. [sweep]")
    if command[0] not in RUNNABLE:
        raise _bad(path, "command", f"unknown command {command[0]!r} (expected one of {', '.join(sorted(RUNNABLE))})")
    enabled = data.get("enabled", True)
    if not isinstance(enabled, bool):
        raise _bad(path, "enabled", "must be true or false")
    trig = data.get("trigger")
    if not isinstance(trig, dict) or len(trig) != 1 or next(iter(trig)) not in ("cron", "interval"):
        raise _bad(path, "trigger", "must be {cron: '<m h dom mon dow>'} or {interval: {hours: N}}")
    kind, spec = next(iter(trig.items()))
    now = now or datetime.now().astimezone()
    if kind == "cron":
        if not isinstance(spec, str):
            raise _bad(path, "trigger.cron", "must be a crontab string like '30 3 * * *'")
        try:
            trigger = cron_trigger(spec)
        except ValueError as exc:
            raise _bad(path, "trigger.cron", f"bad crontab {spec!r} ({exc})") from None
        text = f"cron {spec}"
    else:
        trigger, text = _interval(path, spec)
    first = trigger.get_next_fire_time(None, now)
    if first is None or first - now > HORIZON:
        raise _bad(path, f"trigger.{kind}", f"{spec!r} does not fire within the next {HORIZON.days} days "
                                            "(a date that does not exist, such as 31 February?)")
    if check_command is not None:
        try:
            check_command(command)
        except UsageError as exc:
            raise _bad(path, "command", str(exc)) from None
    return Job(name=name, command=command, trigger=trigger, trigger_text=text, enabled=enabled, source=path)


def _interval(path: Path, spec: Any) -> tuple[IntervalTrigger, str]:
    shape = f"must map {', '.join(INTERVAL_UNITS)} to positive numbers, e.g. {{hours: 6}}"
    if not isinstance(spec, dict) or not spec or set(spec) - set(INTERVAL_UNITS):
        raise _bad(path, "trigger.interval", shape)
    total = 0.0
    for unit, value in spec.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or \
                isinstance(value, float) and not math.isfinite(value):
            raise _bad(path, "trigger.interval", f"{unit}: {value!r} is not a positive finite number ({shape})")
        total += float(min(value, 1e300)) * UNIT_SECONDS[unit]
    if not 1 <= total <= HORIZON.total_seconds():
        raise _bad(path, "trigger.interval", f"{total:g} seconds is out of range (from 1 second to "
                                             f"{HORIZON.days} days)")
    return IntervalTrigger(**spec), "every " + ", ".join(f"{v} {k}" for k, v in spec.items())


def load_catalogue(directory: Path | None = None,
                   check_command: Callable[[list[str]], None] | None = None) -> list[Job]:
    """The job files of *directory* (default: the catalogue shipped with the package), each checked whole.

    The folder is trusted as OpenSSH trusts the folders of its keys: it and every folder above it owned by us
    or root and writable by no one else (sticky folders aside); a catalogue others can write to would run
    whatever job they add, or drop the ones they delete."""
    from maint import files

    directory = Path(directory) if directory else Path(resources.files(CATALOGUE))
    if not directory.is_dir():
        raise UsageError(f"{directory}: no such job directory")
    why = files.untrusted_folder(directory)
    if why:
        raise UsageError(f"{directory}: the job folder {why}; refusing to obey the job files in it (chown it to "
                         "you or root, chmod go-w it)")
    jobs = [load_job(p, check_command) for p in sorted(directory.iterdir()) if p.suffix in (".yaml", ".yml")]
    names = [j.name for j in jobs]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise UsageError(f"{directory}: job name {sorted(dupes)[0]!r} is used by more than one file")
    return jobs


def find_job(jobs: list[Job], name: str) -> Job:
    for job in jobs:
        if job.name == name:
            return job
    raise UsageError(f"no job named {name!r} (known: {', '.join(j.name for j in jobs) or 'none'})")


def next_runs(jobs: list[Job], now: datetime | None = None) -> list[tuple[Job, datetime | None]]:
    now = now or datetime.now().astimezone()
    return [(j, j.trigger.get_next_fire_time(None, now) if j.enabled else None) for j in jobs]


def stop_grace() -> float:
    """Seconds a running job gets to stop after SIGTERM/SIGINT (``HERMES_MAINT_STOP_GRACE_S``)."""
    from maint import settings

    return settings.value("stop_grace_s")


class _Running:
    """The jobs running now, so that shutdown can wait for them and name the ones that do not stop."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.started: dict[str, float] = {}
        self.cut_short: list[str] = []  # jobs the stop signal cut short (work left undone)

    def start(self, name: str) -> None:
        with self.cond:
            self.started[name] = time.monotonic()

    def finish(self, name: str) -> None:
        with self.cond:
            self.started.pop(name, None)
            self.cond.notify_all()

    def wait_idle(self, timeout: float) -> dict[str, float]:
        """Wait up to *timeout* s for every job to finish; the ones still running, with their age in s."""
        with self.cond:
            self.cond.wait_for(lambda: not self.started, timeout)
            now = time.monotonic()
            return {name: now - t for name, t in self.started.items()}


class DaemonThreadExecutor(BaseExecutor):
    """Runs each job in a daemon thread of its own.

    A pool's worker threads are joined when the interpreter exits, so one job stuck in a system
    call (a FIFO given as the store) would keep the process alive after the loop gave up on it.
    """

    def _do_submit_job(self, job, run_times):
        def target() -> None:
            try:
                events = run_job(job, job._jobstore_alias, run_times, self._logger.name)
            except BaseException:  # noqa: BLE001 - reported through the scheduler's own events
                self._run_job_error(job.id, *sys.exc_info()[1:])
            else:
                self._run_job_success(job.id, events)

        threading.Thread(target=target, name=f"hermes-maint-job-{job.id}", daemon=True).start()


def run_loop(jobs: list[Job], execute: Callable[[Job], int], grace: float | None = None) -> int:
    """Run *jobs* until SIGTERM/SIGINT/SIGHUP; returns the exit code (0, or 1 when a job did not stop in time).

    The first signal sets the cancel flag (a prune or sweep stops at its next batch boundary) and
    stops scheduling; the running job then has *grace* seconds. Later signals only say that the
    loop is already stopping.
    """
    grace = stop_grace() if grace is None else grace
    enabled = [j for j in jobs if j.enabled]
    if not enabled:
        raise UsageError("no enabled job in the catalogue; nothing to run")
    running = _Running()
    scheduler = BackgroundScheduler(executors={"default": DaemonThreadExecutor()},
                                    job_defaults={"coalesce": True, "max_instances": 1,
                                                  "misfire_grace_time": MISFIRE_GRACE_S})
    for job in enabled:
        scheduler.add_job(_guarded(execute, job, running), job.trigger, id=job.name, name=job.name)
    batching.reset_cancel()
    stop = threading.Event()

    def on_signal(signum, frame):  # noqa: ARG001
        name = signal.Signals(signum).name
        if stop.is_set():
            log.info("received %s again: already stopping", name)
            return
        log.info("received %s: cancelling at the next batch boundary, stopping within %g s", name, grace)
        batching.cancel(signum)
        stop.set()

    # SIGHUP (the terminal or ssh session of a foreground loop closing) stops it the same way: left to the
    # process-wide handler it ended the loop at once, the running job's partial files left (hostile try 12, P19)
    from maint import files

    files.set_stop_grace(grace)  # a job's statement is interrupted only when the loop gives up on it
    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        scheduler.start()
        for job, when in next_runs(enabled):
            log.info("job %s (%s): next run %s", job.name, job.trigger_text, when.isoformat() if when else "-")
        while not stop.wait(1.0):
            pass
        scheduler.shutdown(wait=False)  # no new runs; the running job is waited for below
        stuck = running.wait_idle(grace)
    except BaseException:
        for s, handler in old.items():
            signal.signal(s, handler)
        raise
    # The loop stopped on a signal: our handler stays installed until the process exits, so a signal
    # sent a moment later is "already stopping" rather than the default action killing us mid-exit.
    for name, age in stuck.items():
        log.error("job %s did not stop within %g s of the signal (running for %.0f s); exiting anyway: "
                  "its unfinished transaction is rolled back, committed ones stay", name, grace, age)
    for name in running.cut_short:
        log.warning("job %s was stopped early by the signal: part of its work is left for its next run", name)
    log.info("job loop stopped")
    if stuck:
        return EXIT_FAILED
    # A job cut short ends the loop as the CLI's own signal ends a run: 128 + the signal, not 0.
    return 128 + (batching.cancel_signal() or signal.SIGTERM) if running.cut_short else 0


def _guarded(execute: Callable[[Job], int], job: Job, running: _Running) -> Callable[[], None]:
    def run() -> None:
        log.info("job %s starting: hermes-maint %s", job.name, " ".join(job.command))
        running.start(job.name)
        try:
            hang_point("job_started")
            code = execute(job)
        except Exception:  # noqa: BLE001 - one failing job must not stop the loop
            log.exception("job %s crashed", job.name)
            return
        finally:
            running.finish(job.name)
        if code != 0 and batching.cancel_signal() is not None and code == 128 + batching.cancel_signal():
            running.cut_short.append(job.name)
        log.log(logging.INFO if code == 0 else logging.ERROR, "job %s finished with exit code %s", job.name, code)

    return run
