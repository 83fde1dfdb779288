"""hermes-maint delete ID: options and output; the logic is :func:`maint.ops.sessions.delete_session`."""

import click

from maint.commands.options import command, dry_run_option, store_options, yes_option
from maint.commands.output import Terminal, printable


@command("delete")
@click.argument("session_id", metavar="ID", help="Session id or a unique prefix of one.")
@click.option("--include-pinned", is_flag=True,
              help="Also delete the session or a delegate child that is pinned (a pin is a keep flag).")
@dry_run_option
@yes_option
@store_options(all_profiles=False)
def delete(session_id, include_pinned, dry_run, yes, stores) -> None:
    """Delete one session and its delegate (subagent) children, in one transaction.

    The confirmation lists what goes. Refused (exit 1) while a turn or
    compression is in progress on any of them, or while any of them is pinned
    (unless --include-pinned), as export --delete-after-verified. Branch and
    compression children are kept (unlinked). An open session is deleted with a
    warning: a chat still running it recreates it at its next save.

    \b
    Example:
      hermes-maint delete 20250305_091523_a1b2 --dry-run
    """
    from maint.ops.sessions import delete_session

    op = Terminal(yes=yes, quiet=stores.as_json)
    stores.run(lambda target: delete_session(target, session_id, dry_run, op, include_pinned=include_pinned), _render)


def _render(r: dict) -> None:
    verb = "Would delete" if r["dry_run"] else "Deleted"
    kids = f" and {len(r['children'])} delegate child(ren)" if r["children"] else ""
    click.echo(f"{verb} session {printable(r['session_id'])}{kids}, {r['messages']} messages")
    for c in r["children"]:
        click.echo(f"    {printable(c)}")
    if r["dry_run"]:
        for w in r["warnings"]:
            click.echo(f"  warning: {printable(w)}")
