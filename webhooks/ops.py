"""The webhooks panel of the operations dashboard."""

from datetime import timedelta

from django.db.models import Count, Sum
from django.utils.translation import gettext as _

from idempotency.ops import Figure, Panel, changelist_url, hourly_counts

from .models import WebhookReceipt, WebhookRejection


def panel(now) -> Panel:
    figures = []
    # One grouped query over the (state, received_at) and source indexes.
    rows = (
        WebhookReceipt.objects.values("source", "state")
        .annotate(count=Count("pk"))
        .order_by("source", "state")
    )
    for row in rows:
        figures.append(
            Figure(
                f"{row['source']} · {row['state']}",
                row["count"],
                changelist_url(
                    WebhookReceipt,
                    source__exact=row["source"],
                    state__exact=row["state"],
                ),
                alert=row["state"] == "failed",
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
                changelist_url(
                    WebhookRejection,
                    source__exact=row["source"],
                    reason__exact=row["reason"],
                ),
                alert=True,
            )
        )
    return Panel(_("Webhook receipts"), figures)


def received_per_hour(since):
    return hourly_counts(WebhookReceipt.objects, "received_at", since)
