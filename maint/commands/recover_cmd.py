"""hermes-maint recover: options and output; the logic is :func:`maint.ops.recover.recover_store`."""

import click

from maint.commands.options import FilePath, command, dry_run_option, store_options, yes_option
from maint.commands.output import Terminal, printable
from maint.errors import UsageError
from maint.fmt import fmt_time


@command("recover")
@click.option("--apply", is_flag=True, help="Create the placeholder sessions (asks first).")
@click.option("--salvage", "salvage_path", type=FilePath("a path for the new file"), metavar="NEW_PATH",
              help="Copy every readable row of a damaged store into this new file (upstream's --allow-partial).")
@dry_run_option
@yes_option
@store_options(metrics=True)
def recover(apply, salvage_path, dry_run, yes, stores) -> None:
    """Find messages whose session row is missing; --apply gives each session id a placeholder row.

    The placeholder (source 'recovered') is left open: the sweep's orphan
    reaping closes it like other automation sessions once it is idle for
    retention_days. One transaction per session id; no message changes.
    Without --apply (or with --dry-run) nothing is written.

    --salvage NEW_PATH is for a store too damaged to open or repair: every row
    that can still be read is copied into a new file with the store's own
    schema (search rebuilt through Hermes's triggers; messages whose session
    was lost get a 'recovered' placeholder), and what could not be read is
    reported per table. The damaged file is only ever read (a copy of it),
    never changed; NEW_PATH must not exist and is never installed in its
    place: stop Hermes and move it there yourself once you have checked it.
    With --dry-run the salvage runs in memory and creates nothing.

    \b
    Examples:
      hermes-maint recover              # report only
      hermes-maint recover --apply      # asks, then creates the placeholders
      hermes-maint recover --salvage ~/state.salvaged.db
    """
    if apply and dry_run:
        raise UsageError("--apply and --dry-run contradict each other (use one)")
    if salvage_path is not None:
        if apply:
            raise UsageError("--salvage writes a new file and --apply changes the store (use one)")
        if stores.all_profiles:
            raise UsageError("--salvage NEW_PATH makes one file from one store; drop --all-profiles")
        from maint.ops.salvage import salvage

        stores.run(lambda target: salvage(target.path, salvage_path, dry_run=dry_run), _render_salvage)
        return
    from maint.ops.recover import recover_store

    op = Terminal(yes=yes, quiet=stores.as_json)
    stores.run(lambda target: recover_store(target, op, apply=apply), _render, job="recover",
               ran=lambda r: bool(r["recovered"]))


def _render_salvage(r: dict) -> None:
    where = "in memory (--dry-run, nothing created)" if r["dry_run"] else f"into {printable(r['salvage'])}"
    state = "complete" if r["complete"] else "partial"
    click.echo(f"Salvaged {r['sessions']} session(s) and {r['messages']} message(s) {where}: {state}.")
    for t in r["tables"]:
        if t["error"]:
            click.echo(f"  {t['table']}: unreadable ({printable(t['error'])})")
            continue
        lost = [f"rowids {lo}..{hi} unread" for lo, hi in t["unread_rowid_ranges"][:5]]
        lost += [f"{t['rejected']} row(s) refused by the schema"] if t["rejected"] else []
        lost += [f"{t['dropped']} row(s) whose parent was lost"] if t["dropped"] else []
        if lost:
            click.echo(f"  {t['table']}: {t['copied']} copied; " + "; ".join(lost))
    for s in r.get("skipped", []):
        click.echo(f"  {s['kind']} {printable(s['name'])}: not made in the new file ({printable(s['reason'])})")
    if r["placeholder_sessions"]:
        click.echo(f"  {r['placeholder_sessions']} placeholder session(s) (source 'recovered') hold messages whose "
                   "session row was lost")
    if not r["dry_run"]:
        click.echo("The damaged store was not changed. Check the new file, stop Hermes and any scheduled "
                   "hermes-maint job, then move it into place.")


def _render(r: dict) -> None:
    strays = r["stray_sessions"]
    if not strays:
        click.echo("No stray messages: every message has its session row.")
        return
    if not r["apply"]:
        for s in strays[:20]:
            click.echo(f"  {s['session_id']}  {s['messages']} message(s), "
                       f"{fmt_time(s['first'])} .. {fmt_time(s['last'])}")
        click.echo(f"{r['stray_messages']} stray message(s) under {len(strays)} session id(s). "
                   "Re-run with --apply to give each a 'recovered' placeholder session.")
        return
    click.echo(f"Recovered {len(r['recovered'])} session(s) holding {r['recovered_messages']} message(s) "
               "(source 'recovered', left open: the sweep closes them once idle).")
    for s in r["skipped"]:
        click.echo(f"  skipped {s['session_id']}: {s['reason']}")
