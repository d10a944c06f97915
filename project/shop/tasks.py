"""The shop's consumers: each order event reserves stock once."""

from django.db.models import F

from inbox.api import consumer_task

from .models import Stock


# Acked after the commit; a raise is retried, then dead in the console.
@consumer_task("shop.reserve-stock", name="shop.reserve_stock")
def reserve_stock(*, event_type, aggregate_type, aggregate_id, payload, headers):
    """Reserve the ordered quantity; a redelivered event changes nothing."""
    stock, _ = Stock.objects.get_or_create(sku=payload["sku"])
    # F() expressions: concurrent reservations of one SKU never lose updates.
    Stock.objects.filter(pk=stock.pk).update(
        on_hand=F("on_hand") - payload["quantity"],
        reserved=F("reserved") + payload["quantity"],
    )
