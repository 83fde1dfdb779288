"""hermes-maint delete ID: options and output; the logic is :mod:`maint.ops.sessions`."""

from typing import Annotated

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, ProfileOpt, YesOpt
from maint.commands.output import confirm_or_refuse, fmt_time, printable
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
    from maint.ops.sessions import execute_delete, plan_delete
    from maint.store.delete import session_files
    from maint.store.connection import open_store

    if all_profiles:
        raise UsageError("--all-profiles: an ID names one session in one store (use --db or --profile)")

    def run(target) -> dict:
        with open_store(target.path, readonly=dry_run) as store:  # a preview works on a read-only store
            plan = plan_delete(store, session_id, exact=yes)
            s = plan.sessions[plan.session_id]
            report = {"store": str(target.path), "dry_run": dry_run, "session_id": plan.session_id,
                      "session_ids": plan.ids, "children": plan.children, "messages": plan.messages,
                      "warnings": plan.warnings, "deleted": [],
                      "session_files": session_files(target.path, plan.ids) if dry_run else [], "removed_files": []}
            lines = [f"{plan.session_id}  {s.title or '(untitled)'}  {s.source}, {s.message_count} messages, "
                     f"last active {fmt_time(s.last_active)}"]
            lines += [f"  + delegate child {c} ({plan.sessions[c].source}, {plan.sessions[c].message_count} "
                      "messages)" for c in plan.children]
            lines += [f"warning: {w}" for w in plan.warnings]
            if dry_run:
                return report
            if yes:
                for w in plan.warnings:
                    typer.echo(f"warning: {printable(w)}", err=True)
            confirm_or_refuse(yes, f"Delete {len(plan.ids)} session(s), {plan.messages} messages?", lines)
            report["deleted"] = execute_delete(store, plan)
            report["removed_files"] = plan.removed_files
            return report

    for_each_store(resolve_targets(db, profile, all_profiles), as_json, run, _render)


def _render(r: dict) -> None:
    verb = "Would delete" if r["dry_run"] else "Deleted"
    kids = f" and {len(r['children'])} delegate child(ren)" if r["children"] else ""
    typer.echo(f"{verb} session {printable(r['session_id'])}{kids}, {r['messages']} messages")
    for c in r["children"]:
        typer.echo(f"    {printable(c)}")
    if r["dry_run"]:
        for w in r["warnings"]:
            typer.echo(f"  warning: {printable(w)}")
