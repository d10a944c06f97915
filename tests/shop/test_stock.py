"""The shop's stock consumer: each order event reserves stock once, whatever
the broker redelivers and wherever the worker dies."""

from django.db.models import Sum

from inbox.testing.suites import ConsumerSuite
from project.shop.models import Stock
from project.shop.tasks import reserve_stock


class TestReserveStock(ConsumerSuite):
    consumer = reserve_stock
    event_type = "order.created"
    payload = {"order": 1, "sku": "BOOK-1", "quantity": 2}

    def effects(self):
        return Stock.objects.aggregate(total=Sum("reserved"))["total"]
