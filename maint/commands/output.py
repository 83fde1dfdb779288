"""How commands talk to the operator: JSON lines, safe terminal text, and :class:`Terminal` (a terminal)."""

import contextlib
import errno
import re
import select
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click

from maint.errors import Declined, Interrupted, NotATerminal, StdoutFailed
from maint.flow import Operator
from maint.store.sqlutil import write_json


# C0 controls but tab and newline, DEL, and C1 controls: none reaches a terminal from our text. Nor do the
# bidi embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069): a title holding U+202E showed
# "invoice\u202efdp.exe" as "invoiceexe.pdf", reordering what follows it on the line.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


# Text of ours that is meant to span lines (a help page): written with its line breaks as they are. Every
# other write is one line at most: a line break inside it came from a value (a profile folder's name, a
# title, an id, a path) and is shown escaped, so no value starts a line of its own in a job's log.
_OWN_LINES: set[str] = set()


def own_lines(text: str) -> str:
    """*text*, our own (a help page), marked to be written with its line breaks (see :class:`SafeText`)."""
    _OWN_LINES.add(text)
    return text


def escape_controls(text: str) -> str:
    """Every control character but tab and newline, and every bidi override or isolate, as ``\\u001b``:
    shown, never obeyed, and inside a JSON string the same character still (JSON's own escape;
    ``json.dumps`` leaves DEL, C1 and the bidi controls raw)."""
    return _CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class _Closed:
    """sys.stdout of a process started with it closed (``>&-``, where Python sets it to None): every write
    fails as the closed descriptor does, so the run reports it (see :class:`SafeText`) instead of dying on
    ``None.write`` or dropping what it was asked to print."""

    encoding, errors = "utf-8", "strict"

    def write(self, data: Any) -> int:
        raise OSError(errno.EBADF, "closed")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "closed")

    @property
    def buffer(self) -> "_Closed":
        return self


@contextlib.contextmanager
def _naming_stdout(is_stdout: bool = True) -> Iterator[None]:
    """A failed write or flush of stdout raised as :class:`~maint.errors.StdoutFailed`, naming stdout (never the
    store: hostile try 4, G10); a reader gone away stays a BrokenPipeError (exit 141, quiet); another stream's
    error as it is."""
    try:
        yield
    except BrokenPipeError:
        raise
    except OSError as exc:
        if not is_stdout:
            raise
        raise StdoutFailed("closed" if exc.errno == errno.EBADF else (exc.strerror or str(exc))) from None


class _GuardedBytes:
    """stdout's binary buffer (documents written to ``-``) whose failures name stdout (see :class:`SafeText`)."""

    def __init__(self, inner: Any):
        self._inner = inner

    def write(self, data: Any) -> int:
        """All of *data*, or an error. Under PYTHONUNBUFFERED (``python -u``) the buffer is a raw file whose
        write takes what the pipe takes and returns the count (None when a non-blocking stdout is full): a
        document was cut short while the run said it was written (hostile try 6, I1)."""
        view = memoryview(data).cast("B")
        total = len(view)
        with _naming_stdout():
            while view:
                done = self._inner.write(view)
                if done is None:  # a non-blocking stdout with no room: wait for the reader, as a blocking one would
                    select.select([], [self._inner], [])
                    continue
                view = view[done:]
        return total

    def flush(self) -> None:
        with _naming_stdout():
            self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class SafeText:
    """A text stream (stdout, stderr) whose writes never carry a terminal control character, and never a line
    break but the one that ends the write.

    :func:`maint.commands.runner.run` puts one over sys.stdout and sys.stderr for the whole run, a
    terminal or not (a log or a piped listing is read on a terminal later): ids, titles, paths,
    lock-file bytes and error lines are stored or foreign text, escaped here once for every
    command. Each write is one line (``click.echo`` writes a line and its break at once), so a line break
    inside a write came from a value and is shown as ``\\u000a``, as CR is: a profile folder named
    ``"evil\\nhermes-maint doctor ...: OK"`` cannot forge a line of a job's log (hostile try 4, G11). Our own
    multi-line text (help pages) is marked with :func:`own_lines`. JSON is unchanged in meaning (see
    :func:`escape_controls`; a JSON text holds no raw line break). Documents written to ``-`` go to the
    binary ``buffer`` beneath, byte for byte; the progress bar writes to :func:`raw_stream`. A stdout that
    cannot take a write (closed at start, a full disk or device) raises :class:`~maint.errors.StdoutFailed`,
    naming stdout (never the store: hostile try 4, G10); a reader gone away stays a BrokenPipeError (exit
    141, quiet).
    """

    def __init__(self, inner: Any, name: str | None = None):
        self._inner, self._name = inner, name

    def write(self, text: Any) -> int:
        with _naming_stdout(self._name == "stdout"):
            if isinstance(text, str):
                body, end = (text[:-1], "\n") if text.endswith("\n") else (text, "")
                breaks = "\n" in body and body not in _OWN_LINES
                if breaks or _CONTROLS.search(body) is not None:
                    shown = escape_controls(body)
                    self._inner.write((shown.replace("\n", "\\u000a") if breaks else shown) + end)
                    return len(text)
            return self._inner.write(text)

    def flush(self) -> None:
        with _naming_stdout(self._name == "stdout"):
            self._inner.flush()

    @property
    def buffer(self) -> Any:
        return _GuardedBytes(self._inner.buffer) if self._name == "stdout" else self._inner.buffer

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._inner)


def raw_stream(stream: Any) -> Any:
    """The stream beneath a :class:`SafeText` (for our own control sequences: the progress bar)."""
    return stream._inner if isinstance(stream, SafeText) else stream


@contextmanager
def safe_streams() -> Iterator[None]:
    """sys.stdout and sys.stderr as :class:`SafeText` while the block runs (once: a nested run keeps them)."""
    saved = sys.stdout, sys.stderr
    if not isinstance(sys.stdout, SafeText):
        sys.stdout = SafeText(_Closed() if sys.stdout is None else sys.stdout, "stdout")
    if not isinstance(sys.stderr, SafeText) and sys.stderr is not None:
        sys.stderr = SafeText(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def emit_json(obj: Any) -> None:
    write_json(obj, sys.stdout.write)
    sys.stdout.write("\n")
    sys.stdout.flush()


def printable(text: object) -> str:
    """Stored text as one safe terminal line: escape sequences and line breaks shown, never obeyed."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def fit(text: str, width: int) -> str:
    """*text* cut and padded to *width* terminal columns: wide (CJK) characters take two."""
    from unicodedata import east_asian_width

    out, used = [], 0
    for ch in text:
        w = 2 if east_asian_width(ch) in ("W", "F") else 1
        if used + w > width:
            break
        out.append(ch)
        used += w
    return "".join(out) + " " * (width - used)


def ask_yes_no(question: str) -> bool:
    """A y/N question on the terminal; EOFError on Ctrl-D, KeyboardInterrupt on Ctrl-C.

    Not ``input()``: a Ctrl-C that lands between Python's last signal check and the blocking read
    of the terminal is acted on only when a line arrives (the prompt hung for ever in 3 of 25 tries
    with ^C sent as the prompt appeared). Waiting in short ``select`` steps lets the handler run.
    """
    import os
    import select

    while True:
        click.echo(f"{question} [y/N]: ", nl=False)
        line = b""
        while not line.endswith(b"\n"):
            if not select.select([sys.stdin.fileno()], [], [], 0.2)[0]:
                continue
            chunk = os.read(sys.stdin.fileno(), 1024)
            if not chunk:
                raise EOFError
            line += chunk
        answer = line.decode(errors="replace").strip().lower()
        if answer in ("", "n", "no"):
            return False
        if answer in ("y", "yes"):
            return True
        click.echo("Error: invalid input (answer y or n)")


class Terminal(Operator):
    """The operator at a terminal: --yes or a typed answer; a progress bar on a terminal's stderr.

    Without --yes, a stdin that is not a terminal is refused (exit 2); "no" raises :class:`Declined`
    (exit 1); Ctrl-C or Ctrl-D at the prompt raises :class:`Interrupted` (exit 130). Either way
    nothing was changed. *quiet* (--json, a one-line summary) keeps the bar and notices off the terminal.
    """

    def __init__(self, yes: bool = False, quiet: bool = False) -> None:
        self.yes, self.quiet = yes, quiet

    @property
    def asks(self) -> bool:
        return not self.yes

    @property
    def can_ask(self) -> bool:
        return not self.yes and sys.stdin.isatty()

    def confirm(self, question: str, summary: Sequence[str] = (), warnings: Sequence[str] = ()) -> None:
        if self.yes:
            for warning in warnings:
                click.echo(f"warning: {printable(warning)}", err=True)
            return
        if not sys.stdin.isatty():
            raise NotATerminal("refusing to change the store without confirmation: stdin is not a terminal "
                               "(pass --yes to proceed, or --dry-run to preview)")
        for line in [*summary, *(f"warning: {w}" for w in warnings)]:
            click.echo(printable(line))  # ids and titles are stored text: shown, never obeyed
        try:
            agreed = ask_yes_no(question)
        except (KeyboardInterrupt, EOFError):
            raise Interrupted("aborted at the prompt; nothing was changed") from None
        if not agreed:
            raise Declined("declined at the prompt; nothing was changed")

    def notice(self, lines: Sequence[str], topic: str = "hermes_maint") -> None:
        if self.quiet or not sys.stdin.isatty():
            super().notice(lines, topic)
            return
        for line in lines:
            click.echo(line, err=True)

    @contextmanager
    def progress(self, total: int, label: str) -> Iterator[Callable[[int], None]]:
        """A bar on a terminal's stderr; silent in a pipe, with --json, and under the scheduler."""
        if self.quiet or total <= 0 or not sys.stderr.isatty():
            yield lambda n: None
            return
        with click.progressbar(length=total, label=label, file=raw_stream(sys.stderr), show_eta=True) as bar:
            yield bar.update
