"""hermes-maint jobs run | list | run-once: the scheduled job catalogue; the loop is :mod:`maint.jobs.scheduler`."""

import logging
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt
from maint.commands.output import emit_json
from maint.commands.runner import guard, run as run_command

jobs_app = typer.Typer(help="Scheduled maintenance: the job catalogue and its loop.", no_args_is_help=True)

JobsDirOpt = Annotated[Optional[Path], typer.Option("--jobs-dir", help="Job catalogue folder (default: shipped).")]


def setup_logging() -> None:
    """Plain lines on stderr: journald adds its own timestamps, a terminal gets them from us."""
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s" if sys.stderr.isatty() else \
        "%(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=logging.INFO, format=fmt, stream=sys.stderr, force=True)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)


def executor(root: Any, all_profiles: bool, db: Optional[str]):
    """Run each job as the same command line an operator would type, through the app's own root command."""

    def execute(job) -> int:
        args = list(job.command)
        if all_profiles:
            args.append("--all-profiles")
        elif db is not None:
            args += ["--db", str(db)]
        if args[0] in ("prune", "archive"):
            args.append("--yes")
        return run_command(root, args)

    return execute


def _store_flags(db: Optional[str], all_profiles: bool) -> None:
    from maint.store.targets import resolve_targets

    resolve_targets(db, None, all_profiles)  # the same refusals as every command, before anything runs


@jobs_app.command("run")
@guard
def run(ctx: typer.Context, jobs_dir: JobsDirOpt = None, all_profiles: AllProfilesOpt = False,
        db: DbOpt = None) -> None:
    """Run the job loop in the foreground until SIGTERM or Ctrl-C."""
    from maint.jobs.scheduler import load_catalogue, run_loop

    _store_flags(db, all_profiles)
    setup_logging()
    jobs = load_catalogue(jobs_dir)  # a bad file stops us here, before anything is scheduled
    run_loop(jobs, executor(ctx.find_root().command, all_profiles, db))


@jobs_app.command("list")
@guard
def list_jobs(jobs_dir: JobsDirOpt = None, as_json: JsonOpt = False) -> None:
    """Each job with its trigger and next run time."""
    from maint.jobs.scheduler import load_catalogue, next_runs

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
@guard
def run_once(ctx: typer.Context, name: Annotated[str, typer.Argument(help="Job name from `jobs list`.")],
             jobs_dir: JobsDirOpt = None, all_profiles: AllProfilesOpt = False, db: DbOpt = None) -> None:
    """Run one job now, in the foreground, and exit with its exit code."""
    from maint.jobs.scheduler import find_job, load_catalogue

    _store_flags(db, all_profiles)
    setup_logging()
    job = find_job(load_catalogue(jobs_dir), name)
    raise typer.Exit(executor(ctx.find_root().command, all_profiles, db)(job))
