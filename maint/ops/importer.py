"""import: sessions back into a store from our own jsonl export (the undo of export-then-delete).

Each line of the export holds one session row, every stored message with its
flags (``active``/``compacted``), the content-addressed prompts the row
references (v30 stores) and a ``timings`` block, which is rebuilt on every
export and ignored here.

The whole file is read and checked before anything is written: a line that
is not a session record refuses the import (nothing written). Then:

* columns the store lacks are refused by name unless ``drop_missing`` (never
  dropped silently); pinned, archived, hidden and auto-archived marks are
  plain columns and go back as they were, except that ``replace`` never
  unpins a session the store holds pinned;
* sessions are grouped like prune groups them: a compression lineage with its
  delegate (subagent) descendants is one unit, inserted in one transaction,
  whole or not at all; units are packed into short clock-bounded
  ``BEGIN IMMEDIATE`` transactions beside live Hermes writers (batching);
* a session whose id exists is skipped and reported, or with ``replace`` its
  row is updated and its messages replaced, in its unit's transaction;
* messages keep their ids when none is taken (then a re-export gives the same
  bytes); otherwise that session's messages get fresh ids, in order, reported;
* messages go in as ordinary inserts, so Hermes's own triggers index them for
  search;
* the prompts the export carries go back into ``system_prompts``, only those
  its sessions reference, and only under their own SHA-256 (a text under
  another hash refuses the file: the store is content-addressed, its first
  writer of a hash wins for ever); a store
  without that table (v22) gets the text in the row's ``system_prompt``; a
  prompt the export lacks (written before prompts travelled with it) leaves
  the row's reference empty, reported (Hermes rebuilds it on the next turn);
* the session's per-model usage rows (``model_usage``, ``session_model_usage``: the split by model,
  provider and task that the row's totals lack) go back with it; a row the store already has (its key
  taken, as after ``--replace``) is kept as stored;
* BLOB cells of BLOB columns, which the export writes as Python's bytes repr, are turned back
  into bytes;
* Hermes's own exports are read too (0.19.0's ``export_session``/``export_all``
  and upstream's current ones): ``tool_calls``, multimodal ``content`` and
  ``display_metadata`` as JSON go back as the JSON text Hermes stores;
  ``last_active`` is not a column; a ``system_prompt`` that is the text its
  ``system_prompt_hash`` names (upstream) goes back into ``system_prompts``.
  Our older exports (``tool_calls`` as the stored string) go back as they are;
* a parent that is neither in the file nor in the store is unlinked (as
  Hermes's own import does) and reported.

Importing the same file again adds nothing.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import heapq
import itertools
import json
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from maint import files, json_text
from maint.errors import MaintError, UsageError
from maint.store import lineage_records as lin
from maint.store import guard
from maint.store.delete import PARENT_NOTE, note_unlinked
from maint.store.batching import Batcher, paced_writes
from maint.store.catalog import SessionInfo
from maint.store.connection import PROMPT_REFS, USAGE_TABLE, Store, quote_ident
from maint.store.sqlutil import chunks, ph
from maint.store.targets import StoreTarget
from maint.store.text_check import shown_id
from maint.flow import Operator

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Keys of a session record that are not columns: ours, and what Hermes's own exports add (last_active from
# export_all, the logical-lineage fields of md/qmd).
NOT_COLUMNS = {"messages", "timings", "system_prompts", "kept_children", "model_usage", "last_active", "segments",
               "lineage_session_ids"}
# Fields that may hold JSON structure: Hermes's export decodes them (content: multimodal parts; tool_calls:
# the parsed list; upstream's display_metadata: an object), Hermes's import encodes them back; so do we.
# Our own export writes tool_calls parsed too, older ones the stored string: both are read.
STRUCTURED = {"session": {"model_config"},
              "message": {"content", "tool_calls", "reasoning_details", "codex_reasoning_items",
                          "codex_message_items", "display_metadata"},
              "usage": set()}
CONTENT_JSON_PREFIX = "\x00json:"  # hermes_state.SessionDB._encode_content
INT64 = (-(2**63), 2**63 - 1)
EXPECTED = ("expected one session per line as written by `hermes-maint export` or `hermes sessions export` (jsonl): "
            "a JSON object with "
            "id, source, started_at and messages")


def prompt_hash(text: str) -> str | None:
    """The key upstream Hermes stores a prompt under (``SessionDB._store_system_prompt``:
    ``hashlib.sha256(prompt.encode("utf-8")).hexdigest()``); None for text UTF-8 cannot encode (a lone
    surrogate from a JSON escape), which Hermes could never have stored."""
    try:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()
    except UnicodeEncodeError:
        return None


_LITERAL = re.compile(r"-?[0-9]+(\.[0-9]+)?|'[^']*'|NULL", re.IGNORECASE)  # a column default we take as a value
MAX_VARIABLES = 30000  # below SQLite's 32766 bound-parameter limit


@dataclass
class Record:
    """Where one session sits in the file, and what planning needs of it (not its messages)."""

    line: int
    offset: int
    length: int
    info: SessionInfo
    messages: int
    digest: bytes = b""  # of the line as checked: a file rewritten meanwhile is caught before its rows are written
    newest: float | None = None  # the newest numeric message timestamp
    taken_back: int = 0  # messages with active 0 (taken back by Hermes's /undo, kept as rows)
    # ended_at and end_reason as the file has them (a time as text too), each with whether the file has the field at
    # all (an UPDATE without it keeps the stored value: nothing to compare; try 19, W1b)
    end: tuple[bool, Any, bool, Any] = (False, None, False, None)
    kept_children: list[str] = field(default_factory=list)
    title: str | None = None
    title_given: bool = False  # the record has a "title" field (an UPDATE without it keeps the stored title)


@dataclass
class ImportPlan:
    path: Path
    records: dict[str, Record]
    units: list[list[str]]
    session_columns: dict[str, int]  # column -> rows that set it (non-null)
    message_columns: dict[str, int]
    missing: dict[str, int]  # "table.column" the store lacks -> rows that set it
    existing: set[str]
    busy: dict[str, str] = field(default_factory=dict)  # existing sessions --replace must not overwrite, and why

    @property
    def messages(self) -> int:
        return sum(r.messages for r in self.records.values())


def record_limit() -> int:
    """The most bytes one line (one session record) of an import file may hold, newline included."""
    from maint import settings

    return int(settings.value("import_record_mb") * (1 << 20))


def _mib(size: int) -> str:
    return f"{size / (1 << 20):g} MiB"


def _bad(path: Path, line: int, problem: str) -> UsageError:
    return UsageError(f"{path}: line {line}: {problem} ({EXPECTED})")


def _markers(model_config: Any) -> dict[str, str | None]:
    cfg = model_config
    if isinstance(cfg, str):
        try:
            cfg = json_text.loads(cfg)
        except ValueError:
            cfg = None
    cfg = cfg if isinstance(cfg, dict) else {}
    return {k: (str(cfg[f"_{k}"]) if cfg.get(f"_{k}") is not None else None)
            for k in ("branched_from", "delegate_from", "reset_from")}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _value_problem(value: Any) -> str | None:
    """Why a value cannot be a column value as it stands (None when it can)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return None if INT64[0] <= value <= INT64[1] else "an integer beyond SQLite's 64-bit range"
    if isinstance(value, float):
        return None if math.isfinite(value) else "not a finite number"
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "text with a lone surrogate (not UTF-8)"
        return None
    return f"a JSON {type(value).__name__}"


def _structure_problem(value: Any) -> str | None:
    """Why JSON structure cannot be stored as JSON text (None when it can). It is stored as ``json.dumps``
    writes it (as Hermes does): integers of any size and lone surrogates (escaped) come back as they were;
    only a number that is not finite (``1e400`` read as infinity) would not."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return "not a finite number"
    return None


def _check_values(path: Path, n: int, obj: dict[str, Any], where: str, kind: str) -> None:
    for key, value in obj.items():
        if not IDENT.match(key):
            raise _bad(path, n, f"{where} field {key[:40]!r} is not a column name")
        if isinstance(value, (dict, list)):
            if key not in STRUCTURED[kind]:
                raise _bad(path, n, f"{where} field {key!r} holds a JSON {type(value).__name__}, not a column value")
            problem = _structure_problem(value)
        else:
            problem = _value_problem(value)
        if problem:
            raise _bad(path, n, f"{where} field {key!r} holds {problem}")


def _time_ok(value: Any, *, null: bool) -> bool:
    """A time as exports write it: a number SQLite can hold, text a store kept as text, or (where allowed) null.
    Text that reads as a number is held to the same rule: the column's REAL affinity stores it as that number
    (hostile try 10, M8: "1e999" was stored as infinity)."""
    if isinstance(value, str):
        try:
            return math.isfinite(float(value))
        except ValueError:
            return True  # text SQLite keeps as text
    return (value is None and null) or (_number(value) and _value_problem(value) is None)


# A session's or message's time may be this far past now (a clock a day ahead: the setting import_future_days); a
# later one is refused: a session from year 9999 lists first for good and no retention ever takes it (hostile try 12,
# P12). The setting is the way in for what a clock that ran further ahead wrote (hostile try 16, T3).
SESSION_TIMES = ("started_at", "ended_at", "last_activity_at", "last_read_at")


def _seconds(value: Any) -> float | None:
    """A time as SQLite's REAL affinity stores it: a number, or text that reads as one (else None)."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return float(value) if _number(value) and _value_problem(value) is None else None


def _future_problem(where: str, key: str, value: Any, bound: float) -> str | None:
    seconds = _seconds(value)
    if seconds is None or seconds <= bound:
        return None
    return (f"{where}: {key} {value!r} is later than now plus hermes_maint.import_future_days (expected a time in "
            f"seconds since 1970 up to {bound:.0f}, as Hermes writes them; a clock that ran ahead wrote it: raise "
            "HERMES_MAINT_IMPORT_FUTURE_DAYS)")


# Hermes's keep/archive flags: 0 or 1 (any other value is neither to its `= 0`/`= 1` tests; M8), and a message's
# (live or taken back by /undo, compacted or not: hostile try 18, V6)
FLAGS = ("archived", "pinned")
MESSAGE_FLAGS = ("active", "compacted")


def _flags_problem(obj: dict[str, Any], keys: tuple[str, ...] = FLAGS) -> str | None:
    for key in keys:
        if key in obj and obj[key] not in (None, 0, 1):  # True and False are 1 and 0
            return f"{key} is {obj[key]!r} (expected 0, 1 or null)"
    return None


@dataclass
class ExportFile:
    """What :func:`read_export` found in a file: every session's place, and the columns the file sets."""

    records: dict[str, Record]
    session_columns: dict[str, int]  # column -> rows that set it (non-null)
    message_columns: dict[str, int]
    nulls: dict[str, int]  # "table.column" -> the first line that sets it to null
    usage_columns: dict[str, int] = field(default_factory=dict)  # model_usage: column -> rows that set it
    usage_keys: dict[frozenset, int] = field(default_factory=dict)  # the columns a usage row sets -> first line


def read_export(path: Path, store: Path | None = None) -> ExportFile:
    """One pass over the file, every line checked before anything is written (types, ranges, parent
    links, depth): nothing kept but offsets, digests and what planning needs. Reads our own exports and
    Hermes's (``hermes sessions export``: tool_calls and multimodal content as JSON, ``last_active``).

    *store*: the store it is read into; a run as root reads it through no link but root's or that store's
    owner's (:func:`maint.files.open_regular`), so nothing of another user's file is read or echoed."""
    path = Path(path).expanduser()
    if not path.exists():
        raise UsageError(f"FILE: {path} is not a file ({EXPECTED})")
    records: dict[str, Record] = {}
    scols: dict[str, int] = {}
    mcols: dict[str, int] = {}
    nulls: dict[str, int] = {}  # "table.column" -> first line that sets it to null (checked against the store)
    ucols: dict[str, int] = {}
    ukeys: dict[frozenset, int] = {}
    titled: dict[str, str] = {}  # title -> the session that has it (titles are unique in Hermes)
    offset = 0
    try:
        fh = files.open_regular(path, what="export to import", store=store)
    except files.FileRefused as exc:
        raise UsageError(f"FILE: {exc} ({EXPECTED})") from None
    limit = record_limit()
    from maint import settings

    latest = time.time() + settings.value("import_future_days") * 86400.0
    with fh:
        for n in itertools.count(1):
            raw = fh.readline(limit + 1)  # read in the file object's chunks, never more than the bound
            if not raw:
                break
            if len(raw) > limit:
                raise _bad(path, n, f"a record longer than {_mib(limit)} (the most one session record may take: "
                                    "hermes_maint.import_record_mb / HERMES_MAINT_IMPORT_RECORD_MB)")
            start, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise _bad(path, n, "not UTF-8 text") from None
            try:
                obj = json_text.loads(text)
            except ValueError as exc:
                cut = not raw.endswith(b"\n")
                raise _bad(path, n, "truncated: the file ends inside a record" if cut else
                           f"not valid JSON{' (' + str(exc) + ')' if 'nested' in str(exc) else ''}") from None
            if not isinstance(obj, dict):
                raise _bad(path, n, f"a JSON {type(obj).__name__}, not a session record")
            sid = obj.get("id")
            if not isinstance(sid, str) or not sid:
                raise _bad(path, n, "no session id")
            # started_at as export writes it: a number, or text a store kept as text (REAL affinity keeps
            # '2026-12-01'); stored back as-is, ordered like the planners do (text counts as 0).
            if not isinstance(obj.get("source"), str) or not obj["source"] or not _time_ok(obj.get("started_at"),
                                                                                            null=False):
                raise _bad(path, n, f"session {sid!r} lacks source or started_at (a number, or text as exported)")
            if not _time_ok(obj.get("ended_at"), null=True):
                raise _bad(path, n, f"session {sid!r}: ended_at is not a time (a number, text as exported, or null)")
            for key in SESSION_TIMES:
                if problem := _future_problem(f"session {sid!r}", key, obj.get(key), latest):
                    raise _bad(path, n, problem)
            parent = obj.get("parent_session_id")
            if parent is not None and (not isinstance(parent, str) or not parent or parent == sid):
                raise _bad(path, n, f"session {sid!r}: parent_session_id {parent!r} is not another session's id "
                                    "(expected an id, or null)")
            msgs = obj.get("messages")
            if not isinstance(msgs, list):
                raise _bad(path, n, f"session {sid!r} has no messages list")
            if sid in records:
                raise _bad(path, n, f"session {sid!r} appears twice (first on line {records[sid].line})")
            row = {k: v for k, v in obj.items() if k not in NOT_COLUMNS}
            _check_values(path, n, row, "session", "session")
            flags = _flags_problem(row)
            if flags:
                raise _bad(path, n, f"session {sid!r}: {flags}")
            prompts = obj.get("system_prompts")
            if prompts is not None and not (isinstance(prompts, dict) and all(
                    isinstance(v, str) and _value_problem(v) is None for v in prompts.values())):
                raise _bad(path, n, f"session {sid!r}: system_prompts is not a map of hash to text")
            for h, ptext in (prompts or {}).items():
                if prompt_hash(ptext) != h:
                    # the store is content-addressed and its first writer of a hash wins for ever: a text under
                    # another text's hash would become every later session's prompt of that hash (hostile try 5, H7)
                    raise _bad(path, n, f"session {sid!r}: system_prompts entry {h[:80]!r} is not the SHA-256 of "
                                        "its text (a prompt is stored under sha256(text), hex); refusing the file")
            title = obj.get("title")
            if title is not None and not isinstance(title, str):
                # SQLite would keep 5 as '5', the same title as "5" (hostile try 15, S3): Hermes writes text
                raise _bad(path, n, f"session {sid!r}: title {str(title)[:80]!r} is not text (expected a JSON string "
                                    "or null)")
            if isinstance(title, str):
                if title in titled:
                    raise _bad(path, n, f"session {sid!r} has the title {title[:80]!r}, as session {titled[title]!r} "
                                        f"(line {records[titled[title]].line}) has: titles are unique in Hermes; give "
                                        "one of them another title (or none) in the file")
                titled[title] = sid
            kept = obj.get("kept_children") or []
            if not isinstance(kept, list) or not all(isinstance(c, str) and c and c != sid for c in kept):
                raise _bad(path, n, f"session {sid!r}: kept_children is not a list of session ids")
            usage = obj.get("model_usage")
            if usage is not None and not (isinstance(usage, list) and all(isinstance(u, dict) for u in usage)):
                raise _bad(path, n, f"session {sid!r}: model_usage is not a list of usage rows (JSON objects of "
                                    "column values)")
            for i, u in enumerate(usage or []):
                if u.get("session_id", sid) != sid:
                    raise _bad(path, n, f"session {sid!r}: model_usage row {i} belongs to session "
                                        f"{str(u.get('session_id'))[:80]!r}")
                _check_values(path, n, u, f"session {sid!r} model_usage row {i}:", "usage")
                for k, v in u.items():
                    ucols[k] = ucols.get(k, 0) + (v is not None)
                    if v is None:
                        nulls.setdefault(f"{USAGE_TABLE}.{k}", n)
                ukeys.setdefault(frozenset(u), n)
            for k, v in row.items():
                scols[k] = scols.get(k, 0) + (v is not None)
                if v is None:
                    nulls.setdefault(f"sessions.{k}", n)
            newest = None
            taken_back = 0
            for i, m in enumerate(msgs):
                if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not m["role"]:
                    raise _bad(path, n, f"session {sid!r}: message {i} is not a message with a role")
                if m.get("session_id", sid) != sid:
                    raise _bad(path, n, f"session {sid!r}: message {i} belongs to session {m.get('session_id')!r}")
                if m.get("id") is not None and not (isinstance(m["id"], int) and not isinstance(m["id"], bool)
                                                    and 1 <= m["id"] <= INT64[1]):
                    raise _bad(path, n, f"session {sid!r}: message {i} has an id that is not a positive 64-bit "
                                        "integer")
                if not _time_ok(m.get("timestamp"), null=True):
                    raise _bad(path, n, f"session {sid!r}: message {i}'s timestamp is not a time")
                if problem := _future_problem(f"session {sid!r} message {i}", "timestamp", m.get("timestamp"),
                                              latest):
                    raise _bad(path, n, problem)
                _check_values(path, n, m, f"session {sid!r} message", "message")
                if problem := _flags_problem(m, MESSAGE_FLAGS):
                    raise _bad(path, n, f"session {sid!r}: message {i}'s {problem}")
                taken_back += m.get("active", 1) == 0
                for k, v in m.items():
                    mcols[k] = mcols.get(k, 0) + (v is not None)
                    if v is None:
                        nulls.setdefault(f"messages.{k}", n)
                if _number(m.get("timestamp")):
                    newest = m["timestamp"] if newest is None else max(newest, m["timestamp"])
            started = float(obj["started_at"]) if _number(obj["started_at"]) else 0.0
            ended = obj.get("ended_at") if _number(obj.get("ended_at")) else None
            info = SessionInfo(id=sid, source=obj["source"], started_at=started, ended_at=ended,
                               end_reason=obj.get("end_reason") if isinstance(obj.get("end_reason"), str) else None,
                               parent_id=parent, last_active=started,
                               session_key=obj.get("session_key") if isinstance(obj.get("session_key"), str) else None,
                               **_markers(obj.get("model_config")))
            records[sid] = Record(line=n, offset=start, length=len(raw), info=info, messages=len(msgs),
                                  digest=hashlib.sha256(raw).digest(), newest=newest, taken_back=taken_back,
                                  end=("ended_at" in obj, _bindable(obj.get("ended_at")),
                                       "end_reason" in obj, _bindable(obj.get("end_reason"))),
                                  kept_children=list(kept),
                                  title=title if isinstance(title, str) else None, title_given="title" in obj)
    if not records:
        raise UsageError(f"{path}: no session records ({EXPECTED})")
    _refuse_cycles(path, records, set(records), lambda sid: None)
    return ExportFile(records, scols, mcols, nulls, ucols, ukeys)


def _refuse_cycles(path: Path, records: dict[str, Record], written: set[str],
                   stored_parent: Callable[[str], str | None]) -> None:
    """A parent chain that comes back to where it started would make the parent links a loop: refused, naming
    it. A session's parent after the import is the file's for the sessions written (*written*), the store's
    (*stored_parent*) for every other one."""
    rooted: set[str] = set()  # sessions whose chain ends without a loop: a later walk stops there (hostile try 18,
    # V8: a chain of 20,000 was walked from each of its sessions to the root, 130 s before the question)
    for sid in written:
        seen, walk, cur = {sid}, [sid], records[sid].info.parent_id
        while cur is not None and cur not in rooted:
            if cur in seen:
                raise _bad(path, records[sid].line, f"session {sid!r}: its parent links form a loop through {cur!r}")
            seen.add(cur)
            walk.append(cur)
            cur = records[cur].info.parent_id if cur in written else stored_parent(cur)
        rooted.update(walk)


def _units(records: dict[str, Record]) -> list[list[str]]:
    """Compression lineages with their delegate subtrees, parents before children, units in dependency order."""
    infos = {sid: r.info for sid, r in records.items()}
    tree = lin.build(infos)
    heads = [k for k, c in tree.chains.items() if c.delegate_parent is None]
    order = {sid: (r.info.started_at, r.line) for sid, r in records.items()}
    units = []
    for key in heads:
        ids = tree.subtree_session_ids(key)
        units.append(_parents_first(ids, infos, order))
    unit_of = {sid: i for i, u in enumerate(units) for sid in u}
    deps = {i: {unit_of[infos[s].parent_id] for s in u if infos[s].parent_id in unit_of} - {i}
            for i, u in enumerate(units)}
    # the earliest unit (file order) whose parents are placed, each time; none such (a cycle): the earliest left.
    # A heap of the ready ones by rank, not a scan of all that wait after each placement (hostile try 18, V8)
    ranked = sorted(range(len(units)), key=lambda i: order[units[i][0]])
    rank = {i: r for r, i in enumerate(ranked)}
    waiting = {i: len(d) for i, d in deps.items()}
    children: dict[int, list[int]] = {}
    for i, d in deps.items():
        for j in d:
            children.setdefault(j, []).append(i)
    ready = [rank[i] for i in ranked if not waiting[i]]
    heapq.heapify(ready)
    done: list[int] = []
    placed: set[int] = set()
    first_left = 0
    while len(done) < len(units):
        if ready:
            nxt = ranked[heapq.heappop(ready)]
            if nxt in placed:
                continue
        else:
            while ranked[first_left] in placed:
                first_left += 1
            nxt = ranked[first_left]
        placed.add(nxt)
        done.append(nxt)
        for c in children.get(nxt, ()):
            waiting[c] -= 1
            if not waiting[c] and c not in placed:
                heapq.heappush(ready, rank[c])
    return [units[i] for i in done]


def _parents_first(ids: list[str], infos: dict[str, SessionInfo], order: dict) -> list[str]:
    inside = set(ids)
    out: list[str] = []
    seen: set[str] = set()
    for sid in sorted(ids, key=lambda s: order[s]):
        chain: list[str] = []
        in_chain: set[str] = set()  # a list's `in` made a 20,000-long chain quadratic (hostile try 18, V8)
        cur: str | None = sid
        while cur and cur in inside and cur not in seen and cur not in in_chain:
            chain.append(cur)
            in_chain.add(cur)
            cur = infos[cur].parent_id
        for s in reversed(chain):
            seen.add(s)
            out.append(s)
    return out


def plan_import(store: Store, path: Path, read: ExportFile | None = None, *, replace: bool = False) -> ImportPlan:
    """*read*: what :func:`read_export` returned for *path*, when the caller has checked the file already.

    Checked against the store before anything is written: a null where the store needs a value, parent links
    that would loop (with *replace*, through the rows it overwrites), and, with *replace*, the sessions it must
    not overwrite (:attr:`ImportPlan.busy`): busy ones (:mod:`maint.store.guard`), and ones whose stored copy
    holds messages the file lacks (written after the export: replacing would delete them).
    """
    read = read or read_export(path, store.path)
    records = read.records
    have_s, have_m = store.columns("sessions"), store.columns("messages")
    missing = {f"sessions.{c}": n for c, n in read.session_columns.items() if c not in have_s}
    missing.update({f"messages.{c}": n for c, n in read.message_columns.items() if c not in have_m})
    have_u = store.columns(USAGE_TABLE) if store.has_table(USAGE_TABLE) else []
    missing.update({f"{USAGE_TABLE}.{c}": n for c, n in read.usage_columns.items() if c not in have_u})
    for table in ("sessions", "messages", *([USAGE_TABLE] if have_u else [])):
        for _, col, _, notnull, default, _ in store.conn.execute(f"PRAGMA table_info({table})"):
            line = read.nulls.get(f"{table}.{col}")
            if notnull and line is not None and not (table == "messages" and col == "id"):
                raise _bad(Path(path), line, f"{table}.{col} is null, but the store requires a value there"
                                             f"{' (leave the field out to get its default)' if default else ''}")
            if table == USAGE_TABLE and notnull and default is None and col != "session_id":
                for keys, line in read.usage_keys.items():
                    if col not in keys:  # SQLite would refuse the row mid-import
                        raise _bad(Path(path), line, f"a model_usage row has no {col}, but the store requires a "
                                                     "value there")
    existing = set()
    for chunk in chunks(list(records)):
        existing.update(r[0] for r in store.conn.execute(f"SELECT id FROM sessions WHERE id IN ({ph(chunk)})", chunk))
    busy = _replace_guard(store, records, existing) if replace else {}
    written = {sid for sid in records if sid not in existing or (replace and sid not in busy)}

    def stored_parent(sid: str) -> str | None:
        return store.scalar("SELECT parent_session_id FROM sessions WHERE id = ?", (sid,))

    _refuse_cycles(Path(path), records, written, stored_parent)
    units = _units(records)
    _refuse_taken_titles(store, Path(path), records, [sid for u in units for sid in u if sid in written])
    return ImportPlan(path=Path(path), records=records, units=units, session_columns=read.session_columns,
                      message_columns=read.message_columns, missing=missing, existing=existing, busy=busy)


def _refuse_taken_titles(store: Store, path: Path, records: dict[str, Record], order: list[str]) -> None:
    """Titles are unique in Hermes (its ``idx_sessions_title_unique``; hermes-agent's own import fails on a taken
    one): a session written with a title another session has at that moment is refused before the first write,
    also in a store that lacks that index. The sessions are followed in the order they are written (*order*), so a
    title a replaced session gives up earlier in the file may be taken later, not the other way round (hostile
    try 15, S3: a swap of two titles passed the check, then SQLite's index stopped the import mid-file)."""
    holder: dict[str, str | None] = {}  # title -> the session that has it now (None: a row without an id, U8)
    wanted = sorted({records[sid].title for sid in order if records[sid].title is not None})
    for chunk in chunks(wanted):
        holder.update({title: other for other, title in store.conn.execute(
            f"SELECT id, title FROM sessions WHERE title IN ({ph(chunk)})", chunk)})
    stored: dict[str, str] = {}  # session -> its title in the store now, for the sessions this import writes
    for chunk in chunks(order):
        stored.update(store.conn.execute(
            f"SELECT id, title FROM sessions WHERE id IN ({ph(chunk)}) AND title IS NOT NULL", chunk))
    for sid in order:
        rec = records[sid]
        if not rec.title_given:
            continue  # an UPDATE without the field keeps the stored title (an INSERT leaves it null)
        if (old := stored.get(sid)) is not None and old in holder and holder[old] == sid:
            del holder[old]
        if rec.title is not None and rec.title in holder and holder[rec.title] != sid:
            other = holder[rec.title]
            later = " (this file gives it another title later: move a title in two steps)" if other in stored else ""
            who = f"session {other!r}" if other is not None else "a session row without an id (NULL)"
            raise _bad(path, rec.line, f"session {sid!r} has the title {rec.title[:80]!r}, which {who} "
                                       f"of the store has{later}: titles are unique in Hermes; rename one of them "
                                       "(`hermes-maint rename`) or give it another title in the file; nothing was "
                                       "imported")
        if rec.title is not None:
            holder[rec.title] = sid


def _unique_keys(store: Store, table: str) -> tuple[list[tuple[str, ...]], dict[str, Any]]:
    """The column sets of *table*'s unique keys (indexes on expressions or with a WHERE left out), and the
    values SQLite fills in for columns an INSERT leaves out (literal defaults only)."""
    keys = []
    for _, name, unique, _, partial in store.conn.execute(f"PRAGMA index_list({quote_ident(table)})"):
        cols = [r[2] for r in store.conn.execute(f"PRAGMA index_info({quote_ident(name)})")]
        if unique and not partial and cols and None not in cols:
            keys.append(tuple(cols))
    return keys, literal_defaults(store, table)


def literal_defaults(store: Store, table: str) -> dict[str, Any]:
    """The values SQLite fills in for *table*'s columns an INSERT leaves out, where the default is a literal."""
    return {r[1]: store.scalar(f"SELECT {r[4]}") for r in store.conn.execute(f"PRAGMA table_info({table})")
            if r[4] is not None and _LITERAL.fullmatch(str(r[4]))}


def _bindable(value: Any) -> Any:
    """*value* as SQLite can compare it with a stored one (a JSON list or object as its text)."""
    return value if value is None or isinstance(value, (str, int, float)) else json.dumps(value, sort_keys=True)


def _replace_guard(store: Store, records: dict[str, Record], existing: set[str]) -> dict[str, str]:
    """The existing sessions --replace must leave alone, and why: any whose copy in the store is newer than the
    file's, whether Hermes wrote messages (more, or a newer one), resumed it (open in the store, ended in the file:
    U3), ended, reset or re-ended it (another end: a reset conversation came back to its peer, hostile try 18, V1),
    or took turns back with /undo (rows kept with active 0, no message written: V5)."""
    out = dict(guard.busy(store, existing))
    taken = "SUM(active = 0)" if store.has_column("messages", "active") else "0"
    for sid in sorted(existing - set(out)):
        count, newest, taken_back = store.conn.execute(
            "SELECT COUNT(*), MAX(CASE WHEN typeof(timestamp) IN ('integer', 'real') THEN timestamp END), "
            f"{taken} FROM messages WHERE session_id = ?", (sid,)).fetchone()
        rec = records[sid]
        # the end as the file has it (a time stored as text is exported as text: try 19, W1); the reason as bytes
        ended_at, same_end, reason = store.conn.execute(
            "SELECT ended_at, (NOT ? OR ended_at IS ?) AND (NOT ? OR end_reason IS ?), CAST(end_reason AS BLOB) "
            "FROM sessions WHERE id = ?", (*rec.end, sid)).fetchone()
        if newest is not None and (rec.newest is None or newest > rec.newest):
            out[sid] = ("the store holds messages the file lacks (written after the export); replacing would "
                        "delete them")
        elif count > rec.messages:
            # Hermes's own export leaves out rows taken back or compacted (active 0): nothing written since (W2)
            out[sid] = ("the store holds messages the file lacks (written after the export, or taken back or compacted "
                        "rows an export of active messages leaves out); replacing would delete them")
        elif ended_at is None and rec.end[1] is not None:
            # resumed in Hermes since the export: the file would mark it ended under Hermes's next message (U3)
            out[sid] = "open in the store (resumed since the export); replacing would mark it ended"
        elif ended_at is not None and not same_end:
            out[sid] = (f"ended in the store as {shown_id(reason)[:40] if reason is not None else 'ended'} since the "
                        "export (ended, reset or ended again by Hermes); replacing would undo that end")
        elif (taken_back or 0) > rec.taken_back:
            out[sid] = ("turns taken back in the store since the export (Hermes's /undo); replacing would bring "
                        "them back")
    return out


def refuse_missing(plan: ImportPlan, drop_missing: bool) -> None:
    if plan.missing and not drop_missing:
        what = ", ".join(f"{c} (set in {n} rows)" for c, n in sorted(plan.missing.items()))
        raise MaintError(f"{plan.path}: the store has no column for {what}; nothing was imported. Pass "
                         "--drop-missing-columns to import without them")


@dataclass
class ImportResult:
    imported: list[str] = field(default_factory=list)
    skipped_existing: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    skipped_busy: dict[str, str] = field(default_factory=dict)
    detached: list[str] = field(default_factory=list)
    relinked: list[str] = field(default_factory=list)
    renumbered: list[str] = field(default_factory=list)
    prompts_dropped: list[str] = field(default_factory=list)
    usage_kept_out: list[str] = field(default_factory=list)  # sessions with a usage row the store's key refused
    messages: int = 0
    transactions: int = 0
    longest_lock_s: float = 0.0


def blob_columns(store: Store, table: str) -> set[str]:
    """The columns whose ``b'...'`` text import turns back into bytes (declared BLOB): in any other column a
    BLOB comes back as the text of its repr (what a verified delete refuses: :mod:`maint.export.verified_delete`)."""
    return {r[1] for r in store.conn.execute(f"PRAGMA table_info({table})") if str(r[2]).upper() == "BLOB"}


def _unrepr(value: Any) -> Any:
    """The export writes BLOB cells as Python's bytes repr (b'...'); put the bytes back."""
    if isinstance(value, str) and len(value) >= 3 and value[0] == "b" and value[1] in "'\"":
        try:
            out = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
        return out if isinstance(out, bytes) else value
    return value


def _stored(column: str, value: Any) -> Any:
    """A field as Hermes stores it: multimodal content behind its JSON prefix, other structure as JSON text
    (as ``SessionDB._encode_content`` and ``import_sessions`` write them)."""
    if not isinstance(value, (dict, list)):
        return value
    if column == "display_metadata" and not value:
        return None  # as upstream's writer stores an empty one
    # tool_calls: any list or object as JSON text, [] included (Hermes's import stores [] as NULL; a stored
    # '[]' we exported comes back as it was)
    text = json.dumps(value)
    return CONTENT_JSON_PREFIX + text if column == "content" else text


class _Writer:
    """Inserts units inside the caller's transaction; collects what happened."""

    def __init__(self, store: Store, plan: ImportPlan, replace: bool, result: ImportResult):
        self.store, self.plan, self.replace, self.result = store, plan, replace, result
        self.committed = 0  # sessions of the transactions committed before the current one
        self.scols = [r[1] for r in store.conn.execute("PRAGMA table_info(sessions)")]
        self.mcols = [r[1] for r in store.conn.execute("PRAGMA table_info(messages)")]
        self.sblobs, self.mblobs = blob_columns(store, "sessions"), blob_columns(store, "messages")
        self.ucols = set(store.columns(USAGE_TABLE)) if store.has_table(USAGE_TABLE) else set()
        self.ublobs = blob_columns(store, USAGE_TABLE) if self.ucols else set()
        self.ukeys, self.udefaults = _unique_keys(store, USAGE_TABLE) if self.ucols else ([], {})
        self.mdefaults = literal_defaults(store, "messages")
        fks = list(store.conn.execute("PRAGMA foreign_key_list(sessions)"))
        self.prompt_fks = [(r[3], r[2], r[4]) for r in fks if r[2] != "sessions"]  # (column, table, key)
        self.has_prompt_table = store.has_table("system_prompts")
        self.pending: dict[tuple[str, ...], list[list[Any]]] = {}
        self.pending_ids: set[int] = set()
        # the store's parent notes by parent, read once: asked for every session written, a scan of state_meta each
        # time made an import of 20,000 sessions whose parents are elsewhere quadratic (hostile try 18, V8). Only
        # this run writes them meanwhile (a second command is refused while it runs), and it keeps this in step.
        self.notes: dict[str, list[str]] | None = None
        # Opened again by name, as checked the first time: a FIFO swapped in since would block us for ever
        # (hostile try 4, G2); another regular file fails the per-record digest (record()).
        self.fh = files.open_regular(plan.path, what="export to import", store=store.path)

    def close(self) -> None:
        self.fh.close()

    def record(self, sid: str) -> dict[str, Any]:
        """The record as it was checked: a file rewritten since stops the import before this unit is written."""
        rec = self.plan.records[sid]
        self.fh.seek(rec.offset)
        raw = self.fh.read(rec.length)
        if hashlib.sha256(raw).digest() != rec.digest:
            raise MaintError(f"{self.plan.path}: changed while it was being imported (line {rec.line} differs from "
                             f"what was checked); stopped before writing session {sid}: the {self.committed} sessions "
                             "imported before it stay, whole (import the file again once it is final)")
        return json_text.loads(raw)

    def exists(self, sid: str) -> bool:
        return self.store.scalar("SELECT 1 FROM sessions WHERE id = ?", (sid,)) is not None

    def unit(self, conn, ids: list[str]) -> int:
        present = {r[0] for r in conn.execute(f"SELECT id FROM sessions WHERE id IN ({ph(ids)})", ids)}
        if self.replace:
            # asked again with the lock held: a session idle at the plan that Hermes wrote to (or that was resumed)
            # since would lose those messages to the replace (hostile try 16, T12). The plan's parent-loop and title
            # checks counted on writing it (try 17, U1, U2), so the import stops here, this transaction rolled back;
            # a new run plans afresh and leaves that session alone.
            now = _replace_guard(self.store, self.plan.records, present - set(self.plan.busy))
            if now:
                sid = sorted(now)[0]
                raise MaintError(f"session {sid}: {now[sid]}, since this import was planned; stopped before replacing "
                                 f"it (this transaction rolled back); the {self.committed} sessions imported before "
                                 "stay: run the import again, it plans afresh and leaves that session alone")
        done = 0
        for sid in ids:
            if sid in present and not self.replace:
                self.result.skipped_existing.append(sid)
                continue
            if sid in present and sid in self.plan.busy:
                self.result.skipped_busy[sid] = self.plan.busy[sid]
                continue
            try:
                self.session(conn, sid, replacing=sid in present)
            except apsw.ConstraintError as exc:
                raise MaintError(
                    f"session {sid} (line {self.plan.records[sid].line}): SQLite refused its rows ({exc}); its "
                    f"transaction was rolled back, whole lineages; the {self.committed} sessions imported before "
                    "it stay (a second run skips them)") from None
            done += 1
        return done

    def session(self, conn, sid: str, replacing: bool) -> None:
        obj = self.record(sid)
        row = {c: _stored(c, obj[c]) for c in self.scols if c in obj}
        for c in self.sblobs & row.keys():
            row[c] = _unrepr(row[c])
        parent = row.get("parent_session_id")
        if parent and not self.exists(parent):
            row["parent_session_id"] = None
            self.result.detached.append(sid)
            note_unlinked(self.store, conn, [(sid, str(parent))])  # the parent's later import links it again
            self.parent_notes(conn).setdefault(str(parent), []).append(sid)
        prompts = obj.get("system_prompts") or {}
        text, ref = obj.get("system_prompt"), obj.get("system_prompt_hash")
        if self.has_prompt_table and isinstance(text, str) and isinstance(ref, str) and (
                prompts.get(ref) == text if "system_prompts" in obj
                else prompt_hash(text) == ref):
            # Upstream's get_session (and our export since issue 25) writes the prompt the hash names in
            # system_prompt: it goes back into system_prompts, the row keeping only the hash, as upstream's
            # import stores it. Hermes's export carries no system_prompts: the text is taken when it hashes to ref.
            prompts = {**prompts, ref: text}
            if "system_prompt" in row:
                row["system_prompt"] = None
        # only what the session references: an entry it does not point at is no business of this import
        refs = {v for c in PROMPT_REFS if isinstance(v := obj.get(c), str)}
        prompts = {h: t for h, t in prompts.items() if h in refs}
        if self.has_prompt_table:
            for h, text in prompts.items():
                conn.execute("INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)", (h, text))
        elif "system_prompt" in self.scols and row.get("system_prompt") is None and obj.get("system_prompt_hash") \
                in prompts:
            row["system_prompt"] = prompts[obj["system_prompt_hash"]]  # a store that keeps prompts inline
        for col, table, key in self.prompt_fks:
            value = row.get(col)
            if value is not None and self.store.scalar(f'SELECT 1 FROM "{table}" WHERE "{key}" = ?', (value,)) is None:
                row[col] = None  # an export made before prompts travelled with it
                self.result.prompts_dropped.append(sid)
        cols = list(row)
        names = ", ".join(f'"{c}"' for c in cols)
        if replacing:
            # a pin is the user's durable keep flag: a replace from an older export never takes it away
            sets = ", ".join('"pinned" = CASE WHEN "pinned" THEN "pinned" ELSE ? END' if c == "pinned" else
                             f'"{c}" = ?' for c in cols if c != "id")
            conn.execute(f"UPDATE sessions SET {sets} WHERE id = ?", [row[c] for c in cols if c != "id"] + [sid])
            conn.execute("DELETE FROM messages WHERE session_id = ?", (sid,))
            self.result.replaced.append(sid)
        else:
            conn.execute(f"INSERT INTO sessions ({names}) VALUES ({ph(cols)})", [row[c] for c in cols])
            self.result.imported.append(sid)
        self.messages(conn, sid, obj["messages"])
        self.usage(conn, sid, obj.get("model_usage") or [])
        self.relink(conn, sid, self.waiting_children(conn, sid))
        if row.get("parent_session_id") is None:
            self.back_to_parent(conn, sid)

    def usage(self, conn, sid: str, rows: list[dict[str, Any]]) -> None:
        """The session's per-model usage rows, in the columns the store has (the others were refused by name, or
        left out with ``drop_missing``); a row whose key the store holds is kept as stored (hostile try 15, S17:
        a verified delete took them, and its undo could not bring them back)."""
        if not self.ucols:
            return
        # a conflict with a row the store held for a replaced session keeps the stored row (as designed); one with a
        # row of this same record is a merge the file never meant (hostile try 16, T10; try 17, U7: on --replace; try
        # 18, V3: whatever other rows of the session the store holds). Told apart by the store's unique keys, each
        # row's key as SQLite fills it (defaults for the columns left out), against the keys of the rows this
        # record wrote: nothing is written to a row kept as stored (an upsert's no-op update fired its triggers,
        # try 19, W3).
        written: list[tuple] = []
        for u in rows:
            cols = [c for c in u if c in self.ucols and c != "session_id"] + ["session_id"]
            names = ", ".join(f'"{c}"' for c in cols)  # column names: checked when the file was read (IDENT)
            values = {c: sid if c == "session_id" else _unrepr(u[c]) if c in self.ublobs else u[c] for c in cols}
            conn.execute(f"INSERT INTO {USAGE_TABLE} ({names}) VALUES ({ph(cols)}) ON CONFLICT DO NOTHING",
                         [values[c] for c in cols])
            keys = tuple(tuple(values.get(c, self.udefaults.get(c)) for c in key) for key in self.ukeys)
            if conn.changes():
                written.append(keys)
            elif any(k[i] == keys[i] and None not in keys[i] for k in written for i in range(len(keys))) \
                    and sid not in self.result.usage_kept_out:
                # a row the store's key merges with another of the record's rows (a key column left out by
                # --drop-missing-columns): named, not lost unseen
                self.result.usage_kept_out.append(sid)

    def waiting_children(self, conn, sid: str) -> list[str]:
        """Sessions this store's verified delete (the children it kept) or an earlier import (the files of one
        verified delete imported child first, hostile try 9, L14) unlinked from *sid*, by the store's own notes
        (:data:`maint.store.delete.PARENT_NOTE`): a file's ``kept_children`` alone never re-parents a session
        (hostile try 10, M4). The notes of the children the store holds go with this answer; a child the store
        lacks (deleted since, by a verified delete of its own) keeps its note, and is linked when it comes back
        (:meth:`back_to_parent`)."""
        if not self.store.has_table("state_meta"):
            return []
        children = self.parent_notes(conn).pop(sid, [])
        present = [c for c in children if self.exists(c)]
        if len(present) < len(children):
            self.notes[sid] = [c for c in children if c not in present]
        if present:
            conn.executemany("DELETE FROM state_meta WHERE key = ?", [(PARENT_NOTE + c,) for c in present])
        return present

    def parent_notes(self, conn) -> dict[str, list[str]]:
        """The store's parent notes (:data:`maint.store.delete.PARENT_NOTE`), children by parent."""
        if self.notes is None:
            self.notes = {}
            if self.store.has_table("state_meta"):
                # as bytes: a note of bytes that are not UTF-8 (no run of ours writes one) is no session's
                for key, value in conn.execute("SELECT CAST(key AS BLOB), CAST(value AS BLOB) FROM state_meta "
                                               "WHERE substr(key, 1, ?) = ? AND typeof(value) = 'text'",
                                               (len(PARENT_NOTE), PARENT_NOTE)):
                    try:
                        child, parent = key.decode()[len(PARENT_NOTE):], value.decode()
                    except UnicodeDecodeError:
                        continue
                    self.notes.setdefault(parent, []).append(child)
        return self.notes

    def back_to_parent(self, conn, sid: str) -> None:
        """*sid*, written without a parent, is linked to the parent this store unlinked it from, when that parent is
        here now (by the store's own note, which then goes): the undo of two chained verified deletes, in the order
        they were made (hostile try 15, S16: the first file's import brought the parent back while its kept child
        was deleted by the second, whose record carries the link nulled)."""
        if not self.store.has_table("state_meta"):
            return
        parent = conn.execute("SELECT value FROM state_meta WHERE key = ?", (PARENT_NOTE + sid,)).fetchone()
        if parent is None or not isinstance(parent[0], str) or not self.exists(parent[0]):
            return
        conn.execute("DELETE FROM state_meta WHERE key = ?", (PARENT_NOTE + sid,))
        waiting = self.parent_notes(conn).get(parent[0], [])
        if sid in waiting:
            waiting.remove(sid)
        self.relink(conn, parent[0], [sid])

    def relink(self, conn, sid: str, children: list[str]) -> None:
        """The undo of a verified delete: children it kept, and whose link to *sid* it removed, point at it
        again (only children still unlinked, and never into a loop)."""
        for child in children:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ? AND parent_session_id IS NULL", (child,)).fetchone() \
                    is None:
                continue
            cur, loop = sid, False
            for _ in range(10_000):
                if cur is None:
                    break
                if cur == child:
                    loop = True
                    break
                cur = self.store.scalar("SELECT parent_session_id FROM sessions WHERE id = ?", (cur,))
            if not loop:
                conn.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (sid, child))
                self.result.relinked.append(child)

    def messages(self, conn, sid: str, msgs: list[dict[str, Any]]) -> None:
        """Queue the session's messages; :meth:`flush` writes the chunk's in as few statements as it can."""
        if not msgs:
            return
        cols = [c for c in self.mcols if any(c in m for m in msgs)]
        if "session_id" not in cols:
            cols.append("session_id")
        ids = [m["id"] for m in msgs if isinstance(m.get("id"), int)]
        if "id" in cols and (len(ids) != len(msgs) or not self.pending_ids.isdisjoint(ids) or any(
                self.store.scalar(f"SELECT 1 FROM messages WHERE id IN ({ph(c)}) LIMIT 1", c) for c in chunks(ids))):
            cols.remove("id")  # an id is taken here: fresh ones, in the same order
            self.result.renumbered.append(sid)
        elif "id" in cols:
            self.pending_ids.update(ids)
        rows = self.pending.setdefault(tuple(cols), [])
        absent = self.mdefaults  # a field only some messages carry (upstream's _compressed_summary): the default
        for m in msgs:
            rows.append([sid if c == "session_id" else absent.get(c) if c not in m else
                         (_unrepr(m[c]) if c in self.mblobs else _stored(c, m[c])) for c in cols])
        self.result.messages += len(msgs)

    def flush(self, conn) -> None:
        # FTS5 writes a new index segment per statement, and merges them as they pile up: a chunk's
        # messages go in through one statement (per SQLite's bound-parameter limit), not one per session.
        # Rows that keep their ids first: fresh ids are then drawn above all of them.
        for cols, rows in sorted(self.pending.items(), key=lambda kv: "id" not in kv[0]):
            per = max(1, MAX_VARIABLES // len(cols))
            names = ", ".join(f'"{c}"' for c in cols)
            row_ph = "(" + ph(cols) + ")"
            for start in range(0, len(rows), per):
                part = rows[start:start + per]
                conn.execute(f"INSERT INTO messages ({names}) VALUES {','.join([row_ph] * len(part))}",
                             [v for r in part for v in r])
        self.pending.clear()
        self.pending_ids.clear()


def import_batcher() -> Batcher:
    """Inserting costs more per row than deleting, and less evenly: FTS5 merges its index segments as new
    ones pile up, so one chunk can take ten times the one before (docs/benchmarks.md). Imports aim at half
    the prune target, in chunks of at most 200 messages."""
    target = Batcher().target_s / 2
    return Batcher(target_s=target, chunk_s=target / 2.5, rate=1500.0, max_load=200)


def refuse_big_units_while_shared(store: Store, plan: ImportPlan, units: list[list[str]]) -> None:
    """A lineage is written in one transaction (never split): one whose writing would hold the write lock past what
    Hermes waits, while other processes have the store open (or we cannot tell), refuses the import before
    anything is written (hostile try 11, N4: one 156,020-message conversation held the lock 17 s and a running
    Hermes's appends failed); the rule is the delete's (:mod:`maint.store.delete`)."""
    from maint.store.delete import refuse_long_transaction_while_shared

    big = max(units, key=lambda u: sum(plan.records[s].messages for s in u))
    messages = sum(plan.records[s].messages for s in big)
    refuse_long_transaction_while_shared(store, messages, f"session {big[0]}: writing its {messages} messages "
                                         "(one transaction)", "nothing was imported")


def execute_import(store: Store, plan: ImportPlan, *, replace: bool = False, drop_missing: bool = False,
                   batcher: Batcher | None = None, on_progress: Callable[[int], None] | None = None) -> ImportResult:
    refuse_missing(plan, drop_missing)
    if replace and plan.existing:
        store.refuse_unknown_references()  # replacing deletes messages: nothing we do not know may point at them
    result = ImportResult()
    todo = [u for u in plan.units if replace or not set(u) <= plan.existing]
    for u in plan.units:
        if not replace and set(u) <= plan.existing:
            result.skipped_existing.extend(u)
    if not todo:
        return result
    refuse_big_units_while_shared(store, plan, todo)
    before = store.write_stats.transactions
    writer = _Writer(store, plan, replace, result)
    try:
        marks = [0, 0]  # imported and replaced when the transaction in flight began

        @contextlib.contextmanager
        def transaction() -> Iterator[None]:
            # counted per transaction, not per chunk: a transaction holds several chunks, and a stop rolls back
            # them all (hostile try 18, V4: "the 140 sessions imported before stay" when 126 did)
            marks[:] = len(result.imported), len(result.replaced)
            writer.committed = sum(marks)
            with store.write():
                yield

        def apply(units: list[list[str]]) -> int:
            try:
                done = sum(writer.unit(store.conn, u) for u in units)
                writer.flush(store.conn)
            except apsw.ConstraintError as exc:
                ids = [sid for u in units for sid in u]
                raise MaintError(f"SQLite refused the messages of sessions {', '.join(ids[:5])}"
                                 f"{' …' if len(ids) > 5 else ''} ({exc}); their transaction was rolled back, "
                                 f"whole lineages; the {writer.committed} sessions imported before stay (a second "
                                 "run skips them)") from None
            except BaseException:
                # the transaction's sessions are rolled back: not counted as imported (hostile try 15, S3)
                del result.imported[marks[0]:], result.replaced[marks[1]:]
                raise
            finally:
                writer.pending.clear()
                writer.pending_ids.clear()
            return done

        with paced_writes(store) as writes:
            writes.run_batches(todo, lambda u: sum(plan.records[s].messages + 1 for s in u), apply, transaction,
                               batcher=batcher or import_batcher(), on_progress=on_progress)
    finally:
        writer.close()
    result.transactions = store.write_stats.transactions - before
    result.longest_lock_s = store.write_stats.longest_hold_s
    return result


OTHER_PROFILE = ("gateway keys of another profile than this store's ({owner}): Hermes's gateway there will not find "
                 "them here (`hermes-maint repair-profiles` moves or rekeys them)")


@dataclass(frozen=True)
class ImportRequest:
    """``hermes-maint import``'s arguments: the export file, read and checked line by line before any store
    is opened."""

    file: Path
    checked: tuple
    replace: bool = False
    drop_missing: bool = False
    dry_run: bool = False

    @classmethod
    def of(cls, file: Path, *, replace: bool = False, drop_missing: bool = False,
           dry_run: bool = False, store: Path | None = None) -> ImportRequest:
        """*store*: the store it goes into (its owner's links are followed by a root run, no one else's)."""
        return cls(file, read_export(file, store), replace=replace, drop_missing=drop_missing, dry_run=dry_run)


def import_store(target: StoreTarget, req: ImportRequest, op: Operator) -> dict[str, Any]:
    """``hermes-maint import`` into one store: the plan, the operator asked, then a lineage per transaction."""
    from maint.ops.routing import store_owner
    from maint.store.connection import open_store
    from maint.store.targets import key_profile

    with open_store(target.path, readonly=req.dry_run) as store:
        plan = plan_import(store, req.file, req.checked, replace=req.replace)
        # a backup restored into another profile's store (hostile try 18, V7): named before the question, not
        # refused (moving sessions between profiles on purpose is the user's call; repair-profiles rekeys them)
        owner = store_owner(target.path)
        foreign = [sid for sid, r in plan.records.items() if key_profile(r.info.session_key) not in (None, owner)]
        existing = [sid for sid in plan.records if sid in plan.existing]
        new = [sid for sid in plan.records if sid not in plan.existing]
        replace, dry_run = req.replace, req.dry_run
        report = {"store": str(target.path), "profile": target.profile, "file": str(plan.path), "dry_run": dry_run,
                  "sessions_in_file": len(plan.records), "messages_in_file": plan.messages, "units": len(plan.units),
                  "missing_columns": plan.missing, "dropped_columns": sorted(plan.missing) if req.drop_missing else [],
                  "imported": new if dry_run else [], "skipped_existing": [] if replace else existing,
                  "replaced": [s for s in existing if s not in plan.busy] if replace and dry_run else [],
                  "skipped_busy": plan.busy if dry_run else {}, "detached": [], "relinked": [], "renumbered": [],
                  "prompts_dropped": [], "usage_kept_out": [], "messages": 0, "transactions": 0, "longest_lock_ms": 0.0,
                  "store_owner": owner, "other_profile": foreign}
        refuse_missing(plan, req.drop_missing)
        if dry_run:
            return report
        if new or (replace and existing):
            what = f"{len(new)} new session(s)" + (f", replace {len(existing)}" if replace and existing else "")
            op.confirm(f"Import {what} into {target.path}?", [
                f"{plan.path}: {len(plan.records)} sessions, {plan.messages} messages",
                f"  new: {len(new)}; already in the store: {len(existing)} ({'replaced' if replace else 'skipped'})",
                *([f"  columns left out: {', '.join(sorted(plan.missing))}"] if plan.missing else []),
                *([f"  {OTHER_PROFILE.format(owner=owner)}: {len(foreign)} session(s)"] if foreign else []),
            ])
        with op.progress(len(plan.units), "Importing") as tick:
            result = execute_import(store, plan, replace=replace, drop_missing=req.drop_missing, on_progress=tick)
        report.update(imported=result.imported, skipped_existing=result.skipped_existing, replaced=result.replaced,
                      skipped_busy=result.skipped_busy, detached=result.detached, relinked=result.relinked,
                      renumbered=result.renumbered, prompts_dropped=result.prompts_dropped,
                      usage_kept_out=result.usage_kept_out,
                      messages=result.messages, transactions=result.transactions,
                      longest_lock_ms=round(result.longest_lock_s * 1000, 1))
    return report
