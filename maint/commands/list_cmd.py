"""hermes-maint list: options and output; the rows come from :func:`maint.ops.listing.list_store`."""

import click

from maint import PROG

from maint.commands.options import command, store_options
from maint.commands.output import fit, printable
from maint.commands.params import Text, WholeNumber

SORTS = ("started", "last-active")  # maint.ops.listing.SORTS


@command("list")
@click.option("--source", type=Text("a platform name, e.g. cli or telegram"), help="Only this platform.")
@click.option("--limit", type=WholeNumber(), default=20, show_default=True,
              help="How many to show (0 = all). Pinned ones past the limit show too, up to as many again; "
                   "a line counts the rest.")
@click.option("--workspace", type=Text("a path substring or a directory name, e.g. my-project or "
                                       "~/code/hermes-agent"), metavar="NEEDLE",
              help="Only one workspace (git repo root, else working directory): a path substring or the exact "
                   "directory name.")
@click.option("--sort", type=click.Choice(SORTS), default="started", show_default=True,
              help="started: newest conversation start first, as Hermes lists them (stops at the limit; one lean "
                   "pass counts the rest); last-active: most recent activity first (reads every session's newest "
                   "message).")
@store_options()
def list_sessions(source, limit, workspace, sort, stores) -> None:
    """Recent conversations, newest start first: title, preview, last active, id. Pinned ones are always listed.

    Past the limit, pinned conversations follow the page, newest first, up to
    --limit of them; a last line counts the pinned ones left out (--limit 0
    lists every conversation).

    \b
    Example:
      hermes-maint list --workspace my-project --limit 50 --sort last-active
    """
    from maint.ops.listing import ListRequest, list_store

    req = ListRequest(source=source, limit=limit, workspace=workspace, sort=sort, count=stores.as_json)
    stores.run(lambda target: list_store(target, req), _render)


def _render(r: dict) -> None:
    from maint.ops.listing import relative_time, source_label

    rows = r["sessions"]
    for sid in r.get("unlisted_ids_not_utf8") or []:
        click.echo(f"{PROG}: warning: session {sid}: its id is not UTF-8 text; not listed", err=True)
    if not rows:
        click.echo("No sessions found.")
        return
    titled = any(row["title"] for row in rows)
    if titled:
        click.echo(f"{'Title':<22} {'Preview':<40} {'Last Active':<13} ID")
        click.echo("─" * 96)
    else:
        click.echo(f"{'Preview':<50} {'Last Active':<13} {'Src':<6} ID")
        click.echo("─" * 86)
    for row in rows:
        when = relative_time(row["last_active"])
        title, preview = printable(row["title"] or "—"), printable(row["preview"])
        sid = printable(row["id"])
        if titled:
            click.echo(f"{fit(title, 22)} {fit(preview, 40)} {when:<13} {sid}")
        else:
            click.echo(f"{fit(preview, 50)} {when:<13} {fit(printable(source_label(row['source'])), 6)} {sid}")
    if r["more"]:
        click.echo("… more not shown (use --limit N to see more)")
    if r.get("pinned_not_shown"):
        click.echo(f"… {r['pinned_not_shown']:,} more pinned not shown (--limit 0 lists them all)")
