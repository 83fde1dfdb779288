"""hermes-maint delete ID: options and output; the logic is :mod:`maint.ops.sessions`."""

from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, ProfileOpt, YesOpt
from maint.commands.output import Terminal
from maint.commands.runner import for_each_store
from maint.errors import UsageError
from maint.store.targets import resolve_targets


def delete(
    session_id: Annotated[str, typer.Argument(help="Session id or a unique prefix of one.")],
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
) -> None:
    """Delete one session and its delegate (subagent) children, in one transaction.

    The confirmation lists what goes. Refused (exit 1) while a turn or compression
    is in progress on any of them. Branch and compression children are kept
    (unlinked). An open session is deleted with a warning: a chat still running it
    recreates it at its next save.

    Example: hermes-maint delete 20250305_091523_a1b2 --dry-run
    """
    from maint.ops.sessions import delete_session

    if all_profiles:
        raise UsageError("--all-profiles: an ID names one session in one store (use --db or --profile)")
    op = Terminal(yes=yes, quiet=as_json)
    for_each_store(resolve_targets(db, profile, all_profiles), as_json,
                   lambda target: delete_session(target, session_id, dry_run, op), _render)


def _render(r: dict) -> None:
    verb = "Would delete" if r["dry_run"] else "Deleted"
    kids = f" and {len(r['children'])} delegate child(ren)" if r["children"] else ""
    typer.echo(f"{verb} session {r['session_id']}{kids}, {r['messages']} messages")
    for c in r["children"]:
        typer.echo(f"    {c}")
    if r["dry_run"]:
        for w in r["warnings"]:
            typer.echo(f"  warning: {w}")
