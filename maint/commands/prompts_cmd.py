"""hermes-maint repair-prompts [SESSION_ID] [--apply]."""

from typing import Annotated, Optional

import typer

from maint.commands.common import JsonOpt, command, confirm_or_refuse, emit_json, resolve
from maint.store.holders import STOP_HERMES, refuse_if_held
from maint.store.catalog import resolve_session
from maint.ops.prompts import clear_prompts, scan, stored_prompt
from maint.store.connection import open_store

RESTART = "Restart a running gateway now: it holds prompts in memory and would write them back."


@command
def repair_prompts(
    targets: dict,
    session_id: Annotated[
        Optional[str], typer.Argument(help="Force-clear this session's prompt (id or prefix).")] = None,
    apply: Annotated[bool, typer.Option("--apply", help="Clear the verified degraded prompts (asks first).")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Skip the confirmation.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Proceed when the holder check could not complete.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Report stored system prompts degraded to a reduced-toolset build; --apply clears them.

    Only prompts lacking the Skill Safety guidance while the tool pin includes skill_manage are
    cleared; rows without a readable pin are reported as unverifiable and left alone.
    """
    path = resolve(targets)[0].path
    with open_store(path, readonly=not apply) as store:
        if session_id:
            sid = resolve_session(store, session_id)
            row = store.rows("SELECT * FROM sessions WHERE id = ?", (sid,))[0]
            prompt = stored_prompt(store, row)
            verified = [{"id": sid, "reason": "targeted clear", "prompt_chars": len(prompt or "")}] if prompt else []
            unverifiable: list = []
        else:
            result = scan(store)
            verified, unverifiable = result.verified, result.unverifiable
    ids = [v["id"] for v in verified]
    cleared: list[str] = []
    if apply and ids:
        refuse_if_held(path, force=force, doing="repair", advice=STOP_HERMES)
        if not as_json:
            confirm_or_refuse(yes, f"Clear {len(ids)} stored prompt(s)?",
                              [f"  {v['id']}  ({v['prompt_chars']} chars) - {v['reason']}" for v in verified])
        with open_store(path) as store:
            cleared = clear_prompts(store, ids)
    if as_json:
        emit_json({"store": str(path), "verified": ids, "unverifiable": unverifiable, "apply": apply,
                   "cleared": cleared, "findings": verified})
        return
    if not apply:
        for v in verified:
            typer.echo(f"  {v['id']}  ({v['prompt_chars']} chars) - {v['reason']}")
        for u in unverifiable:
            typer.echo(f"  unverifiable {u['id']}: {u['reason']}")
        typer.echo(f"{len(ids)} verified degraded prompt(s), {len(unverifiable)} unverifiable (left unchanged). "
                   + ("Re-run with --apply to clear them." if ids else ""))
        return
    typer.echo(f"Cleared {len(cleared)} stored prompt(s); each session rebuilds a healthy prompt next turn.")
    if cleared:
        typer.echo(RESTART)
