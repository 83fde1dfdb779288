"""hermes-maint archive: options and output; plan, confirm and archive are :func:`maint.ops.archive.archive_store`."""

import click

from maint.commands.options import command, dry_run_option, filter_options, store_options, yes_option
from maint.commands.output import Terminal, printable


@command("archive")
@click.option("--include-open", is_flag=True, help="Also archive sessions still open.")
@click.option("--idle", is_flag=True,
              help="Run the idle sweep now: every conversation idle for sessions.auto_archive_days (default 3), "
                   "open ones included, pinned and busy ones exempt; it comes back when resumed. Needs a store "
                   "with the auto_archived column.")
@dry_run_option
@yes_option
@store_options(metrics=True)
@filter_options
def archive(filters, include_open, idle, dry_run, yes, stores) -> None:
    """Hide matching conversations (archived flag only: messages and search stay).

    At least one filter is required (or --idle). A compression lineage is judged
    by its live tip and archived as a whole. Pinned lineages are left alone.

    \b
    Examples:
      hermes-maint archive --newer-than 5h --dry-run
      hermes-maint archive --idle --yes
    """
    from maint.ops.archive import ArchiveRequest, archive_store

    req = ArchiveRequest(filters, include_open=include_open, idle=idle, dry_run=dry_run)
    op = Terminal(yes=yes, quiet=stores.as_json)
    stores.run(lambda target: archive_store(target, req, op), _render, job="archive", ran=lambda r: not r["dry_run"])


def _render(r: dict) -> None:
    verb = "Would archive" if r["dry_run"] else "Archived"
    what = f" idle for {r['idle_days']:g} days or more (they come back when resumed)" if r["idle"] else ""
    click.echo(f"{verb} {r['matched']} sessions in {r['lineages']} conversations{what}")
    if r["dry_run"]:
        for sid in r["session_ids"][:20]:
            click.echo(f"    {printable(sid)}")
    if r["idle"]:
        if r["skipped_pinned"] or r["skipped_busy"]:
            click.echo(f"  left alone: {r['skipped_pinned']} pinned, {r['skipped_busy']} with a turn or "
                       "compression in progress")
        return
    click.echo(f"  skipped {r['skipped_open']} matching conversation(s) still open"
               + ("" if r["include_open"] else " (use --include-open to archive them)"))
    if r["skipped_pinned"]:
        click.echo(f"  skipped {r['skipped_pinned']} pinned conversation(s)")
    if r["skipped_changed"]:
        click.echo(f"  skipped {len(r['skipped_changed'])} session(s) pinned, reopened or written to while archiving")
