"""Sending the apps' signals: after the commit for a committed fact, and never
at the guarantee's expense.

Each app declares its own signals in its ``signals.py``; this module holds the
two ways they are sent, and the signals of what all apps share (steps,
compensations, the purge). A receiver that raises is logged on the
``idempotency.signals`` logger and the others still run.
"""

import logging

from django.db import transaction
from django.dispatch import Signal

logger = logging.getLogger("idempotency.signals")

# A durable step's recovery point committed: kind, unit (its identity), intent,
# step (name), attempt, undo (True for a compensation's own step).
step_done = Signal()
# A unit gave up and every completed step's undo ran: kind, unit, intent,
# steps (the names undone, in the order they ran), reason.
unit_compensated = Signal()
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


def report(
    signal: Signal,
    sender,
    *,
    logger: logging.Logger,
    level: int | None,
    message: str,
    using: str | None = None,
    exc_info=None,
    **kwargs,
) -> None:
    """Log one decision, then send its signal: the same ``kwargs`` are the
    log record's ``extra`` and the receivers' arguments, so both name the
    unit alike. ``message`` may name them (``%(operation)s``).

    Sent after the commit on ``using`` when given (a committed fact), at
    once otherwise (a refusal that commits nothing). Logged at once either
    way: the log tells what was decided, even if it is then rolled back.
    ``level`` None: logged already, where the cause was found.
    """
    if level is not None and logger.isEnabledFor(level):
        logger.log(level, message, kwargs, extra=kwargs, exc_info=exc_info)
    if using is None:
        send(signal, sender, **kwargs)
    else:
        send_on_commit(signal, sender, using=using, **kwargs)
