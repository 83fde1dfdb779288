"""hermes-maint backup: options and output; the logic is :mod:`maint.ops.backup`."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt
from maint.commands.output import fmt_bytes
from maint.commands.runner import for_each_store
from maint.errors import UsageError
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
    if keep is not None and keep < 1:
        raise UsageError(f"--keep: bad value {keep} (expected a whole number >= 1; the new snapshot always stays)")
    from maint.commands.recording import metrics_target
    from maint.ops.backup import (default_folder, estimate_bytes, list_snapshots, prepare_folder,
                                  remove_stale_partials, rotate, store_label, take_snapshot, would_rotate)
    from maint.store.connection import open_store

    folder = Path(dest).expanduser() if dest is not None else None
    metrics = metrics_target(metrics_file)

    def run(target) -> dict:
        label = store_label(target.path, target.profile)
        with open_store(target.path, readonly=True) as store:  # a bad store is refused before any folder is made
            size, peak = estimate_bytes(store, compact)
        report = {"dry_run": dry_run, "snapshot": None, "label": label, "estimated_bytes": size,
                  "peak_extra_bytes": peak, "would_remove": [], "removed": [], "removed_partials": [],
                  "unverified_kept": []}
        if dry_run:
            base = folder if folder is not None else default_folder()
            report["folder"] = str(base)
            report["would_remove"] = would_rotate(base, target.path, keep) if keep and base.is_dir() else []
            return report
        where = prepare_folder(folder)
        report["folder"] = str(where)
        report["removed_partials"] = remove_stale_partials(where)
        snap = take_snapshot(target.path, where, label=label, compact=compact)
        report["snapshot"] = snap.as_dict()
        report["removed"] = rotate(where, target.path, keep, snap.path) if keep else []
        report["unverified_kept"] = [str(s.path) for s in list_snapshots(where)
                                     if not s.verified and s.path.name.startswith(f"state-{label}-")]
        return report

    # Each snapshot goes into its store's run history (a one-row write, after the copy).
    for_each_store(resolve_targets(db, profile, all_profiles), as_json, run, _render, job="backup",
                   ran=lambda r: not r["dry_run"], metrics_file=metrics)


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
