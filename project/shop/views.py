"""The demo shop's API: idempotent order creation."""

from django.db import transaction
from rest_framework import mixins, viewsets

from idempotency.mixins import IdempotencyMixin
from outbox.api import record

from .models import Order
from .serializers import OrderSerializer


class OrderViewSet(
    IdempotencyMixin,
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    serializer_class = OrderSerializer
    idempotency_operation = "shop.order.create"

    def get_queryset(self):
        return Order.objects.filter(owner=self.request.user)

    def perform_create(self, serializer):
        # The order and its event commit together (the claim's transaction
        # already holds both; atomic() makes it true without a key as well).
        with transaction.atomic():
            order = serializer.save(owner=self.request.user)
            record(
                "order",
                order.pk,
                "order.created",
                {"order": order.pk, "sku": order.sku, "quantity": order.quantity},
                headers={"idempotency-key": self.request.idempotency.key},
            )
        self.request.idempotency.set_resource(order)
