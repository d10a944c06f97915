"""The payment flow of issue 19, across three hops, every outside call a step.

``POST /t/payments/`` (keys, steps mode) charges the provider in a step whose
undo refunds it, then writes the payment and records ``payment.captured`` in
one atomic step. A consumer of that event books a shipment with the carrier
and records ``shipment.booked`` (``tasks.ship_payment``); a consumer of that
one emails a receipt through a mailer that takes no key
(``tasks.email_receipt``). An email at ``FLAGGED_DOMAIN`` is refused after
the charge: the unit gives up and the charge is refunded.

``crash_point()`` calls mark where the fault tests kill the process: before
each step, inside it between the outside call and its recovery point, and
after it.
"""

import functools

from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency.mixins import IdempotencyMixin
from idempotency.shared.steps import Abandon
from outbox.api import record

from . import services
from .crashes import crash_point
from .models import Payment

FLAGGED_DOMAIN = "@flagged.example"


class PaymentSerializer(serializers.Serializer):
    amount = serializers.IntegerField(min_value=1)
    email = serializers.EmailField()


class PaymentView(IdempotencyMixin, APIView):
    idempotency_mode = "steps"
    idempotency_operation = "payment.capture"

    def post(self, request):
        serializer = PaymentSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        amount, email = (serializer.validated_data[f] for f in ("amount", "email"))
        unit = request.idempotency

        crash_point("before:charge")
        charge = unit.step(
            "charge", functools.partial(charge_card, amount), undo=refund
        )
        crash_point("after:charge")
        if email.endswith(FLAGGED_DOMAIN):
            raise Abandon("the risk check flagged the buyer")

        crash_point("before:capture")
        capture = functools.partial(
            capture_payment, request.user.pk, amount, email, charge["id"]
        )
        payment = unit.step("capture", capture, atomic=True)
        crash_point("after:capture")
        return Response({"id": payment, "charge": charge["id"]}, status=201)


def charge_card(amount, key):
    charge = services.charge(key, amount)
    crash_point("call:charge")
    return charge


def refund(key, charge):
    """The charge step's undo: refund what it charged, with the undo's key."""
    refunded = services.refund(key, charge["id"])
    crash_point("call:refund")
    return refunded


def capture_payment(owner, amount, email, charge, key):
    # Runs in the step's transaction: the row, the event and the recovery
    # point commit together.
    payment = Payment.objects.create(
        owner_id=owner, amount=amount, email=email, charge=charge
    )
    record(
        "payment",
        payment.pk,
        "payment.captured",
        {"payment": payment.pk, "email": email, "amount": amount},
    )
    crash_point("call:capture")
    return payment.pk
