"""hermes-maint backup [DEST]: options and output; the logic is :func:`maint.ops.backup.backup_store`."""

import click

from maint.commands.options import command, dry_run_option, store_options
from maint.commands.params import FilePath, WholeNumber
from maint.fmt import fmt_bytes


@command("backup")
@click.argument("dest", required=False, type=FilePath("a folder for the snapshots"),
                help="Folder for the snapshots (default: $HERMES_HOME/state-snapshots/).")
@click.option("--keep", type=WholeNumber(1, form="a whole number >= 1; the new snapshot always stays"),
              help="Then remove this store's oldest verified snapshots beyond N (N >= 1).")
@click.option("--compact", is_flag=True,
              help="A compacted snapshot (VACUUM INTO from a private copy): smaller, slower.")
@dry_run_option
@store_options(metrics=True)
def backup(dest, keep, compact, dry_run, stores) -> None:
    """A consistent snapshot of the store while Hermes keeps writing: one verified file, 0600.

    Named state-<profile>-<UTC time>.db, checked with PRAGMA quick_check and
    against the store's session and message counts before it counts. --keep N
    removes only snapshots this tool made and verified for the same store,
    never the one just made. Refuses, with both figures, when the folder's
    filesystem lacks room for the snapshot plus a margin, and refuses a
    folder another user controls (theirs, or writable by others unless sticky).
    """
    from maint.ops.backup import BackupRequest, backup_store

    req = BackupRequest(folder=dest, keep=keep, compact=compact, dry_run=dry_run)
    # Each snapshot goes into its store's run history (a one-row write, after the copy).
    stores.run(lambda target: backup_store(target, req), _render, job="backup", ran=lambda r: not r["dry_run"])


def _render(r: dict) -> None:
    if r["dry_run"]:
        click.echo(f"Would write a snapshot of about {fmt_bytes(r['estimated_bytes'])} into {r['folder']}")
        for p in r["would_remove"]:
            click.echo(f"  would remove {p}")
        return
    s = r["snapshot"]
    click.echo(f"Snapshot {s['path']}")
    click.echo(f"  {s['sessions']} sessions, {s['messages']} messages, {fmt_bytes(s['bytes'])}, "
               f"verified (quick_check ok, counts match) in {s['seconds']:.1f}s")
    for p in r["removed"]:
        click.echo(f"  removed old snapshot {p}")
    for p in r["removed_partials"]:
        click.echo(f"  removed {p} (left by an interrupted backup)")
