"""Hermes's config.yaml: read with defaults for missing keys; one key written back by ``autoprune on|off``.

The file holds the user's API keys and is often a symlink into a dotfiles repository, so the
write-back is a targeted edit of one line (see :func:`set_session_key`), not a YAML re-dump.
"""

from __future__ import annotations

import json
import os
import re
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from maint import files
from maint.errors import MaintError, UsageError
from maint.store.targets import hermes_home, home_of, is_default_name, profile_folder_by_path

SESSION_DEFAULTS: dict[str, Any] = {
    "auto_prune": False,
    "auto_archive": False,
    "auto_archive_days": 3,
    "retention_days": 90,
    "vacuum_after_prune": True,
    "min_vacuum_interval_days": 30,
    "min_interval_hours": 24,
    "max_export_messages": 20000,
}

# Our own settings live in config.yaml's ``hermes_maint:`` mapping; Hermes ignores it.
MAINT_SECTION = "hermes_maint"


@dataclass
class Config:
    path: Path
    exists: bool
    raw: Any = None
    sessions: dict[str, Any] = field(default_factory=dict)
    journal_mode: str | None = None
    maint_section: Any = None  # the raw ``hermes_maint:`` value (validated where it is used)
    owner: int | None = None  # the uid that owns the file: whose word a path named in it is

    def maint(self, key: str, default: Any = None) -> Any:
        """``hermes_maint.<key>`` (dotted for nested mappings), or *default* when absent or not a mapping."""
        node: Any = self.maint_section
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def session(self, key: str) -> Any:
        return self.sessions.get(key, SESSION_DEFAULTS.get(key))

    def has_session_key(self, key: str) -> bool:
        return key in self.sessions


def yaml_loader() -> YAML:
    """YAML 1.1, as Hermes reads its config with PyYAML: ``yes``/``no``/``on``/``off`` are booleans."""
    yaml = YAML(typ="rt")
    yaml.version = (1, 1)
    return yaml


def config_path_for(store: Path | None, profile: str | None = None) -> Path:
    """The config.yaml Hermes itself uses for a store: a profile is a HERMES_HOME of its own.

    The default store reads $HERMES_HOME/config.yaml, a profile's store
    $HERMES_HOME/profiles/NAME/config.yaml, whatever path names the file; any other store given with --db reads
    the config.yaml beside it (that folder is its Hermes home), defaults when there is none: never the runner's
    home's (hostile try 12, P18: ``sweep --db`` on a profile's store obeyed the default profile's retention and
    pruned it; try 15, S4: root's retention pruned another user's store whose home had no config.yaml).
    """
    if profile is not None:
        return (hermes_home() if is_default_name(profile) else hermes_home() / "profiles" / profile) / "config.yaml"
    if store is not None:
        given = Path(store).expanduser().parent
        beside = given / "config.yaml"
        # by the path given or the one it leads to: a profile folder may be a link (hostile try 13, Q1), and
        # reached by a relative path or through another link (try 14, R1): the home's own profiles decide
        if os.path.lexists(beside) or profile_folder_by_path(store) is not None:
            return beside
        home = home_of(store)  # the folder whose store it is, not a name (hostile try 15, S1: profiles/default)
        return (home or given) / "config.yaml"
    return hermes_home() / "config.yaml"


def load_config(path: Path | None = None, *, store: Path | None = None) -> Config:
    """The config.yaml at *path* (default: $HERMES_HOME/config.yaml): defaults when it is absent; a file
    we may not trust or cannot parse is a usage error naming it (see :func:`read_trusted`, :func:`parse_yaml`).
    With *store*, the config steers that store: it must be owned by us, root or the store's owner."""
    path = path or hermes_home() / "config.yaml"
    if not path.exists():
        return Config(path=path, exists=False)
    text, owner = read_trusted(path, "config", store=store)
    data = parse_yaml(text, path, what="config")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}:1: malformed config: top level must be a mapping")
    sessions = data.get("sessions") or {}
    if not isinstance(sessions, dict):
        raise UsageError(f"{path}: 'sessions' must be a mapping")
    database = data.get("database") or {}
    journal = database.get("journal_mode") if isinstance(database, dict) else None
    return Config(path=path, exists=True, raw=data, sessions=dict(sessions),
                  journal_mode=str(journal).lower() if journal is not None else None,
                  maint_section=data.get(MAINT_SECTION), owner=owner)


# -- trust and bounds: every YAML file that steers us (config.yaml, job files) -----------------------

YAML_MAX_NODES = 20_000  # values and keys, aliases expanded: a config has hundreds
YAML_MAX_DEPTH = 64


def read_trusted(path: Path, what: str, *, store: Path | None = None,
                 foreign_links: str = "readable") -> tuple[str, int]:
    """The text of a file that steers us, and its owner, as OpenSSH and sudo read theirs: a regular file (a
    link is followed), owned by us, by root, or (with *store*) by the owner of the store it configures, else
    by the owner of its folder (who could replace it anyway); and writable by its owner alone. A file planted
    by another user beside a store in a shared folder, or a config in one user's folder steering another
    user's store through a link, is refused, never obeyed. The way to it is checked first (see
    :func:`_check_way`): nothing is read through a link its owner could not have read through themselves; and a
    file with a second name (a hard link) only when the store's owner (or the folder's) owns it
    (:func:`maint.files.foreign_second_name`)."""
    if store is not None:  # the store's owner, or (no store yet) the owner of the folder it will be made in
        vouches = files.owner_of(store) or files.owner_of(Path(os.path.realpath(store)).parent)
    else:
        vouches = files.owner_of(Path(os.path.realpath(path)).parent)
    vouched = vouches[0] if vouches else None
    _check_way(path, what, foreign_links, vouched)
    try:
        data, st = files.read_regular(path, what=what)
    except files.FileRefused as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the {what} ({exc.strerror or exc})") from None
    # The check and the read are two lookups of the name: judge the way again, now that the file is read, and
    # keep what was read only if the name still leads to that same file (a link flipped in between is refused).
    _check_way(path, what, foreign_links, vouched)
    try:
        named = os.stat(path)
    except OSError:
        named = None
    if named is None or (named.st_dev, named.st_ino) != (st.st_dev, st.st_ino):
        raise UsageError(f"{path}: changed while it was being read; refusing to obey it as the {what}")
    why = files.untrusted_by(st, also_trusted=vouched)
    whose = "the store's owner" if store is not None else "the owner of its folder"
    if why:
        raise UsageError(f"{path}: {why}; refusing to obey it as the {what} (it must be owned by you, root or "
                         f"{whose}, and writable by its owner only: chown it, or chmod go-w it)")
    why = files.foreign_second_name(st, vouched)
    if why:
        raise UsageError(f"{path}: {why} ({whose}); refusing to read it as the {what} (a file with a second name "
                         f"is read only when {whose} owns it: copy the file instead of linking it)")
    try:
        return data.decode("utf-8"), st.st_uid
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: the {what} is not UTF-8 text (byte {exc.start}); refusing") from None


def _check_way(path: Path, what: str, foreign_links: str, vouched: int | None) -> None:
    """The links and folders on the way to a file that steers us.

    A symbolic link owned by another user (not us, not root) is followed only if it is the store's owner's
    (*vouched*: the one whose file may configure the store) and that user could read the target themselves
    (*foreign_links* ``"readable"``: a user's config.yaml linked to a root-only file would otherwise be read,
    and its values echoed, by a root run), or never (``"refuse"``: job files, which make a run act). A third
    user's link in a shared sticky folder, pointing at some YAML file the store's owner owns, would choose
    what configures the store (hostile try 7, J3). And each folder holding a name on the way must not be
    writable by others without the sticky bit, as OpenSSH's StrictModes requires: anyone there could swap
    the file for their own.
    """
    me = os.geteuid() if hasattr(os, "geteuid") else None
    links = files.links_on(path)
    for link, st, _ in links:
        if st.st_uid in (0, me):
            continue
        if foreign_links == "refuse" or st.st_uid != vouched:
            raise UsageError(f"{path}: reached through {link}, a symbolic link owned by another user (uid "
                             f"{st.st_uid}); refusing to obey it as the {what} (use the file itself, not a link)")
        if not files.user_may(st.st_uid, path, os.R_OK):
            raise UsageError(f"{path}: reached through {link}, a symbolic link owned by uid {st.st_uid}, to a file "
                             f"that user cannot read; refusing to read it as the {what}")
    holders = [holder for _, _, holder in links] + [Path(os.path.realpath(path)).parent]
    for folder in dict.fromkeys(holders):
        try:
            why = files.loose_folder(os.stat(folder), folder)
        except OSError:
            continue  # reading the file reports what is wrong
        if why:
            raise UsageError(f"{path}: its folder {folder} {why}; anyone there could replace the {what}; refusing "
                             "to obey it (chmod go-w, or +t, the folder)")


def parse_yaml(text: str, path: Path, *, what: str = "config", safe: bool = False) -> Any:
    """YAML 1.1 as Hermes reads it (round-trip, or *safe* plain data), refused with one line naming the file
    when malformed, nested deeper than :data:`YAML_MAX_DEPTH`, or expanding (aliases included) to more
    than :data:`YAML_MAX_NODES` values: an alias bomb is refused before anything expands it."""
    yaml = YAML(typ="safe", pure=True) if safe else yaml_loader()
    if not safe:
        yaml.version = (1, 1)
    try:
        node = yaml.compose(text)
        if node is not None:
            _check_bounds(node, path, what)
        with warnings.catch_warnings():  # ruamel's notes on YAML 1.1 spellings are not ours to print
            warnings.simplefilter("ignore")
            return yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else "?"
        problem = (exc.problem or exc.context or "malformed YAML").strip()
        if exc.problem and exc.context and exc.context_mark is not None:
            problem += f" ({exc.context.strip()} at line {exc.context_mark.line + 1})"
        raise UsageError(f"{path}:{line}: malformed YAML in the {what}: {problem}") from None
    except YAMLError as exc:
        raise UsageError(f"{path}: malformed YAML in the {what}: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise UsageError(f"{path}: malformed {what}: nested deeper than {YAML_MAX_DEPTH} levels; refusing") from None
    except (ValueError, OverflowError, KeyError, IndexError, TypeError) as exc:
        # a scalar that is not the type it looks like or is tagged with (2024-02-30 as a date, !!bool "maybe",
        # !!int ""): the loader's constructors raise whatever their parsing hits (hostile tries 9 and 10, L3, M7)
        raise UsageError(f"{path}: malformed YAML in the {what}: a value cannot be read as the type it looks like "
                         f"({exc}); quote it to keep it as text") from None


def _check_bounds(root: Any, path: Path, what: str) -> None:
    """Size and height of the document as it would expand, from its node graph (shared aliases counted once
    per use, computed once per node)."""
    done: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, height)
    stack: list[tuple[Any, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, finished = stack.pop()
        if depth > YAML_MAX_DEPTH:
            raise UsageError(f"{path}: malformed {what}: nested deeper than {YAML_MAX_DEPTH} levels (or an alias "
                             "that contains itself); refusing")
        children = _children(node)
        if finished:
            size = 1 + sum(done[id(c)][0] for c in children)
            height = 1 + max((done[id(c)][1] for c in children), default=0)
            if size > YAML_MAX_NODES:
                raise UsageError(f"{path}: malformed {what}: expands (aliases included) to more than "
                                 f"{YAML_MAX_NODES} values; refusing")
            if height > YAML_MAX_DEPTH:
                raise UsageError(f"{path}: malformed {what}: nested deeper than {YAML_MAX_DEPTH} levels; refusing")
            done[id(node)] = (size, height)
            continue
        if id(node) in done:
            continue
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in done)


def _children(node: Any) -> list[Any]:
    value = getattr(node, "value", None)
    if not isinstance(value, list):
        return []
    out = []
    for item in value:
        out.extend(item if isinstance(item, tuple) else (item,))
    return out


def set_session_key(path: Path, key: str, value: bool | int, *, store: Path | None = None) -> None:
    """Write ``sessions.<key>: <value>`` into config.yaml by editing one line (or adding one or two).

    A YAML re-dump would re-indent the file, drop quotes, the BOM and CRLF line endings, and write
    into an anchored mapping so that every alias of it gains the key. Instead the one line that
    holds the key is rewritten (or a line is inserted under ``sessions:``), every other byte is
    kept, and the result is parsed again and must differ from the original in that key alone.
    The file is replaced atomically at its real location (a symlink stays a symlink and its target
    is updated), keeping its mode and owner; a new one is made only in an existing folder. A run as root
    writes only where the owner of *store* (the store the config steers) could write it themselves
    (:func:`_check_root_write`).
    """
    literal = _literal(value)
    _check_root_write(path, store)
    target = _real_target(path)
    if target is None:
        _create_config(path, f"sessions:\n  {key}: {literal}\n", store)
        return
    fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        before = os.fstat(fh.fileno())
        raw = fh.read()
    bom = b"\xef\xbb\xbf" if raw.startswith(b"\xef\xbb\xbf") else b""
    try:
        text = raw[len(bom):].decode("utf-8")
    except UnicodeDecodeError:
        raise MaintError(f"{path}: not UTF-8 text; not rewriting it (add sessions.{key}: {literal} by hand)") \
            from None
    new_text = edit_session_key(text, key, value, path)
    _replace_file(target, bom + new_text.encode("utf-8"), before, path)


def _literal(value: bool | int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"only booleans and integers are written back, not {type(value).__name__}")


def _real_target(path: Path) -> Path | None:
    """The regular file behind *path* (following symlinks), or None when nothing is there yet."""
    if not os.path.lexists(path):
        return None
    real = Path(os.path.realpath(path))
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        raise MaintError(f"{path}: is a symbolic link to a missing file ({real}); not creating it "
                         "(fix the link, or remove it to start a new config)") from None
    if not stat.S_ISREG(st.st_mode):
        raise MaintError(f"{path}: is not a regular file; refusing to rewrite it")
    if st.st_nlink > 1:
        raise MaintError(f"{path}: has {st.st_nlink} hard links; replacing it would split them, so it is "
                         "not rewritten (edit it by hand)")
    return real


def _store_owner(store: Path | None) -> int | None:
    """The uid owning *store*, or (no store yet) the folder it would be made in; None when neither is known."""
    if store is None:
        return None
    owner = files.owner_of(store) or files.owner_of(Path(os.path.realpath(store)).parent)
    return owner[0] if owner else None


def _check_root_write(path: Path, store: Path | None) -> None:
    """As root, the config of another user's store is written only where that user could write it: never
    through a symbolic link owned by anyone but root or the store's owner, and never into a file (or, for a new
    one, a folder) the store's owner cannot write. A user's config.yaml linked to a root-owned file elsewhere
    would otherwise have root rewrite that file."""
    if not files.as_root():
        return
    owner = _store_owner(store)
    for link, st, _ in files.links_on(path):
        if st.st_uid not in (0, owner):
            raise MaintError(f"{path}: reached through {link}, a symbolic link owned by uid {st.st_uid} (not root "
                             "nor the store's owner); a run as root does not write through it; nothing was changed")
    if owner in (None, 0):
        return
    if os.path.lexists(path):
        if not files.user_may(owner, path, os.W_OK):
            real = os.path.realpath(path)
            raise MaintError(f"{path}: the store's owner (uid {owner}) may not change {real}; a run as root does "
                             "not change it for them; nothing was changed (edit it by hand, or as that user)")
    elif os.path.isdir(path.parent) and not files.user_may_create(owner, path.parent):
        raise MaintError(f"{path.parent}: the store's owner (uid {owner}) may not create files there; a run as "
                         "root does not create the config for them; nothing was changed")


def _create_config(path: Path, text: str, store: Path | None = None) -> None:
    """A new config.yaml: 0600 (Hermes keeps API keys in it), never over a file or through a link, and only in
    an existing folder (a Hermes home or profile: a mistyped --profile or $HERMES_HOME is not made one)."""
    try:
        folder = files.Folder.open(path.parent, follow_links=True, what="Hermes home", store=store)
    except files.FileRefused as exc:
        if not os.path.lexists(path.parent):
            raise UsageError(f"{path.parent}: no such folder (expected an existing Hermes home or profile folder); "
                             f"not creating {path.name} there, nothing was changed") from None
        raise MaintError(f"{exc}; nothing was changed") from None
    with folder, folder.atomic(path.name, mode=0o600, replace=False) as fh:
        fh.write(text.encode("utf-8"))


def _replace_file(target: Path, data: bytes, before: os.stat_result, shown: Path) -> None:
    """Atomically replace *target* with *data*, keeping its mode and owner; refuse if it changed since *before*."""
    try:
        with files.Folder.open(target.parent, follow_links=True) as folder, \
                folder.atomic(target.name, expect=before) as fh:
            fh.write(data)
    except MaintError as exc:
        raise MaintError(str(exc).replace(str(target), str(shown), 1)) from None


# -- the one-line edit ---------------------------------------------------------------------------

_NULLS = {"", "~", "null", "Null", "NULL"}


def edit_session_key(text: str, key: str, value: bool | int, shown: Path | str = "config.yaml") -> str:
    """*text* with ``sessions.<key>`` set to *value*, every other line kept byte for byte.

    Refuses (MaintError, one line) what a line edit cannot do safely: ``sessions`` anchored or an
    alias (the change would reach every alias), a value that is itself an anchor, a multi-line
    value, or several YAML documents. Whatever the edit, the result must parse to the original
    plus this one key, or nothing is written.
    """
    literal = _literal(value)
    by_hand = f"add `{key}: {literal}` under `sessions:` by hand"
    data = parse_yaml(text, Path(shown))  # malformed, too deep or an alias bomb: refused, nothing rewritten
    lines = text.splitlines(keepends=True)
    nl = next((ln[len(ln.rstrip("\r\n")):] for ln in lines if ln.endswith("\n")), "\n")
    if data is not None and not isinstance(data, CommentedMap):
        raise MaintError(f"{shown}:1: malformed config: top level must be a mapping; not rewriting it")
    if any(re.match(r"(---|\.\.\.)(\s|$)", ln) for ln in lines[1:]):
        raise MaintError(f"{shown}: has a YAML document marker (--- or ...) after the start; {by_hand}")
    if data is not None and data.fa.flow_style():
        raise MaintError(f"{shown}: the top level is a flow mapping {{...}}; {by_hand}")
    indent = _indent_step(data) if data is not None else 2
    if data is None or "sessions" not in data.lc.data:  # absent (a merged-in `sessions` is not ours to edit)
        out = list(lines)
        if out and not out[-1].endswith("\n"):
            out[-1] += nl
        out.append(f"sessions:{nl}{' ' * indent}{key}: {literal}{nl}")
        return _verified(text, "".join(out), key, value, shown, by_hand)
    kline, kcol = data.lc.key("sessions")
    head, after = _split_value(lines[kline], kcol)
    token = _strip_comment(after, flow=False).strip()
    sessions = data["sessions"]
    anchored = getattr(getattr(sessions, "anchor", None), "value", None)
    if token[:1] in ("&", "*") or anchored:
        raise MaintError(f"{shown}:{kline + 1}: `sessions` is a YAML anchor or alias; setting {key} there would "
                         f"change every mapping that shares it, so it is not rewritten; {by_hand} "
                         "(as its own mapping)")
    if token.startswith("!"):
        raise MaintError(f"{shown}:{kline + 1}: `sessions` carries a YAML tag; {by_hand}")
    out = list(lines)
    if sessions is None:
        if token not in _NULLS:
            raise MaintError(f"{shown}:{kline + 1}: unexpected value for `sessions`; {by_hand}")
        eol = lines[kline][len(lines[kline].rstrip("\r\n")):] or nl
        if token:  # an explicit null goes; an empty value's line stays as it is
            comment = _comment_of(after)
            out[kline] = head + (f" {comment}" if comment else "") + eol
        elif not lines[kline].endswith("\n"):
            out[kline] += eol
        out.insert(kline + 1, f"{' ' * (kcol + indent)}{key}: {literal}{eol}")
        return _verified(text, "".join(out), key, value, shown, by_hand)
    if not isinstance(sessions, dict):
        raise MaintError(f"{shown}:{kline + 1}: `sessions` must be a mapping; not rewriting it")
    own = sessions.lc.data or {}
    flow = bool(sessions.fa.flow_style()) or token.startswith("{")
    if key in own:
        line_no, col = own[key][0], own[key][1]
        k_head, k_after = _split_value(lines[line_no], col)
        stripped = k_after.lstrip(" ")
        lead = k_after[:len(k_after) - len(stripped)]
        if stripped[:1] in ("&", "!"):
            raise MaintError(f"{shown}:{line_no + 1}: sessions.{key} carries a YAML anchor or tag; {by_hand}")
        end = _scalar_end(stripped, flow)
        if end is None:
            raise MaintError(f"{shown}:{line_no + 1}: sessions.{key} is not a one-line value; {by_hand}")
        out[line_no] = k_head + lead + literal + stripped[end:]
        return _verified(text, "".join(out), key, value, shown, by_hand)
    if flow:
        brace = lines[kline].find("{", kcol)
        if brace < 0:
            raise MaintError(f"{shown}:{kline + 1}: `sessions` is a flow mapping spread over lines; {by_hand}")
        rest = lines[kline][brace + 1:]
        pad = rest[:len(rest) - len(rest.lstrip(" "))]
        empty = rest.lstrip(" ").startswith("}")
        out[kline] = lines[kline][:brace + 1] + pad + f"{key}: {literal}" + ("" if empty else ", ") + rest.lstrip(" ")
        return _verified(text, "".join(out), key, value, shown, by_hand)
    child_col = next((len(ln) - len(ln.lstrip(" ")) for ln in lines[kline + 1:]
                      if ln.strip() and not ln.lstrip(" ").startswith("#")), kcol + indent)
    eol = lines[kline][len(lines[kline].rstrip("\r\n")):] or nl
    if not lines[kline].endswith("\n"):
        out[kline] += nl
        eol = nl
    out.insert(kline + 1, f"{' ' * child_col}{key}: {literal}{eol}")
    return _verified(text, "".join(out), key, value, shown, by_hand)


def _indent_step(data: Any) -> int:
    """The indentation the file already uses for nested mappings (2 when none shows it)."""
    for k, v in data.items():
        if isinstance(v, dict) and hasattr(v, "lc") and v.lc.data and not v.fa.flow_style():
            first = min(pos[1] for pos in v.lc.data.values())
            step = first - data.lc.key(k)[1]
            if step > 0:
                return step
    return 2


def _split_value(line: str, key_col: int) -> tuple[str, str]:
    """(everything up to and including the key's colon, everything after it) for a ``key: value`` line."""
    i = key_col
    if line[i:i + 1] in ("'", '"'):
        i = _quoted_end(line, i)
    colon = line.find(":", i)
    while colon >= 0 and line[colon + 1:colon + 2] not in ("", " ", "\t", "\r", "\n"):
        colon = line.find(":", colon + 1)
    if colon < 0:
        raise MaintError(f"cannot find the key's colon in line {line.rstrip()!r}")
    return line[:colon + 1], line[colon + 1:]


def _quoted_end(text: str, start: int) -> int:
    """Index just past the quoted scalar starting at *start* (YAML single or double quotes)."""
    q = text[start]
    i = start + 1
    while i < len(text):
        if q == '"' and text[i] == "\\":
            i += 2
            continue
        if text[i] == q:
            if q == "'" and text[i + 1:i + 2] == "'":
                i += 2
                continue
            return i + 1
        i += 1
    return len(text)


def _scalar_end(text: str, flow: bool) -> int | None:
    """Where the one-line scalar at the start of *text* ends, or None if it is not one."""
    body = text.rstrip("\r\n")
    if not _strip_comment(body, flow).strip() or body[:1] in ("|", ">", "[", "{"):
        return None  # empty (the value is on the next lines), a block scalar or a collection
    if body[:1] in ("'", '"'):
        end = _quoted_end(body, 0)
        return end if end <= len(body) and body[end - 1] == body[0] else None
    value = _strip_comment(body, flow)
    return len(value.rstrip())


def _strip_comment(text: str, flow: bool) -> str:
    """*text* up to a comment (``#`` after a space), or in flow context up to ``,`` or ``}``."""
    body = text.rstrip("\r\n")
    for i, ch in enumerate(body):
        if ch == "#" and (i == 0 or body[i - 1] in " \t"):
            return body[:i]
        if flow and ch in ",}":
            return body[:i]
    return body


def _comment_of(text: str) -> str:
    body = text.rstrip("\r\n")
    for i, ch in enumerate(body):
        if ch == "#" and (i == 0 or body[i - 1] in " \t"):
            return body[i:]
    return ""


def _plain(text: str) -> Any:
    """The document as plain JSON-able data, aliases expanded into independent copies (within the bounds)."""
    return json.loads(json.dumps(parse_yaml(text, Path("config.yaml"), safe=True), default=repr))


def _verified(old: str, new: str, key: str, value: Any, shown: Path | str, by_hand: str) -> str:
    try:
        after = _plain(new)
    except UsageError:
        after = None
    expected = _plain(old) or {}
    if not isinstance(expected.get("sessions"), dict):
        expected["sessions"] = {}
    expected["sessions"][key] = value
    if after != expected:
        raise MaintError(f"{shown}: a one-line edit would change more than sessions.{key} (shared or merged "
                         f"mappings); not rewriting it; {by_hand}")
    return new
