"""hermes-maint repair-profiles [--apply] [--legacy-main rekey|move]."""

from enum import StrEnum
from typing import Annotated, Optional

import typer

from maint.commands.options import DryRunOpt, JsonOpt, MetricsOpt, YesOpt
from maint.commands.output import Terminal, emit_json
from maint.errors import UsageError


class LegacyMain(StrEnum):
    rekey = "rekey"
    move = "move"


ADVICE = {
    "missing_profile": "bound to a profile that does not exist: create it (hermes profile create NAME) "
                       "or migrate the identity",
    "legacy_main": "agent:main rows inside a named profile's store: --legacy-main rekey moves them into this "
                   "profile's namespace, --legacy-main move sends them to the default store",
    "stray_bindings": "Telegram topic bindings keyed for another profile whose session lives here",
}


def repair_profiles(
    apply: Annotated[bool, typer.Option("--apply", help="Move each stray row to its profile's store.")] = False,
    legacy_main: Annotated[Optional[LegacyMain], typer.Option("--legacy-main",
                                                              help="rekey | move: what to do with agent:main rows "
                                                                   "inside a named profile's store.")] = None,
    dry_run: DryRunOpt = False,
    yes: YesOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Proceed when the holder check could not complete.")] = False,
    as_json: JsonOpt = False,
    metrics_file: MetricsOpt = None,
) -> None:
    """Find state written into the wrong profile's store; --apply moves it home (snapshot first).

    Always scans $HERMES_HOME/state.db and every profiles/*/state.db together (a stray row is
    only stray relative to the others), so it takes no --db/--profile/--all-profiles. Refuses to
    apply while any process holds any of the stores: stop the gateway first. Without --apply
    (or with --dry-run) nothing is written.
    """
    import time

    from maint.commands.recording import metrics_target, record_job, write_metrics
    from maint.ops.profiles import repair_stores, store_targets

    if apply and dry_run:
        raise UsageError("--apply and --dry-run contradict each other (use one)")
    metrics = metrics_target(metrics_file)
    started = time.monotonic()
    report = repair_stores(Terminal(yes=yes, quiet=as_json), legacy_main=legacy_main.value if legacy_main else None,
                           apply=apply, force=force)
    if report["snapshot"]:  # it spans every store at once, so it records each itself
        targets = store_targets(report)
        for target in targets:
            record_job(target, "repair-profiles", report, time.monotonic() - started)
        write_metrics(metrics, targets)
    if as_json:
        emit_json(report)
    else:
        _render(report)


def _render(r: dict) -> None:
    from maint.ops.profiles import finding_line

    if not r["findings"]:
        typer.echo(f"No profile mix-ups found in {len(r['stores'])} store(s).")
        return
    for f in r["findings"]:
        typer.echo(finding_line(f))
        if f["kind"] in ADVICE and f["action"] == "report":
            typer.echo(f"    {ADVICE[f['kind']]}")
    actionable = sum(f["action"] in ("move", "rekey") for f in r["findings"])
    if r["snapshot"]:
        typer.echo(f"Snapshot of every store: {r['snapshot']}")
        typer.echo(f"Applied {len(r['applied'])} repair(s). Restart the gateway.")
    elif actionable:
        typer.echo(f"{actionable} repair(s) possible; re-run with --apply (stop the gateway first).")
