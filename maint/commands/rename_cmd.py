"""hermes-maint rename ID TITLE...: options and output; the logic is :func:`maint.ops.sessions.rename_session`."""

import click

from maint.commands.options import command, store_options


@command("rename")
@click.argument("session_id", metavar="ID", help="Session id or a unique prefix of one.")
@click.argument("title", nargs=-1, required=True, help="The new title; several words need no quotes.")
@store_options(all_profiles=False)
def rename(session_id, title, stores) -> None:
    """Set or change a session's title (Hermes's rules: unique, at most 100 characters, control
    and invisible characters removed). The previous title is printed, to undo.

    \b
    Example:
      hermes-maint rename 20250305_091523_a1b2 debugging auth flow
    """
    from maint.ops.sessions import RenameRequest, rename_session

    req = RenameRequest(session_id, " ".join(title))
    stores.run(lambda target: rename_session(target, req), _render)


def _render(r: dict) -> None:
    click.echo(f"Session {r['session_id']} renamed to: {r['title']}")
    click.echo(f"  previous title: {r['previous_title'] if r['previous_title'] is not None else '(none)'}")
    if r["transferred_from"]:
        click.echo(f"  (the title moved here from {r['transferred_from']}, an earlier segment of this conversation)")
