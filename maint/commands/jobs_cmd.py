"""hermes-maint jobs run | list | run-once: the scheduled job catalogue; the loop is :mod:`maint.jobs.scheduler`,
the job command lines :mod:`maint.jobs.commandline`."""

import click

from maint.commands.options import Group, all_profiles_option, db_option, jobs_dir_option, json_option, metrics_option
from maint.commands.output import emit_json


@click.group("jobs", cls=Group, no_args_is_help=True)
def jobs() -> None:
    """Scheduled maintenance: the job catalogue and its loop."""


@jobs.command("run")
@jobs_dir_option
@all_profiles_option
@db_option
@metrics_option
@click.pass_context
def run(ctx: click.Context, jobs_dir, all_profiles, db, metrics_file) -> None:
    """Run the job loop in the foreground until SIGTERM or Ctrl-C (exit 1 if a job outlived the stop grace,
    128 + the signal if it stopped a job part-way); each run's report goes to the log."""
    from maint.jobs.commandline import run_jobs

    code = run_jobs(ctx.find_root().command, jobs_dir, all_profiles, db, metrics_file)
    if code:
        raise click.exceptions.Exit(code)


@jobs.command("list")
@jobs_dir_option
@json_option
@click.pass_context
def list_jobs(ctx: click.Context, jobs_dir, as_json) -> None:
    """Each job with its trigger and next run time."""
    from maint.jobs.commandline import job_rows

    rows = job_rows(ctx.find_root().command, jobs_dir)
    if as_json:
        emit_json({"jobs": rows})
        return
    for r in rows:
        state = r["next_run"] or "disabled"
        click.echo(f"{r['name']:<18} {r['trigger']:<22} next: {state:<28} hermes-maint {' '.join(r['command'])}")


@jobs.command("run-once")
@click.argument("name", help="Job name from `jobs list`.")
@jobs_dir_option
@all_profiles_option
@db_option
@metrics_option
@click.pass_context
def run_once(ctx: click.Context, name, jobs_dir, all_profiles, db, metrics_file) -> None:
    """Run one job now, in the foreground, and exit with its exit code."""
    from maint.jobs.commandline import run_one

    raise click.exceptions.Exit(run_one(ctx.find_root().command, name, jobs_dir, all_profiles, db, metrics_file))
