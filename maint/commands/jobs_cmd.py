"""hermes-maint jobs run | list | run-once: the scheduled job catalogue."""

import logging
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from maint.commands.common import emit_json, handle_errors
from maint.jobs.scheduler import Job, find_job, load_catalogue, next_runs, run_loop

jobs_app = typer.Typer(help="Scheduled maintenance: the job catalogue and its loop.", no_args_is_help=True)

JobsDirOpt = Annotated[Optional[Path], typer.Option("--jobs-dir", help="Job catalogue folder (default: shipped).")]
AllProfilesOpt = Annotated[bool, typer.Option("--all-profiles", help="Run each job over every profile's store.")]
DbOpt = Annotated[Optional[Path], typer.Option("--db", help="Run each job against this store.")]


def setup_logging() -> None:
    """Plain lines on stderr: journald adds its own timestamps, a terminal gets them from us."""
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s" if sys.stderr.isatty() else \
        "%(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=logging.INFO, format=fmt, stream=sys.stderr, force=True)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)


def executor(all_profiles: bool, db: Optional[Path]):
    def execute(job: Job) -> int:
        from maint.cli import invoke

        args = list(job.command)
        if all_profiles:
            args.append("--all-profiles")
        elif db is not None:
            args += ["--db", str(db)]
        if args[0] in ("prune", "archive"):
            args.append("--yes")
        return invoke(args)

    return execute


@jobs_app.command("run")
@handle_errors
def run(jobs_dir: JobsDirOpt = None, all_profiles: AllProfilesOpt = False, db: DbOpt = None) -> None:
    """Run the job loop in the foreground until SIGTERM or Ctrl-C."""
    setup_logging()
    jobs = load_catalogue(jobs_dir)  # a bad file stops us here, before anything is scheduled
    run_loop(jobs, executor(all_profiles, db))


@jobs_app.command("list")
@handle_errors
def list_jobs(jobs_dir: JobsDirOpt = None,
              as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> None:
    """Each job with its trigger and next run time."""
    rows = [{"name": j.name, "command": j.command, "trigger": j.trigger_text, "enabled": j.enabled,
             "next_run": when.isoformat() if when else None, "file": str(j.source)}
            for j, when in next_runs(load_catalogue(jobs_dir))]
    if as_json:
        emit_json({"jobs": rows})
        return
    for r in rows:
        state = r["next_run"] or "disabled"
        typer.echo(f"{r['name']:<18} {r['trigger']:<22} next: {state:<28} hermes-maint {' '.join(r['command'])}")


@jobs_app.command("run-once")
@handle_errors
def run_once(name: Annotated[str, typer.Argument(help="Job name from `jobs list`.")], jobs_dir: JobsDirOpt = None,
             all_profiles: AllProfilesOpt = False, db: DbOpt = None) -> None:
    """Run one job now, in the foreground, and exit with its exit code."""
    setup_logging()
    job = find_job(load_catalogue(jobs_dir), name)
    raise typer.Exit(executor(all_profiles, db)(job))
