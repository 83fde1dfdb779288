"""repair-profiles: state written into the wrong profile's store, found and moved home.

Each profile owns one store: the default profile ``$HERMES_HOME/state.db``,
profile NAME ``$HERMES_HOME/profiles/NAME/state.db``. A row belongs to the
profile its gateway session key names (``agent:<name>:...``; ``agent:main`` is
the default profile) or, failing that, its ``profile_name``. Found here:

* ``stray_sessions`` — sessions (with their descendants, messages, usage and
  Telegram topic bindings) of another existing profile: moved to its store;
* ``stray_routing`` — ``gateway_routing`` rows keyed for another profile: moved;
* ``stray_bindings`` — Telegram topic bindings keyed for another profile whose
  session stays here: moved with a copy of nothing else (their session is not
  ours to move, so they are only reported);
* ``missing_profile`` — rows bound to a profile that does not exist: reported
  only (create the profile or migrate the identity);
* ``legacy_main`` — ``agent:main:`` rows inside a named profile's store:
  reported, or with ``legacy_main="rekey"`` moved into that profile's
  namespace, with ``"move"`` sent to the default store.

Moves copy first, then delete the stray copy, each in its own transaction: a
crash between the two leaves a duplicate, never a loss, and the next run
removes the duplicate after checking that the copy is complete. The check runs
inside the delete's own transaction, with the session-write guard: a session
Hermes wrote to after the copy keeps its stray copy, named in the report.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any


from maint import PROG
from maint.errors import MaintError, StoreError
from maint.store.targets import hermes_home, key_profile, profile_folders
from maint.store import guard
from maint.store.delete import delete_sessions
from maint.store.sqlutil import chunks, ph
from maint.store.connection import PROMPT_REFS, USAGE_TABLE, Store, open_store, quote_ident
from maint.store.snapshots import copy_stores
from maint.store.holders import STOP_HERMES, refuse_if_held
from maint.store.targets import StoreTarget

if TYPE_CHECKING:
    from maint.flow import Operator

DEFAULT = "default"


def normalize_profile(name: str | None) -> str | None:
    if name is None or not str(name).strip():
        return None
    return DEFAULT if name in ("default", "main") else str(name)


def file_id(path: Path) -> tuple[int, int] | None:
    """The file *path* resolves to, as (st_dev, st_ino): two links or a linked folder give the same one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _candidate_stores(home: Path) -> list[tuple[str, Path]]:
    out = [(DEFAULT, home / "state.db")] if (home / "state.db").is_file() else []
    out += [(name, home / "profiles" / name / "state.db") for name in profile_folders(home)
            if (home / "profiles" / name / "state.db").is_file()]
    return out


def store_aliases(home: Path | None = None) -> dict[str, str]:
    """Profile names whose state.db is the same file as an earlier name's: alias -> that name."""
    seen: dict[tuple[int, int], str] = {}
    aliases = {}
    for name, path in _candidate_stores(home or hermes_home()):
        fid = file_id(path)
        if fid in seen:
            aliases[name] = seen[fid]
        elif fid is not None:
            seen[fid] = name
    return aliases


def profile_stores(home: Path | None = None) -> dict[str, Path]:
    """One entry per store file: a name whose state.db is the same file as an earlier name's (see
    :func:`store_aliases`) is left out, so no file is scanned, snapshotted or written twice."""
    home = home or hermes_home()
    aliases = store_aliases(home)
    return {name: path for name, path in _candidate_stores(home) if name not in aliases}


def existing_profiles(home: Path | None = None) -> set[str]:
    home = home or hermes_home()
    return {DEFAULT} | {name for name in profile_folders(home) if (home / "profiles" / name).is_dir()}


@dataclass
class Finding:
    kind: str
    store: str  # profile whose store holds the rows
    owner: str | None  # profile the rows belong to
    session_ids: list[str] = field(default_factory=list)
    routing_keys: list[list[str]] = field(default_factory=list)  # [scope, session_key]
    action: str = "report"  # move | rekey | report
    reason: str | None = None  # why, for findings that are only reported
    target: str | None = None  # the store a move goes to when the owner names another's file (an alias)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "store": self.store, "owner": self.owner, "session_ids": self.session_ids,
                "routing_keys": self.routing_keys, "action": self.action, "reason": self.reason}


def _owner(row: dict[str, Any]) -> str | None:
    return key_profile(row.get("session_key")) or normalize_profile(row.get("profile_name"))


def scan_store(store: Store, profile: str, known: set[str], legacy_main: str | None,
               aliases: dict[str, str] | None = None) -> list[Finding]:
    """Findings for the store of *profile*; *aliases* (alias -> name) maps profile names whose store is
    another name's file, so rows of an alias of *profile* are at home here."""
    aliases = aliases or {}
    cols = ["id", "parent_session_id"]
    cols += [c if store.has_column("sessions", c) else f"NULL AS {c}" for c in ("session_key", "profile_name")]
    rows, odd = {}, 0
    for r in store.iter_rows(f"SELECT {', '.join(cols)} FROM sessions"):
        if isinstance(r["id"], str):
            rows[r["id"]] = r
        else:  # NULL or bytes: no row Hermes writes, and no id to move it by (hostile try 16, T1, T7)
            odd += 1
    children: dict[str, list[str]] = {}
    for r in rows.values():
        if r["parent_session_id"] in rows:
            children.setdefault(r["parent_session_id"], []).append(r["id"])
    findings: dict[tuple[str, str | None], Finding] = {}

    def classify(owner: str | None) -> tuple[str, str] | None:
        if owner is None or aliases.get(owner, owner) == profile:
            return None
        if owner == DEFAULT and profile != DEFAULT:
            if legacy_main == "rekey":
                return "legacy_main", "rekey"
            if legacy_main == "move":
                return "legacy_main", "move"
            return "legacy_main", "report"
        if owner not in known:
            return "missing_profile", "report"
        return "stray_sessions", "move"

    claimed: set[str] = set()
    for sid, r in sorted(rows.items()):
        if sid in claimed:
            continue
        parent = rows.get(r["parent_session_id"])
        if parent is not None and _owner(parent) in (_owner(r), None) and classify(_owner(parent)):
            continue  # handled with its stray parent
        verdict = classify(_owner(r))
        if verdict is None:
            continue
        kind, action = verdict
        family, stack = [], [sid]
        while stack:  # descendants that carry no other identity inherit this one
            cur = stack.pop()
            if cur in claimed:
                continue
            if cur != sid and _owner(rows[cur]) not in (None, _owner(r)):
                continue
            claimed.add(cur)
            family.append(cur)
            stack.extend(children.get(cur, []))
        f = findings.setdefault((kind, _owner(r)), Finding(kind, profile, _owner(r), action=action,
                                                           target=aliases.get(_owner(r))))
        f.session_ids.extend(sorted(family))
    if odd:
        findings[("odd_ids", None)] = Finding("odd_ids", profile, None, reason=(
            f"{odd} session row(s) whose id is not text (NULL or bytes: not rows Hermes writes) were not scanned"))
    if store.has_table("gateway_routing"):
        for scope, key in store.conn.execute("SELECT scope, session_key FROM gateway_routing"):
            verdict = classify(key_profile(key))
            if verdict is None:
                continue
            kind, action = verdict
            kind = "stray_routing" if kind == "stray_sessions" else kind
            f = findings.setdefault((kind + ":routing", key_profile(key)),
                                    Finding(kind, profile, key_profile(key), action=action,
                                            target=aliases.get(key_profile(key))))
            f.routing_keys.append([scope, key])
    if store.has_table("telegram_dm_topic_bindings"):
        moving = {sid for f in findings.values() for sid in f.session_ids}
        for key, sid in store.conn.execute("SELECT session_key, session_id FROM telegram_dm_topic_bindings"):
            owner = key_profile(key)
            if classify(owner) and sid not in moving:
                f = findings.setdefault(("stray_bindings", owner), Finding("stray_bindings", profile, owner))
                f.session_ids.append(sid)
    return list(findings.values())


def scan(home: Path | None = None, legacy_main: str | None = None) -> tuple[dict[str, Path], list[Finding]]:
    stores = profile_stores(home)
    aliases = store_aliases(home)
    known = existing_profiles(home)
    out: list[Finding] = []
    for alias, name in aliases.items():  # one file under two names: one store, its rows are home under both
        out.append(Finding("shared_store", name, alias, reason=f"profiles {name} and {alias} are one store file "
                                                               f"({stores[name]}): scanned once, as {name}"))
    for profile, path in stores.items():
        try:
            with open_store(path, readonly=True) as store:
                out.extend(scan_store(store, profile, known, legacy_main, aliases))
        except StoreError as exc:  # reported; the other stores are still scanned
            out.append(Finding("unreadable_store", profile, None, reason=str(exc)))
    return stores, out


SIDE_TABLES = (USAGE_TABLE, "telegram_dm_topic_bindings")  # rows of a session the move carries with it


def _copy_sessions(src: Store, dst: Store, ids: list[str], rekey: tuple[str, str] | None = None) -> set[str]:
    """Copy sessions (parents first), messages, usage and topic bindings; one transaction in *dst*. Returns the
    ids *dst* already had (not copied)."""
    cols = src.shared_columns(dst, "sessions")
    mcols = [c for c in src.shared_columns(dst, "messages") if c != "id"]
    rows = []
    for chunk in chunks(ids):
        rows += src.rows(f"SELECT {', '.join(cols)} FROM sessions WHERE id IN ({ph(chunk)})", chunk)
    order = {r["id"]: i for i, r in enumerate(rows)}
    rows.sort(key=lambda r: (r.get("started_at") or 0, order[r["id"]]))
    present = {r[0] for chunk in chunks(ids) for r in dst.conn.execute(
        f"SELECT id FROM sessions WHERE id IN ({ph(chunk)})", chunk)}
    with dst.write() as conn:
        for r in rows:
            if r["id"] in present:
                continue
            if r.get("parent_session_id") and r["parent_session_id"] not in order and not dst.scalar(
                    "SELECT 1 FROM sessions WHERE id = ?", (r["parent_session_id"],)):
                r["parent_session_id"] = None
            if rekey and r.get("session_key", "") and r["session_key"].startswith(rekey[0]):
                r["session_key"] = rekey[1] + r["session_key"][len(rekey[0]):]
            for ref in (r.get(c) for c in PROMPT_REFS if dst.has_table("system_prompts")):
                # every prompt the source's delete counts as referenced, the tool pin too (hostile try 16, T5:
                # the moved session's tool pin was in no store once the source's delete dropped its row)
                text = src.system_prompt(ref) if isinstance(ref, str) and ref else None
                if text is not None:
                    conn.execute("INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)", (ref, text))
            conn.execute(f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({ph(cols)})", list(r.values()))
            for m in src.iter_rows(f"SELECT {', '.join(mcols)} FROM messages WHERE session_id = ? ORDER BY id",
                                   (r["id"],)):
                conn.execute(f"INSERT INTO messages ({', '.join(mcols)}) VALUES ({ph(mcols)})", list(m.values()))
            for table in SIDE_TABLES:
                if src.has_table(table) and dst.has_table(table):
                    tcols = src.shared_columns(dst, table)
                    for t in src.iter_rows(f"SELECT {', '.join(tcols)} FROM {table} WHERE session_id = ?",
                                           (r["id"],)):
                        if rekey and "session_key" in t and str(t["session_key"]).startswith(rekey[0]):
                            t["session_key"] = rekey[1] + t["session_key"][len(rekey[0]):]
                        conn.execute(f"INSERT OR IGNORE INTO {table} ({', '.join(tcols)}) VALUES ({ph(tcols)})",
                                     list(t.values()))
    return present


def _why_not_removable(src: Store, dst: Store, ids: list[str], had: set[str]) -> str | None:
    """Why the stray copies of *ids* may not be deleted now (None when they may). Asked inside the delete's own
    transaction, so nothing Hermes writes after the answer is lost: a session written to since it was copied
    (its copy would miss the new messages), or one a turn or compression is working on, keeps its stray copy.
    *had*: the ids the target held before this run (not copied by it)."""
    for sid in ids:
        a = src.scalar("SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,))
        b = dst.scalar("SELECT COUNT(*) FROM messages WHERE session_id = ?", (sid,))
        if sid in had and a != b:
            # not this run's copy: the two went on apart, and no later run makes them one (hostile try 15, S10)
            return (f"{sid} is also a session of {dst.path} with {b} messages ({a} here): two copies under one id "
                    "that went on apart: keep both, or delete one by hand")
        if not dst.scalar("SELECT 1 FROM sessions WHERE id = ?", (sid,)) or a != b:
            return f"{sid} was written to since it was copied into {dst.path} ({a} messages here, {b} there)"
        cols = sorted(c for c in src.shared_columns(dst, "messages") if c != "id")
        # the row too, as the copy writes it (its parent unlinked where the target lacks it): a title, pin or
        # cost the user gave one of them makes them two (hostile try 13, Q6: the stray row was dropped)
        row_cols = sorted(c for c in src.shared_columns(dst, "sessions") if c != "parent_session_id")
        row = f"SELECT {', '.join(row_cols)} FROM sessions WHERE id = ?"
        if src.conn.execute(row, (sid,)).fetchall() != dst.conn.execute(row, (sid,)).fetchall():
            return (f"{sid} is also a session of {dst.path} with another row (title, marks or figures differ: two "
                    "sessions under one id: keep both, or delete one by hand)")
        for table in SIDE_TABLES:  # what the copy carries besides
            if src.has_table(table) and dst.has_table(table):
                tcols = sorted(c for c in src.shared_columns(dst, table) if c != "id")
                q = f"SELECT {', '.join(tcols)} FROM {table} WHERE session_id = ?"
                if sorted(map(repr, src.conn.execute(q, (sid,)))) != sorted(map(repr, dst.conn.execute(q, (sid,)))):
                    # hostile try 14, R4: the stray session's usage rows were deleted with it
                    return (f"{sid} is also a session of {dst.path} with other {table} rows (two sessions under "
                            "one id: keep both, or delete one by hand)")
        if _messages_digest(src, cols, sid) != _messages_digest(dst, cols, sid):
            # the same id with other messages there (a profile made by copying a store, then written to apart):
            # two conversations, neither copied over the other (hostile try 12, P11: the stray one was deleted)
            return (f"{sid} is also a session of {dst.path} with other messages (two conversations under one id: "
                    "keep both, or delete one by hand)")
    for sid, why in sorted(guard.busy(src, ids, active=False).items()):
        return f"{sid}: {why}"
    return None


def _messages_digest(store: Store, cols: list[str], sid: str) -> str:
    """SHA-256 of a session's messages in *store*, in order, over *cols* (the columns both stores have, ids aside:
    a copy numbers them afresh)."""
    h = hashlib.sha256()
    for row in store.conn.execute(f"SELECT {', '.join(cols)} FROM messages WHERE session_id = ? ORDER BY id", (sid,)):
        h.update(repr(tuple(row)).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def _move_routing(src: Store, dst: Store, keys: list[list[str]], rekey: tuple[str, str] | None = None) -> None:
    cols = src.shared_columns(dst, "gateway_routing")
    with dst.write() as conn:
        for scope, key in keys:
            for r in src.rows(f"SELECT {', '.join(cols)} FROM gateway_routing WHERE scope = ? AND session_key = ?",
                              (scope, key)):
                if rekey and r["session_key"].startswith(rekey[0]):
                    r["session_key"] = rekey[1] + r["session_key"][len(rekey[0]):]
                newer = dst.scalar("SELECT updated_at FROM gateway_routing WHERE scope = ? AND session_key = ?",
                                   (r["scope"], r["session_key"]))
                if newer is None or _newer(r["updated_at"], newer):
                    conn.execute(f"INSERT OR REPLACE INTO gateway_routing ({', '.join(cols)}) VALUES ({ph(cols)})",
                                 list(r.values()))
    with src.write() as conn:
        for scope, key in keys:
            conn.execute("DELETE FROM gateway_routing WHERE scope = ? AND session_key = ?", (scope, key))


def _paths(stores: dict[str, Path], f: Finding) -> tuple[Path, Path | None]:
    """The store a finding's rows are in and the store they go to (the same file for a rekey; None when the
    owner profile has no store yet)."""
    src = stores[f.store]
    if f.action == "rekey":
        return src, src
    return src, stores.get(DEFAULT if f.kind == "legacy_main" else (f.target or f.owner))


def _kept_reason(src: Store, dst: Store, f: Finding) -> str | None:
    """Why a move must leave *f*'s rows where they are, from what the two stores hold (None: it may go on).
    Asked before the snapshot, so a run that will write nothing takes none (hostile try 14, R2), and again
    with the stores open for the move."""
    lost_cols = _unmovable_columns(src, dst, f.session_ids, f.routing_keys)
    if lost_cols:
        # a profile not opened since a Hermes upgrade keeps the older schema: the copy would drop these
        # values, and the stray session would then be deleted (hostile try 14, R8)
        return (f"{dst.path} has no column {', '.join(lost_cols)} to receive their values "
                "(an older schema: let Hermes open that profile once); nothing moved")
    lost = _unmovable_tables(src, dst, f.session_ids)
    if lost:
        return (f"{dst.path} has no {', '.join(lost)} table to receive their rows "
                "(Hermes creates it on first use); nothing moved")
    clash = _title_clash(src, dst, f.session_ids)
    if clash:
        return clash
    if f.session_ids and not f.routing_keys:
        had = {r[0] for chunk in chunks(f.session_ids) for r in dst.conn.execute(
            f"SELECT id FROM sessions WHERE id IN ({ph(chunk)})", chunk)}
        if had == set(f.session_ids):  # nothing to copy: the stray copies go only if they are the same sessions
            why = _why_not_removable(src, dst, f.session_ids, had)
            if why and "under one id" in why:
                return f"{why}; the stray copy was kept"
    return None


def plan_kept(stores: dict[str, Path], findings: list[Finding]) -> tuple[list[Finding], list[dict[str, Any]]]:
    """The moves and rekeys of *findings* that can go on, and the ones kept with their reason: a store that fails
    its pages' check is not written (hostile try 15, S9: a stray session was moved into a damaged file and
    deleted from the healthy one), nor a move :func:`_kept_reason` refuses."""
    todo, kept = [], []
    damaged: dict[Path, str | None] = {}

    def damage(path: Path) -> str | None:
        if path not in damaged:
            with open_store(path, readonly=True) as store:
                lines = store.damage()
            damaged[path] = (f"{path} fails PRAGMA quick_check ({lines[0]}{' …' if len(lines) > 1 else ''}): "
                             f"a damaged store is not written (`{PROG} doctor --db {path}` says what to do); "
                             "nothing moved") if lines else None
        return damaged[path]

    for f in (f for f in findings if f.action in ("move", "rekey")):
        src_path, dst_path = _paths(stores, f)
        if dst_path is None:
            continue  # the owner profile exists but has no store yet: leave it reported
        if f.action == "move" and file_id(dst_path) == file_id(src_path):
            why = f"{dst_path} is the same file as {src_path}; nothing moved"  # the delete would lose the rows
        else:
            why = damage(src_path) or damage(dst_path)
        if why is None and f.action == "move":
            with open_store(src_path, readonly=True) as src, open_store(dst_path, readonly=True) as dst:
                why = _kept_reason(src, dst, f)
        if why is None:
            todo.append(f)
        else:
            kept.append({**f.as_dict(), "to": str(dst_path), "skipped": True, "reason": why})
    return todo, kept


def apply_findings(stores: dict[str, Path], findings: list[Finding]) -> list[dict[str, Any]]:
    """Carry out every finding whose action is move or rekey (those :func:`plan_kept` let through); returns
    what was done."""
    done = []
    for f in findings:
        if f.action not in ("move", "rekey"):
            continue
        src_path, dst_path = _paths(stores, f)
        if dst_path is None:
            continue
        if f.action == "move" and file_id(dst_path) == file_id(src_path):  # never: the delete would lose the rows
            done.append({**f.as_dict(), "to": str(dst_path), "skipped": True,
                         "reason": f"{dst_path} is the same file as {src_path}; nothing moved"})
            continue
        with open_store(src_path) as src:
            if f.action == "rekey":
                _rekey_in_place(src, f, ("agent:main:", f"agent:{f.store}:"))
                done.append({**f.as_dict(), "to": f.store})
                continue
            with open_store(dst_path) as dst:
                why = _kept_reason(src, dst, f)  # again, on the stores as they are now
                if why:
                    done.append({**f.as_dict(), "to": str(dst_path), "skipped": True, "reason": why})
                    continue
                if f.session_ids:
                    src.refuse_unknown_references()
                    had = _copy_sessions(src, dst, f.session_ids)
                    with src.write() as conn:
                        why = _why_not_removable(src, dst, f.session_ids, had)
                        if why is None:
                            delete_sessions(src, conn, f.session_ids)
                    if why:
                        done.append({**f.as_dict(), "to": str(dst_path), "skipped": True,
                                     "reason": f"{why}; the stray copy was kept"
                                               + ("" if "under one id" in why else " (run again to move it)")})
                        continue
                if f.routing_keys:
                    _move_routing(src, dst, f.routing_keys)
        done.append({**f.as_dict(), "to": str(dst_path)})
    return done


def _unmovable_columns(src: Store, dst: Store, ids: list[str], routing_keys: list[list[str]]) -> list[str]:
    """``table.column`` the target store lacks where the move holds values: the session rows, their messages and
    the side tables the copy carries (hostile try 15, S2: a usage column of a newer schema), and the routing rows."""
    lost = []
    tables = [("sessions", "id"), ("messages", "session_id")]
    tables += [(t, "session_id") for t in SIDE_TABLES if src.has_table(t) and dst.has_table(t)]
    if routing_keys and src.has_table("gateway_routing") and dst.has_table("gateway_routing"):
        tables.append(("gateway_routing", ""))  # keyed by (scope, session_key)
    for table, key in tables:
        have = set(dst.columns(table))
        for col in (c for c in src.columns(table) if c not in have):
            quoted = quote_ident(col)
            if key:
                held = any(src.scalar(f"SELECT 1 FROM {table} WHERE {key} IN ({ph(c)}) AND {quoted} IS NOT NULL "
                                      "LIMIT 1", c) for c in chunks(ids))
            else:
                held = any(src.scalar(f"SELECT 1 FROM {table} WHERE scope = ? AND session_key = ? AND {quoted} IS "
                                      "NOT NULL LIMIT 1", tuple(k)) for k in routing_keys)
            if held:
                lost.append(f"{table}.{col}")
    return lost


def _title_clash(src: Store, dst: Store, ids: list[str]) -> str | None:
    """A title of *ids* that another session of the target has (titles are unique in Hermes: its index would stop
    the whole run at this move, hostile try 15, S11); None when there is none."""
    if not (src.has_column("sessions", "title") and dst.has_column("sessions", "title")):
        return None
    for chunk in chunks(ids):
        for sid, title in src.conn.execute(f"SELECT id, title FROM sessions WHERE id IN ({ph(chunk)}) AND title IS "
                                           "NOT NULL", chunk):
            other = dst.scalar("SELECT id FROM sessions WHERE title = ? AND id <> ?", (title, sid))
            if other is not None:
                return (f"{sid}'s title {str(title)[:80]!r} is session {other}'s in {dst.path} (titles are unique in "
                        "Hermes: rename one of them, `hermes-maint rename`); nothing moved")
    return None


def _unmovable_tables(src: Store, dst: Store, ids: list[str]) -> list[str]:
    """Side tables with rows for *ids* that the target store lacks: moving would drop those rows."""
    lost = []
    for table in SIDE_TABLES:
        if src.has_table(table) and not dst.has_table(table) and any(
                src.scalar(f"SELECT 1 FROM {table} WHERE session_id IN ({ph(c)}) LIMIT 1", c) for c in chunks(ids)):
            lost.append(table)
    return lost


def _newer(a: Any, b: Any) -> bool:
    """Whether routing time *a* is later than *b* (a time that is not a number counts as the oldest)."""
    def at(v: Any) -> float:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else float("-inf")
    return at(a) > at(b)


def _rekey_in_place(store: Store, f: Finding, rekey: tuple[str, str]) -> None:
    old, new = rekey
    with store.write() as conn:
        for chunk in chunks(f.session_ids):
            conn.execute(f"UPDATE sessions SET session_key = ? || substr(session_key, ?) "
                         f"WHERE id IN ({ph(chunk)}) AND session_key LIKE ?", [new, len(old) + 1, *chunk, old + "%"])
            if store.has_column("sessions", "profile_name"):
                conn.execute(f"UPDATE sessions SET profile_name = ? WHERE id IN ({ph(chunk)}) "
                             f"AND profile_name IN ('default', 'main')", [f.store, *chunk])
        if f.routing_keys and store.has_table("gateway_routing"):
            for scope, key in f.routing_keys:
                # the newer of the two rows for one chat stays, as a move keeps it (hostile try 12, P17: the legacy
                # row replaced the profile's newer one, and the gateway resumed the chat in the old session)
                renamed = new + key[len(old):]
                ours = store.scalar("SELECT updated_at FROM gateway_routing WHERE scope = ? AND session_key = ?",
                                    (scope, renamed))
                theirs = store.scalar("SELECT updated_at FROM gateway_routing WHERE scope = ? AND session_key = ?",
                                      (scope, key))
                if ours is not None and not (theirs is not None and _newer(theirs, ours)):
                    conn.execute("DELETE FROM gateway_routing WHERE scope = ? AND session_key = ?", (scope, key))
                    continue
                conn.execute("UPDATE OR REPLACE gateway_routing SET session_key = ? "
                             "WHERE scope = ? AND session_key = ?", (renamed, scope, key))
        if store.has_table("telegram_dm_topic_bindings"):
            conn.execute("UPDATE telegram_dm_topic_bindings SET session_key = ? || substr(session_key, ?) "
                         "WHERE session_key LIKE ?", (new, len(old) + 1, old + "%"))


def repair_stores(op: Operator, *, legacy_main: str | None = None, apply: bool = False,
                  force: bool = False) -> dict[str, Any]:
    """``hermes-maint repair-profiles``: every store scanned together; with *apply*, once no process holds
    any of them and the operator agrees, a snapshot of every store and then each move or rekey."""
    stores, findings = scan(legacy_main=legacy_main)
    actionable = [f for f in findings if f.action in ("move", "rekey")]
    unreadable = [f for f in findings if f.kind == "unreadable_store"]
    report = {"stores": {k: str(v) for k, v in stores.items()}, "findings": [f.as_dict() for f in findings],
              "apply": apply, "snapshot": None, "applied": []}
    if not apply or not actionable:
        return report
    if unreadable:
        raise MaintError(f"refusing to apply while a store cannot be read ({unreadable[0].reason}); "
                         "nothing was changed")
    for path in stores.values():
        refuse_if_held(path, force=force, doing="repair", advice=STOP_HERMES)
    todo, kept = plan_kept(stores, actionable)
    report["applied"] = kept
    if not todo:  # nothing will be written: no confirmation, no snapshot (hostile try 14, R2)
        return report
    op.confirm(f"Apply {len(todo)} repair(s) across {len(stores)} store(s)?",
               [finding_line(f.as_dict()) for f in todo] + [f"  kept: {k['reason']}" for k in kept])
    report["snapshot"] = str(copy_stores(stores, label="repair-profiles"))
    report["applied"] = kept + apply_findings(stores, todo)
    return report


def store_targets(report: dict[str, Any]) -> list[StoreTarget]:
    """The stores a :func:`repair_stores` report covers, as targets (each gets the run in its history)."""
    return [StoreTarget(Path(path), None if name == DEFAULT else name) for name, path in report["stores"].items()]


def finding_line(f: dict[str, Any]) -> str:
    """One finding as the report and the confirmation show it."""
    if f["kind"] == "unreadable_store":
        return f"  [unreadable_store] {f['reason']} (the other stores were scanned)"
    if f["kind"] == "odd_ids":
        return f"  [odd_ids] in {f['store']}'s store: {f['reason']}"
    if f["kind"] == "shared_store":
        return f"  [shared_store] {f['reason']}; rows of either name stay where they are"
    what = f"{len(f['session_ids'])} session(s)" + (f", {len(f['routing_keys'])} routing row(s)"
                                                     if f["routing_keys"] else "")
    return f"  [{f['kind']}] in {f['store']}'s store, belonging to {f['owner']}: {what} -> {f['action']}"
