"""hermes-maint restore SNAPSHOT: options and output; the logic is :func:`maint.ops.restore.restore_store`."""

import click

from maint.commands.options import command, dry_run_option, store_options, yes_option
from maint.commands.output import Terminal
from maint.commands.params import FilePath


@command("restore")
@click.argument("snapshot", type=FilePath("a snapshot file made by `hermes-maint backup`"),
                help="A snapshot made by `hermes-maint backup` (or another copy of a state.db).")
@click.option("--force", is_flag=True,
              help="Proceed when the holder check could not complete (never when a holder is found).")
@dry_run_option
@yes_option
@store_options(all_profiles=False, metrics=True)
def restore(snapshot, force, dry_run, yes, stores) -> None:
    """Copy a snapshot back into the store, in place (same file, same inode), after a safety snapshot.

    Stop Hermes first: refused while any process holds the store. The
    snapshot must pass PRAGMA quick_check, be yours, root's or the store's
    owner's in a folder only they control, and match what its sidecar
    recorded (counts, size, sha256); the store is checked again after the
    copy. A kill at any moment leaves the old or the new store, whole.
    """
    from maint.ops.restore import RestoreRequest, restore_store

    req = RestoreRequest.of(snapshot, force=force, dry_run=dry_run)
    op = Terminal(yes=yes, quiet=stores.as_json)
    # The restore goes into the restored store's history.
    stores.run(lambda target: restore_store(target, req, op), _render, job="restore", ran=lambda r: not r["dry_run"])


def _render(r: dict) -> None:
    from maint.ops.restore import counts_text

    for w in r["warnings"]:
        click.echo(f"warning: {w}", err=True)
    if r["dry_run"]:
        click.echo(f"Would restore {r['snapshot']} ({counts_text(r['snapshot_counts'])}) into {r['store']} "
                   f"({counts_text(r['before'])}), after a safety snapshot")
        return
    click.echo(f"Restored {r['snapshot']} into {r['store']} (same file) in {r['seconds']:.1f}s")
    click.echo(f"  before: {counts_text(r['before'])}")
    click.echo(f"  after:  {counts_text(r['after'])} (quick_check ok)")
    click.echo(f"  safety snapshot of the previous store: {r['safety_snapshot']}")
