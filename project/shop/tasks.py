"""The shop's consumers: each order event reserves stock once."""

from celery import shared_task
from django.db.models import F

from inbox.api import consumer

from .models import Stock


@shared_task(name="shop.reserve_stock", acks_late=True)
@consumer("shop.reserve-stock")
def reserve_stock(*, event_type, aggregate_type, aggregate_id, payload, headers):
    """Reserve the ordered quantity; a redelivered event changes nothing."""
    stock, _ = Stock.objects.get_or_create(sku=payload["sku"])
    # F() expressions: concurrent reservations of one SKU never lose updates.
    Stock.objects.filter(pk=stock.pk).update(
        on_hand=F("on_hand") - payload["quantity"],
        reserved=F("reserved") + payload["quantity"],
    )
