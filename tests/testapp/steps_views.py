"""A steps-mode view: charge a provider, write the payment, send a mail."""

from collections.abc import Callable

from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency.mixins import IdempotencyMixin
from idempotency.shared.steps import Abandon

from .downstream import provider
from .models import Widget
from .views import _maybe_fail

# What the keyless outside world saw: a mailer sends what it is asked to.
mails: list[str] = []
refunds: list[tuple[str, str]] = []
# Tests' probes, each called with the step's name as an outside call starts.
on_call: list[Callable[[str], None]] = []
# Set: the view answers before its first step (a retry taking another branch).
answer_early: list[bool] = []


def reset():
    mails.clear()
    refunds.clear()
    on_call.clear()
    answer_early.clear()


def refund(key: str, charge: str) -> str:
    _calling("undo:charge")
    refunds.append((key, charge))
    return f"re_{len(refunds)}"


def _calling(step: str) -> None:
    for probe in on_call:
        probe(step)


class PaymentSerializer(serializers.Serializer):
    amount = serializers.IntegerField(min_value=1)
    ship = serializers.BooleanField(default=True)


class PaymentView(IdempotencyMixin, APIView):
    """Steps mode: each outside call and the local write is a step."""

    idempotency_mode = "steps"
    idempotency_operation = "payment.create"

    def post(self, request):
        serializer = PaymentSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        amount = serializer.validated_data["amount"]
        unit = request.idempotency
        if answer_early:
            return Response({"charge": None}, status=200)

        def charge(key):
            _calling("charge")
            return provider.charge(key, amount)

        charge_id = unit.step("charge", charge, undo=refund)
        failure = _maybe_fail()  # a failure or a crash between two steps
        if failure:
            return failure
        if not serializer.validated_data["ship"]:
            raise Abandon("No carrier takes this parcel.")
        payment = unit.step(
            "payment",
            lambda key: Widget.objects.create(name=charge_id).pk,
            atomic=True,
        )

        def mail(key):
            _calling("mail")
            mails.append(charge_id)  # no key: the mailer cannot deduplicate

        unit.step("mail", mail)
        return Response({"charge": charge_id, "payment": payment}, status=201)
