"""hermes-maint set-journal-mode wal|delete: options and output; the logic is :mod:`maint.ops.journal`."""

from enum import StrEnum
from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, JsonOpt, ProfileOpt
from maint.commands.runner import for_each_store
from maint.store.targets import resolve_targets


class Mode(StrEnum):
    wal = "wal"
    delete = "delete"


def set_journal_mode(
    mode: Annotated[Mode, typer.Argument(help="wal or delete", case_sensitive=False)],
    force: Annotated[bool, typer.Option("--force", help="Proceed when the holder check could not complete "
                                                        "(never when a holder was found).")] = False,
    as_json: JsonOpt = False,
    db: Annotated[str | None, typer.Option("--db", metavar="PATH",
                                           help="Any Hermes SQLite store, e.g. a state.db or kanban.db.")] = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
) -> None:
    """Switch a store between WAL and rollback journaling; refused while any process holds it.

    Holders are found on this machine only: processes in other containers or VMs sharing
    the volume are invisible, so stop Hermes there yourself first.
    """
    from maint.ops.journal import switch_store

    for_each_store(resolve_targets(db, profile, all_profiles), as_json,
                   lambda target: switch_store(target, mode.value, force=force), _render)


def _render(r: dict) -> None:
    typer.echo(f"{r['store']}: journal mode {r['before']} -> {r['after']} "
               f"(file header bytes 18-19 = {r['header'][0]},{r['header'][1]})")
    for w in r["warnings"]:
        typer.echo(f"warning: {w}", err=True)
    if r["config_advice"]:
        typer.echo(r["config_advice"])
