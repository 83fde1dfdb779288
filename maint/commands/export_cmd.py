"""hermes-maint export: options and output; the pipeline is :func:`maint.export.pipeline.export_store`."""

import sys

import click

from maint import PROG
from maint.commands.options import command, dry_run_option, filter_options, store_options
from maint.commands.output import Terminal, emit_json, write_json
from maint.commands.runner import naming_store
from maint.errors import MaintError, UsageError

FORMATS = ("jsonl", "md", "qmd", "html", "trace")  # maint.export.pipeline.FORMATS


@command("export")
@click.argument("output", required=False, help="File, folder, or - for stdout.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="jsonl", show_default=True,
              help="The kind of file written.")
@click.option("--session-id", metavar="ID", help="One session (unique prefix ok).")
@click.option("--only", type=click.Choice(["user-prompts"]), help="user-prompts: just the prompts (jsonl or md).")
@click.option("--lineage", type=click.Choice(["segment", "logical"]), default=None,
              help="md/qmd: logical writes a whole compression lineage as one document (default: segment).")
@click.option("--redact/--no-redact", default=None, help="Mask secrets (default: on for trace, off otherwise).")
@click.option("--upload", is_flag=True, help="trace: upload to your private HF dataset.")
@click.option("--public", is_flag=True, help="trace upload: allow a public dataset.")
@click.option("--delete-after-verified", is_flag=True,
              help="With --session-id and --yes: delete the session once its export is proven (md/qmd: "
                   "its jsonl record is written and proven beside the document too, for import).")
@click.option("--include-pinned", is_flag=True,
              help="With --delete-after-verified: also delete the session or a delegate child that is pinned.")
@click.option("--yes", "-y", is_flag=True, help="Required with --delete-after-verified.")
@dry_run_option
@store_options(all_profiles=False)
@filter_options
def export(filters, output, fmt, session_id, only, lineage, redact, upload, public, delete_after_verified,
           include_pinned, yes, dry_run, stores) -> None:
    """Export sessions: jsonl backups, md/qmd documents with a manifest, standalone html, or traces.

    Bulk filters take ended sessions (pinned and archived included); no filter exports everything.
    --format trace alone traces the most recent session to stdout. One store at a time (the files
    of several would collide): use --profile NAME per profile.
    """
    from maint.export.pipeline import ExportRequest, export_store

    if delete_after_verified and not yes:
        raise UsageError("--delete-after-verified needs --session-id and --yes")
    if yes and not delete_after_verified:
        raise UsageError("--yes only applies with --delete-after-verified (an export asks nothing else)")
    req = ExportRequest(fmt=fmt, output=output, session_id=session_id, filters=filters, only=only,
                        lineage=lineage or "segment", lineage_given=lineage is not None,
                        redact=redact, upload=upload, public=public, delete_after_verified=delete_after_verified,
                        include_pinned=include_pinned,
                        dry_run=dry_run)
    target = stores.targets()[0]
    with naming_store(target.path):
        try:
            report = export_store(target, req, Terminal(yes=yes, quiet=stores.as_json))
        except MaintError as exc:
            # The upload was refused before any file went up: the files written are still reported.
            if stores.as_json and getattr(exc, "report", None) is not None:
                _emit_report({**exc.report, "upload_error": str(exc)})
            raise
    if not report["sessions"] and not stores.as_json:
        click.echo("No session matches; nothing " + ("would be written" if dry_run else "written"), err=True)
    if dry_run:
        _render_plan(report, stores.as_json)
        _name_skipped(report, "would skip")
        return
    _emit_report(report) if stores.as_json else _render(report)
    _name_skipped(report, "skipped")
    failed = [u for u in report["uploaded"] if not u["ok"]]
    if failed:  # each one is listed in the report
        done = len(report["uploaded"]) - len(failed)
        raise MaintError(f"{len(failed)} of {len(report['uploaded'])} uploads failed ({done} went up); "
                         "the local files were kept")
    if report["deleted"] and not stores.as_json:
        click.echo(f"verified and deleted {len(report['deleted'])} session(s): {', '.join(report['deleted'])}",
                   err=True)


def _name_skipped(report: dict, done: str) -> None:
    """A session whose stored text is not UTF-8 was left out: each named on stderr, then exit 1."""
    skipped = report.get("skipped") or []
    for u in skipped:
        click.echo(f"{PROG}: warning: session {u['id']}: stored text is not valid UTF-8 in "
                   f"{', '.join(u['fields'])}; {done}", err=True)
    if skipped:
        raise MaintError(f"{len(skipped)} session(s) {'would not be' if done == 'would skip' else 'not'} exported: "
                         "stored text not valid UTF-8 (each named above)")


def _render_plan(report: dict, as_json: bool) -> None:
    entries = report.pop("entries")  # the human preview names each file's sessions; the JSON lists the files
    if as_json:
        emit_json(report)
        return
    for e in entries:
        where = e["path"] or "(a temporary file, uploaded)"
        click.echo(f"would write {where}  ({', '.join(e['ids'])})"
                   + ("  [replaces the existing file]" if e.get("replaces") else ""), err=e["path"] == "-")
    if report["would_delete"]:
        click.echo(f"would then delete {len(report['would_delete'])} session(s) from the store once their copy is "
                   f"verified: {', '.join(report['would_delete'])}")


def _render(report: dict) -> None:
    for w in report["written"]:
        where = "stdout" if w["path"] == "-" else w["path"]
        if w["path"] in report["files"] or w["path"] == "-":
            replaced = " (replaced the existing file)" if w["path"] in report["replaced"] else ""
            click.echo(f"wrote {where}{replaced}  ({w['messages']} messages, sha256 {w['sha256'][:12]}…)", err=True)
    for u in report["uploaded"]:
        if u["ok"]:
            click.echo(f"uploaded {u['repo']}/{u['path_in_repo']}", err=True)
        else:
            click.echo(f"not uploaded: {u['file'] or u['path_in_repo']}: {u['error']}", err=True)


def _emit_report(report: dict) -> None:
    to_stdout = any(w["path"] == "-" for w in report["written"])
    stream = sys.stderr if to_stdout else sys.stdout  # never inside a document
    write_json(report, stream.write)
    stream.write("\n")
    stream.flush()
