"""Keyed views that show what their unit of work is while they run: the
derived key, the current unit, and the intent of an event they record."""

from asgiref.sync import sync_to_async
from django.db import transaction
from django.http import JsonResponse
from django.urls import path
from rest_framework.decorators import api_view
from rest_framework.response import Response

from idempotency.decorators import idempotent
from idempotency.shared import units
from outbox.api import record
from outbox.models import OutboxMessage

# Each run appends what it saw; a test sets ``failures`` to fail the next runs.
runs: list[dict] = []
failures = {"left": 0}


def _run(request):
    claim = request.idempotency
    with transaction.atomic():
        message_id = record("order", 1, "order.created", {"sku": "BOOK-1"})
    runs.append(
        {
            "derived": claim.derive("charge"),
            "current": units.current(),
            "unit": claim.unit,
            "event_intent": OutboxMessage.objects.get(pk=message_id).headers[
                "once-intent"
            ],
        }
    )
    if failures["left"]:
        failures["left"] -= 1
        raise RuntimeError("injected failure")
    return Response({"derived": claim.derive("charge")}, status=201)


@api_view(["POST"])
@idempotent("unit.lease", mode="lease")
def lease_view(request):
    return _run(request)


@api_view(["POST"])
@idempotent("unit.atomic")
def atomic_view(request):
    return _run(request)


def _record_intent() -> str:
    with transaction.atomic():
        message_id = record("order", 1, "order.created", {"sku": "BOOK-1"})
    return OutboxMessage.objects.get(pk=message_id).headers["once-intent"]


@idempotent("unit.async")
async def async_view(request):
    # The claim runs on the sync thread and this view on the event loop: the
    # current unit crosses both hops of asgiref.
    runs.append(
        {
            "current": units.current(),
            "unit": request.idempotency.unit,
            "event_intent": await sync_to_async(_record_intent)(),
        }
    )
    return JsonResponse({}, status=201)


urlpatterns = [
    path("lease/", lease_view),
    path("atomic/", atomic_view),
    path("async/", async_view),
]
