"""hermes-maint repair-prompts [SESSION_ID] [--apply]: options and output; logic in :mod:`maint.ops.prompts`."""

from typing import Annotated, Optional

import typer

from maint.commands.options import AllProfilesOpt, DbOpt, DryRunOpt, JsonOpt, MetricsOpt, ProfileOpt, YesOpt
from maint.commands.output import confirm_or_refuse
from maint.commands.runner import for_each_store
from maint.errors import UsageError
from maint.store.targets import resolve_targets

RESTART = "Restart a running gateway now: it holds prompts in memory and would write them back."


def repair_prompts(
    session_id: Annotated[
        Optional[str], typer.Argument(help="Force-clear this session's prompt (id or prefix).")] = None,
    apply: Annotated[bool, typer.Option("--apply", help="Clear the verified degraded prompts (asks first).")] = False,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Proceed when the holder check could not complete.")] = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    profile: ProfileOpt = None,
    all_profiles: AllProfilesOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Report stored system prompts degraded to a reduced-toolset build; --apply clears them.

    Only prompts lacking the Skill Safety guidance while the tool pin includes skill_manage are
    cleared; rows without a readable pin are reported as unverifiable and left alone. Without
    --apply (or with --dry-run) nothing is written.
    """
    from maint.commands.recording import metrics_target
    from maint.ops.prompts import clear_prompts, scan, targeted
    from maint.store.connection import open_store
    from maint.store.holders import STOP_HERMES, refuse_if_held

    if apply and dry_run:
        raise UsageError("--apply and --dry-run contradict each other (use one)")
    if session_id is not None and all_profiles:
        raise UsageError("a SESSION_ID names one session in one store; drop --all-profiles or the id")
    metrics = metrics_target(metrics_file)

    def run(target) -> dict:
        with open_store(target.path, readonly=not apply) as store:
            result = targeted(store, session_id, exact=apply and (yes or as_json)) if session_id is not None \
                else scan(store)
        ids = result.verified.ids
        cleared: list[str] = []
        if apply and ids:
            refuse_if_held(target.path, force=force, doing="repair", advice=STOP_HERMES)
            # --apply --json is the documented non-interactive automation form: it applies without asking.
            confirm_or_refuse(yes or as_json, f"Clear {len(ids)} stored prompt(s) in {target.path}?",
                              [f"  {v['id']}  ({v['prompt_chars']} chars) - {v['reason']}" for v in result.verified])
            with open_store(target.path) as store:
                cleared = clear_prompts(store, ids)
        return {"store": str(target.path), "verified": ids, "unverifiable": result.unverifiable, "apply": apply,
                "cleared": cleared, "findings": result.verified}

    for_each_store(resolve_targets(db, profile, all_profiles), as_json, run, _render, job="repair-prompts",
                   ran=lambda r: bool(r["cleared"]), metrics_file=metrics)


def _render(r: dict) -> None:
    if not r["apply"]:
        for v in r["findings"]:
            typer.echo(f"  {v['id']}  ({v['prompt_chars']} chars) - {v['reason']}")
        for u in r["unverifiable"]:
            typer.echo(f"  unverifiable {u['id']}: {u['reason']}")
        typer.echo(f"{len(r['verified'])} verified degraded prompt(s), {len(r['unverifiable'])} unverifiable "
                   "(left unchanged). " + ("Re-run with --apply to clear them." if r["verified"] else ""))
        return
    typer.echo(f"Cleared {len(r['cleared'])} stored prompt(s); each session rebuilds a healthy prompt next turn.")
    if r["cleared"]:
        typer.echo(RESTART)
