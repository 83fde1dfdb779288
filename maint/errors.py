"""Error classes that map one-to-one onto the documented exit codes.

Commands raise these; the CLI turns each into a one-line message on stderr
and its exit code, never a traceback.
"""

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class MaintError(Exception):
    """A refusal or failure: exit 1."""

    exit_code = EXIT_FAILED


class UsageError(MaintError):
    """Bad input from the operator: exit 2, nothing written."""

    exit_code = EXIT_USAGE


class StoreError(MaintError):
    """The store cannot be used (missing, corrupt, not a Hermes store, busy)."""


class NotATerminal(UsageError):
    """A destructive command without --yes whose stdin is not a terminal."""
