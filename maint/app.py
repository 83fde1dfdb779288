"""The typer application object and its root options; commands are attached in :mod:`maint.cli`.

Nothing here imports a command, so command modules (the job loop among them) never import the
CLI back.
"""

import typer

from maint import PROG, __version__

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
        from maint.store.connection import sqlite_version

        typer.echo(f"{PROG} {__version__} (SQLite {sqlite_version()})")
        raise typer.Exit(0)


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Show the version and the SQLite in use."),
) -> None:
    """Maintenance for Hermes Agent session stores (state.db)."""
