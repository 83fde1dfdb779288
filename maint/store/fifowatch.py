"""No open of ours waits for ever on a FIFO put where SQLite opens a store's files by name.

SQLite opens the store, its ``-journal`` (the hot-journal probe at the start of a read, on every store) and,
read-only, its ``-wal`` with a plain blocking ``open()``, and retries it when a signal interrupts it: a FIFO
at one of those names after our checks blocks that open for ever, SIGTERM included (hostile tries 6 and 7:
I6, J1). One watcher thread per process looks at our own threads every ``FIFO_WATCH_S``; one that sleeps in a
FIFO's open (the kernel's ``wait_for_partner``) is released: the watcher opens the other end of every FIFO at
a watched name and closes it, so the open returns on an empty file that every later check refuses. When the
FIFO it waits on was moved away (J2), the thread is interrupted by a signal, so SQLite's retry opens the
name again, and the next look releases that one.
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import stat
import threading

FIFO_WATCH_S = 0.2
WAKE_SIGNAL = signal.SIGURG  # ignored by default: no other use in this process
# open/openat by machine, for a kernel that does not name the wait (wchan reads "0")
_OPEN_SYSCALLS = {"x86_64": {"2", "257", "437"}, "aarch64": {"56", "437"}}.get(platform.machine(), set())

_lock = threading.Lock()
_names: set[str] = set()
_watcher: threading.Thread | None = None


def watch(path: str) -> None:
    """Keep *path*'s names (the store, ``-journal``, ``-wal``) under watch for the rest of the process."""
    global _watcher
    with _lock:
        _names.update((path, f"{path}-journal", f"{path}-wal"))
        _install_wake()
        if _watcher is None:
            _watcher = threading.Thread(target=_run, name="fifo-open-watch", daemon=True)
            _watcher.start()


def _install_wake() -> None:
    """A no-op handler, installed without SA_RESTART by Python: the signal makes a blocked open return EINTR."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(WAKE_SIGNAL) in (signal.SIG_DFL, signal.SIG_IGN, None):
        signal.signal(WAKE_SIGNAL, _woken)


def _woken(signum, frame) -> None:
    pass


def _run() -> None:
    me = threading.get_native_id()
    waited: set[int] = set()
    while True:
        threading.Event().wait(FIFO_WATCH_S)
        blocked = {tid for tid in _tasks() if tid != me and _in_fifo_open(tid)}
        if not blocked:
            waited.clear()
            continue
        _release()
        # Still waiting after a release one look ago: its FIFO is no longer at the name; make its open retry.
        for thread in threading.enumerate():
            if thread.native_id in blocked & waited and thread.ident is not None and _wake_installed():
                with contextlib.suppress(OSError, ValueError):
                    signal.pthread_kill(thread.ident, WAKE_SIGNAL)
        waited = blocked


def _wake_installed() -> bool:
    return signal.getsignal(WAKE_SIGNAL) not in (signal.SIG_DFL, signal.SIG_IGN, None)


def _tasks() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except (OSError, ValueError):
        return []


def _in_fifo_open(tid: int) -> bool:
    try:
        with open(f"/proc/self/task/{tid}/wchan") as fh:
            wchan = fh.read().strip()
        if wchan not in ("", "0"):
            return wchan in ("wait_for_partner", "fifo_open")
        with open(f"/proc/self/task/{tid}/syscall") as fh:
            return fh.read().split(" ", 1)[0] in _OPEN_SYSCALLS
    except OSError:
        return False


def _release() -> None:
    with _lock:
        names = list(_names)
    for name in names:
        try:
            if not stat.S_ISFIFO(os.stat(name).st_mode):
                continue
            fd = os.open(name, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # ENXIO while nobody reads
        except OSError:
            continue
        os.close(fd)
