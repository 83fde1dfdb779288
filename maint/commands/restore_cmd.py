"""hermes-maint restore: options and output; the logic is :mod:`maint.ops.restore`."""

from pathlib import Path
from typing import Annotated

import typer

from maint.commands.options import DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt
from maint.commands.output import Terminal
from maint.commands.runner import for_each_store
from maint.errors import UsageError
from maint.store.targets import resolve_targets


def restore(
    snapshot: Annotated[Path, typer.Argument(help="A snapshot made by `hermes-maint backup` (or another copy of "
                                                  "a state.db).")],
    force: Annotated[bool, typer.Option("--force", help="Proceed when the holder check could not complete "
                                                        "(never when a holder is found).")] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: Annotated[bool, typer.Option("--all-profiles", hidden=True)] = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Copy a snapshot back into the store, in place (same file, same inode), after a safety snapshot.

    Stop Hermes first: refused while any process holds the store. The
    snapshot must pass PRAGMA quick_check; the store is checked again after
    the copy. A kill at any moment leaves the old or the new store, whole.
    """
    from maint.commands.recording import metrics_target
    from maint.ops.restore import RestoreRequest, restore_store

    if all_profiles:
        raise UsageError("restore works on one store (a snapshot is of one store); use --db or --profile NAME")
    metrics = metrics_target(metrics_file)
    targets = resolve_targets(db, profile, False)
    req = RestoreRequest.of(snapshot, force=force, dry_run=dry_run)
    op = Terminal(yes=yes, quiet=as_json)
    # The restore goes into the restored store's history.
    for_each_store(targets, as_json, lambda target: restore_store(target, req, op), _render, job="restore",
                   ran=lambda r: not r["dry_run"], metrics_file=metrics)


def _render(r: dict) -> None:
    from maint.ops.restore import counts_text

    for w in r["warnings"]:
        typer.echo(f"warning: {w}", err=True)
    if r["dry_run"]:
        typer.echo(f"Would restore {r['snapshot']} ({counts_text(r['snapshot_counts'])}) into {r['store']} "
                   f"({counts_text(r['before'])}), after a safety snapshot")
        return
    typer.echo(f"Restored {r['snapshot']} into {r['store']} (same file) in {r['seconds']:.1f}s")
    typer.echo(f"  before: {counts_text(r['before'])}")
    typer.echo(f"  after:  {counts_text(r['after'])} (quick_check ok)")
    typer.echo(f"  safety snapshot of the previous store: {r['safety_snapshot']}")
