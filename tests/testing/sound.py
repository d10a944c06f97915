"""Sound code the proof kit must pass, in shapes its other tests do not have."""

from django.http import JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency.decorators import idempotent
from idempotency.mixins import IdempotencyMixin
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


def shipped_count() -> int:
    return Widget.objects.filter(name__startswith=SHIPPED).count()


@csrf_exempt
@idempotent("sound.form-widget")
def form_widget(request):
    """A plain Django view reading a form (``request.POST``), not JSON."""
    widget = Widget.objects.create(name=request.POST["name"])
    return JsonResponse({"id": widget.pk}, status=201)
