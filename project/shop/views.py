"""The demo shop's API: idempotent order creation."""

from rest_framework import mixins, viewsets

from idempotency.mixins import IdempotencyMixin

from . import orders
from .models import Order
from .serializers import OrderSerializer


class OrderViewSet(
    IdempotencyMixin,
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet,
):
    queryset = Order.objects.all()
    serializer_class = OrderSerializer
    idempotency_operation = "shop.order.create"

    def get_queryset(self):
        return super().get_queryset().filter(owner=self.request.user)

    def perform_create(self, serializer):
        claim = self.request.idempotency
        order = orders.place(serializer, self.request.user)
        claim.set_resource(order)
