"""hermes-maint repair-profiles [--apply] [--legacy-main rekey|move]."""

from enum import StrEnum
from typing import Annotated, Optional

import typer

from maint.commands.options import DryRunOpt, JsonOpt, MetricsOpt, YesOpt
from maint.commands.output import confirm_or_refuse, emit_json
from maint.errors import MaintError, UsageError


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
    from maint.ops.profiles import DEFAULT, scan, snapshot
    from maint.ops.profiles import apply as apply_findings
    from maint.store.holders import STOP_HERMES, refuse_if_held
    from maint.store.targets import StoreTarget

    if apply and dry_run:
        raise UsageError("--apply and --dry-run contradict each other (use one)")
    metrics = metrics_target(metrics_file)
    started = time.monotonic()
    stores, findings = scan(legacy_main=legacy_main.value if legacy_main else None)
    actionable = [f for f in findings if f.action in ("move", "rekey")]
    unreadable = [f for f in findings if f.kind == "unreadable_store"]
    report = {"stores": {k: str(v) for k, v in stores.items()}, "findings": [f.as_dict() for f in findings],
              "apply": apply, "snapshot": None, "applied": []}
    if apply and actionable and unreadable:
        raise MaintError(f"refusing to apply while a store cannot be read ({unreadable[0].reason}); "
                         "nothing was changed")
    if apply and actionable:
        for path in stores.values():
            refuse_if_held(path, force=force, doing="repair", advice=STOP_HERMES)
        confirm_or_refuse(yes, f"Apply {len(actionable)} repair(s) across {len(stores)} store(s)?",
                          [_line(f.as_dict()) for f in actionable])
        folder = snapshot(stores)
        report["snapshot"] = str(folder)
        report["applied"] = apply_findings(stores, findings)
        targets = [StoreTarget(path, None if name == DEFAULT else name) for name, path in stores.items()]
        for target in targets:  # spans every store at once, so it records each itself
            record_job(target, "repair-profiles", report, time.monotonic() - started)
        write_metrics(metrics, targets)
    if as_json:
        emit_json(report)
        return
    if not findings:
        typer.echo(f"No profile mix-ups found in {len(stores)} store(s).")
        return
    for f in report["findings"]:
        typer.echo(_line(f))
        if f["kind"] in ADVICE and f["action"] == "report":
            typer.echo(f"    {ADVICE[f['kind']]}")
    if report["snapshot"]:
        typer.echo(f"Snapshot of every store: {report['snapshot']}")
        typer.echo(f"Applied {len(report['applied'])} repair(s). Restart the gateway.")
    elif actionable:
        typer.echo(f"{len(actionable)} repair(s) possible; re-run with --apply (stop the gateway first).")


def _line(f: dict) -> str:
    if f["kind"] == "unreadable_store":
        return f"  [unreadable_store] {f['reason']} (the other stores were scanned)"
    if f["kind"] == "shared_store":
        return f"  [shared_store] {f['reason']}; rows of either name stay where they are"
    what = f"{len(f['session_ids'])} session(s)" + (f", {len(f['routing_keys'])} routing row(s)"
                                                     if f["routing_keys"] else "")
    return f"  [{f['kind']}] in {f['store']}'s store, belonging to {f['owner']}: {what} -> {f['action']}"
