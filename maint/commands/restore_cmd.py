"""hermes-maint restore: options and output; the logic is :mod:`maint.ops.restore`."""

from pathlib import Path
from typing import Annotated

import typer

from maint.commands.options import DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt
from maint.commands.output import confirm_or_refuse, emit_json, fmt_bytes
from maint.commands.runner import naming_store
from maint.errors import UsageError
from maint.store.targets import resolve_targets


def _counts(c) -> str:
    return "unreadable" if c is None else f"{c['sessions']} sessions, {c['messages']} messages"


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
    if all_profiles:
        raise UsageError("restore works on one store (a snapshot is of one store); use --db or --profile NAME")
    from maint.ops.backup import prepare_folder, remove_stale_partials, store_label
    from maint.ops.restore import inspect_snapshot, live_counts, open_live, restore as run_restore

    from maint.commands.recording import metrics_target, record_job, write_metrics

    metrics = metrics_target(metrics_file)
    target = resolve_targets(db, profile, False)[0]
    info = inspect_snapshot(snapshot)
    if info.path.resolve() == Path(target.path).expanduser().resolve():
        raise UsageError(f"SNAPSHOT: {info.path} is the store itself (expected a snapshot of it)")
    with naming_store(target.path):
        conn = open_live(target.path)
        try:
            before = live_counts(conn)
        finally:
            conn.close()
    report = {"store": str(target.path), "profile": target.profile, "snapshot": str(info.path),
              "dry_run": dry_run, "before": before,
              "snapshot_counts": {"sessions": info.sessions, "messages": info.messages},
              "warnings": [], "safety_snapshot": None, "after": None, "inode_kept": None, "seconds": None}
    made_for = (info.sidecar or {}).get("store")
    if made_for and made_for != str(Path(target.path).expanduser().resolve()):
        report["warnings"].append(f"the snapshot was taken of {made_for}, not of this store")
    if dry_run:
        return _out(report, as_json)
    confirm_or_refuse(yes, f"Replace the contents of {target.path} with this snapshot?", [
        f"store:    {target.path} ({_counts(before)})",
        f"snapshot: {info.path} ({_counts(report['snapshot_counts'])}, {fmt_bytes(info.bytes)})",
        *[f"warning: {w}" for w in report["warnings"]],
        "a safety snapshot of the store is taken first",
    ])
    folder = prepare_folder(None)
    remove_stale_partials(folder)
    with naming_store(target.path):
        result = run_restore(target.path, info, label=store_label(target.path, target.profile),
                             safety_folder=folder, force=force)
    report.update(safety_snapshot=str(result.safety_snapshot.path), after=result.after, before=result.before,
                  inode_kept=result.inode_kept, seconds=result.seconds)
    report["warnings"] += result.warnings
    record_job(target, "restore", report, result.seconds)  # into the restored store's history
    write_metrics(metrics, [target])
    _out(report, as_json)


def _out(r: dict, as_json: bool) -> None:
    if as_json:
        emit_json(r)
        return
    for w in r["warnings"]:
        typer.echo(f"warning: {w}", err=True)
    if r["dry_run"]:
        typer.echo(f"Would restore {r['snapshot']} ({_counts(r['snapshot_counts'])}) into {r['store']} "
                   f"({_counts(r['before'])}), after a safety snapshot")
        return
    typer.echo(f"Restored {r['snapshot']} into {r['store']} (same file) in {r['seconds']:.1f}s")
    typer.echo(f"  before: {_counts(r['before'])}")
    typer.echo(f"  after:  {_counts(r['after'])} (quick_check ok)")
    typer.echo(f"  safety snapshot of the previous store: {r['safety_snapshot']}")
