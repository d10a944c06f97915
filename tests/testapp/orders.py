"""An order API that records an event with each order: POST /api/orders/."""

from django.db import transaction
from rest_framework import mixins, serializers, viewsets

from idempotency.mixins import IdempotencyMixin
from outbox.api import record

from .crashes import crash_point
from .models import Order


class OrderSerializer(serializers.ModelSerializer):
    quantity = serializers.IntegerField(min_value=1, max_value=1000)

    class Meta:
        model = Order
        fields = ["id", "sku", "quantity", "status"]
        read_only_fields = ["id", "status"]


class OrderViewSet(
    IdempotencyMixin,
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    queryset = Order.objects.all()
    serializer_class = OrderSerializer
    idempotency_operation = "order.create"

    def get_queryset(self):
        return super().get_queryset().filter(owner=self.request.user)

    def perform_create(self, serializer):
        claim = self.request.idempotency
        crash_point("before:order")  # the key claimed, nothing written
        # The order and its event commit together, inside the claim's transaction.
        with transaction.atomic(savepoint=False):
            order = serializer.save(owner=self.request.user)
            record(
                "order",
                order.pk,
                "order.created",
                {"order": order.pk, "sku": order.sku, "quantity": order.quantity},
            )
        crash_point("after:order")  # written, not committed
        claim.set_resource(order)
