"""hermes-maint repair-profiles [--apply] [--legacy-main rekey|move]: options and output; the logic is
:func:`maint.ops.profiles.repair_stores`."""

import time

import click

from maint.commands.options import apply_options, command, force_option, json_option, metrics_option, yes_option
from maint.commands.output import Terminal, emit_json

ADVICE = {
    "missing_profile": "bound to a profile that does not exist: create it (hermes profile create NAME) "
                       "or migrate the identity",
    "legacy_main": "agent:main rows inside a named profile's store: --legacy-main rekey moves them into this "
                   "profile's namespace, --legacy-main move sends them to the default store",
    "stray_bindings": "Telegram topic bindings keyed for another profile whose session lives here",
}


@command("repair-profiles")
@apply_options("Move each stray row to its profile's store.")
@click.option("--legacy-main", type=click.Choice(["rekey", "move"]),
              help="What to do with agent:main rows inside a named profile's store.")
@yes_option
@force_option
@json_option
@metrics_option
def repair_profiles(apply, legacy_main, yes, force, as_json, metrics_file) -> None:
    """Find state written into the wrong profile's store; --apply moves it home (snapshot first).

    Always scans $HERMES_HOME/state.db and every profiles/*/state.db together (a stray row is
    only stray relative to the others), so it takes no --db/--profile/--all-profiles. Refuses to
    apply while any process holds any of the stores: stop the gateway first. Without --apply
    (or with --dry-run) nothing is written.
    """
    from maint.commands.recording import metrics_target, record_job, write_metrics
    from maint.ops.profiles import repair_stores, store_targets

    metrics = metrics_target(metrics_file)
    started = time.monotonic()
    report = repair_stores(Terminal(yes=yes, quiet=as_json), legacy_main=legacy_main, apply=apply, force=force)
    if report["snapshot"]:  # it spans every store at once, so it records each itself
        targets = store_targets(report)
        for target in targets:
            record_job(target, "repair-profiles", report, time.monotonic() - started)
        write_metrics(metrics, targets)
    emit_json(report) if as_json else _render(report)


def _render(r: dict) -> None:
    from maint.ops.profiles import finding_line

    if not r["findings"]:
        click.echo(f"No profile mix-ups found in {len(r['stores'])} store(s).")
        return
    for f in r["findings"]:
        click.echo(finding_line(f))
        if f["kind"] in ADVICE and f["action"] == "report":
            click.echo(f"    {ADVICE[f['kind']]}")
    actionable = sum(f["action"] in ("move", "rekey") for f in r["findings"])
    if r["snapshot"] or r["applied"]:  # applied without a snapshot: every repair was kept, nothing written
        click.echo(f"Snapshot of every store: {r['snapshot']}" if r["snapshot"]
                   else "Nothing to write: no snapshot taken.")
        kept = [d for d in r["applied"] if d.get("skipped")]
        for d in kept:  # a move refused is said, with why (hostile try 13, Q7: "Applied" for a move that kept all)
            click.echo(f"  kept [{d['kind']}] {', '.join(d['session_ids'][:5]) or d['store']}: {d['reason']}")
        done = len(r["applied"]) - len(kept)
        click.echo(f"Applied {done} repair(s){f', kept {len(kept)}' if kept else ''}."
                   + (" Restart the gateway." if done else ""))
    elif actionable:
        click.echo(f"{actionable} repair(s) possible; re-run with --apply (stop the gateway first).")
