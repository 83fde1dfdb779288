"""The job loop: a foreground APScheduler BlockingScheduler over the job catalogue.

Each job is one small YAML file (name, command, cron or interval trigger,
enabled). A bad file stops the loop before it starts, naming file and field.
Jobs run coalesced, one instance at a time, with an hour of misfire grace so
a host that slept through 03:30 still sweeps when it wakes. SIGTERM/SIGINT
let the running batch finish, then exit.
"""

from __future__ import annotations

import logging
from importlib import resources
import signal
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from collections.abc import Callable

from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from maint.store import batching
from maint.errors import UsageError

log = logging.getLogger("hermes_maint.jobs")

CATALOGUE = "maint.jobs.catalogue"  # package data: the top-level jobs/ folder
RUNNABLE = {"sweep", "optimize", "prune", "archive", "stats"}
INTERVAL_UNITS = ("weeks", "days", "hours", "minutes", "seconds")
MISFIRE_GRACE_S = 3600


@dataclass
class Job:
    name: str
    command: list[str]
    trigger: Any
    trigger_text: str
    enabled: bool
    source: Path


def _bad(path: Path, field: str, problem: str) -> UsageError:
    return UsageError(f"{path}: field '{field}': {problem}")


def load_job(path: Path) -> Job:
    try:
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read job file ({exc})") from None
    except YAMLError as exc:
        raise UsageError(f"{path}: malformed YAML ({str(exc).splitlines()[0]})") from None
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
    if kind == "cron":
        if not isinstance(spec, str):
            raise _bad(path, "trigger.cron", "must be a crontab string like '30 3 * * *'")
        try:
            trigger = CronTrigger.from_crontab(spec)
        except ValueError as exc:
            raise _bad(path, "trigger.cron", f"bad crontab {spec!r} ({exc})") from None
        text = f"cron {spec}"
    else:
        if not isinstance(spec, dict) or not spec or set(spec) - set(INTERVAL_UNITS) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in spec.values()):
            raise _bad(path, "trigger.interval", f"must map {', '.join(INTERVAL_UNITS)} to positive numbers")
        trigger = IntervalTrigger(**spec)
        text = "every " + ", ".join(f"{v} {k}" for k, v in spec.items())
    return Job(name=name, command=command, trigger=trigger, trigger_text=text, enabled=enabled, source=path)


def load_catalogue(directory: Path | None = None) -> list[Job]:
    directory = Path(directory) if directory else Path(resources.files(CATALOGUE))
    if not directory.is_dir():
        raise UsageError(f"{directory}: no such job directory")
    jobs = [load_job(p) for p in sorted(directory.iterdir()) if p.suffix in (".yaml", ".yml")]
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


def run_loop(jobs: list[Job], execute: Callable[[Job], int]) -> None:
    """Block running *jobs* until SIGTERM/SIGINT; the running batch finishes first."""
    enabled = [j for j in jobs if j.enabled]
    if not enabled:
        raise UsageError("no enabled job in the catalogue; nothing to run")
    scheduler = BlockingScheduler(job_defaults={"coalesce": True, "max_instances": 1,
                                                "misfire_grace_time": MISFIRE_GRACE_S})
    for job in enabled:
        scheduler.add_job(_guarded(execute, job), job.trigger, id=job.name, name=job.name)
    batching.CANCEL.clear()

    def on_signal(signum, frame):  # noqa: ARG001
        log.info("received %s: finishing the current batch, then stopping", signal.Signals(signum).name)
        batching.CANCEL.set()
        threading.Thread(target=scheduler.shutdown, kwargs={"wait": True}, daemon=True).start()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for job, when in next_runs(enabled):
            log.info("job %s (%s): next run %s", job.name, job.trigger_text, when.isoformat() if when else "-")
        scheduler.start()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    log.info("job loop stopped")


def _guarded(execute: Callable[[Job], int], job: Job) -> Callable[[], None]:
    def run() -> None:
        log.info("job %s starting: hermes-maint %s", job.name, " ".join(job.command))
        try:
            code = execute(job)
        except Exception:  # noqa: BLE001 - one failing job must not stop the loop
            log.exception("job %s crashed", job.name)
            return
        log.log(logging.INFO if code == 0 else logging.ERROR, "job %s finished with exit code %s", job.name, code)

    return run
