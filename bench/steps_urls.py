"""The bench's URLs plus a steps-mode twin of the leased order view."""

from django.urls import include, path
from rest_framework.routers import SimpleRouter

from project.shop.models import Order

from .urls import LeasedOrderViewSet
from .urls import urlpatterns as bench_urlpatterns


class SteppedOrderViewSet(LeasedOrderViewSet):
    """The same order, written by an atomic step of a steps-mode view."""

    idempotency_mode = "steps"
    idempotency_operation = "bench.order.create-stepped"

    def perform_create(self, serializer):
        def create(key):
            return serializer.save(owner=self.request.user).pk

        pk = self.request.idempotency.step("order", create, atomic=True)
        if serializer.instance is None:  # a retry: the step's order exists
            serializer.instance = Order.objects.get(pk=pk)


router = SimpleRouter()
router.register("orders", SteppedOrderViewSet, basename="stepped-order")

urlpatterns = [
    path("stepped/", include(router.urls)),
    *bench_urlpatterns,
]
