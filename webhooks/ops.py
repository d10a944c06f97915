"""What webhooks contribute to operations: retention, a panel, a series."""

from datetime import timedelta

from django.db.models import Sum
from django.utils.translation import gettext as _

from idempotency.console.panels import (
    Figure,
    Panel,
    capped_count,
    changelist_url,
    hourly_counts,
)
from idempotency.shared import units

from .conf import webhooks_settings
from .models import WebhookReceipt, WebhookRejection


def panel(now) -> Panel:
    figures = []
    # Capped counts per configured source and state: a GROUP BY would read
    # every receipt, and "10000+ processed" tells an operator enough.
    for source in webhooks_settings.SOURCES:
        for state in WebhookReceipt.State.values:
            count = capped_count(
                WebhookReceipt.objects.filter(source=source, state=state)
            )
            if count:
                figures.append(
                    Figure(
                        f"{source} · {state}",
                        count,
                        changelist_url(
                            WebhookReceipt, source__exact=source, state__exact=state
                        ),
                        alert=state == WebhookReceipt.State.FAILED,
                    )
                )
    since = (now - timedelta(hours=24)).date()
    rejected = (
        WebhookRejection.objects.filter(day__gte=since)
        .values("source", "reason")
        .annotate(count=Sum("count"))
        .order_by("source", "reason")
    )
    for row in rejected:
        figures.append(
            Figure(
                _("rejected %(source)s · %(reason)s") % row,
                row["count"],
                # The days counted, not every day kept: the list shows what
                # the figure counts.
                changelist_url(
                    WebhookRejection,
                    source__exact=row["source"],
                    reason__exact=row["reason"],
                    day__gte=since.isoformat(),
                ),
                alert=True,
            )
        )
    return Panel(_("Webhook receipts"), figures)


def received_per_hour(since):
    return hourly_counts(WebhookReceipt.objects, "received_at", since)


def purgeable_receipts(now, using=None):
    return WebhookReceipt.objects.purgeable(now)


def purgeable_counts(now, using=None):
    return WebhookRejection.objects.purgeable(now)


def kept_units():
    """The units of the receipts the purge keeps whatever their age
    (received, failed): a replay or the provider's resend runs them again.
    Their unit stays as long: purged, a given-up unit would let that run do
    its steps again."""
    identity = units.Identity(units.WEBHOOKS, "source", "delivery_id")
    kept = WebhookReceipt.objects.exclude(state__in=WebhookReceipt.FINISHED)
    return kept.annotate(unit=identity)
