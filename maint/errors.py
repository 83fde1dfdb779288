"""Every failure the library reports, each class carrying its exit code.

The library raises these; the CLI maps them once (``maint.commands.runner``) to one line on
stderr and the exit code, never a traceback. The README's exit-code table lists the same codes.
"""

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # Ctrl-C, or Ctrl-D at a prompt
EXIT_BROKEN_PIPE = 141  # stdout closed by the reader (128 + SIGPIPE, as a shell reports `git log | head`)


class MaintError(Exception):
    """A refusal or failure: exit 1, nothing (more) was changed."""

    exit_code = EXIT_FAILED


class UsageError(MaintError):
    """Bad input from the operator: exit 2, nothing written."""

    exit_code = EXIT_USAGE


class NotATerminal(UsageError):
    """A destructive command without --yes whose stdin is not a terminal."""


class StoreError(MaintError):
    """The store cannot be used (missing, corrupt, not a Hermes store, busy)."""


class OutputError(MaintError):
    """Where an export was asked to write cannot take it (a link, a device, the store itself, a full disk)."""


class StdoutFailed(OutputError):
    """Our stdout cannot take what we write (closed at start, a full disk or device): the error names stdout,
    never the store (hostile try 4, G10). Raised by :class:`maint.commands.output.SafeText`, once for every
    command; *reason* is what the write met."""

    def __init__(self, reason: str, what: str = "the output", note: str = ""):
        self.reason, self.what = reason, what
        super().__init__(f"stdout: {reason} while writing {what}{note}")


class CorruptStore(StoreError):
    """The file is a SQLite store whose pages are damaged or missing (truncated, malformed)."""


class SessionNotFound(MaintError):
    """A session id or prefix that matches no session, or more than one."""


class Declined(MaintError):
    """The operator answered no at a confirmation prompt."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the program stands (as Ctrl-C raises KeyboardInterrupt) so that
    cleanup runs: temporary files go, an open transaction rolls back. Exit 128 + the signal's number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class Interrupted(MaintError):
    """Ctrl-C, or end of input at a prompt: finished transactions stay, the store is consistent."""

    exit_code = EXIT_INTERRUPTED
