"""The lineage rules of :mod:`maint.store.lineage` over session records held in memory.

Stores are planned in SQL; this is for records that are not in a store yet: the sessions of an
export file being imported (:mod:`maint.ops.importer`), read into records anyway. The differential
test checks that it groups, tips and nests exactly as the SQL does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from maint.store.catalog import SessionInfo
from maint.store.lineage import BRANCH, COMPRESSION, DELEGATE, OTHER, RESET, RESET_END_REASONS, ROOT


def classify(s: SessionInfo, sessions: dict[str, SessionInfo]) -> str:
    parent = sessions.get(s.parent_id) if s.parent_id else None
    if parent is None:
        if s.delegate_from and s.delegate_from in sessions and s.delegate_from != s.id:
            return DELEGATE
        return ROOT
    forks_parent = parent.id in (s.branched_from, s.delegate_from, s.reset_from)
    if parent.end_reason == "compression" and not forks_parent and s.source != "tool":
        return COMPRESSION
    if s.delegate_from:
        return DELEGATE
    if s.branched_from or (
        parent.end_reason == "branched" and parent.ended_at is not None and s.started_at >= parent.ended_at
    ):
        return BRANCH
    if s.reset_from or (
        parent.end_reason in RESET_END_REASONS and s.session_key and s.session_key == parent.session_key
    ):
        return RESET
    return OTHER


@dataclass
class Chain:
    """One compression lineage, oldest segment first."""

    ids: list[str]
    tip: str
    delegate_parent: str | None = None
    children: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.ids[0]


@dataclass
class Lineage:
    sessions: dict[str, SessionInfo]
    kind: dict[str, str]
    chain_of: dict[str, str]
    chains: dict[str, Chain]

    def subtree(self, key: str) -> list[str]:
        """Chain keys of *key* and every chain delegated from it, transitively."""
        out, stack, seen = [], [key], set()
        while stack:
            k = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            out.append(k)
            stack.extend(self.chains[k].children)
        return out

    def subtree_session_ids(self, key: str) -> list[str]:
        return [sid for k in self.subtree(key) for sid in self.chains[k].ids]


def _pick_tip(ids: Iterable[str], sessions: dict[str, SessionInfo], children: dict[str, list[str]]) -> str:
    """The live end of a chain: follow continuations, preferring ones still going."""
    ids = set(ids)
    # one pass: every member against every member made a 20,000-segment lineage take 96 s (hostile try 19, W4)
    continued = {c for p in ids for c in children.get(p, ())}
    roots = [i for i in ids if i not in continued]
    current = min(roots or ids, key=lambda i: (sessions[i].started_at, i))
    seen = {current}
    while True:
        nxt = [c for c in children.get(current, []) if c in ids and c not in seen]
        if not nxt:
            return current

        def rank(c: str):
            s = sessions[c]
            state = 0 if s.end_reason == "compression" else 1 if s.ended_at is None else 2
            return (state, -s.last_active, -s.started_at, c)

        current = min(nxt, key=rank)
        seen.add(current)


def build(sessions: dict[str, SessionInfo]) -> Lineage:
    kind = {sid: classify(s, sessions) for sid, s in sessions.items()}
    parent_of: dict[str, str] = {sid: sid for sid in sessions}

    def find(x: str) -> str:
        while parent_of[x] != x:
            parent_of[x] = parent_of[parent_of[x]]
            x = parent_of[x]
        return x

    comp_children: dict[str, list[str]] = {}
    for sid, k in kind.items():
        if k == COMPRESSION:
            p = sessions[sid].parent_id
            comp_children.setdefault(p, []).append(sid)
            a, b = find(sid), find(p)
            if a != b:
                parent_of[a] = b
    groups: dict[str, list[str]] = {}
    for sid in sessions:
        groups.setdefault(find(sid), []).append(sid)
    chains: dict[str, Chain] = {}
    chain_of: dict[str, str] = {}
    for members in groups.values():
        members.sort(key=lambda i: (sessions[i].started_at, i))
        chain = Chain(ids=members, tip=_pick_tip(members, sessions, comp_children))
        chains[chain.key] = chain
        for sid in members:
            chain_of[sid] = chain.key
    for key, chain in chains.items():
        for sid in chain.ids:
            if kind[sid] != DELEGATE:
                continue
            s = sessions[sid]
            target = s.parent_id if s.parent_id in sessions else s.delegate_from
            if target in chain_of and chain_of[target] != key:
                chain.delegate_parent = chain_of[target]
                break
    # a chain may not be its own delegate ancestor. A walk stops at a chain known to reach a root (a break only
    # ever takes a link away, so that stays true): each walked from its own end to the root made a delegate chain
    # of 20,000 take 23 s (hostile try 19, W5)
    rooted: set[str] = set()
    for key, chain in chains.items():
        seen, path, cur = {key}, [key], chain.delegate_parent
        while cur is not None and cur not in rooted:
            if cur in seen:
                chain.delegate_parent = None
                path = [key]  # the loop is broken here; the others on the walk may still be in one
                break
            seen.add(cur)
            path.append(cur)
            cur = chains[cur].delegate_parent
        rooted.update(path)
    for key, chain in chains.items():
        if chain.delegate_parent:
            chains[chain.delegate_parent].children.append(key)
    return Lineage(sessions=sessions, kind=kind, chain_of=chain_of, chains=chains)
