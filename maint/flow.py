"""What every command's library function is handed: the operator to ask, and the store's config.

Each command's plan → confirm → apply steps live in its library module, as one function taking
the store target, the typed request and an :class:`Operator`, and returning the report. The
library never imports click: the CLI hands in a terminal operator
(:class:`maint.commands.output.Terminal`); this base class is the unattended one (``--yes``): it
approves every step, shows no progress and logs its notices.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from maint.config import Config
    from maint.store.targets import StoreTarget

Tick = Callable[[int], None]


class Operator:
    """Who a command answers to while it runs: asked before a change, shown progress, told of notices."""

    #: Whether :meth:`confirm` shows the summary and waits for an answer (false under --yes).
    asks = False
    #: Whether an answer can actually be had (a terminal at stdin, no --yes): a session named by a prefix
    #: is acted on only where the confirmation shows its whole id.
    can_ask = False

    def confirm(self, question: str, summary: Sequence[str] = (), warnings: Sequence[str] = ()) -> None:
        """Return to go ahead; raise (:class:`~maint.errors.Declined`, :class:`~maint.errors.Interrupted`,
        :class:`~maint.errors.NotATerminal`) to stop with nothing changed."""
        for warning in warnings:
            logging.getLogger("hermes_maint").warning(warning)

    @contextmanager
    def progress(self, total: int, label: str) -> Iterator[Tick]:
        """A tick to call with each step done of *total*."""
        yield lambda n: None

    def notice(self, lines: Sequence[str], topic: str = "hermes_maint") -> None:
        """Something the operator should read that is not part of the report (a low disk, say)."""
        logging.getLogger(topic).warning(" ".join(lines))


def target_config(target: StoreTarget) -> Config:
    """The config.yaml Hermes itself reads for this store (its profile's, or the one beside a --db file)."""
    from maint.config import config_path_for, load_config

    return load_config(config_path_for(target.path, target.profile), store=target.path)
