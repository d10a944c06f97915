"""Sound code the proof kit must pass, in shapes its other tests do not have."""

from collections.abc import Callable

from celery import Celery
from django.http import JsonResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency.decorators import idempotent
from idempotency.mixins import IdempotencyMixin
from inbox.api import consumer
from tests.testapp import services
from tests.testapp.models import Widget

SHIPPED = "shipped "


class ShipWidgetView(IdempotencyMixin, APIView):
    """A detail route acting once on its object (``POST /widgets/<pk>/ship/``):
    a second shipment of a shipped widget, under any key, is refused."""

    idempotency_operation = "sound.ship-widget"

    def post(self, request, pk):
        widget = get_object_or_404(Widget.objects.select_for_update(), pk=pk)
        if widget.name.startswith(SHIPPED):
            raise ValidationError({"widget": "already shipped"})
        widget.name = SHIPPED + widget.name
        widget.save(update_fields=["name"])
        return Response({"id": widget.pk, "shipped": True})


class StampedWidgetView(IdempotencyMixin, APIView):
    """Answers with the time it ran: a replay differs from what the view
    would answer now, which is no mistake, since the replay is the stored
    answer, byte for byte."""

    idempotency_operation = "sound.stamped-widget"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        return Response({"id": widget.pk, "at": timezone.now().isoformat()}, 201)


def shipped_count() -> int:
    return Widget.objects.filter(name__startswith=SHIPPED).count()


@csrf_exempt
@idempotent("sound.form-widget")
def form_widget(request):
    """A plain Django view reading a form (``request.POST``), not JSON."""
    widget = Widget.objects.create(name=request.POST["name"])
    return JsonResponse({"id": widget.pk}, status=201)


# A Celery app of the tests' own, on a broker in this process.
tasks_app = Celery("kit-sound", broker="memory://", set_as_current=False)


@tasks_app.task(name="sound.ship_widget")
def ship_widget(name, key):
    """Ships the widget once per key: the carrier dedupes on it."""


@consumer("sound.ships-in-a-step", steps=True)
def ships_in_a_step(delivery, *, payload, **kwargs):
    """A steps consumer whose outside call is a task sent in a step, with
    the step's key: a redelivery resumes past it, or sends it again with the
    same key, which the carrier dedupes."""
    name = payload["name"]
    delivery.step("ship", lambda key: ship_widget.delay(name, key).id)
    delivery.step("note", lambda key: Widget.objects.create(name=name).pk, atomic=True)


# A steps-mode view whose every step has its own keyed, idempotent undo.
RESERVED = "reserved "
RELEASED = "released "


def refund_charge(key, charge):
    """The charge's undo: a refund under the undo's own key."""
    return services.refund(key, charge["id"])


def release_reservation(key, widget):
    """The reservation's undo: deleting it twice deletes it once."""
    Widget.objects.filter(pk=widget).delete()


def charge_and_reserve(
    unit, amount, *, charge_undo=refund_charge, reserve_undo=release_reservation
):
    """Charges the provider, then reserves a widget in an atomic step, on any
    unit (a keyed request's, a delivery's, a webhook event's); giving up
    refunds the charge and releases the widget. ``broken`` gets the undos
    wrong."""
    charge = unit.step(
        "charge", lambda key: services.charge(key, amount), undo=charge_undo
    )
    widget = unit.step(
        "reserve",
        lambda key: Widget.objects.create(name=RESERVED + charge["id"]).pk,
        atomic=True,
        undo=reserve_undo,
    )
    return charge["id"], widget


class ChargesAndReservesView(IdempotencyMixin, APIView):
    """``charge_and_reserve()`` in a steps-mode view; its subclasses in
    ``broken`` get the undos wrong."""

    idempotency_mode = "steps"
    idempotency_operation = "sound.charges-and-reserves"
    charge_undo: Callable | None = staticmethod(refund_charge)
    reserve_undo: Callable | None = staticmethod(release_reservation)

    def post(self, request):
        charge, widget = charge_and_reserve(
            request.idempotency,
            request.data["amount"],
            charge_undo=self.charge_undo,
            reserve_undo=self.reserve_undo,
        )
        return Response({"charge": charge, "widget": widget}, status=201)


@consumer("sound.charges-and-reserves", steps=True)
def charges_and_reserves(delivery, *, payload, **kwargs):
    charge_and_reserve(delivery, payload["amount"])


def standing(fakes) -> dict[str, int]:
    """What stands of ``ChargesAndReservesView``'s effects: charges not
    refunded, widgets reserved and not released."""
    widgets = Widget.objects
    return {
        "charge": fakes.effects.count("charge") - fakes.effects.count("refund"),
        "reserved": widgets.filter(name__startswith=RESERVED).count()
        - widgets.filter(name__startswith=RELEASED).count(),
    }
