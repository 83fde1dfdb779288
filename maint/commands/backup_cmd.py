"""hermes-maint backup: options and output; the logic is :mod:`maint.ops.backup`."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt
from maint.commands.runner import for_each_store
from maint.fmt import fmt_bytes
from maint.store.targets import resolve_targets


def backup(
    dest: Annotated[Optional[Path], typer.Argument(help="Folder for the snapshots "
                                                        "(default: $HERMES_HOME/state-snapshots/).")] = None,
    keep: Annotated[Optional[int], typer.Option("--keep", help="Then remove this store's oldest verified "
                                                               "snapshots beyond N (N >= 1).")] = None,
    compact: Annotated[bool, typer.Option("--compact", help="A compacted snapshot (VACUUM INTO from a private "
                                                            "copy): smaller, slower.")] = False,
    dry_run: DryRunOpt = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """A consistent snapshot of the store while Hermes keeps writing: one verified file, 0600.

    Named state-<profile>-<UTC time>.db, checked with PRAGMA quick_check and
    against the store's session and message counts before it counts. --keep N
    removes only snapshots this tool made and verified for the same store,
    never the one just made. Refuses, with both figures, when the folder's
    filesystem lacks room for the snapshot plus a margin.
    """
    from maint.commands.recording import metrics_target
    from maint.ops.backup import BackupRequest, backup_store

    req = BackupRequest(folder=Path(dest).expanduser() if dest is not None else None, keep=keep, compact=compact,
                        dry_run=dry_run)
    metrics = metrics_target(metrics_file)
    # Each snapshot goes into its store's run history (a one-row write, after the copy).
    for_each_store(resolve_targets(db, profile, all_profiles), as_json, lambda target: backup_store(target, req),
                   _render, job="backup", ran=lambda r: not r["dry_run"], metrics_file=metrics)


def _render(r: dict) -> None:
    if r["dry_run"]:
        typer.echo(f"Would write a snapshot of about {fmt_bytes(r['estimated_bytes'])} into {r['folder']}")
        for p in r["would_remove"]:
            typer.echo(f"  would remove {p}")
        return
    s = r["snapshot"]
    typer.echo(f"Snapshot {s['path']}")
    typer.echo(f"  {s['sessions']} sessions, {s['messages']} messages, {fmt_bytes(s['bytes'])}, "
               f"verified (quick_check ok, counts match) in {s['seconds']:.1f}s")
    for p in r["removed"]:
        typer.echo(f"  removed old snapshot {p}")
    for p in r["removed_partials"]:
        typer.echo(f"  removed {p} (left by an interrupted backup)")
