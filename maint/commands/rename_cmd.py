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
    from maint.ops.sessions import rename as do_rename
    from maint.ops.sessions import sanitize_title
    from maint.store.connection import open_store

    if all_profiles:
        raise UsageError("--all-profiles: an ID names one session in one store (use --db or --profile)")
    raw = " ".join(title)
    sanitize_title(raw)  # bad input is refused before any store is opened

    def run(target) -> dict:
        with open_store(target.path) as store:
            return {"store": str(target.path), **do_rename(store, session_id, raw)}

    for_each_store(resolve_targets(db, profile, all_profiles), as_json, run, _render)


def _render(r: dict) -> None:
    typer.echo(f"Session {r['session_id']} renamed to: {r['title']}")
    typer.echo(f"  previous title: {r['previous_title'] if r['previous_title'] is not None else '(none)'}")
    if r["transferred_from"]:
        typer.echo(f"  (the title moved here from {r['transferred_from']}, an earlier segment of this conversation)")
