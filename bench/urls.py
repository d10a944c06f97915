"""The demo's URLs plus the baseline: the same order view without the mixin."""

from django.urls import include, path
from rest_framework import mixins, viewsets
from rest_framework.routers import SimpleRouter

from project.shop import orders
from project.shop.models import Order
from project.shop.serializers import OrderSerializer


class BaselineOrderViewSet(mixins.CreateModelMixin, viewsets.GenericViewSet):
    serializer_class = OrderSerializer

    def get_queryset(self):
        return Order.objects.filter(owner=self.request.user)

    def perform_create(self, serializer):
        orders.place(serializer, self.request.user)


router = SimpleRouter()
router.register("orders", BaselineOrderViewSet, basename="baseline-order")

urlpatterns = [
    path("", include("project.urls")),
    path("baseline/", include(router.urls)),
]
