"""Running commands: the one map from errors to messages and exit codes, and the per-store loop.

Library code raises :class:`~maint.errors.MaintError` subclasses (each with its exit code) or lets
apsw and OS errors through; :func:`describe` turns any of them into one line, and :func:`run` is
the only place a command's outcome becomes an exit code.
"""

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import typer

from maint.errors import (EXIT_BROKEN_PIPE, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, Declined, Interrupted,
                          MaintError, OutputError, Terminated, UsageError)
from maint.store.targets import StoreTarget

from maint.app import PROG


class StdoutClosed(Exception):
    """The reader of our stdout went away (``hermes-maint list | head``)."""


def describe(exc: BaseException) -> tuple[str, int]:
    """One line and an exit code for any error a command can end with."""
    if isinstance(exc, MaintError):
        return str(exc), exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted; finished transactions are committed, the store is consistent", EXIT_INTERRUPTED
    if isinstance(exc, Terminated):
        import signal

        name = signal.Signals(exc.signum).name
        return (f"terminated by {name}; finished transactions are committed, the store is consistent, "
                "temporary files were removed", 128 + exc.signum)
    import apsw  # imported here so that --help never loads SQLite

    if isinstance(exc, apsw.Error):
        detail = str(exc).split(": ", 1)[-1]
        if isinstance(exc, apsw.FullError):
            return ("disk full while writing; the transaction was rolled back, the store is intact",
                    EXIT_FAILED)
        if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
            return ("the store stayed locked by another process past the busy timeout; the transaction "
                    "was rolled back, try again later", EXIT_FAILED)
        if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
            return f"the store is corrupt ({detail}); refusing to go on", EXIT_FAILED
        if isinstance(exc, (apsw.ReadOnlyError, apsw.CantOpenError)):
            return f"the store cannot be written or opened ({detail})", EXIT_FAILED
        if isinstance(exc, apsw.ConstraintError):
            return f"a constraint refused the change ({detail}); the transaction was rolled back", EXIT_FAILED
        return f"SQLite error ({exc.__class__.__name__}: {detail})", EXIT_FAILED
    if isinstance(exc, UnicodeError):  # an argument that is not valid UTF-8 reached a text-only place
        return (f"a value is not valid UTF-8 text ({exc.reason}); give ids, titles and paths in UTF-8",
                EXIT_USAGE)
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}", EXIT_FAILED
    raise exc  # a bug: let the traceback show it


def guard(fn: Callable) -> Callable:
    """Wrap a command so that every way it can fail ends the same way: one line and its exit code.

    Applied to every command where the app is assembled (:mod:`maint.cli`), so a test's CliRunner,
    the job loop and the console script all see the same outcome. A closed stdout becomes
    :class:`StdoutClosed` for :func:`run` to end quietly.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:
            raise StdoutClosed() from None
        except (typer.Exit, typer.Abort):
            raise
        except (Exception, KeyboardInterrupt, Terminated) as exc:
            message, code = describe(exc)
            with contextlib.suppress(BrokenPipeError):
                typer.echo(f"{PROG}: error: {message}", err=True)
            raise typer.Exit(code) from None

    return wrapper


def run(command: Any, args: Sequence[str] | None) -> int:
    """Run a click command (the whole app, or one looked up from it) and return its exit code."""
    from typer._click import exceptions as click_exc

    try:
        code = command.main(args=args, prog_name=PROG, standalone_mode=False)
    except StdoutClosed:
        # Point stdout at /dev/null so the interpreter's final flush cannot complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except click_exc.UsageError as exc:
        typer.echo(f"{PROG}: error: {exc.format_message()}", err=True)
        return EXIT_USAGE
    except typer.Abort:
        typer.echo(f"{PROG}: error: aborted; nothing was changed", err=True)
        return EXIT_INTERRUPTED
    except typer.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:  # while click was still parsing
        return EXIT_INTERRUPTED
    except Terminated as exc:
        return 128 + exc.signum
    return code if isinstance(code, int) else 0


@contextlib.contextmanager
def naming_store(path: Any) -> Iterator[None]:
    """Re-raise any failure (but a usage error or Ctrl-C) as a MaintError whose message names *path*."""
    try:
        yield
    except (UsageError, Interrupted, KeyboardInterrupt, Terminated, BrokenPipeError, OutputError):
        raise  # an output problem names its own path, not the store's
    except MaintError as exc:
        if str(path) not in str(exc):
            exc.args = (f"{path}: {exc}",)
        raise
    except Exception as exc:
        message, code = describe(exc)
        error = MaintError(message if str(path) in message else f"{path}: {message}")
        error.exit_code = code
        raise error from None


class StoresFailed(MaintError):
    """With several stores: at least one failed (each was reported where it failed)."""


def for_each_store(targets: list[StoreTarget], as_json: bool, run_one: Callable[[StoreTarget], dict],
                   render: Callable[[dict], None], *, job: str | None = None,
                   ran: Callable[[dict], bool] = lambda report: True, metrics_file: Any = None) -> None:
    """Run a command once per store, one report each; a failing store does not stop the others.

    One store: its error ends the command with that error's code, the store named. Several
    (--all-profiles): each failure is reported in place (a JSON line with ``error`` under --json),
    the rest still run, and the command exits 1. A usage error or Ctrl-C stops the whole run.

    A *job* is the one place every job's run is recorded: each report for which *ran* is true
    goes into that store's run history, and with a metrics file the stores it ran on get
    fresh figures (see :mod:`maint.commands.recording`).
    """
    done: list[StoreTarget] = []
    try:
        _each_store(targets, as_json, run_one, render, job, ran, done)
    finally:
        if job is not None and done:
            from maint.commands.recording import write_metrics

            write_metrics(metrics_file, done)


def _each_store(targets: list[StoreTarget], as_json: bool, run_one: Callable[[StoreTarget], dict],
                render: Callable[[dict], None], job: str | None, ran: Callable[[dict], bool],
                done: list[StoreTarget]) -> None:
    import time

    from maint.commands.output import emit_json

    failed = 0
    for target in targets:
        if len(targets) > 1 and not as_json:
            typer.echo(f"== {target.profile or 'default'}: {target.path}")
        if target.problem:
            failed += 1
            emit_json({"store": str(target.path), "profile": target.profile, "error": target.problem,
                       "declined": False}) if as_json else typer.echo(f"{PROG}: error: {target.problem}", err=True)
            continue
        if target.alias_of is not None:
            first = target.alias_of
            note = (f"{target.path}: profile {target.name} is the same store file as profile {first.name} "
                    f"({first.path}); already run as {first.name}, skipped")
            emit_json({"store": str(target.path), "profile": target.profile, "skipped": note,
                       "alias_of": first.name}) if as_json else typer.echo(note)
            continue
        if target.missing:
            note = f"{target.path}: profile has no state.db yet; skipped"
            emit_json({"store": str(target.path), "profile": target.profile, "skipped": note}) if as_json \
                else typer.echo(note)
            continue
        started = time.monotonic()
        try:
            with naming_store(target.path):
                report = run_one(target)
        except (UsageError, Interrupted, KeyboardInterrupt, Terminated, BrokenPipeError):
            raise
        except MaintError as exc:
            if len(targets) == 1:
                raise
            message = str(exc)
            failed += 1
            if as_json:
                emit_json({"store": str(target.path), "profile": target.profile, "error": message,
                           "declined": isinstance(exc, Declined)})
            else:
                typer.echo(f"{PROG}: error: {message}", err=True)
            continue
        report.setdefault("store", str(target.path))
        report["profile"] = target.profile
        done.append(target)
        if job is not None and ran(report):
            from maint.commands.recording import record_job

            record_job(target, job, report, time.monotonic() - started)
        emit_json(report) if as_json else render(report)
    if failed:
        raise StoresFailed(f"{failed} of {len(targets)} stores failed (each is reported above)")
