"""Named points where a test can make this process die with SIGKILL.

``HERMES_MAINT_CRASH_AT=name:n`` kills the process the n-th time it passes
point ``name`` (n defaults to 1). Unset, a point costs one dictionary lookup.
The crash-safety suite uses it to prove that a kill anywhere leaves the store
whole and that running the command again finishes the job.
"""

from __future__ import annotations

import os
import signal

_SPEC = os.environ.get("HERMES_MAINT_CRASH_AT", "")
_NAME, _, _NTH = _SPEC.partition(":")
_NTH = _NTH if _NTH.isascii() and _NTH.isdigit() else "1"  # a test seam: a malformed count means the first
_HITS: dict[str, int] = {}


def crash_point(name: str) -> None:
    """Die here when HERMES_MAINT_CRASH_AT names this point; hang here when HERMES_MAINT_HANG_AT does."""
    hang_point(name)
    if not _NAME or name != _NAME:
        return
    _HITS[name] = _HITS.get(name, 0) + 1
    if _HITS[name] >= int(_NTH or 1):
        os.kill(os.getpid(), signal.SIGKILL)


def hang_point(name: str) -> None:
    """``HERMES_MAINT_HANG_AT=name`` blocks the calling thread for good at point ``name``.

    A test seam for the job loop's stop grace (a job stuck in a system call that no cancel flag
    reaches) and for signals arriving mid-write (the wait is interrupted by a signal's handler).
    """
    if os.environ.get("HERMES_MAINT_HANG_AT") == name:
        import sys
        import threading

        if os.environ.get("HERMES_MAINT_HANG_SAY"):  # a test that must signal us there, not on the way
            sys.stderr.write(f"hanging at {name}\n")
            sys.stderr.flush()

        threading.Event().wait()
