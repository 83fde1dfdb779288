"""The hermes-maint command line: one thin command per maintenance job."""

import sys

import typer

try:  # recent typer vendors click; its exceptions are the ones raised
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - older typer on upstream click
    from click import exceptions as click_exc

from maint import __version__
from maint.commands.archive_cmd import archive
from maint.commands.autoprune_cmd import autoprune
from maint.commands.export_cmd import export
from maint.commands.jobs_cmd import jobs_app
from maint.commands.journal_cmd import set_journal_mode
from maint.commands.optimize_cmd import optimize
from maint.commands.profiles_cmd import repair_profiles
from maint.commands.prompts_cmd import repair_prompts
from maint.commands.sweep_cmd import sweep
from maint.commands.common import PROG
from maint.commands.list_cmd import list_sessions
from maint.commands.prune_cmd import prune
from maint.commands.stats_cmd import stats
from maint.errors import EXIT_USAGE
from maint.store.connection import sqlite_version

app = typer.Typer(
    name=PROG,
    help="Maintenance for Hermes Agent session stores (state.db).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"{PROG} {__version__} (SQLite {sqlite_version()})")
        raise typer.Exit(0)


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Show the version and the SQLite in use."),
) -> None:
    """Maintenance for Hermes Agent session stores (state.db)."""


app.command("prune")(prune)
app.command("archive")(archive)
app.command("stats")(stats)
app.command("list")(list_sessions)
app.command("export")(export)
app.command("optimize")(optimize)
app.command("sweep")(sweep)
app.command("autoprune")(autoprune)
app.command("set-journal-mode")(set_journal_mode)
app.command("repair-prompts")(repair_prompts)
app.command("repair-profiles")(repair_profiles)
app.add_typer(jobs_app, name="jobs")


def invoke(args: list[str]) -> int:
    """Run one command in this process (the job loop uses this); returns its exit code."""
    cmd = typer.main.get_command(app)
    try:
        code = cmd.main(args=args, prog_name=PROG, standalone_mode=False)
    except click_exc.UsageError as exc:
        typer.echo(f"{PROG}: error: {exc.format_message()}", err=True)
        return EXIT_USAGE
    except click_exc.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return code if isinstance(code, int) else 0


def main(argv: list[str] | None = None) -> None:
    """Entry point: click usage errors become one line too (exit 2)."""
    cmd = typer.main.get_command(app)
    try:
        code = cmd.main(args=argv, prog_name=PROG, standalone_mode=False)
    except click_exc.UsageError as exc:
        typer.echo(f"{PROG}: error: {exc.format_message()}", err=True)
        sys.exit(EXIT_USAGE)
    except click_exc.Abort:
        typer.echo(f"{PROG}: aborted; nothing was changed", err=True)
        sys.exit(1)
    except click_exc.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
