"""What the inbox contributes to operations: retention and a panel."""

from django.db.models import Sum
from django.utils.translation import gettext as _

from idempotency.console.panels import Figure, Panel, capped_count, changelist_url

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
        ],
    )


def purgeable(now):
    return InboxMessage.objects.purgeable(now, checked_retention())
