"""The command line each job runs: checked as the CLI would parse it, then run through the CLI's own root
command, as an operator would type it; and the three things ``hermes-maint jobs`` does with the catalogue
(run the loop, run one job, list them).

The loop itself (triggers, signals, the stop grace) is :mod:`maint.jobs.scheduler`; this module sits
above the commands it dispatches, as :mod:`maint.cli` does.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Optional

import click

from maint import PROG
from maint.commands.runner import run as run_command, usage_message
from maint.errors import UsageError


def _archive_request(params: dict[str, Any]) -> None:
    from maint.ops.archive import ArchiveRequest

    ArchiveRequest(params["filters"], include_open=params["include_open"], idle=params["idle"])


# What a command's request refuses from its arguments alone, checked on the dry parse too, so a
# job that can never run is refused when the loop starts instead of failing at every run.
REQUESTS = {"archive": _archive_request}

# The job commands that refresh the metrics file after their run.
WRITE_METRICS = {"sweep", "optimize", "prune", "archive", "doctor", "backup"}


def setup_logging() -> None:
    """Plain lines on stderr: journald adds its own timestamps, a terminal gets them from us."""
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s" if sys.stderr.isatty() else \
        "%(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=logging.INFO, format=fmt, stream=sys.stderr, force=True)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)


def job_args(command: list[str], all_profiles: bool, db: Optional[str],
             metrics_file: Optional[Path] = None) -> list[str]:
    """The command line a job runs: its own, plus the loop's store flags, plus --yes where one is needed,
    plus the loop's metrics file for the jobs that write one."""
    args = list(command)
    if all_profiles:
        args.append("--all-profiles")
    elif db is not None:
        args += ["--db", str(db)]
    if metrics_file is not None and args[0] in WRITE_METRICS and "--metrics-file" not in args:
        args += ["--metrics-file", str(metrics_file)]
    if args[0] in ("prune", "archive"):
        args.append("--yes")
    return args


def executor(root: Any, all_profiles: bool, db: Optional[str], metrics_file: Optional[Path] = None):
    """Run each job as the same command line an operator would type, through the app's own root command.

    Each job's report reaches the log through the run history (:mod:`maint.ops.history`).
    """

    return lambda job: run_command(root, job_args(job.command, all_profiles, db, metrics_file))


def dry_parse(root: Any, args: list[str]) -> dict[str, Any]:
    """Parse *args* exactly as the CLI would, without running the command; its parameters.

    Options, their types and choices are checked by click (``make_context`` on the subcommand
    looked up from the root, never ``invoke``), the gathered ones (filters, --apply/--dry-run)
    together as a run gathers them; the store flags and what a command's request refuses from its
    arguments alone are checked here with the same functions.
    """
    shown = " ".join(args)
    if "--help" in args:
        raise UsageError(f"`{PROG} {shown}`: --help only prints help; it is not a job")
    try:
        with root.make_context(PROG, args[:1]) as ctx:
            cmd = root.get_command(ctx, args[0])
            if cmd is None:
                raise UsageError(f"no such command {args[0]!r}")
            with cmd.make_context(args[0], list(args[1:]), parent=ctx) as sub:
                params = dict(sub.params)
        stores = params.get("stores")
        if stores is not None and (stores.db is not None) + (stores.profile is not None) + stores.all_profiles > 1:
            raise UsageError("--db, --profile and --all-profiles are mutually exclusive "
                             "(the loop adds its own --db/--all-profiles to every job)")
        if args[0] in REQUESTS:
            REQUESTS[args[0]](params)
    except click.UsageError as exc:
        raise UsageError(f"`{PROG} {shown}` does not parse: {usage_message(exc)}") from None
    except click.exceptions.Exit:
        raise UsageError(f"`{PROG} {shown}` only prints and exits; it is not a job") from None
    except UsageError as exc:
        raise UsageError(f"`{PROG} {shown}`: {exc}") from None
    return params


def command_check(root: Any, all_profiles: bool, db: Optional[str]):
    """The check :func:`maint.jobs.scheduler.load_job` applies to each job's command line."""
    return lambda command: dry_parse(root, job_args(command, all_profiles, db))


def _store_flags(db: Optional[str], all_profiles: bool) -> None:
    from maint.store.targets import resolve_targets

    resolve_targets(db, None, all_profiles)  # the same refusals as every command, before anything runs


def _prepared(db: Optional[str], all_profiles: bool, metrics_file: Optional[Path]) -> Optional[Path]:
    """The store flags refused as every command refuses them and the metrics file checked, before anything
    runs; logging set up for the jobs' reports."""
    from maint.commands.recording import metrics_target

    _store_flags(db, all_profiles)
    metrics = metrics_target(metrics_file) if metrics_file is not None else None
    setup_logging()
    return metrics


def run_jobs(root: Any, jobs_dir: Optional[Path], all_profiles: bool, db: Optional[str],
             metrics_file: Optional[Path]) -> int:
    """The job loop until SIGTERM or Ctrl-C; its exit code (1 when a job outlived the stop grace)."""
    import signal

    from maint.jobs.scheduler import load_catalogue, run_loop

    metrics = _prepared(db, all_profiles, metrics_file)
    jobs = load_catalogue(jobs_dir, command_check(root, all_profiles, db))  # a bad file stops us before anything runs
    code = run_loop(jobs, executor(root, all_profiles, db, metrics))
    # Stopping is done: further SIGTERM/SIGINT are ignored for the few milliseconds until exit
    # (Python's shutdown would otherwise reset them to their default and die of a late one).
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    return code


def run_one(root: Any, name: str, jobs_dir: Optional[Path], all_profiles: bool, db: Optional[str],
            metrics_file: Optional[Path]) -> int:
    """Job *name* now, in the foreground; its exit code."""
    from maint.jobs.scheduler import find_job, load_catalogue

    metrics = _prepared(db, all_profiles, metrics_file)
    job = find_job(load_catalogue(jobs_dir, command_check(root, all_profiles, db)), name)
    return executor(root, all_profiles, db, metrics)(job)


def job_rows(root: Any, jobs_dir: Optional[Path]) -> list[dict[str, Any]]:
    """Each job of the catalogue with its trigger and next run time."""
    from maint.jobs.scheduler import load_catalogue, next_runs

    return [{"name": j.name, "command": j.command, "trigger": j.trigger_text, "enabled": j.enabled,
             "next_run": when.isoformat() if when else None, "file": str(j.source)}
            for j, when in next_runs(load_catalogue(jobs_dir, command_check(root, False, None)))]
