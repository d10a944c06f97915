"""What idempotency keys contribute to operations: retention, a panel, a series."""

from datetime import timedelta

from django.utils.translation import gettext as _

from .console import panels
from .console.panels import Figure, Panel
from .models import IdempotencyRecord

State = IdempotencyRecord.State


def purgeable(now, using=None):
    return IdempotencyRecord.objects.purgeable(now)


def panel(now) -> Panel:
    records = IdempotencyRecord.objects
    day_ago = now - timedelta(hours=24)
    return Panel(
        _("Idempotency keys"),
        [
            panels.in_state(IdempotencyRecord, _("pending keys"), State.PENDING),
            panels.stuck_leases(
                IdempotencyRecord, _("stuck leases"), records.stuck(now)
            ),
            Figure(
                _("failed attempts (24 h)"),
                panels.capped_count(
                    records.filter(state=State.FAILED, created_at__gte=day_ago)
                ),
                panels.changelist_url(
                    IdempotencyRecord,
                    state__exact=State.FAILED,
                    created_at__gte=day_ago.isoformat(),
                ),
            ),
        ],
    )


def created_per_hour(since):
    return panels.hourly_counts(IdempotencyRecord.objects, "created_at", since)
