"""hermes-maint jobs run | list | run-once: the scheduled job catalogue; the loop is :mod:`maint.jobs.scheduler`."""

import logging
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, MetricsOpt
from maint.commands.output import emit_json
from maint.commands.runner import guard, run as run_command
from maint.errors import UsageError

jobs_app = typer.Typer(help="Scheduled maintenance: the job catalogue and its loop.", no_args_is_help=True)

JobsDirOpt = Annotated[Optional[Path], typer.Option("--jobs-dir", help="Job catalogue folder (default: shipped).")]
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
    looked up from the root, never ``invoke``); filter values and the store flags, which the
    commands check in their bodies, are checked here with the same functions.
    """
    from typer._click import exceptions as click_exc

    from maint import PROG
    from maint.commands.options import FILTER_FLAGS

    shown = " ".join(args)
    if "--help" in args:
        raise UsageError(f"`{PROG} {shown}`: --help only prints help; it is not a job")
    try:
        with root.make_context(PROG, args[:1]) as ctx:
            cmd = root.get_command(ctx, args[0])
            if cmd is None:
                raise UsageError(f"`{PROG} {shown}`: no such command {args[0]!r}")
            with cmd.make_context(args[0], list(args[1:]), parent=ctx) as sub:
                params = dict(sub.params)
    except click_exc.UsageError as exc:
        raise UsageError(f"`{PROG} {shown}` does not parse: {exc.format_message()}") from None
    except typer.Exit:
        raise UsageError(f"`{PROG} {shown}` only prints and exits; it is not a job") from None
    if (params.get("db") is not None) + (params.get("profile") is not None) + bool(params.get("all_profiles")) > 1:
        raise UsageError(f"`{PROG} {shown}`: --db, --profile and --all-profiles are mutually exclusive "
                         "(the loop adds its own --db/--all-profiles to every job)")
    from maint.commands.prechecks import BY_COMMAND

    try:
        if set(FILTER_FLAGS) <= set(params):
            from maint.selection.filters import parse_filters

            params["filters"] = parse_filters({name: params[name] for name in FILTER_FLAGS})
        if args[0] in BY_COMMAND:
            BY_COMMAND[args[0]](params)
    except UsageError as exc:
        raise UsageError(f"`{PROG} {shown}`: {exc}") from None
    return params


def command_check(root: Any, all_profiles: bool, db: Optional[str]):
    """The check :func:`maint.jobs.scheduler.load_job` applies to each job's command line."""
    return lambda command: dry_parse(root, job_args(command, all_profiles, db))


def _store_flags(db: Optional[str], all_profiles: bool) -> None:
    from maint.store.targets import resolve_targets

    resolve_targets(db, None, all_profiles)  # the same refusals as every command, before anything runs


@jobs_app.command("run")
@guard
def run(ctx: typer.Context, jobs_dir: JobsDirOpt = None, all_profiles: AllProfilesOpt = False,
        db: DbOpt = None, metrics_file: MetricsOpt = None) -> None:
    """Run the job loop in the foreground until SIGTERM or Ctrl-C (exit 1 if a job outlived the stop grace);
    each run's report goes to the log."""
    from maint.commands.recording import metrics_target
    from maint.jobs.scheduler import load_catalogue, run_loop

    _store_flags(db, all_profiles)
    metrics = metrics_target(metrics_file) if metrics_file is not None else None
    setup_logging()
    root = ctx.find_root().command
    jobs = load_catalogue(jobs_dir, command_check(root, all_profiles, db))  # a bad file stops us before anything runs
    code = run_loop(jobs, executor(root, all_profiles, db, metrics))
    import signal

    # Stopping is done: further SIGTERM/SIGINT are ignored for the few milliseconds until exit
    # (Python's shutdown would otherwise reset them to their default and die of a late one).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    if code:
        raise typer.Exit(code)


@jobs_app.command("list")
@guard
def list_jobs(ctx: typer.Context, jobs_dir: JobsDirOpt = None, as_json: JsonOpt = False) -> None:
    """Each job with its trigger and next run time."""
    from maint.jobs.scheduler import load_catalogue, next_runs

    rows = [{"name": j.name, "command": j.command, "trigger": j.trigger_text, "enabled": j.enabled,
             "next_run": when.isoformat() if when else None, "file": str(j.source)}
            for j, when in next_runs(load_catalogue(jobs_dir, command_check(ctx.find_root().command, False, None)))]
    if as_json:
        emit_json({"jobs": rows})
        return
    for r in rows:
        state = r["next_run"] or "disabled"
        typer.echo(f"{r['name']:<18} {r['trigger']:<22} next: {state:<28} hermes-maint {' '.join(r['command'])}")


@jobs_app.command("run-once")
@guard
def run_once(ctx: typer.Context, name: Annotated[str, typer.Argument(help="Job name from `jobs list`.")],
             jobs_dir: JobsDirOpt = None, all_profiles: AllProfilesOpt = False, db: DbOpt = None,
             metrics_file: MetricsOpt = None) -> None:
    """Run one job now, in the foreground, and exit with its exit code."""
    from maint.commands.recording import metrics_target
    from maint.jobs.scheduler import find_job, load_catalogue

    _store_flags(db, all_profiles)
    metrics = metrics_target(metrics_file) if metrics_file is not None else None
    setup_logging()
    root = ctx.find_root().command
    job = find_job(load_catalogue(jobs_dir, command_check(root, all_profiles, db)), name)
    raise typer.Exit(executor(root, all_profiles, db, metrics)(job))
