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
    with open(f"/proc/{pid}/maps") as fh:
        for line in fh:
            parts = line.split(None, 5)
            if len(parts) < 5 or parts[4] == "0":
                continue
            major, minor = (int(x, 16) for x in parts[3].split(":"))
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
    return report


def other_connections(db: Path) -> int | None:
    """How many SQLite connections other processes have open on the store; None when the scan is incomplete."""
    report = find_holders(db)
    return None if report.unknown else sum(h.connections for h in report.holders)


# The inode of the initial PID namespace (the kernel's PROC_PID_INIT_INO).
INITIAL_PID_NAMESPACE = 0xEFFFFFFC


def proc_shows_every_process() -> bool:
    """True when we and the mounted ``/proc`` are in the initial PID namespace: only then does
    ``/proc/locks`` list every process's locks (since Linux 4.9 it leaves out the locks of processes
    outside the namespace of the ``/proc`` mount: a Hermes in another container or on the host, seen
    from inside a container)."""
    try:
        return (os.stat("/proc/self/ns/pid").st_ino == INITIAL_PID_NAMESPACE
                and int(os.readlink("/proc/self")) == os.getpid())
    except (OSError, ValueError):
        return False


def foreign_locks(db: Path) -> bool | None:
    """Whether another process holds a POSIX lock on the store, its ``-wal`` or its ``-shm``
    (Linux's ``/proc/locks``: one read, unlike the process scan). Every WAL-mode SQLite connection keeps
    a read lock on the ``-shm`` for as long as it is open, and WAL only works between processes of one
    machine, so False means no other WAL connection is open. None where that cannot be known: no
    ``/proc/locks``, or one that does not show every process (see :func:`proc_shows_every_process`).
    """
    if not proc_shows_every_process():
        return None
    targets = _targets(Path(db))
    try:
        with open("/proc/locks") as fh:
            text = fh.read()
    except OSError:
        return None
    me = str(os.getpid())
    for line in text.splitlines():
        # "1: POSIX  ADVISORY  READ 7188 fe:00:2146434 128 128"; "1: -> POSIX ..." for a request waiting on it
        parts = [p for p in line.split() if p != "->"]
        if len(parts) < 6 or parts[5].count(":") != 2:
            continue
        major, minor, inode = parts[5].split(":")
        try:
            key = (os.makedev(int(major, 16), int(minor, 16)), int(inode))
        except ValueError:
            continue
        if key in targets and parts[4] != me:  # OFD locks show pid -1: not ours either
            return True
    return False


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
