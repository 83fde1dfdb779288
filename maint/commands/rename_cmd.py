"""hermes-maint rename ID TITLE...: options and output; the logic is :mod:`maint.ops.sessions`."""

from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, ProfileOpt
from maint.commands.runner import for_each_store
from maint.errors import UsageError
from maint.store.targets import resolve_targets


def rename(
    session_id: Annotated[str, typer.Argument(help="Session id or a unique prefix of one.")],
    title: Annotated[list[str], typer.Argument(help="The new title; several words need no quotes.")],
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
) -> None:
    """Set or change a session's title (Hermes's rules: unique, at most 100 characters, control
    and invisible characters removed). The previous title is printed, to undo.

    Example: hermes-maint rename 20250305_091523_a1b2 debugging auth flow
    """
    from maint.ops.sessions import RenameRequest, rename_session

    if all_profiles:
        raise UsageError("--all-profiles: an ID names one session in one store (use --db or --profile)")
    req = RenameRequest(session_id, " ".join(title))
    for_each_store(resolve_targets(db, profile, all_profiles), as_json, lambda target: rename_session(target, req),
                   _render)


def _render(r: dict) -> None:
    typer.echo(f"Session {r['session_id']} renamed to: {r['title']}")
    typer.echo(f"  previous title: {r['previous_title'] if r['previous_title'] is not None else '(none)'}")
    if r["transferred_from"]:
        typer.echo(f"  (the title moved here from {r['transferred_from']}, an earlier segment of this conversation)")
