"""hermes-maint pin / unpin ID... and pinned: options and output; the logic is :mod:`maint.ops.sessions`."""

from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, JsonOpt, ProfileOpt
from maint.commands.runner import for_each_store
from maint.errors import UsageError
from maint.store.targets import resolve_targets

IdsArg = Annotated[list[str], typer.Argument(help="Session ids or unique prefixes.")]


def _set(refs: list[str], pinned: bool, as_json: bool, db, profile, all_profiles: bool) -> None:
    from maint.ops.sessions import pin_sessions

    if all_profiles:
        raise UsageError("--all-profiles: IDs name sessions in one store (use --db or --profile)")
    for_each_store(resolve_targets(db, profile, all_profiles), as_json,
                   lambda target: pin_sessions(target, refs, pinned), _render_set)


def pin(session_ids: IdsArg, as_json: JsonOpt = False, db: DbOpt = None, profile: ProfileOpt = None,
        all_profiles: AllProfilesOpt = False) -> None:
    """Pin sessions: a durable keep flag (never pruned, never auto-archived, always listed).

    Covers the whole compression lineage of each. Needs a store with a pinned column.

    Example: hermes-maint pin 20250305 20250306
    """
    _set(session_ids, True, as_json, db, profile, all_profiles)


def unpin(session_ids: IdsArg, as_json: JsonOpt = False, db: DbOpt = None, profile: ProfileOpt = None,
          all_profiles: AllProfilesOpt = False) -> None:
    """Remove the pin from sessions (their whole compression lineage).

    Example: hermes-maint unpin 20250305_091523_a1b2
    """
    _set(session_ids, False, as_json, db, profile, all_profiles)


def pinned(as_json: JsonOpt = False, db: DbOpt = None, profile: ProfileOpt = None,
           all_profiles: AllProfilesOpt = False) -> None:
    """List pinned conversations; --json is a stable list (sorted by id) to back up the pin set.

    Example: hermes-maint pinned --json > pinned-sessions.json
    """
    from maint.ops.sessions import pinned_report

    for_each_store(resolve_targets(db, profile, all_profiles), as_json, pinned_report, _render_pinned)


def _render_set(r: dict) -> None:
    verb = "Pinned" if r["pinned"] else "Unpinned"
    for s in r["sessions"]:
        more = f" (+{len(s['lineage']) - 1} segment(s) of its lineage)" if len(s["lineage"]) > 1 else ""
        title = f"  ({s['title']})" if s["title"] else ""
        typer.echo(f"{verb} session {s['id']}{more}{title}")


def _render_pinned(r: dict) -> None:
    from maint.ops.listing import relative_time, source_label

    if not r["pinned"]:
        typer.echo("No pinned sessions. Pin one with: hermes-maint pin ID")
        return
    typer.echo(f"{'Title':<32} {'Last Active':<13} {'Src':<6} ID")
    typer.echo("─" * 90)
    for s in r["pinned"]:
        archived = " (archived)" if s["archived"] else ""
        typer.echo(f"{(s['title'] or '—')[:30]:<32} {relative_time(s['last_active']):<13} "
                   f"{source_label(s['source']):<6} {s['id']}{archived}")
