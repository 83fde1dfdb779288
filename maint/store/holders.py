"""Which other processes on this machine have the store open.

A process counts as a holder when it has the store, its ``-wal`` or its
``-shm`` open as a file or mapped in memory (a WAL reader maps ``-shm``). On
Linux ``/proc/<pid>/fd`` and ``/proc/<pid>/maps`` are matched by device and
inode, so a deleted-but-open file still counts; psutil covers the rest. When
the scan cannot be completed for a process that could hold the file (access
denied, errors) the answer is *unknown*, never *quiet*. Processes in other
containers or VMs that share the volume are invisible to any such scan.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from maint.errors import MaintError


@dataclass
class Holder:
    pid: int
    cmdline: str
    files: list[str]
    connections: int = 0  # descriptors on the store file itself: one per SQLite connection
    name: str = ""  # the process name (Linux: comm, the executable's or script's file name)
    argv: list[str] = field(default_factory=list)


@dataclass
class HolderReport:
    holders: list[Holder] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # why the scan was incomplete
    outside: list[int] = field(default_factory=list)  # pids root cannot inspect: another namespace

    @property
    def quiet(self) -> bool:
        """True only when the scan completed and found nobody."""
        return not self.holders and not self.unknown

    def describe(self) -> str:
        if self.holders:
            return "; ".join(f"pid {h.pid} ({one_line(h.cmdline) or '?'})" for h in self.holders)
        if self.unknown:
            return "holder check incomplete: " + "; ".join(self.unknown[:3])
        return "no other process holds the store"


def _targets(db: Path) -> dict[tuple[int, int], str]:
    out = {}
    for suffix in ("", "-wal", "-shm"):
        p = Path(str(db) + suffix)
        try:
            st = p.stat()
        except OSError:
            continue
        out[(st.st_dev, st.st_ino)] = p.name
    return out


def _proc_scan(pid: int, targets: dict[tuple[int, int], str]) -> list[str]:
    """Linux: fds and memory maps by device+inode, one entry per open fd. Raises PermissionError when unreadable."""
    found: list[str] = []
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            st = os.stat(f"{fd_dir}/{fd}")
        except (FileNotFoundError, NotADirectoryError):
            continue
        key = (st.st_dev, st.st_ino)
        if key in targets:
            found.append(targets[key])
    mapped: set[str] = set()
    # bytes: a mapped file's name need not be UTF-8, and another user's process mapping one must not stop our
    # runs (hostile try 12: every writing command failed "text that is not valid UTF-8")
    with open(f"/proc/{pid}/maps", "rb") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) < 5 or parts[4] == b"0":
                continue
            major, minor = (int(x, 16) for x in parts[3].split(b":"))
            dev = os.makedev(major, minor)
            key = (dev, int(parts[4]))
            if key in targets:
                mapped.add(targets[key] + " (mapped)")
    return found + sorted(mapped)


def _psutil_scan(proc: psutil.Process, db: Path) -> list[str]:
    names = {str(db), str(db) + "-wal", str(db) + "-shm"}
    found = [Path(f.path).name for f in proc.open_files() if f.path in names]
    with contextlib.suppress(AttributeError, NotImplementedError):
        found += sorted({Path(m.path).name + " (mapped)" for m in proc.memory_maps(grouped=True) if m.path in names})
    return found


def _root_visible(pid: int) -> bool:
    try:
        os.readlink(f"/proc/{pid}/root")
        return True
    except OSError:
        return False


def one_line(text: str, limit: int = 400) -> str:
    """A command line as one printable line: control characters (newlines too) escaped, long ones cut."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"


def find_holders(db: Path) -> HolderReport:
    db = Path(db).resolve()
    exclude = {os.getpid()}
    targets = _targets(db)
    report = HolderReport()
    if not targets:
        return report
    on_linux = os.path.isdir("/proc/self/fd")
    shut = _shut_owners(db) if os.geteuid() != 0 else None
    root_pids: list[int] = []
    for proc in psutil.process_iter(["pid", "cmdline", "name"]):
        pid = proc.info["pid"]
        if pid in exclude:
            continue
        try:
            files = _proc_scan(pid, targets) if on_linux else _psutil_scan(proc, db)
        except (FileNotFoundError, ProcessLookupError, psutil.NoSuchProcess):
            continue  # exited while we looked
        except (PermissionError, psutil.AccessDenied):
            if on_linux and os.geteuid() == 0 and not _root_visible(pid):
                # Even root cannot see its files: it lives outside our namespaces, the
                # same blind spot as another container sharing the volume.
                report.outside.append(pid)
            elif on_linux and (who := _unreadable_as_user(pid, shut)) == "cannot open":
                continue
            elif on_linux and who == "root":
                root_pids.append(pid)
            else:
                report.unknown.append(f"pid {pid}: access denied")
            continue
        except OSError as exc:
            report.unknown.append(f"pid {pid}: {exc.strerror or exc}")
            continue
        if files:
            cmd = " ".join(proc.info.get("cmdline") or []) or proc.info.get("name") or ""
            report.holders.append(Holder(pid=pid, cmdline=cmd, files=sorted(set(files)),
                                         connections=files.count(db.name), name=proc.info.get("name") or "",
                                         argv=list(proc.info.get("cmdline") or [])))
    if root_pids:  # one line, not one "access denied" per root process (hostile try 12, P15)
        report.unknown.insert(0, f"root's processes ({len(root_pids)}) cannot be checked by a user: run as root, "
                                 "or pass --force")
    return report


def _shut_owners(db: Path) -> set[int] | None:
    """The owners of the store's files when none of them grants group or other access (so a process of another
    user cannot open them); None when one does, or cannot be read."""
    owners = set()
    for suffix in ("", "-wal", "-shm"):
        try:
            st = os.stat(f"{db}{suffix}")
        except FileNotFoundError:
            continue
        except OSError:
            return None
        if st.st_mode & 0o077:
            return None
        owners.add(st.st_uid)
    return owners or None


def _unreadable_as_user(pid: int, shut: set[int] | None) -> str:
    """Why a user's scan could not read a process: "root" (any of its ids is root's), "cannot open" (another
    user's process with no capability, while the store's files grant nobody but their owner access: it cannot
    have them open), or "unknown"."""
    uids: set[int] = set()
    caps = None
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    uids = {int(x) for x in line.split()[1:]}
                elif line.startswith(b"CapEff:"):
                    caps = int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        return "unknown"
    if not uids:
        return "unknown"
    if 0 in uids:
        return "root"
    if shut is not None and caps == 0 and not uids & shut:
        return "cannot open"
    return "unknown"


@dataclass
class LockHolder:
    """A process holding a ``flock`` on a file, as the kernel lists it in ``/proc/locks``."""

    pid: int
    uid: int | None  # None: the process is gone or cannot be inspected
    cmdline: str = ""

    def describe(self) -> str:
        if self.uid is None:
            return f"pid {self.pid} (its user cannot be read)"
        try:
            import pwd

            user = f", user {pwd.getpwuid(self.uid).pw_name}"
        except (ImportError, KeyError):
            user = ""
        return f"pid {self.pid} (uid {self.uid}{user}: {one_line(self.cmdline, 120) or '?'})"


def flock_holders(st: os.stat_result, locks: str = "/proc/locks") -> list[LockHolder] | None:
    """Who holds a ``flock`` on the file with status *st* (device and inode), from *locks*; None where the
    kernel does not list locks there (not Linux). A waiter (``->``) is not a holder. Some file systems
    (btrfs subvolumes, overlay) list another device number than stat gives: the inode alone then decides,
    when it names one file only."""
    try:
        with open(locks) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    exact, by_inode = [], []
    for line in lines:
        parts = line.split()
        if len(parts) < 6 or parts[1] == "->" or parts[1] != "FLOCK":
            continue
        try:
            major, minor, inode = parts[5].split(":")
            pid, dev, ino = int(parts[4]), os.makedev(int(major, 16), int(minor, 16)), int(inode)
        except ValueError:
            continue
        if ino == st.st_ino:
            (exact if dev == st.st_dev else by_inode).append(pid)
    pids = exact or by_inode
    out = []
    for pid in dict.fromkeys(pids):
        if pid <= 0:
            out.append(LockHolder(pid, None))
            continue
        try:
            proc = psutil.Process(pid)
            out.append(LockHolder(pid, proc.uids().effective, " ".join(proc.cmdline()) or proc.name()))
        except (psutil.Error, OSError):
            out.append(LockHolder(pid, None))
    return out


def other_connections(db: Path) -> int | None:
    """How many SQLite connections other processes have open on the store; None when the scan is incomplete."""
    report = find_holders(db)
    return None if report.unknown else sum(h.connections for h in report.holders)


STOP_HERMES = "stop the gateway and other Hermes processes first"


class HeldStore(MaintError):
    """Another process holds the store (or we could not prove that none does)."""


def refuse_if_held(db: Path, *, force: bool, doing: str, advice: str,
                   holders: Callable[[Path], HolderReport] | None = None) -> HolderReport:
    """The one refusal every store-rewriting command uses: a found holder always refuses; an
    incomplete check refuses unless *force*, which waives only that case."""
    report = (holders or find_holders)(db)
    if report.holders:
        raise HeldStore(f"{db}: refusing to {doing} while other processes hold it ({report.describe()}); {advice}")
    if report.unknown and not force:
        raise HeldStore(f"{db}: refusing: could not check who holds the store ({report.describe()}); "
                        "pass --force if you are sure no process uses it")
    return report
