"""The hermes-maint entry point: the root command, whose every run ends through :func:`maint.commands.runner.run`.

A run imports only the module of the command it names (most of a short command's time is
imports); ``--help`` and a name that is no command load every one, so the overview and the
suggestions see them all (click's documented pattern for lazily loaded subcommands).
``maint.cli.app`` is the root command, for tests and tools that drive it in-process.
"""

from __future__ import annotations

import importlib
import sys
from difflib import get_close_matches
from typing import Any

import click

from maint import PROG, __version__
from maint.commands.options import OwnHelp
from maint.commands.runner import run

# name -> (module under maint.commands, the click command in it)
COMMANDS = {
    "prune": ("prune_cmd", "prune"),
    "archive": ("archive_cmd", "archive"),
    "stats": ("stats_cmd", "stats"),
    "list": ("list_cmd", "list_sessions"),
    "delete": ("delete_cmd", "delete"),
    "rename": ("rename_cmd", "rename"),
    "pin": ("pin_cmd", "pin"),
    "unpin": ("pin_cmd", "unpin"),
    "pinned": ("pin_cmd", "pinned"),
    "export": ("export_cmd", "export"),
    "optimize": ("optimize_cmd", "optimize"),
    "sweep": ("sweep_cmd", "sweep"),
    "autoprune": ("autoprune_cmd", "autoprune"),
    "set-journal-mode": ("journal_cmd", "set_journal_mode"),
    "repair-prompts": ("prompts_cmd", "repair_prompts"),
    "repair-profiles": ("profiles_cmd", "repair_profiles"),
    "repair-routing": ("routing_cmd", "repair_routing"),
    "repair-fts": ("fts_cmd", "repair_fts"),
    "recover": ("recover_cmd", "recover"),
    "clean-markers": ("clean_markers_cmd", "clean_markers"),
    "discard": ("discard_cmd", "discard"),
    "doctor": ("doctor_cmd", "doctor"),
    "history": ("history_cmd", "history"),
    "demo": ("demo_cmd", "demo"),
    "import": ("import_cmd", "import_sessions"),
    "restore": ("restore_cmd", "restore"),
    "backup": ("backup_cmd", "backup"),
    "jobs": ("jobs_cmd", "jobs"),
}


class Root(OwnHelp, click.Group):
    """The commands of :data:`COMMANDS`, each imported when first looked up; every run ends in :func:`run`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name]
        return getattr(importlib.import_module(f"maint.commands.{module}"), attr)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[Any, ...]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            matches = get_close_matches(args[0], list(COMMANDS)) if args else []
            if matches:
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {', '.join(map(repr, matches))}?"
            raise

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        """Click's main; run standalone (a CliRunner), it ends through :func:`run` like the console script."""
        if standalone_mode:
            sys.exit(run(self, args))
        return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)


def _version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        from maint.store.connection import sqlite_version

        click.echo(f"{PROG} {__version__} (SQLite {sqlite_version()})")
        ctx.exit(0)


# color=True: click never strips escape sequences from what we echo (it would, into a pipe or a log, after our
# columns were measured on the raw text); SafeText escapes every control character, terminal or not, so a
# stored value shows the same wherever it is read (hostile try 5, H4).
@click.group(PROG, cls=Root, no_args_is_help=True, context_settings={"color": True})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version and the SQLite in use.")
def app() -> None:
    """Maintenance for Hermes Agent session stores (state.db)."""


def main(argv: list[str] | None = None) -> None:
    from maint.errors import EXIT_INTERRUPTED, Terminated
    from maint.files import raise_on_termination

    # A stop at any moment ends with 128 + signal and no traceback, the moments before the runner's own
    # handlers are in place included (hostile try 12, P2: SIGTERM or Ctrl-C while the runner's modules loaded).
    try:
        raise_on_termination()
        code = run(app, sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except Terminated as exc:
        code = 128 + exc.signum
    sys.exit(code)
