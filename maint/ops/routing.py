"""repair-routing: gateway conversations stranded in rows that lost their routing identity.

A gateway row whose ``session_key`` was never written (a crashed write path) holds messages that
restart recovery cannot find, so the chat resumes an older session instead. Each such *orphan* is
adopted by the routed row it continues, and only on unambiguous evidence (upstream Hermes,
``find_orphaned_gateway_sessions`` / ``adopt_orphaned_gateway_session`` in hermes_state_gateway.py,
and ``_cmd_repair_routing`` in hermes_cli/sessions_cmd.py):

* lineage: the orphan's ``parent_session_id`` is a routed row of the same platform (a recorded fact,
  no time window);
* contiguity: exactly one routed row of the same platform (same user, when both name one) went
  quiet within ``max_gap_s`` of the orphan's start, and before the orphan's last activity.

Ambiguity (two candidates, or two orphans claiming one predecessor) is reported with its reason and
never applied. Both rows must belong to the same profile (a missing ``profile_name`` reads as the
store's own). Adoption copies the routing identity onto the orphan (filling only its empty columns)
and retires the predecessor with ``end_reason = 'superseded_by_repair'``, a reason restart recovery
does not resume. Branch, delegate and ``tool`` rows are unrouted by design and never reported.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from maint.store.catalog import SessionInfo, load_sessions
from maint.store.connection import Store, open_store
from maint.store.holders import refuse_if_held
from maint.store.snapshots import copy_stores
from maint.store.targets import is_default_name, key_profile, profile_folder_by_path, profile_of
from maint.store.text_check import readable_row_sql, unreadable_rows

if TYPE_CHECKING:
    from maint.flow import Operator
    from maint.store.targets import StoreTarget

STOP_GATEWAY = "stop the gateway first: it holds the old routing in memory and would write it back over the repair"

DEFAULT_MAX_GAP_S = 900.0
REPAIR_END_REASON = "superseded_by_repair"
# Platforms the gateway routes. A source that has any routed row in the store counts as one too.
GATEWAY_SOURCES = frozenset({
    "telegram", "discord", "slack", "whatsapp", "signal", "matrix", "teams", "mattermost", "email", "sms",
    "homeassistant", "dingtalk", "feishu", "wecom", "weixin", "line", "bluebubbles", "qqbot", "webhook",
})
IDENTITY_COLUMNS = ("chat_id", "chat_type", "thread_id", "user_id", "origin_json", "display_name")


def store_owner(path: Path) -> str:
    """The profile a store belongs to (:func:`maint.store.targets.profile_of`); outside this $HERMES_HOME (a cron
    without it, another user's home) a store in a ``profiles/NAME/`` folder is NAME's by its path, as its config is
    (hostile try 15, S7), and any other store is its folder's default profile: that folder is its home, as for its
    config (docs/configuration.md). Never unknown: an unknown owner let a donor of any profile pass (hostile try
    16, T6: root's cron adopted another profile's chat key in a home's default store). The path rule comes first:
    `hermes -p NAME` runs with HERMES_HOME=…/profiles/NAME, whose store is NAME's, not "default" (try 17, U5)."""
    folder = profile_folder_by_path(path)  # first: Hermes runs a profile with HERMES_HOME=…/profiles/NAME (U5)
    if folder is not None and not is_default_name(folder.name):
        return folder.name
    return profile_of(path) or "default"


def _profiles(store: Store) -> dict[str, str | None]:
    if not store.has_column("sessions", "profile_name"):
        return {}
    return dict(store.conn.execute(f"SELECT id, profile_name FROM sessions s WHERE {readable_row_sql(store, 's')}"))


def _may_have_orphans(store: Store) -> bool:
    """Whether any row could be an orphan (the rule below, before the model_config markers): one SQL pass
    that holds nothing per session, so a store whose gateway rows are all routed loads none of them."""
    gateway = ", ".join(f"'{s}'" for s in sorted(GATEWAY_SOURCES))
    end = "k.end_reason" if store.has_column("sessions", "end_reason") else "NULL"
    return bool(store.scalar(f"""
        SELECT 1 FROM sessions s
        WHERE COALESCE(s.session_key, '') = '' AND s.source IS NOT 'tool'
          AND (s.source IN ({gateway}) OR s.source IN (
                SELECT k.source FROM sessions k
                WHERE COALESCE(k.session_key, '') <> '' AND {end} IS NOT '{REPAIR_END_REASON}'))
          AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id)
        LIMIT 1"""))


def find_orphans(store: Store, max_gap_s: float = DEFAULT_MAX_GAP_S, owner: str | None = None,
                 now: float | None = None) -> list[dict[str, Any]]:
    """Every orphaned gateway row with the proposed adoption and its evidence, or why there is none."""
    if not store.has_column("sessions", "session_key"):
        return []
    with store.snapshot():
        if not _may_have_orphans(store):
            return []  # the usual case, answered without a record per session (doctor runs this daily)
        sessions = load_sessions(store, now)
        profiles = _profiles(store)
        counts = dict(store.conn.execute(
            "SELECT session_id, COUNT(*) FROM messages WHERE session_id IN "
            f"(SELECT id FROM sessions s WHERE {readable_row_sql(store, 's')}) GROUP BY session_id"))

    def profile_of(s: SessionInfo) -> str | None:
        return profiles.get(s.id) or owner

    def same_profile(d: SessionInfo, mine: str | None) -> bool:
        """A donor of the orphan's own profile, by its row and by the profile its key names; the rule holds when
        the store's owner is unknown too (hostile try 15, S7: a donor of profile 'other' adopted an orphan)."""
        return profile_of(d) == mine and (mine is None or key_profile(d.session_key) in (None, mine))

    keyed = [s for s in sessions.values() if s.session_key and s.end_reason != REPAIR_END_REASON]
    routed_sources = {s.source for s in keyed}
    orphans = sorted((s for s in sessions.values()
                      if not s.session_key and counts.get(s.id) and s.source != "tool"
                      and not s.branched_from and not s.delegate_from
                      and (s.source in GATEWAY_SOURCES or s.source in routed_sources)),
                     key=lambda s: (s.started_at, s.id))
    records = []
    for o in orphans:
        donor, reason = None, ""
        mine = profile_of(o)
        if o.parent_id:
            evidence = "lineage"
            parent = sessions.get(o.parent_id)
            if parent and parent.session_key and parent.source == o.source and same_profile(parent, mine):
                donor = parent
            else:
                reason = "its parent session carries no routing identity of this platform"
        else:
            evidence = "contiguity"
            candidates = [d for d in keyed if d.id != o.id and d.source == o.source
                          and (not d.user_id or not o.user_id or d.user_id == o.user_id)
                          and o.started_at - max_gap_s <= d.last_active <= o.started_at + max_gap_s
                          and d.last_active < o.last_active
                          and same_profile(d, mine)]
            if not candidates:
                reason = f"no routed session of this platform went quiet within {max_gap_s:g}s of its start"
            elif len(candidates) > 1:
                reason = ("ambiguous: " + " and ".join(sorted(d.id for d in candidates)[:2])
                          + " both went quiet within the window")
            else:
                donor = candidates[0]
        records.append({"orphan_id": o.id, "source": o.source, "message_count": counts.get(o.id, 0),
                        "started_at": o.started_at, "last_active": o.last_active,
                        "donor_id": donor.id if donor else None, "session_key": donor.session_key if donor else None,
                        "evidence": evidence, "adoptable": donor is not None, "reason": reason})
    claims: dict[str, int] = {}
    for r in records:
        if r["adoptable"]:
            claims[r["donor_id"]] = claims.get(r["donor_id"], 0) + 1
    for r in records:
        if r["adoptable"] and claims[r["donor_id"]] > 1:
            r.update(adoptable=False, reason=f"ambiguous: more than one unrouted session claims {r['donor_id']}")
    return records


def adopt(store: Store, orphan_id: str, donor_id: str, owner: str | None = None) -> str | None:
    """One adoption in one transaction, re-checked inside it. Returns None when done, else why not."""
    cols = [c for c in IDENTITY_COLUMNS if store.has_column("sessions", c)]
    profile = "profile_name" if store.has_column("sessions", "profile_name") else "NULL"
    with store.write() as conn:
        rows = {r[0]: r[1:] for r in conn.execute(
            f"SELECT id, session_key, source, {profile}, EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id) "
            f"FROM sessions s WHERE id IN (?, ?)", (orphan_id, donor_id))}
        if orphan_id not in rows or donor_id not in rows:
            return "one of the two sessions is gone"
        (o_key, o_src, o_prof, o_msgs), (d_key, d_src, d_prof, _) = rows[orphan_id], rows[donor_id]
        if o_key or not d_key or o_src != d_src or not o_msgs:
            return "the sessions changed since they were reported (a running gateway?)"
        if owner is not None and (o_prof or owner) != (d_prof or owner):
            return "the two sessions belong to different profiles"
        fill = "".join(f", {c} = COALESCE({c}, (SELECT {c} FROM sessions WHERE id = ?))" for c in cols)
        conn.execute(f"UPDATE sessions SET session_key = ?{fill}, parent_session_id = COALESCE(parent_session_id, ?) "
                     "WHERE id = ? AND session_key IS NULL", [d_key, *[donor_id] * len(cols), donor_id, orphan_id])
        # A donor that ended in a compression stays marked so: its end_reason is what makes the orphan
        # its continuation, and overwriting it would split the conversation (and expose the earlier
        # segment to prune on its own).
        # So does one that ended in a /branch: Hermes lists a branch child by its parent's 'branched' (rows written
        # before its _branched_from marker), and hid the repaired conversation without it (hostile try 16, T8).
        conn.execute("UPDATE sessions SET ended_at = COALESCE(ended_at, ?), end_reason = CASE WHEN end_reason IN "
                     "('compression', 'branched') THEN end_reason ELSE ? END WHERE id = ?",
                     (time.time(), REPAIR_END_REASON, donor_id))
    return None



def repair_store(target: StoreTarget, op: Operator, *, max_gap_seconds: float = 900.0, apply: bool = False,
                 force: bool = False) -> dict[str, Any]:
    """``hermes-maint repair-routing`` on one store: the orphans and their evidence; with *apply*, once no
    process holds the store and the operator agrees, a snapshot and then each adoption."""
    owner = store_owner(target.path)
    with open_store(target.path, readonly=True) as store:
        findings = find_orphans(store, max_gap_seconds, owner)
        unread = unreadable_rows(store)  # left out of the search, named (issue 24: one bad row never blocks the rest)
    todo = [f for f in findings if f["adoptable"]]
    report = {"store": str(target.path), "max_gap_seconds": max_gap_seconds, "findings": findings,
              "adoptable": len(todo), "apply": apply, "snapshot": None, "adopted": [], "not_adopted": [],
              "skipped_not_utf8": unread}
    if not apply or not todo:
        return report
    refuse_if_held(target.path, force=force, doing="repair routing", advice=STOP_GATEWAY)
    op.confirm(f"Adopt {len(todo)} orphaned session(s) in {target.path}?", [
        f"  {f['orphan_id']} -> {f['session_key']} (from {f['donor_id']}, evidence: {f['evidence']})" for f in todo])
    name = target.profile or owner or "store"
    report["snapshot"] = str(copy_stores({name: target.path}, label="repair-routing"))
    with open_store(target.path) as store:
        for f in todo:
            why = adopt(store, f["orphan_id"], f["donor_id"], owner)
            entry = {"orphan_id": f["orphan_id"], "donor_id": f["donor_id"], "session_key": f["session_key"]}
            if why:
                report["not_adopted"].append({**entry, "reason": why})
            else:  # the donor's end as it is now ('compression' and 'branched' are kept)
                report["adopted"].append({**entry, "donor_end_reason": store.scalar(
                    "SELECT end_reason FROM sessions WHERE id = ?", (f["donor_id"],))})
    return report
