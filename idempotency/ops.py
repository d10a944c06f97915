"""What idempotency keys contribute to operations: retention, a panel, a series."""

from datetime import timedelta

from django.utils.translation import gettext as _

from .console.panels import (
    Figure,
    Panel,
    capped_count,
    changelist_url,
    hourly_counts,
    in_state,
)
from .models import IdempotencyRecord

State = IdempotencyRecord.State


def purgeable(now):
    return IdempotencyRecord.objects.purgeable(now)


def panel(now) -> Panel:
    records = IdempotencyRecord.objects
    day_ago = now - timedelta(hours=24)
    stuck = capped_count(records.stuck(now))
    return Panel(
        _("Idempotency keys"),
        [
            in_state(IdempotencyRecord, _("pending keys"), State.PENDING),
            Figure(
                _("stuck leases"),
                stuck,
                changelist_url(IdempotencyRecord, lease="stuck"),
                alert=stuck != 0,
            ),
            Figure(
                _("failed attempts (24 h)"),
                capped_count(
                    records.filter(state=State.FAILED, created_at__gte=day_ago)
                ),
                changelist_url(
                    IdempotencyRecord,
                    state__exact=State.FAILED,
                    created_at__gte=day_ago.isoformat(),
                ),
            ),
        ],
    )


def created_per_hour(since):
    return hourly_counts(IdempotencyRecord.objects, "created_at", since)
