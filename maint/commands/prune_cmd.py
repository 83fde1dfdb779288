"""hermes-maint prune: options and output; plan, confirm and delete are :func:`maint.ops.prune.prune_store`
(``--never-active``: :func:`maint.ops.never_active.prune_never_active`)."""

import click

from maint.commands.options import command, dry_run_option, filter_options, store_options, yes_option
from maint import PROG
from maint.commands.output import Terminal, printable
from maint.commands.runner import stopped_early
from maint.errors import UsageError
from maint.fmt import fmt_bytes, fmt_time


@command("prune")
@click.option("--include-archived", is_flag=True, help="Also delete archived sessions.")
@click.option("--include-pinned", is_flag=True, help="Also delete pinned sessions (a pin is a keep flag).")
@click.option("--never-active", is_flag=True,
              help="Instead of ended sessions, delete open keyed gateway rows never used (no messages, title, "
                   "tokens, tool or API calls) started before --older-than (default 30 days).")
@dry_run_option
@yes_option
@store_options(metrics=True)
@filter_options
def prune(filters, include_archived, include_pinned, never_active, dry_run, yes, stores) -> None:
    """Delete ended sessions: bare = inactive for 90 days; any filter turns the 90 days off.

    Open sessions, sessions with a turn or compression in progress, and pinned
    ones (unless --include-pinned) are never deleted. A compression lineage goes
    only as a whole. Children (delegate, branch, reset) outside the selection
    are kept and lose their parent link, as Hermes does.
    """
    op = Terminal(yes=yes, quiet=stores.as_json)
    if never_active:
        from maint.ops.never_active import NeverActiveRequest, prune_never_active

        others = [name for name in filters.__dataclass_fields__ if name != "active_before"
                  and getattr(filters, name) is not None]
        if others or include_archived or include_pinned:
            raise UsageError("--never-active takes only --older-than AGE (and --dry-run, --yes); drop the other "
                             "filters and --include-* flags")
        na = NeverActiveRequest(before=filters.active_before, dry_run=dry_run)
        stores.run(lambda target: prune_never_active(target, na, op), _render, job="prune", ran=_deleted)
        return
    from maint.ops.prune import PruneRequest, prune_store

    req = PruneRequest(filters, include_archived=include_archived, include_pinned=include_pinned, dry_run=dry_run)
    reports = stores.run(lambda target: prune_store(target, req, op), _render, job="prune", ran=_deleted)
    stopped_early(reports, lambda r: f"{r['store']}: deleted {r['deleted']} of {r['planned']} matching sessions"
                  if r.get("status") == "stopped" else None)


def _deleted(r: dict) -> bool:
    """A prune goes into the run history only when it deleted something (a dry run or an empty one is no run),
    or was stopped early (monitoring must see that one)."""
    return not r["dry_run"] and (r["deleted"] > 0 or r.get("status") == "stopped")


def _render(r: dict) -> None:
    verb = "Would delete" if r["dry_run"] else "Deleted"
    if r.get("never_active"):
        click.echo(f"{verb} {r['matched'] if r['dry_run'] else r['deleted']} never-active keyed sessions "
                   f"(older than {r['days']:g} days)"
                   + ("" if r["dry_run"] else f", {r['routing_deleted']} routing entries"))
    else:
        rule = f" (implicit rule: inactive >= {r['implicit_days']:g} days)" if r["implicit_days"] else ""
        click.echo(f"{verb} {r['matched']} sessions, {r['messages']} messages{rule}")
        if r.get("status") == "stopped":
            click.echo(f"  stopped early: {r['deleted']} of {r['planned']} matching sessions deleted "
                       f"({r['units_done']} of {r['units_planned']} deletion units reached); the rest are left")
    if r.get("bytes") is not None and r["dry_run"]:
        click.echo(f"  stored text: {fmt_bytes(r['bytes'])}")
    if r["oldest"]:
        click.echo(f"  oldest: {printable(r['oldest']['id'])} (last active {fmt_time(r['oldest']['last_active'])})")
        click.echo(f"  newest: {printable(r['newest']['id'])} (last active {fmt_time(r['newest']['last_active'])})")
    if r["dry_run"]:
        for sid in r["session_ids"][:20]:
            click.echo(f"    {printable(sid)}")
        if len(r["session_ids"]) > 20:
            click.echo(f"    … {len(r['session_ids']) - 20} more")
    for reason, n in sorted(r["held_back"].items()):
        click.echo(f"  kept {n} matching lineage(s): {reason.replace('_', ' ')}")
    for sid in r.get("ids_not_utf8") or []:
        click.echo(f"  kept {sid}: its id is not UTF-8 text (never pruned; fix or delete it with SQL)")
    if r.get("skipped_changed"):
        click.echo(f"  skipped {len(r['skipped_changed'])} sessions that changed while pruning")
    if r.get("skipped_out_of_step"):
        click.echo(f"  kept {len(r['skipped_out_of_step'])} sessions whose delete a search index out of step with "
                   f"their messages refused ({r['out_of_step']}): run `{PROG} repair-fts --apply`, then prune again: "
                   + ", ".join(printable(s) for s in r["skipped_out_of_step"][:10])
                   + (" …" if len(r["skipped_out_of_step"]) > 10 else ""), err=True)
    if r.get("skipped_too_big"):
        click.echo(f"  kept {len(r['skipped_too_big'])} sessions in conversations too big to delete while other "
                   "processes have the store open (their delete would hold the lock past HERMES_MAINT_MAX_UNIT_S); "
                   "stop Hermes and prune again")
