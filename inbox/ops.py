"""What the inbox contributes to operations: retention and a panel."""

from celery import current_app
from django.db.models import Sum
from django.utils.translation import gettext as _

from idempotency.console.panels import (
    Figure,
    Panel,
    capped_count,
    changelist_url,
    in_state,
)

from .conf import checked_retention
from .models import InboxMessage


def panel(now) -> Panel:
    redelivered = InboxMessage.objects.with_duplicates()
    # The partial index on duplicates > 0 keeps this to the redelivered rows.
    dropped = redelivered.aggregate(total=Sum("duplicates"))["total"] or 0
    return Panel(
        _("Inbox"),
        [
            Figure(
                _("duplicates dropped"),
                dropped,
                changelist_url(InboxMessage, duplicates="yes"),
            ),
            Figure(
                _("messages redelivered"),
                capped_count(redelivered),
                changelist_url(InboxMessage, duplicates="yes"),
            ),
            in_state(InboxMessage, _("dead messages"), InboxMessage.State.DEAD),
        ],
    )


def purgeable(now):
    return InboxMessage.objects.purgeable(now, checked_retention())


def replay(messages, *, connection=None) -> list[InboxMessage]:
    """Send each dead message's task again; return those sent.

    The same task id and arguments, so the same message id: the first run
    that commits takes the dead row over, and a second replay of it is a
    duplicate. A row applied meanwhile, or without a redrive (arguments
    that were not JSON), is skipped.
    """
    sent = []
    for message in messages:
        redrive = message.redrive
        if message.state != InboxMessage.State.DEAD or not redrive:
            continue
        current_app.send_task(
            redrive["task"],
            redrive["args"],
            redrive["kwargs"],
            task_id=redrive["id"],
            headers=redrive["headers"],
            queue=redrive["queue"],
            connection=connection,
        )
        sent.append(message)
    return sent
