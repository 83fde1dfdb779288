"""Running commands: the one map from errors to messages and exit codes, and the per-store loop.

Library code raises :class:`~maint.errors.MaintError` subclasses (each with its exit code) or lets
apsw and OS errors through; :func:`describe` turns any of them into one line, and :func:`run` is
the only place a command's outcome becomes an exit code.
"""

import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from maint import PROG
from maint.errors import (EXIT_BROKEN_PIPE, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, Declined, Interrupted,
                          MaintError, OutputError, StdoutFailed, Terminated, UsageError)
from maint.store.targets import StoreTarget, resolve_targets


class StdoutClosed(Exception):
    """The reader of our stdout went away (``hermes-maint list | head``)."""


def describe(exc: BaseException) -> tuple[str, int]:
    """One line and an exit code for any error a command can end with."""
    if isinstance(exc, MaintError):
        return str(exc), exc.exit_code
    if isinstance(exc, MemoryError):
        return (f"out of memory{' (' + str(exc) + ')' if str(exc) else ''}; the transaction in progress was rolled "
                "back, finished transactions are committed, the store is consistent (give the process more memory, "
                "or the command less to hold at once)", EXIT_FAILED)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted; finished transactions are committed, the store is consistent", EXIT_INTERRUPTED
    if isinstance(exc, Terminated):
        import signal

        name = signal.Signals(exc.signum).name
        done = f"; {exc.done}" if getattr(exc, "done", None) else ""
        return (f"terminated by {name}; finished transactions are committed, the store is consistent, "
                f"temporary files were removed{done}", 128 + exc.signum)
    import apsw  # imported here so that --help never loads SQLite

    if isinstance(exc, apsw.Error):
        detail = str(exc).split(": ", 1)[-1]
        if isinstance(exc, apsw.FullError):
            return ("disk full while writing; the transaction was rolled back, the store is intact",
                    EXIT_FAILED)
        if isinstance(exc, apsw.NoMemError):
            return describe(MemoryError())
        if isinstance(exc, (apsw.BusyError, apsw.LockedError)):
            return ("the store stayed locked by another process past the busy timeout; the transaction "
                    "was rolled back, try again later", EXIT_FAILED)
        if isinstance(exc, apsw.CorruptError) and getattr(exc, "extendedresult", None) == apsw.SQLITE_CORRUPT_VTAB:
            # FTS5 through Hermes's triggers: an index out of step with its messages (hostile try 5, H6), which a
            # rebuild from the messages repairs; the messages themselves are intact
            return (f"a search index is out of step with its messages ({detail}); the transaction was rolled back: "
                    f"run `{PROG} repair-fts --apply`", EXIT_FAILED)
        if isinstance(exc, (apsw.CorruptError, apsw.NotADBError)):
            return f"the store is corrupt ({detail}); refusing to go on", EXIT_FAILED
        if isinstance(exc, (apsw.ReadOnlyError, apsw.CantOpenError)):
            return f"the store cannot be written or opened ({detail})", EXIT_FAILED
        if isinstance(exc, apsw.ConstraintError):
            return f"a constraint refused the change ({detail}); the transaction was rolled back", EXIT_FAILED
        return f"SQLite error ({exc.__class__.__name__}: {detail})", EXIT_FAILED
    if isinstance(exc, UnicodeDecodeError):  # stored bytes apsw could not hand over as text
        return (f"the store holds text that is not valid UTF-8 ({exc.reason}); this command cannot read past it "
                f"(`{PROG} doctor` names the sessions holding it; exports skip them)", EXIT_FAILED)
    if isinstance(exc, UnicodeError):  # an argument that is not valid UTF-8 reached a text-only place
        return (f"a value is not valid UTF-8 text ({exc.reason}); give ids, titles and paths in UTF-8",
                EXIT_USAGE)
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}", EXIT_FAILED
    raise exc  # a bug: let the traceback show it


def guard(invoke: Callable[[], Any]) -> Any:
    """Run a command's body so that every way it can fail ends the same way: one line and its exit code.

    Every command's invoke goes through here (:class:`maint.commands.options.Command`), so a test's
    CliRunner, the job loop and the console script all see the same outcome; Ctrl-C is caught
    here, before click would turn it into an abort. A closed stdout becomes :class:`StdoutClosed`
    for :func:`run` to end quietly.

    A failure found after the work (:func:`maint.commands.recording.late_failures`: a metrics lock
    another user holds) is said too, and makes exit 0 an exit 1; another exit code stands.
    """
    from maint.commands.recording import late_failures

    with late_failures() as late:
        try:
            result = invoke()
        except BrokenPipeError:
            raise StdoutClosed() from None
        except click.exceptions.Exit as exc:
            if late:
                _say(late)
                raise click.exceptions.Exit(exc.exit_code or EXIT_FAILED) from None
            raise
        except (click.Abort, click.ClickException, StdoutClosed):
            raise
        except (Exception, KeyboardInterrupt, Terminated) as exc:
            message, code = describe(exc)
            _say([*late, message])
            raise click.exceptions.Exit(code) from None
        if late:
            _say(late)
            raise click.exceptions.Exit(EXIT_FAILED)
        return result


def _say(errors: list[str]) -> None:
    with contextlib.suppress(BrokenPipeError):
        for message in errors:
            click.echo(f"{PROG}: error: {message}", err=True)


def usage_message(exc: click.UsageError) -> str:
    """Click's usage error as one line; a bad value is ``FLAG: what is wrong (expected ...)``.

    No arguments at all (``hermes-maint``, ``hermes-maint jobs``) show the help, as it is.
    """
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        return exc.format_message()
    if type(exc) is click.BadParameter and exc.param is not None:
        param = exc.param
        opts = [o for o in getattr(param, "opts", []) if o.startswith("--")]
        name = opts[0] if opts and isinstance(param, click.Option) else param.human_readable_name.strip("[].")
        return f"{name}: {exc.message}"
    return " ".join(exc.format_message().split())


def run(command: click.Command, args: Sequence[str] | None) -> int:
    """Run a click command (the whole app, or one looked up from it) and return its exit code.

    Every text written to stdout and stderr meanwhile has its control characters escaped
    (:class:`maint.commands.output.SafeText`): stored and foreign text never drives the terminal.
    """
    from maint.commands.output import safe_streams

    with safe_streams():
        return _run(command, args)


def _run(command: click.Command, args: Sequence[str] | None) -> int:
    try:
        code = command.main(args=args, prog_name=PROG, standalone_mode=False)
    except StdoutClosed:
        # Point stdout at /dev/null so the interpreter's final flush cannot complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except click.UsageError as exc:
        line = f"{PROG}: error: {usage_message(exc)}"
        if isinstance(exc, click.exceptions.NoArgsIsHelpError):  # the help page: our own lines
            from maint.commands.output import own_lines

            line = own_lines(line)
        click.echo(line, err=True)
        return EXIT_USAGE
    except MaintError as exc:  # refused while the command line was read (a bad combination of flags)
        click.echo(f"{PROG}: error: {exc}", err=True)
        return exc.exit_code
    except click.Abort:
        click.echo(f"{PROG}: error: aborted; nothing was changed", err=True)
        return EXIT_INTERRUPTED
    except click.exceptions.Exit as exc:
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


@dataclass(frozen=True)
class Stores:
    """The stores a command runs on and how it reports: --db / --profile / --all-profiles, --json, --metrics-file.

    Declared once for every command (:func:`maint.commands.options.store_options`), reaching the
    command as this one value. *metrics* says whether the command writes Prometheus figures at all
    (then config.yaml's ``hermes_maint.metrics_file`` applies when --metrics-file is not given).
    """

    db: Path | None = None
    profile: str | None = None
    all_profiles: bool = False
    as_json: bool = False
    metrics_file: Path | None = None
    metrics: bool = False

    def targets(self) -> list[StoreTarget]:
        return resolve_targets(self.db, self.profile, self.all_profiles)

    def metrics_target(self) -> Path | None:
        """Where this run's figures go, checked before any work (a bad path is exit 2); None: nowhere."""
        from maint.commands.recording import metrics_target

        return metrics_target(self.metrics_file) if self.metrics else None

    def run(self, run_one: Callable[[StoreTarget], dict], render: Callable[[dict], None], *,
            job: str | None = None, ran: Callable[[dict], bool] = lambda report: True) -> list[dict]:
        """:func:`for_each_store` over these stores, with this run's metrics file."""
        metrics = self.metrics_target()
        return for_each_store(self.targets(), self.as_json, run_one, render, job=job, ran=ran, metrics_file=metrics)


def stopped_early(reports: list[dict], describe_one: Callable[[dict], str | None]) -> None:
    """A run the job loop's SIGTERM/SIGINT cut short (its report is in the history, marked) ends as the
    CLI's own signal ends it: one line, exit 128 + the signal, never 0 as if it had all been done.
    *describe_one* says what a stopped report did (None: that store ran to the end)."""
    from maint.store import batching

    said = [line for line in map(describe_one, reports) if line]
    if said:
        import signal

        signum = batching.cancel_signal() or signal.SIGTERM
        error = MaintError(f"stopped early by {signal.Signals(signum).name}: {'; '.join(said)}; finished "
                           "transactions are committed, the rest is left for the next run")
        error.exit_code = 128 + signum
        raise error


class StoresFailed(MaintError):
    """With several stores: at least one failed (each was reported where it failed)."""


def for_each_store(targets: list[StoreTarget], as_json: bool, run_one: Callable[[StoreTarget], dict],
                   render: Callable[[dict], None], *, job: str | None = None,
                   ran: Callable[[dict], bool] = lambda report: True, metrics_file: Any = None,
                   findings: bool = False) -> list[dict]:
    """Run a command once per store, one report each; a failing store does not stop the others.

    One store: its error ends the command with that error's code, the store named. Several
    (--all-profiles): each failure is reported in place (a JSON line with ``error`` under --json),
    the rest still run, and the command exits 1. A usage error or Ctrl-C stops the whole run.

    A *job* is the one place every job's run is recorded: each report for which *ran* is true
    goes into that store's run history. With a metrics file, the stores it ran on get fresh
    figures (see :mod:`maint.commands.recording`); the reports are doctor's *findings* when so
    marked. Returns the reports of the stores it ran on.
    """
    done: dict[StoreTarget, dict] = {}
    try:
        _each_store(targets, as_json, run_one, render, job, ran, done)
    finally:
        if metrics_file is not None and done:
            from maint.commands.recording import write_metrics

            write_metrics(metrics_file, list(done),
                          doctor={str(t.path): r for t, r in done.items()} if findings else None)
    return list(done.values())


def _each_store(targets: list[StoreTarget], as_json: bool, run_one: Callable[[StoreTarget], dict],
                render: Callable[[dict], None], job: str | None, ran: Callable[[dict], bool],
                done: dict[StoreTarget, dict]) -> None:
    import time

    from maint.commands.output import emit_json

    failed = 0
    for target in targets:
        if len(targets) > 1 and not as_json:
            click.echo(f"== {target.profile or 'default'}: {target.path}")
        if target.problem:
            failed += 1
            emit_json({"store": str(target.path), "profile": target.profile, "error": target.problem,
                       "declined": False}) if as_json else click.echo(f"{PROG}: error: {target.problem}", err=True)
            continue
        if target.alias_of is not None:
            first = target.alias_of
            note = (f"{target.path}: profile {target.name} is the same store file as profile {first.name} "
                    f"({first.path}); already run as {first.name}, skipped")
            emit_json({"store": str(target.path), "profile": target.profile, "skipped": note,
                       "alias_of": first.name}) if as_json else click.echo(note)
            continue
        if target.missing:
            note = f"{target.path}: profile has no state.db yet; skipped"
            emit_json({"store": str(target.path), "profile": target.profile, "skipped": note}) if as_json \
                else click.echo(note)
            continue
        started = time.monotonic()
        try:
            with naming_store(target.path):
                report = run_one(target)
        except (UsageError, Interrupted, KeyboardInterrupt, Terminated, BrokenPipeError, StdoutFailed):
            raise  # stops every store: stdout is the same for all
        except MaintError as exc:
            if len(targets) == 1:
                raise
            message = str(exc)
            failed += 1
            if as_json:
                emit_json({"store": str(target.path), "profile": target.profile, "error": message,
                           "declined": isinstance(exc, Declined)})
            else:
                click.echo(f"{PROG}: error: {message}", err=True)
            continue
        report.setdefault("store", str(target.path))
        report["profile"] = target.profile
        done[target] = report
        if job is not None and ran(report):
            from maint.commands.recording import record_job

            record_job(target, job, report, time.monotonic() - started)
        emit_json(report) if as_json else render(report)
    if failed:
        raise StoresFailed(f"{failed} of {len(targets)} stores failed (each is reported above)")
