"""The export pipeline: :func:`plan_export` decides what goes where, :func:`run_export` writes it.

Like prune's plan and execute: the plan reads the store and the file system but creates
nothing (``--dry-run`` prints it), the run writes each file safely (:mod:`maint.export.files`),
then the manifest, the upload and the verified delete follow in that order.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maint import json_text
from maint import files
from maint.errors import MaintError, OutputError, UsageError
from maint.flow import target_config
from maint.export.files import Spool, atomic_text, check_destination, inside, safe_name
from maint.export.selection import latest_session, latest_session_sql, select_sessions
from maint.selection.filters import Filters
from maint.store.connection import Store, open_store
from maint.store.sqlutil import IdList
from maint.store.targets import hermes_home
from maint.store.text_check import Unreadable, unreadable_session, unreadable_sessions

if TYPE_CHECKING:
    from maint.flow import Operator
    from maint.store.targets import StoreTarget

FORMATS = ("jsonl", "md", "qmd", "html", "trace")
STDOUT = "-"


@dataclass(frozen=True)
class ExportRequest:
    """What the operator asked for, already checked for combinations that cannot work."""

    fmt: str = "jsonl"
    output: str | None = None
    session_id: str | None = None
    filters: Filters = field(default_factory=Filters)
    only: str | None = None  # "user-prompts"
    lineage: str = "segment"  # or "logical"
    lineage_given: bool = False  # --lineage was named (it applies to md/qmd only)
    redact: bool | None = None  # None: on for trace, off otherwise
    upload: bool = False
    public: bool = False
    delete_after_verified: bool = False
    include_pinned: bool = False  # with delete_after_verified: a pinned member of the family goes too
    dry_run: bool = False  # plan only: what would be written, nothing created

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise UsageError(f"--format: bad value {self.fmt!r} (expected one of {', '.join(FORMATS)})")
        if self.only and self.fmt not in ("jsonl", "md"):
            raise UsageError("--only user-prompts works with --format jsonl or md")
        if (self.upload or self.public) and self.fmt != "trace":
            raise UsageError("--upload/--public only apply to --format trace")
        if self.public and not self.upload:
            raise UsageError("--public only applies with --upload (it allows uploading to a public dataset)")
        if self.lineage not in ("segment", "logical"):
            raise UsageError(f"--lineage: bad value {self.lineage!r} (expected segment or logical)")
        if self.lineage_given and self.fmt not in ("md", "qmd"):
            raise UsageError("--lineage only applies to --format md or qmd (one document per session or lineage)")
        if self.session_id is not None and not self.filters.is_empty:
            raise UsageError("--session-id cannot be combined with filters (use one or the other)")
        if self.include_pinned and not self.delete_after_verified:
            raise UsageError("--include-pinned only applies with --delete-after-verified (an export deletes nothing "
                             "else)")
        if self.delete_after_verified:
            if not self.session_id:
                raise UsageError("--delete-after-verified needs --session-id and --yes")
            if self.redact:
                raise UsageError("--delete-after-verified cannot be combined with --redact: the export would be "
                                 "the only copy left, and a redacted copy is not the data (export with --redact "
                                 "separately to share it)")
            if self.fmt not in ("jsonl", "md", "qmd") or self.only:
                raise UsageError("--delete-after-verified works with --format jsonl, md or qmd (full transcripts)")
            if self.output == STDOUT:
                raise UsageError("--delete-after-verified needs files to verify; give a folder, not -")
        if self.fmt in ("md", "qmd") and not self.session_id and self.filters.is_empty:
            raise UsageError(f"--format {self.fmt} bulk export needs at least one filter (or --session-id)")
        if self.upload:
            from maint.export.hf_upload import http_deadline, http_timeout

            http_timeout(), http_deadline()  # bad settings are refused before anything is written

    @property
    def redacting(self) -> bool:
        return (self.fmt == "trace") if self.redact is None else self.redact

    @property
    def latest_trace(self) -> bool:
        """``export --format trace`` alone: the most recent session (the documented default)."""
        return self.fmt == "trace" and self.session_id is None and self.filters.is_empty


@dataclass
class ExportPlan:
    request: ExportRequest
    chosen: Sequence[str]  # session ids, in export order (a bulk selection is read from a temp table)
    entries: list[dict[str, Any]]  # {"path", "ids", "lineage"?, "replaces"?}
    folder: Path | None  # created by run_export when it does not exist
    manifest: Path | None
    manifest_lines: list[str]  # lines kept from an existing manifest
    skipped: list[Unreadable] = field(default_factory=list)  # left out: stored text not UTF-8
    # The messages' text is checked by the export itself (bulk jsonl, see plan_export): sessions found there
    # join skipped when the run ends.
    messages_checked_in_run: bool = False


def plan_export(store: Store, req: ExportRequest, max_export_messages: Any = None) -> ExportPlan:
    """Read the store and the destination; create and write nothing.

    A session whose stored text is not UTF-8 is left out and listed in the plan's ``skipped``; the
    rest are exported (the command names each one skipped and exits 1). A bulk jsonl export (not a dry
    run) does not read the messages here: the lines it builds hold every message's text, and a session
    whose line is not UTF-8 is checked and skipped then (:meth:`Renderer.render`), named as here.
    """
    skipped: list[Unreadable] = []
    in_run = (req.fmt == "jsonl" and not req.only and not req.delete_after_verified and req.session_id is None
              and not req.dry_run)
    if req.latest_trace:
        with store.snapshot():
            now = time.time()
            latest = latest_session(store, now, raw=True)
            if latest is None:
                raise MaintError("the store has no sessions to trace")
            skipped = unreadable_sessions(store, latest_session_sql(store), {"now": now})
        chosen: Sequence[str] = [] if skipped else [latest.decode("utf-8")]
    else:
        chosen = select_sessions(store, req.session_id, req.filters, exact=req.delete_after_verified,
                                 skipped=skipped, messages=not in_run)
    if req.delete_after_verified and skipped:
        raise MaintError(f"{skipped[0].describe()}; it cannot be exported as it is stored, so nothing was "
                         "exported or deleted")
    if req.delete_after_verified:
        from maint.export.verified_delete import family, refuse_if_busy, refuse_lossy_values

        with store.snapshot():
            _refuse_splitting_a_lineage(store, chosen[0])
            chosen = family(store, chosen[0])  # the named session first, then its delegates
            refuse_if_busy(store, chosen, include_pinned=req.include_pinned)
            bad = unreadable_sessions(store, "SELECT value FROM json_each(?)", (json.dumps(list(chosen)),))
            if not bad:
                refuse_lossy_values(store, chosen)  # a value its record would not carry as stored
        if bad:
            raise MaintError(f"{bad[0].describe()} (a delegate of {chosen[0]}); it cannot be exported as it is "
                             "stored, so nothing was exported or deleted")
    if req.fmt == "jsonl" and not req.only and isinstance(max_export_messages, int) and max_export_messages > 0:
        from maint.export.transcript import stored_count

        for sid in chosen:
            n = stored_count(store, sid)
            if n > max_export_messages:
                raise MaintError(f"session {sid} has {n} stored messages, more than "
                                 f"sessions.max_export_messages={max_export_messages}; raise the setting "
                                 "(0 = no cap) or export it as md/qmd")
    single = bool(req.session_id) or req.latest_trace
    entries, folder = _entries(store, chosen, req, single)
    if req.delete_after_verified and req.fmt in ("md", "qmd"):
        entries += _records_beside(entries, chosen)
    paths = [e["path"] for e in entries if e["path"] not in (None, STDOUT)]
    if req.delete_after_verified:  # the files are the only copy once the sessions go: a folder others can't touch
        try:
            for where in sorted({str(Path(p).parent) for p in paths}):
                files.refuse_untrusted_keeper(where, store_owner=(files.owner_of(store.path) or (None,))[0],
                                              what="OUTPUT folder")
        except files.FileRefused as exc:
            raise OutputError(f"{exc}; nothing was exported or deleted") from None
    if len(set(paths)) != len(paths):  # safe_name keeps ids apart; this is the last guard
        raise OutputError("two sessions would share one output file; nothing was written")
    for entry in entries:
        if entry["path"] not in (None, STDOUT):
            entry["replaces"] = check_destination(Path(entry["path"]))
    manifest, kept = None, []
    if req.fmt in ("md", "qmd") and folder is not None:
        manifest = folder / "manifest.jsonl"
        kept = _kept_manifest_lines(manifest, {Path(e["path"]).name for e in entries})
    return ExportPlan(req, chosen, entries, folder, manifest, kept, skipped, in_run)


def _refuse_splitting_a_lineage(store: Store, session_id: str) -> None:
    """One segment of a compression lineage is not a conversation: deleting it would cut the others loose."""
    from maint.store import lineage as lin

    lin.build(store, time.time())
    segments = [r[0] for r in store.conn.execute(
        "SELECT id FROM maint_s WHERE chain = (SELECT chain FROM maint_s WHERE id = ?) ORDER BY started_at, id",
        (session_id,))]
    lin.drop(store)
    if len(segments) > 1:
        raise MaintError(f"session {session_id} is one of {len(segments)} segments of a compression lineage "
                         f"({' -> '.join(segments)}); deleting it alone would split the conversation, so nothing "
                         "was exported or deleted (prune takes whole lineages)")


def _default_folder() -> Path:
    return hermes_home() / "session-exports"


def _folder_of(output: str | None) -> Path:
    folder = Path(output).expanduser() if output and output != STDOUT else _default_folder()
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"OUTPUT: {folder} is a file; md/qmd/trace bulk exports need a folder")
    return folder


def _single_file(output: str | None, default_name: str) -> tuple[str, Path | None]:
    """A file path for one document: ``-``/nothing = stdout; a folder (or a path ending in /) gets *default_name*."""
    if not output or output == STDOUT:
        return STDOUT, None
    path = Path(output).expanduser()
    if output.endswith(("/", os.sep)) or path.is_dir():
        if path.exists() and not path.is_dir():
            raise UsageError(f"OUTPUT: {path} is a file, not a folder")
        return str(inside(path, default_name)), path
    if not path.parent.is_dir():
        raise UsageError(f"OUTPUT: folder {path.parent} does not exist (expected an existing folder, a file "
                         "path in one, or -)")
    return str(path), None


def _entries(store: Store, chosen: Sequence[str], req: ExportRequest,
             single: bool) -> tuple[list[dict[str, Any]], Path | None]:
    """Which files the export writes and which sessions go in each; the folder to create, if any."""
    fmt, output = req.fmt, req.output
    if not chosen:
        return [], None
    if fmt == "html":
        path, folder = _single_file(output, "hermes_sessions.html")
        return [{"path": path, "ids": chosen}], folder
    if fmt == "jsonl":
        if req.delete_after_verified:  # one file per family member, in a folder, named as a folder export names it
            folder = _folder_of(output)
            return [{"path": str(inside(folder, f"hermes_session_{safe_name(sid, '')}.jsonl")), "ids": [sid]}
                    for sid in chosen], folder
        if req.only and single:
            path, folder = _single_file(output, safe_name(chosen[0], ".prompts.jsonl"))
            return [{"path": path, "ids": [chosen[0]]}], folder
        name = f"hermes_session_{safe_name(chosen[0], '')}.jsonl" if single else "hermes_sessions.jsonl"
        path, folder = _single_file(output, name)
        return [{"path": path, "ids": chosen}], folder
    if fmt == "trace":
        if single:
            if req.upload and not output:  # uploaded through a private temporary file (see run_export)
                return [{"path": None, "ids": [chosen[0]]}], None
            path, folder = _single_file(output, safe_name(chosen[0], ".trace.jsonl"))
            return [{"path": path, "ids": [chosen[0]]}], folder
        if output == STDOUT:
            raise UsageError("OUTPUT -: a bulk trace export writes one file per session; give a folder")
        if _names_a_file(output, FILE_SUFFIXES):  # as md/qmd (hostile try 12, P6: a folder named tr.jsonl was made)
            raise UsageError(f"OUTPUT: {output} names one file, but this export writes {len(chosen)} traces (one per "
                             "session); give a folder (e.g. traces/)")
        folder = _folder_of(output)
        return [{"path": str(inside(folder, safe_name(sid, ".trace.jsonl"))), "ids": [sid]} for sid in chosen], folder
    # md / qmd (and --only user-prompts --format md): one document per session or lineage
    suffix = ".prompts.md" if req.only else f".{fmt}"
    if _names_a_file(output, (".md", ".qmd")):
        groups = _groups(store, chosen, req.lineage)
        if not single or len(groups) > 1:
            raise UsageError(f"OUTPUT: {output} names one file, but this export writes {len(groups)} documents "
                             "(one per session); give a folder (e.g. exports/)")
        path, folder = _single_file(output, safe_name(groups[0][0], suffix))
        return [{"path": path, "ids": groups[0]}], Path(path).parent
    if not single and _names_a_file(output, FILE_SUFFIXES):  # another kind's name (try 14, R6: o8.jsonl, o7.markdown)
        raise UsageError(f"OUTPUT: {output} names one file, but a bulk {fmt} export writes one document per session; "
                         "give a folder (e.g. exports/)")
    if output == STDOUT:
        if not single or req.lineage == "logical" and len(_groups(store, chosen, req.lineage)) > 1:
            raise UsageError(f"OUTPUT -: stdout takes one document; a bulk {fmt} export writes one file per "
                             "session into a folder")
        return [{"path": STDOUT, "ids": _groups(store, chosen, req.lineage)[0]}], None
    folder = _folder_of(output)
    out = []
    for ids in _groups(store, chosen, req.lineage):
        entry = {"path": str(inside(folder, safe_name(ids[0], suffix))), "ids": ids}
        if req.lineage == "logical":
            entry["lineage"] = ids
        out.append(entry)
    return out, folder


FILE_SUFFIXES = (".jsonl", ".json", ".md", ".markdown", ".qmd", ".html", ".htm", ".txt")  # names of one document


def _names_a_file(output: str | None, suffixes: tuple[str, ...]) -> bool:
    """OUTPUT reads as one file of these kinds (any case, trailing blanks aside): not stdout, no trailing slash, not
    an existing folder."""
    return bool(output) and output != STDOUT and not output.endswith(("/", os.sep)) \
        and Path(output.rstrip()).suffix.lower() in suffixes and not Path(output).expanduser().is_dir()


def _records_beside(entries: list[dict[str, Any]], chosen: Sequence[str]) -> list[dict[str, Any]]:
    """md/qmd with --delete-after-verified: a document is for reading (no tool-call arguments, reasoning, model
    config, token figures) and ``import`` cannot read it, so each deleted session's full jsonl record is written
    and verified beside its document too, named as the jsonl verified delete names it: the undo is
    ``import hermes_session_<id>.jsonl`` (hostile try 5, H10)."""
    folder = Path(entries[0]["path"]).parent
    return [{"path": str(inside(folder, f"hermes_session_{safe_name(sid, '')}.jsonl")), "ids": [sid],
             "fmt": "jsonl", "record": True} for sid in chosen]


def _groups(store: Store, chosen: Sequence[str], lineage: str) -> list[list[str]]:
    """One document per session, or per compression chain (``logical``: its segments, first started first)."""
    if lineage != "logical":
        return [[sid] for sid in chosen]
    from maint.store import lineage as lin

    groups, seen = [], set()
    with store.snapshot():
        lin.build(store, time.time())
        for sid in chosen:
            key = store.scalar("SELECT chain FROM maint_s WHERE id = ?", (sid,))
            if key not in seen:
                seen.add(key)
                groups.append([r[0] for r in store.conn.execute(
                    "SELECT id FROM maint_s WHERE chain = ? ORDER BY started_at, id", (key,))])
        lin.drop(store)
    return groups


def _kept_manifest_lines(path: Path, names: set[str]) -> list[str]:
    """Lines of an existing manifest for files this export does not rewrite; a bad line refuses the export."""
    if not os.path.lexists(path):
        return []
    check_destination(path)
    kept = []
    with files.open_regular(path, what="manifest") as fh:  # never blocks on a FIFO swapped in since the check
        text = fh.read().decode("utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json_text.loads(line)
        except ValueError:
            entry = None
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise MaintError(f"{path}:{number}: not a manifest entry (expected a JSON object with a path); "
                             "fix or move the file, nothing was written")
        if entry["path"] not in names:
            kept.append(line)
    return kept


class Renderer:
    """Renders plan entries from the open store in the chosen format."""

    def __init__(self, store: Store, plan: ExportPlan, started: float):
        self.store, self.plan, self.started = store, plan, started  # documents say when the export began
        self.req = plan.request
        self.late: list[Unreadable] = []  # found by the jsonl lines (plan.messages_checked_in_run)

    def paced(self) -> bool:
        """The SQL-built jsonl lines: read in short transactions of their own (see :meth:`write`)."""
        return self.req.fmt == "jsonl" and not self.req.only and not self.req.delete_after_verified

    def render(self, entry: dict, write, write_bytes, reads=None) -> int:
        """*write* takes text, *write_bytes* UTF-8 bytes (the SQL-built jsonl lines), both in one order.

        With *reads* (:class:`maint.export.fast_jsonl.ReadPacing`, jsonl lines only) the render opens its
        own read transactions; otherwise the caller holds one."""
        store, redact = self.store, self.req.redacting
        if entry.get("fmt", self.req.fmt) == "jsonl" and self.req.delete_after_verified:
            from maint.export import render as r

            family = set(self.plan.chosen)
            return sum(r.write_jsonl_session(store, sid, write, redact, kept_children=[
                c for (c,) in store.conn.execute("SELECT id FROM sessions WHERE parent_session_id = ? ORDER BY id",
                                                 (sid,)) if c not in family]) for sid in entry["ids"])
        if self.req.fmt == "jsonl" and not self.req.only:  # redacted too: the SQL calls the redactor
            from maint.export.fast_jsonl import write_sessions

            text = reads.spool.write if reads is not None else write

            def reference(sid: str) -> int:
                # Every line that is not UTF-8 comes here (and SQLite keeps each text's bytes in the line), so
                # a session whose messages' text is not UTF-8 is found here, before a byte of it is written.
                if self.plan.messages_checked_in_run:
                    bad = unreadable_session(store, sid)
                    if bad:
                        self.late.extend(bad)
                        return 0
                return _reference_jsonl(store, sid, text, redact=redact)
            return write_sessions(store, entry["ids"], write_bytes, reference, redact=redact, reads=reads)
        from maint.export import render as r  # jinja2 and the redaction patterns: imported when needed

        if self.req.fmt == "jsonl":
            if self.req.only:
                n = 0
                for sid in entry["ids"]:
                    for rec in r.iter_user_prompts(store, sid, redact):
                        write(json.dumps(rec, ensure_ascii=False) + "\n")
                        n += 1
                return n
            return sum(r.write_jsonl_session(store, sid, write, redact) for sid in entry["ids"])
        if self.req.fmt == "trace":
            from maint.store.catalog import session_info

            return r.write_trace(store, session_info(store, entry["ids"][0]), write, redact)
        if self.req.fmt == "html":
            return r.render_html(store, entry["ids"], write, redact)
        doc_fmt = "prompts.md" if self.req.only else self.req.fmt
        return r.render_document(store, doc_fmt, entry["ids"], write, redact, entry["ids"][0],
                                 r.iso_time(self.started))

    def write(self, entry: dict, path: str) -> dict:
        """One planned file. No read transaction is ever open while the output is written (a pipe that
        nobody reads must not hold Hermes's writers off, nor the checkpoints): jsonl lines are read in
        bounded transactions, each written once it has ended; any other document (one session, or one
        lineage) is read whole in one transaction into a spool, then written."""
        from maint.export.fast_jsonl import read_pacing

        spool = Spool()
        prints: dict = {}
        try:
            with atomic_text(path, store=self.store.path) as sink:
                if self.paced():
                    n = self.render(entry, sink.write, sink.write_bytes, reads=read_pacing(self.store, spool))
                else:
                    with self.store.snapshot():
                        n = self.render(entry, spool.write, spool.write_bytes)
                        # The delete check needs the transcript as it was exported, from the same snapshot.
                        if self.req.delete_after_verified:
                            from maint.export.verified_delete import fingerprint

                            prints = {sid: fingerprint(self.store, sid) for sid in entry["ids"]}
                    spool.drain(sink.write_bytes)
        finally:
            spool.close()
        return {**entry, "path": path, "messages": n, "sha256": sink.digest.hexdigest(), "fingerprints": prints}

    def rerender_digest(self, entry: dict) -> str:
        h = hashlib.sha256()
        with self.store.snapshot():
            self.render(entry, lambda t: h.update(t.encode("utf-8")), h.update)
        return h.hexdigest()


def _reference_jsonl(store: Store, session_id: str, write, redact: bool = False) -> int:
    """A session the SQL-built export gives back, rendered (or failed) the Python way."""
    from maint.export.render import write_jsonl_session

    return write_jsonl_session(store, session_id, write, redact)


def run_export(store: Store, plan: ExportPlan, on_progress=lambda n: None) -> dict[str, Any]:
    """Write every planned file, then the manifest, the upload and the verified delete, in that order."""
    req = plan.request
    if plan.folder is not None and not plan.folder.exists():
        # Our default folder is ours by name: a link planted there is refused, never followed.
        own = plan.folder == _default_folder()
        try:
            files.Folder.open(plan.folder, create=True, parents=True, follow_links=not own,
                              what="export folder", store=store.path).close()
        except files.FileRefused as exc:
            raise OutputError(f"{exc}; nothing was written") from None
    renderer = Renderer(store, plan, time.time())
    written: list[dict] = []
    with contextlib.ExitStack() as stack:  # a private temporary folder, if one is needed, goes at the end
        for entry in plan.entries:
            path = entry["path"]
            if path is None:  # trace --upload without OUTPUT: a private temporary file
                scratch = stack.enter_context(files.private_workdir("trace"))  # one a killed run left goes
                path = os.path.join(scratch, safe_name(entry["ids"][0], ".trace.jsonl"))
            written.append({**renderer.write(entry, path), "temporary": entry["path"] is None})
            on_progress(1)
        chosen: Sequence[str] = plan.chosen
        if renderer.late:
            late = {u.id for u in renderer.late}
            chosen = IdList(sid for sid in plan.chosen if sid not in late)
            plan.skipped = sorted([*plan.skipped, *renderer.late], key=lambda u: u.order)
        report: dict[str, Any] = {
            "dry_run": False, "format": req.fmt, "sessions": chosen,
            "files": [w["path"] for w in written if w["path"] != STDOUT and not w["temporary"]],
            "replaced": [w["path"] for w in written if w.get("replaces")],
            "messages": sum(w["messages"] for w in written if not w.get("record")),  # a record repeats its document
            "written": [{"path": w["path"], "messages": w["messages"], "sha256": w["sha256"]} for w in written],
            "manifest": _write_manifest(plan, written, store.path), "uploaded": [], "deleted": [],
            "removed_files": [],
            "skipped": [u.as_json() for u in plan.skipped],
        }
        if req.upload:
            from maint.export.hf_upload import KEPT, REMOVED, upload_traces

            note = REMOVED if any(w["temporary"] for w in written) else KEPT  # the stack above removes it at the end
            try:
                report["uploaded"] = upload_traces([(safe_name(w["ids"][0], ""), Path(w["path"])) for w in written],
                                                   public=req.public, local_note=note)
            except MaintError as exc:
                exc.report = report  # what was written still goes into a --json report
                raise
            for result, w in zip(report["uploaded"], written):
                if w["temporary"]:
                    result["file"] = None  # the private temporary file is gone when the command ends
        if req.delete_after_verified:
            report["deleted"], report["removed_files"] = _verified_delete(store, renderer, written)
        return report


def _write_manifest(plan: ExportPlan, written: list[dict], store: Path | None = None) -> str | None:
    files = [w for w in written if w["path"] != STDOUT]
    if plan.manifest is None or not files:
        return None
    with atomic_text(plan.manifest, store=store) as sink:
        for line in plan.manifest_lines:
            sink.write(line + "\n")
        for w in files:
            sink.write(json.dumps({"path": Path(w["path"]).name, "messages": w["messages"],
                                   "lineage_ids": w.get("lineage", w["ids"]), "sha256": w["sha256"]}) + "\n")
    return str(plan.manifest)


def _verified_delete(store: Store, renderer: Renderer, written: list[dict]) -> tuple[list[str], list[str]]:
    from maint.export.verified_delete import delete_if_unchanged, verify_files

    verify_files(written, renderer.rerender_digest)
    ids = list(dict.fromkeys(sid for w in written for sid in w["ids"]))  # md/qmd: a document and its record
    _prove_importable(store, [w for w in written if renderer.req.fmt == "jsonl" or w.get("record")], ids)
    prints = {sid: p for w in written for sid, p in w["fingerprints"].items()}
    return ids, delete_if_unchanged(store, ids, prints, include_pinned=renderer.req.include_pinned)


def _prove_importable(store: Store, records: list[dict], ids: list[str]) -> None:
    """The files are the undo: each must pass ``import``'s own reading of a file (types, ranges, times, parent
    links) before anything is deleted, or the session would be in no store (hostile try 15, S15: a time a day
    ahead, an infinite cost, an empty role: "verified and deleted", then the import refused the file)."""
    from maint.ops.importer import EXPECTED, read_export

    covered = {sid for w in records for sid in w["ids"]}
    if set(ids) - covered:
        raise MaintError(f"session {sorted(set(ids) - covered)[0]}: no file of this export can be imported back; "
                         "nothing deleted, files kept")
    titled: dict[str, str] = {}  # title -> the session of these files that has it
    for w in records:
        try:
            read = read_export(Path(w["path"]), store.path)
        except (UsageError, MaintError) as exc:
            why = str(exc).removeprefix("FILE: ").removeprefix(f"{w['path']}: ").removesuffix(f" ({EXPECTED})")
            raise MaintError(f"{w['path']}: would not import back, so nothing was deleted (files kept): {why}") \
                from None
        # and against the store as the delete leaves it: import refuses a title another session has (titles are
        # unique in Hermes; a store of an older layout, without that index, may hold two: hostile try 16, T4)
        for sid, rec in read.records.items():
            other = store.scalar("SELECT id FROM sessions WHERE title = ? AND id NOT IN (SELECT value FROM "
                                 "json_each(?)) LIMIT 1", (rec.title, json.dumps(ids))) if rec.title else None
            # and across the files themselves: a family whose members share a title (try 17, U4)
            other = other or next((o for o in [titled.get(rec.title)] if rec.title and o not in (None, sid)), None)
            if rec.title:
                titled.setdefault(rec.title, sid)
            if other is not None:
                raise MaintError(f"{w['path']}: would not import back, so nothing was deleted (files kept): session "
                                 f"{sid!r} has the title {rec.title[:80]!r}, which session {other!r} also has (titles "
                                 "are unique in Hermes: rename one of them, `hermes-maint rename`)")


def export_store(target: StoreTarget, req: ExportRequest, op: Operator) -> dict[str, Any]:
    """``hermes-maint export`` on one store: the plan (``dry_run``), or the files written, uploaded and
    deleted as the request says; the report.

    A refused upload raises with the report of what was written as ``exc.report``.
    """
    cap = target_config(target).session("max_export_messages")
    with open_store(target.path, readonly=req.dry_run or not req.delete_after_verified) as store:  # preview: no write
        plan = plan_export(store, req, cap)
        if req.dry_run:
            return {"dry_run": True, "store": str(target.path), "format": req.fmt, "sessions": IdList(plan.chosen),
                    "files": [e["path"] for e in plan.entries if e["path"] is not None],
                    "would_replace": [e["path"] for e in plan.entries if e.get("replaces")],
                    "would_delete": IdList(plan.chosen if req.delete_after_verified else []),
                    "entries": [{**e, "ids": list(e["ids"])} for e in plan.entries],
                    "skipped": [u.as_json() for u in plan.skipped]}
        with op.progress(len(plan.entries) if len(plan.entries) > 1 else 0, "Exporting") as tick:
            try:
                report = run_export(store, plan, on_progress=tick)
            except MaintError as exc:
                if getattr(exc, "report", None) is not None:  # the selection's temp table goes with the store
                    exc.report = {**exc.report, "sessions": IdList(exc.report["sessions"]), "store": str(target.path)}
                raise
        report["sessions"] = IdList(report["sessions"])  # the selection's temp table goes with the store
    report["store"] = str(target.path)
    return report
