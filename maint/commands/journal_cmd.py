"""hermes-maint set-journal-mode wal|delete."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from maint.commands.common import JsonOpt, emit_json, handle_errors
from maint.config import load_config
from maint.errors import UsageError
from maint.ops.journal import MODES, set_journal_mode as switch
from maint.store.targets import resolve_targets


@handle_errors
def set_journal_mode(
    mode: Annotated[str, typer.Argument(help="wal or delete")],
    db: Annotated[Optional[Path], typer.Option("--db", help="Any Hermes store, e.g. kanban.db.")] = None,
    profile: Annotated[Optional[str], typer.Option("--profile", help="Profile name.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Proceed when the holder check could not complete "
                                                        "(never when a holder was found).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Switch a store between WAL and rollback journaling; refused while any process holds it.

    Holders are found on this machine only: processes in other containers or VMs sharing
    the volume are invisible, so stop Hermes there yourself first.
    """
    mode = mode.lower()
    if mode not in MODES:
        raise UsageError(f"set-journal-mode: bad mode {mode!r} (expected wal or delete)")
    target = resolve_targets(db, profile, False)[0]
    result = switch(target.path, mode, force=force)
    cfg = load_config()
    advice = None
    if cfg.journal_mode is not None and cfg.journal_mode != mode:
        advice = (f"{cfg.path} says database.journal_mode: {cfg.journal_mode}; Hermes will switch it back. "
                  f"Set:\n  database:\n    journal_mode: {mode}")
    if as_json:
        emit_json({"store": result.path, "before": result.before, "after": result.after,
                   "header": list(result.header), "warnings": result.warnings, "config_advice": advice})
        return
    typer.echo(f"{result.path}: journal mode {result.before} -> {result.after} "
               f"(file header bytes 18-19 = {result.header[0]},{result.header[1]})")
    for w in result.warnings:
        typer.echo(f"warning: {w}", err=True)
    if advice:
        typer.echo(advice)
