"""hermes-maint doctor: options and output; the checks are :func:`maint.ops.doctor.doctor_store`."""

import click

from maint.commands.options import command, store_options
from maint.commands.output import Terminal
from maint.commands.runner import for_each_store
from maint.errors import EXIT_FAILED, UsageError


@command("doctor")
@click.option("--full", is_flag=True, help="The complete pass: integrity_check of the whole file, FTS5's own check of "
                                           "each search index (its check against the messages is a write: "
                                           "repair-fts runs it), the page "
                                           "accounting and the UTF-8 check of every stored text (slower: the "
                                           "default pass checks every table and index, and the text that can have "
                                           "changed since the last clean recorded --full, and says what it left "
                                           "out).")
@click.option("--record", is_flag=True, help="With --full: note when it ran and what it found in the store's "
                                             "state_meta (one row of hermes-maint's own), which the default pass "
                                             "reports, and when clean, where its UTF-8 check stood; the "
                                             "weekly-doctor-full job passes it.")
@click.option("--fail-on", type=click.Choice(["warning", "critical"]),
              help="Exit 1 when a finding at this level or worse exists.")
@click.option("--summary", is_flag=True, help="One line per store (for cron mail).")
@store_options(metrics=True)
def doctor(full, record, fail_on, summary, stores) -> None:
    """Check a store without writing to it: integrity, search indexes, sizes, holders, config, repairs due.

    The daily pass checks every table and index, and stored text only where
    it can have changed since the last clean `--full --record`; --full adds
    the search indexes' own check, the file's page accounting and every stored
    text (weekly; --record notes it in the store, the one write doctor makes).

    Each finding is ok, warning or critical, says what and why, and names the
    exact command that fixes it.

    \b
    Examples:
      hermes-maint doctor
      hermes-maint doctor --all-profiles --summary --fail-on critical
      hermes-maint doctor --json --metrics-file /var/lib/node_exporter/textfile/hermes.prom
    """
    from maint.ops.doctor import doctor_store, fails, summary_line

    if record and not full:
        raise UsageError("--record goes with --full (it notes a full check)")
    if summary and stores.as_json:
        raise UsageError("--summary and --json are exclusive (use one)")
    targets = stores.targets()
    try:
        metrics = stores.metrics_target()
    except UsageError:
        if stores.metrics_file is not None:
            raise
        metrics = None  # a broken config.yaml is the doctor's finding, not a stop
    op = Terminal(quiet=stores.as_json or summary)
    reports = for_each_store(targets, stores.as_json, lambda target: doctor_store(target, op, full=full, record=record),
                             lambda r: click.echo(summary_line(r)) if summary else _render(r, len(targets) > 1),
                             metrics_file=metrics, findings=True)
    if any(fails(r, fail_on) for r in reports):
        raise click.exceptions.Exit(EXIT_FAILED)


def _render(r: dict, several: bool) -> None:
    from maint.ops.doctor import RANK, SEVERITIES

    if not several:
        click.echo(f"Store: {r['store']}")
    width = max([17] + [len(f["kind"]) + 2 for f in r["findings"]])  # a kind never runs into its text
    for f in sorted(r["findings"], key=lambda f: -RANK[f["severity"]]):
        label = f["severity"].upper() if f["severity"] != "ok" else "ok"
        click.echo(f"  {label:<9}{f['kind']:<{width}}{f['what']}")
        if f["fix"]:
            click.echo(f"  {'':<9}{'':<{width}}fix: {f['fix']}")
    for what in r.get("skipped") or []:
        click.echo(f"  skipped: {what} (--full)")
    if r.get("full_check_recorded") not in (None, True):
        click.echo(f"  full check {r['full_check_recorded']}")
    c = r["counts"]
    click.echo(f"{r['worst'].upper()}: " + ", ".join(f"{c[s]} {s}" for s in reversed(SEVERITIES))
               + f" ({r['seconds']:.1f}s)")
