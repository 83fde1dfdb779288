"""hermes-maint repair-prompts [SESSION_ID] [--apply]: options and output; the logic is
:func:`maint.ops.prompts.repair_store`."""

import click

from maint.commands.options import apply_options, command, force_option, store_options, yes_option
from maint.commands.output import Terminal
from maint.errors import UsageError

RESTART = "Restart a running gateway now: it holds prompts in memory and would write them back."


@command("repair-prompts")
@click.argument("session_id", required=False, help="Force-clear this session's prompt (id or prefix).")
@apply_options("Clear the verified degraded prompts (asks first).")
@yes_option
@force_option
@store_options(metrics=True)
def repair_prompts(session_id, apply, yes, force, stores) -> None:
    """Report stored system prompts degraded to a reduced-toolset build; --apply clears them.

    Only prompts lacking the Skill Safety guidance while the tool pin includes skill_manage are
    cleared; rows without a readable pin are reported as unverifiable and left alone. Without
    --apply (or with --dry-run) nothing is written.
    """
    from maint.ops.prompts import repair_store

    if session_id is not None and stores.all_profiles:
        raise UsageError("a SESSION_ID names one session in one store; drop --all-profiles or the id")
    # --apply --json is the documented non-interactive automation form: it applies without asking.
    op = Terminal(yes=yes or stores.as_json, quiet=stores.as_json)
    stores.run(lambda target: repair_store(target, op, session_id=session_id, apply=apply, force=force), _render,
               job="repair-prompts", ran=lambda r: bool(r["cleared"]))


def _render(r: dict) -> None:
    if not r["apply"]:
        for v in r["findings"]:
            click.echo(f"  {v['id']}  ({v['prompt_chars']} chars) - {v['reason']}")
        for u in r["unverifiable"]:
            click.echo(f"  unverifiable {u['id']}: {u['reason']}")
        click.echo(f"{len(r['verified'])} verified degraded prompt(s), {len(r['unverifiable'])} unverifiable "
                   "(left unchanged). " + ("Re-run with --apply to clear them." if r["verified"] else ""))
        return
    click.echo(f"Cleared {len(r['cleared'])} stored prompt(s); each session rebuilds a healthy prompt next turn.")
    if r["cleared"]:
        click.echo(RESTART)
