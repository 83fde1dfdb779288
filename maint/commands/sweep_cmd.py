"""hermes-maint sweep: the nightly job, by hand; the logic is :func:`maint.ops.sweep.sweep_store`."""

import click

from maint.commands.options import command, store_options
from maint import PROG
from maint.commands.output import Terminal, printable
from maint.commands.runner import stopped_early
from maint.errors import MaintError


@command("sweep")
@click.option("--force", is_flag=True, help="Ignore min_interval_hours (never the lock).")
@store_options(metrics=True)
def sweep(force, stores) -> None:
    """Reap orphaned open sessions, prune past sessions.retention_days, VACUUM when it pays.

    Runs only while sessions.auto_prune is true, at most once per
    sessions.min_interval_hours across every Hermes process sharing the store.
    With sessions.auto_archive: true it first archives conversations idle for
    sessions.auto_archive_days (pinned and busy ones exempt). Skipped (exit 0)
    while another process holds Hermes's auto-maintenance lock; exit 1 when
    that process belongs to another user than the store's owner or root.

    \b
    Example:
      hermes-maint sweep --force --json
    """
    from maint.ops.sweep import SweepRequest, sweep_store

    req = SweepRequest(force=force)
    op = Terminal(quiet=stores.as_json)
    reports = stores.run(lambda target: sweep_store(target, req, op), _render, job="sweep", ran=lambda r: r["swept"])
    stopped_early(reports, lambda r: f"{r['store']}: the sweep was cancelled part-way (pruned "
                  f"{len(r['pruned_ids'])} sessions)" if r.get("swept") and r.get("cancelled") else None)
    suppressed = [r for r in reports if r.get("lock_held_by_another_user")]
    if suppressed:  # a skip another user forces, night after night, must show in monitoring: exit 1
        who = "; ".join(f"{r['store']}: pid {h['pid']} (uid {h['uid']})" for r in suppressed
                        for h in r["lock_held_by_another_user"])
        raise MaintError(f"{len(suppressed)} of {len(reports)} store(s) not swept: another user than the store's "
                         f"owner or root holds the auto-maintenance lock ({who})")


def _render(r: dict) -> None:
    if r["auto_archived_ids"]:
        click.echo(f"Idle sweep: archived {len(r['auto_archived_ids'])} session(s) (they come back when resumed)")
    elif r["auto_archive_skipped_reason"] != "sessions.auto_archive is off":
        click.echo(f"Idle sweep: {r['auto_archive_skipped_reason'] or 'nothing idle to archive'}")
    if not r["swept"]:
        click.echo(f"Sweep skipped: {r['skipped_reason']}")
        return
    how = "Resumed an unfinished sweep" if r.get("resumed") else "Swept"
    click.echo(f"{how}: reaped {len(r['reaped_ids'])} open orphan(s), pruned {len(r['pruned_ids'])} sessions "
               f"({r['pruned_messages']} messages) past {r['retention_days']} days")
    if r.get("skipped_out_of_step"):
        click.echo(f"  kept {len(r['skipped_out_of_step'])} sessions whose delete a search index out of step with "
                   f"their messages refused ({r['out_of_step']}): run `{PROG} repair-fts --apply`: "
                   + ", ".join(printable(s) for s in r["skipped_out_of_step"][:10])
                   + (" …" if len(r["skipped_out_of_step"]) > 10 else ""), err=True)
    if r.get("cancelled"):
        click.echo("  cancelled part-way: the next run inside the interval resumes it")
    click.echo(f"  VACUUM: {'done' if r['vacuumed'] else 'not run'} ({r['vacuum_reason']}); "
               f"{r['bytes_freed']} bytes freed in {r['seconds']}s")
