"""What the outbox contributes to operations: retention, a panel, a series."""

from django.utils.translation import gettext as _

from idempotency.console.panels import (
    Figure,
    Panel,
    capped_count,
    changelist_url,
    hourly_counts,
    in_state,
)

from .conf import outbox_settings
from .models import OutboxMessage

State = OutboxMessage.State


def panel(now) -> Panel:
    messages = OutboxMessage.objects
    lag = messages.oldest_pending_age(now)
    return Panel(
        _("Outbox"),
        [
            in_state(OutboxMessage, _("backlog (pending)"), State.PENDING),
            Figure(
                _("oldest pending age"),
                _age(lag),
                changelist_url(OutboxMessage, state__exact=State.PENDING),
                alert=lag is not None and lag.total_seconds() > 300,
                ordering="created_at",  # the oldest first
            ),
            Figure(
                _("failing, backing off"),
                capped_count(messages.pending().exclude(last_error="")),
                changelist_url(OutboxMessage, delivery="retrying"),
            ),
            in_state(OutboxMessage, _("dead"), State.DEAD, alert=True),
        ],
    )


def _age(delta):
    if delta is None:
        return "—"
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def published_per_hour(since):
    return hourly_counts(OutboxMessage.objects.published(), "published_at", since)


def purgeable(now, using=None):
    return OutboxMessage.objects.purgeable(now, outbox_settings.RETENTION)
