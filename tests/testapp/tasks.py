"""The test app's inbox consumer: each ``order.created`` reserves stock once."""

from django.db.models import F

from inbox.api import consumer_task

from .models import Stock


@consumer_task("testapp.reserve-stock", name="testapp.reserve_stock")
def reserve_stock(*, event_type, aggregate_type, aggregate_id, payload, headers):
    stock, _ = Stock.objects.get_or_create(sku=payload["sku"])
    # F(): concurrent reservations of one SKU never lose an update.
    Stock.objects.filter(pk=stock.pk).update(
        on_hand=F("on_hand") - payload["quantity"],
        reserved=F("reserved") + payload["quantity"],
    )
