"""Sending the apps' signals: after the commit for a committed fact, and never
at the guarantee's expense.

Each app declares its own signals in its ``signals.py``; this module holds the
two ways they are sent, and the signals of what all apps share (steps,
compensations, the purge). A receiver that raises is logged on the
``idempotency.signals`` logger and the others still run.
"""

import logging
from functools import cached_property

from django.apps import apps
from django.db import transaction
from django.dispatch import Signal

logger = logging.getLogger("idempotency.signals")

# A durable step's recovery point committed: kind, unit (its identity), intent,
# step (name), attempt, undo (True for a compensation's own step).
step_done = Signal()
# A unit gave up and every completed step's undo ran: kind, unit, intent,
# steps (the names undone, in the order they ran), reason.
unit_compensated = Signal()
# An operator released stuck units in the console (the next retry resumes
# them): count, user, units (each one's kind and unit identity).
units_released = Signal()
# The retention purge deleted rows of a kind (the sender, and ``kind``): rows.
purged = Signal()


def send(signal: Signal, sender, **kwargs) -> None:
    """Send now, to every receiver; one that raises is logged, not raised."""
    if not signal.receivers:
        return  # the common case costs one attribute read
    for receiver, result in signal.send_robust(sender, **kwargs):
        if isinstance(result, Exception):
            logger.error(
                "A receiver of %s raised; the decision stands.",
                receiver,
                exc_info=(type(result), result, result.__traceback__),
            )


def send_on_commit(signal: Signal, sender, *, using: str, **kwargs) -> None:
    """Send once the current transaction commits (now, outside one); nothing
    is sent if it rolls back, so a receiver only hears of committed facts."""
    if not signal.receivers:
        return
    transaction.on_commit(lambda: send(signal, sender, **kwargs), using=using)


class Reporter:
    """How one app reports its decisions: each is logged once on the app's
    logger, then sent as a signal whose sender is the app's model.

    The same keyword arguments are the log record's ``extra`` and the
    receivers' arguments, so both name the unit alike; the message may name
    them (``%(operation)s``).
    """

    def __init__(self, logger: str, model: str | None = None):
        self.logger = logging.getLogger(logger)
        # "app_label.Model", looked up at first use: the models are not
        # loaded yet when a receiver's module imports the app's signals.
        self._model = model

    @cached_property
    def sender(self):
        return apps.get_model(self._model) if self._model else None

    def heard(self, signal: Signal, level: int) -> bool:
        """Whether a report of ``signal`` at ``level`` reaches anyone: a
        receiver, or the logger. When not, a hot path skips building it."""
        return bool(signal.receivers) or self.logger.isEnabledFor(level)

    def __call__(
        self,
        signal: Signal,
        level: int | None,
        message: str,
        *,
        using: str | None = None,
        sender=None,
        **kwargs,
    ) -> None:
        """Log, then send: after the commit on ``using`` when given (a
        committed fact), at once otherwise (a refusal that commits nothing).
        Logged at once either way: the log tells what was decided, even if it
        then rolls back. ``level`` None: logged already, where the cause was
        found. ``sender``: instead of the app's model."""
        self._report(signal, level, message, using, sender, kwargs)

    def operator_action(
        self, signal: Signal, user, rows, done: str, *, using=None, **kwargs
    ) -> None:
        """What an operator did to ``rows`` in the console: logged at INFO as
        "<user> <done>" (``done`` names ``%(count)s``), sent with ``count``
        and ``user`` before ``kwargs``. ``using`` as for a call."""
        arguments = {"count": len(rows), "user": user, **kwargs}
        self._report(signal, logging.INFO, "%(user)s " + done, using, None, arguments)

    def _report(self, signal, level, message, using, sender, kwargs) -> None:
        if level is not None and self.logger.isEnabledFor(level):
            # stacklevel: the record names the app's function that decided
            # (this one's caller's caller).
            self.logger.log(level, message, kwargs, extra=kwargs, stacklevel=3)
        if sender is None:
            sender = self.sender
        if using is None:
            send(signal, sender, **kwargs)
        else:
            send_on_commit(signal, sender, using=using, **kwargs)
