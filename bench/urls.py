"""The demo's URLs plus the baselines: views without the mixin, and bare ones.

The demo-shaped pair (``baseline/orders/`` against the demo's ``api/orders/``)
does the demo's work: the order, its outbox row and the relay kick. The bare
trio creates one order and nothing else, with the mixin in either mode or
without it, so the keys' own cost shows alone; the floor view does nothing.
"""

from django.urls import include, path
from rest_framework import mixins, status, viewsets
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.settings import api_settings

from idempotency.mixins import IdempotencyMixin
from project.shop import orders
from project.shop.models import Order
from project.shop.serializers import OrderSerializer

from .cached_auth import CachedUserAuthentication

# The bare trio and the floor: the bench's query-free authentication first,
# then the project's (Basic, session), so a client picks its kind by header.
AUTHENTICATION = [
    CachedUserAuthentication,
    *api_settings.DEFAULT_AUTHENTICATION_CLASSES,
]


class BaselineOrderViewSet(mixins.CreateModelMixin, viewsets.GenericViewSet):
    serializer_class = OrderSerializer

    def get_queryset(self):
        return Order.objects.filter(owner=self.request.user)

    def perform_create(self, serializer):
        orders.place(serializer, self.request.user)


class BareOrderViewSet(mixins.CreateModelMixin, viewsets.GenericViewSet):
    """A DRF create view writing one row: no outbox, no relay kick."""

    serializer_class = OrderSerializer
    authentication_classes = AUTHENTICATION

    def perform_create(self, serializer):
        serializer.save(owner=self.request.user)


class KeyedOrderViewSet(IdempotencyMixin, BareOrderViewSet):
    idempotency_operation = "bench.order.create"


class LeasedOrderViewSet(KeyedOrderViewSet):
    idempotency_mode = "lease"
    idempotency_operation = "bench.order.create-leased"


class FloorViewSet(viewsets.GenericViewSet):
    """What no keyed request can skip: DRF's authentication, permission and
    content negotiation, then a constant answer. A replay's lower bound."""

    authentication_classes = AUTHENTICATION

    def create(self, request):
        return Response({"id": 0}, status=status.HTTP_201_CREATED)


def _routes(prefix, viewset):
    router = SimpleRouter()
    router.register("orders", viewset, basename=f"{prefix}-order")
    return path(f"{prefix}/", include(router.urls))


urlpatterns = [
    path("", include("project.urls")),
    _routes("baseline", BaselineOrderViewSet),
    _routes("bare", BareOrderViewSet),
    _routes("keyed", KeyedOrderViewSet),
    _routes("leased", LeasedOrderViewSet),
    _routes("floor", FloorViewSet),
]
