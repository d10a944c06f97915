"""Code that breaks a guarantee on purpose: the proof kit must say which.

Each piece is the kind of mistake the kit exists to catch in users' code.
"""

import time
import uuid

from celery import Celery
from django.core import mail
from django.db import IntegrityError, transaction
from django.db.models import F
from rest_framework import permissions, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from idempotency.mixins import IdempotencyMixin
from inbox.api import consumer, receive
from outbox.api import record
from tests.testapp import services
from tests.testapp.downstream import provider
from tests.testapp.models import Order, Stock, Widget
from tests.testing.sound import (
    RELEASED,
    RESERVED,
    SHIPPED,
    ChargesAndReservesView,
    charge_and_reserve,
    refund_charge,
    release_reservation,
)
from webhooks.handlers import on


class WidgetSerializer(serializers.ModelSerializer):
    class Meta:
        model = Widget
        fields = ["id", "name"]


# A Celery app of the tests' own, on a broker in this process.
tasks_app = Celery("kit-broken", broker="memory://", set_as_current=False)


@tasks_app.task(name="broken.ship_widget")
def ship_widget(name):
    """Ships the widget: a carrier's pickup, out of the database."""


# Endpoints.


class UnguardedView(APIView):
    """No mixin, no decorator: the key is ignored and every request runs."""

    def post(self, request):
        if not request.data.get("name"):
            return Response({"name": ["This field is required."]}, status=400)
        widget = Widget.objects.create(name=request.data["name"])
        return Response({"id": widget.pk}, status=201)


class CheckThenActView(APIView):
    """Dedupes by hand: looks the key up first, then creates. Sequential
    retries replay; concurrent ones all find nothing and all create."""

    permission_classes = [permissions.IsAuthenticated]

    def post(self, request):
        key = request.headers["Idempotency-Key"]
        existing = Widget.objects.filter(name=key).first()
        if existing is not None:
            answer = Response({"id": existing.pk, "name": key}, status=201)
            answer["Idempotent-Replayed"] = "true"
            return answer
        widget = Widget.objects.create(name=key)
        return Response({"id": widget.pk, "name": key}, status=201)


class MailsOutsideStepsView(IdempotencyMixin, APIView):
    """Steps mode, but the mail goes out between two steps, not in one: when
    a crash comes after the later step, the retry resumes past the steps and
    mails again."""

    idempotency_mode = "steps"
    idempotency_operation = "broken.mails-outside-steps"

    def post(self, request):
        unit = request.idempotency
        charge = unit.step("charge", lambda key: services.charge(key, 500))
        services.send_mail("buyer@example.com", "Your receipt")
        unit.step("note", lambda key: charge["id"])
        return Response({"charge": charge["id"]}, status=201)


def notify(widget):
    """Tells another system about the widget; tests make it fail."""


class FiveHundredView(IdempotencyMixin, APIView):
    """Answers 500 when a step after its write fails; with STORE_STATUS
    storing every status (store_everything), the 500 and the write are kept."""

    idempotency_operation = "broken.five-hundred"
    failure_body: dict = {"error": "try again later"}
    failure_status = 500

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        try:
            notify(widget)
        except Exception:
            return Response(self.failure_body, status=self.failure_status)
        return Response({"id": widget.pk}, status=201)


def store_everything(status_code):
    return True


class ReturnedBadRequestView(IdempotencyMixin, APIView):
    """Answers its validation errors with a 400 response instead of raising
    ValidationError: the 400 is stored like any client error."""

    idempotency_operation = "broken.bad-request"

    def post(self, request):
        serializer = WidgetSerializer(data=request.data)
        if not serializer.is_valid():
            return Response(serializer.errors, status=400)
        serializer.save()
        return Response(serializer.data, status=201)


class ExcludesTheNameView(IdempotencyMixin, APIView):
    """Leaves a field that matters out of the fingerprint: another name under
    the same key is taken for a retry of the first."""

    idempotency_operation = "broken.excludes-name"
    idempotency_exclude_fields = ("name",)

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        return Response({"id": widget.pk}, status=201)


class UnderivedChargeView(IdempotencyMixin, APIView):
    """Lease mode, but the downstream key is new on every attempt."""

    idempotency_mode = "lease"
    idempotency_operation = "broken.underived-charge"

    def post(self, request):
        charge = provider.charge(uuid.uuid4().hex, 500)
        widget = Widget.objects.create(name=charge)
        return Response({"charge": charge, "widget": widget.pk}, status=201)


class ClientKeyChargeView(UnderivedChargeView):
    """Hands the client's own key downstream, not one derived per step."""

    idempotency_operation = "broken.client-key-charge"

    def post(self, request):
        charge = provider.charge(request.idempotency.key, 500)
        widget = Widget.objects.create(name=charge)
        return Response({"charge": charge, "widget": widget.pk}, status=201)


def one_scope_for_all(request):
    """A scope resolver that puts every client in one scope."""
    return "everyone"


# Consumers.


def applies_before_receive(*, payload, headers, **kwargs):
    """Makes its change, then asks the inbox: a redelivery changes it again."""
    Widget.objects.create(name=payload["name"])
    with receive("broken.before", headers["once-message-id"]) as delivery:
        if delivery.duplicate:
            return


def applies_after_receive(*, payload, headers, **kwargs):
    """Claims the message, commits, then makes its change: a crash between
    the two loses the change for good."""
    with receive("broken.after", headers["once-message-id"]) as delivery:
        duplicate = delivery.duplicate
    if not duplicate:
        Widget.objects.create(name=payload["name"])


def receives_under_an_id_of_its_own(*, payload, **kwargs):
    """Asks the inbox under an id it makes per call (``uuid4()``), not the
    message's: every delivery looks new, and a redelivery applies again."""
    with receive("broken.own-id", str(uuid.uuid4())) as delivery:
        if delivery.duplicate:
            return
        Widget.objects.create(name=payload["name"])


def receives_under_a_name_of_its_own(*, payload, headers, **kwargs):
    """Asks the inbox under the message's id but a name it makes per call:
    every delivery is new to the inbox, and a redelivery applies again."""
    name = f"broken.own-name-{uuid.uuid4().hex[:8]}"
    with receive(name, headers["once-message-id"]) as delivery:
        if delivery.duplicate:
            return
        Widget.objects.create(name=payload["name"])


def applies_duplicates_too(*, payload, headers, **kwargs):
    """Claims the message under the inbox but never asks
    ``delivery.duplicate``: a redelivery the inbox knows for one is applied
    again."""
    with receive("broken.no-duplicate-check", headers["once-message-id"]):
        Widget.objects.create(name=payload["name"])


class AlreadyApplied(Exception):
    pass


def raises_on_duplicates(*, payload, headers, **kwargs):
    """Tells a redelivery from a new message, and raises on it: the broker
    retries it until the message is dead, though it was applied."""
    with receive("broken.raises-on-duplicate", headers["once-message-id"]) as delivery:
        if delivery.duplicate:
            raise AlreadyApplied("this message was applied already")
        Widget.objects.create(name=payload["name"])


def without_inbox(*, payload, **kwargs):
    """No inbox at all."""
    Widget.objects.create(name=payload["name"])


@consumer("broken.ships-by-task")
def ships_by_task(*, payload, **kwargs):
    """Under the inbox, writes its widget and hands the shipping on to a task
    sent straight to the broker: a death before the inbox's commit rolls the
    widget back, but the task is out, and the redelivery sends it again."""
    Widget.objects.create(name=payload["name"])
    ship_widget.delay(payload["name"])


def reserves_swallowing_failures(*, payload, headers, **kwargs):
    """Reserves stock and notes it under the inbox, but catches every
    exception and returns: a failure rolls the inbox row back with the work,
    the task is acked all the same, and no redelivery comes: the message is
    lost."""
    try:
        with receive("broken.swallows", headers["once-message-id"]) as delivery:
            if delivery.duplicate:
                return
            Stock.objects.filter(sku=payload["sku"]).update(reserved=F("reserved") + 1)
            Widget.objects.create(name=payload["name"])
    except Exception:
        return  # "logged": the broker acks the message


@consumer("broken.notes-swallowing-failures")
def notes_swallowing_failures(*, payload, **kwargs):
    """Notes the widget, then reserves stock, catching a failure in between
    inside the inbox's block: the inbox row commits with half the work."""
    try:
        Widget.objects.create(name=payload["name"])
        Stock.objects.filter(sku=payload["sku"]).update(reserved=F("reserved") + 1)
    except Exception:
        pass


@consumer("broken.mails-outside-steps", steps=True)
def mails_outside_steps(delivery, *, payload, **kwargs):
    """Books with a step, then mails outside any: when a crash comes after a
    later step, the redelivery resumes past the steps and mails again."""
    booking = delivery.step("ship", lambda key: services.book_shipment(key, 1))
    services.send_mail(payload["email"], "Your receipt")
    delivery.step("note", lambda key: booking["id"])


@consumer("broken.charges-under-its-own-key", steps=True)
def charges_under_its_own_key(delivery, *, payload, **kwargs):
    """Charges in a step, but under a key of its own, not the step's: a death
    between the charge and its recovery point has the redelivery charge
    again, and the provider cannot tell the two apart."""
    delivery.step(
        "charge", lambda key: services.charge(uuid.uuid4().hex, payload["amount"])
    )
    delivery.step(
        "note", lambda key: Widget.objects.create(name=payload["name"]).pk, atomic=True
    )


def places_order_losing_its_event(name):
    """Records the order's event, then its change fails and is caught: the
    transaction rolls back with the event, and the caller, told nothing,
    goes on as if the event were sent."""
    try:
        with transaction.atomic():
            record("widget", name, "widget.made", {"name": name})
            Widget.objects.create(name=name)
            raise RuntimeError("the stock service is down")
    except RuntimeError:
        return "accepted"


# Webhook handlers; tests register them on their own source.


def pay_in_arrival_order(event):
    """Sets the order's status without asking whether the event is stale."""
    order = Order.objects.get(pk=event.data["data"]["order"])
    order.status = event.data["data"]["status"]
    order.payment_updated_at = event.occurred_at
    order.save()


def mail_the_team(event):
    """Sends mail from inside the handler's transaction: the mail is out even
    when the transaction then rolls back, and the retry sends it again."""
    mail.send_mail("Pushed", event.delivery_id, "ci@example.com", ["team@example.com"])


def ships_the_widget_by_task(event):
    """Writes its widget, then hands the shipping on to a task sent straight
    to the broker: a worker dying before the handler's commit rolls the
    widget back, but the task is out, and the redelivered receipt sends it
    again."""
    widget = Widget.objects.create(name=event.delivery_id[:100])
    ship_widget.delay(widget.name)


def pays_swallowing_failures(event):
    """Marks the order paid and notes it, but catches every exception: a
    failure rolls the handler's work back, the receipt is marked processed
    all the same, and no retry comes: the payment is lost."""
    try:
        with transaction.atomic():
            order = Order.objects.select_for_update().get(pk=event.data["order"])
            order.status = "paid"
            order.save(update_fields=["status"])
            Widget.objects.create(name=f"paid {order.pk}")
    except Exception:
        return  # "logged"


def pays_once_committed(event):
    """Marks the order paid and notes it once the handler's transaction
    commits (``on_commit``): the receipt is processed by then, so a worker
    dying in between, or the note failing, loses the work for good."""

    def pay():
        Order.objects.filter(pk=event.data["order"]).update(status="paid")
        Widget.objects.create(name=f"paid {event.data['order']}")

    transaction.on_commit(pay)


def pays_and_mails_every_run(event):
    """Marks the order paid and mails the receipt on every run: a processed
    receipt an operator force-reprocesses (to run a handler added since)
    mails the buyer a second receipt."""
    order = Order.objects.select_for_update().get(pk=event.data["order"])
    order.status = "paid"
    order.save(update_fields=["status"])
    mail.send_mail("Paid", f"order {order.pk}", "shop@example.com", ["b@example.com"])


def register(source, event_type, handler):
    on(source, event_type)(handler)


# Endpoints the proof kit used to pass.


class TopUpSerializer(serializers.Serializer):
    wallet = serializers.CharField()
    amount = serializers.IntegerField(min_value=1)


class TopUpExcludingAmountView(IdempotencyMixin, APIView):
    """Leaves ``amount`` out of the fingerprint by mistake: the same key with
    another amount replays the first answer."""

    idempotency_operation = "broken.top-up"
    idempotency_exclude_fields = ("amount",)

    def post(self, request):
        serializer = TopUpSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        top_up = serializer.validated_data
        widget = Widget.objects.create(name=f"{top_up['wallet']}+{top_up['amount']}")
        return Response({"id": widget.pk, **top_up}, status=201)


class TopUpChargeView(IdempotencyMixin, APIView):
    """Builds the downstream key from the client's key alone: stable across
    retries, but two customers sending one key charge once between them."""

    idempotency_mode = "lease"
    idempotency_operation = "broken.top-up-charge"

    def post(self, request):
        amount = int(request.data["amount"])
        charge = provider.charge(f"topup-{request.idempotency.key}", amount)
        widget = Widget.objects.create(name=charge)
        return Response({"charge": charge, "widget": widget.pk}, status=201)


class SwallowsEverythingView(IdempotencyMixin, APIView):
    """Catches every exception and answers 202 "accepted": a failure after
    its write is stored as a success, and every retry replays it."""

    idempotency_operation = "broken.swallows-everything"

    def post(self, request):
        try:
            widget = Widget.objects.create(name=request.data["name"])
            notify(widget)
        except Exception:
            return Response({"status": "accepted"}, status=202)
        return Response({"id": widget.pk}, status=201)


class SwallowsNotifyFailureView(FiveHundredView):
    """Writes, then catches the failure of its next step and answers 202: the
    kit's failure inside the ORM passes through; the user's fail() of that
    step shows it."""

    idempotency_operation = "broken.swallows-notify"
    failure_body = {"status": "accepted"}
    failure_status = 202


class MailsBeforeCompletingView(IdempotencyMixin, APIView):
    """Sends mail after its write, inside the claim's transaction: a failure
    after it rolls the write back, but the mail is out, and the retry sends
    it again."""

    idempotency_operation = "broken.mails"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        mail.send_mail("Widget", widget.name, "shop@example.com", ["a@example.com"])
        return Response({"id": widget.pk}, status=201)


class ChargesOnCommitView(IdempotencyMixin, APIView):
    """Writes its widget, then charges once the claim's transaction commits
    (``on_commit``): a process that dies in between keeps the widget and the
    stored answer, and the charge is never made; every retry replays."""

    idempotency_operation = "broken.charges-on-commit"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        key = request.idempotency.derive("charge")
        transaction.on_commit(lambda: provider.charge(key, 500))
        return Response({"id": widget.pk}, status=201)


class ChargesOnCommitThenNotesItView(IdempotencyMixin, APIView):
    """As ``ChargesOnCommitView``, and the callback then notes the charge on
    the widget: a write after the commit that stores the answer. A process
    dying right after that commit still loses the charge."""

    idempotency_operation = "broken.charges-on-commit-then-notes"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        key = request.idempotency.derive("charge")

        def charge():
            charged = provider.charge(key, 500)
            Widget.objects.filter(pk=widget.pk).update(name=charged)

        transaction.on_commit(charge)
        return Response({"id": widget.pk}, status=201)


class ReservesOutsideStepsView(IdempotencyMixin, APIView):
    """Steps mode, but it reserves stock outside any step: steps mode runs
    the view in no transaction, so a failure after the update keeps it, and
    the retry, running the view again, reserves once more."""

    idempotency_mode = "steps"
    idempotency_operation = "broken.reserves-outside-steps"

    def post(self, request):
        sku = request.data["sku"]
        Stock.objects.filter(sku=sku).update(reserved=F("reserved") + 1)
        request.idempotency.step("note", lambda key: sku)
        return Response({"sku": sku}, status=201)


class ShipsSwallowingFailuresView(IdempotencyMixin, APIView):
    """The sound ``ShipWidgetView``, but it catches every exception after
    shipping and answers 202: a failure is stored as a success."""

    idempotency_operation = "broken.ships-swallowing-failures"

    def post(self, request, pk):
        widget = Widget.objects.select_for_update().get(pk=pk)
        if widget.name.startswith(SHIPPED):
            raise ValidationError({"widget": "already shipped"})
        try:
            widget.name = SHIPPED + widget.name
            widget.save(update_fields=["name"])
            notify(widget)
        except Exception:
            return Response({"status": "accepted"}, status=202)
        return Response({"id": widget.pk, "shipped": True})


class ShipsByTaskOnCommitView(IdempotencyMixin, APIView):
    """Writes its widget and has a Celery task ship it once the claim's
    transaction commits: a process dying between the commit and the send
    keeps the stored answer, every retry replays it, and the widget is never
    shipped."""

    idempotency_operation = "broken.ships-by-task-on-commit"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        transaction.on_commit(lambda: ship_widget.delay(widget.name))
        return Response({"id": widget.pk}, status=201)


# Compensations gone wrong: ChargesAndReservesView with one undo mistaken.


class NoRefundView(ChargesAndReservesView):
    """The charge has no undo: a unit that gives up keeps the money."""

    idempotency_operation = "broken.no-refund"
    charge_undo = None


def refund_with_a_new_key(key, charge):
    """Refunds under a key of its own, not the one it is given: resumed after
    a death, the compensation refunds a second time."""
    return services.refund(str(uuid.uuid4()), charge["id"])


class UnkeyedRefundView(ChargesAndReservesView):
    idempotency_operation = "broken.unkeyed-refund"
    charge_undo = staticmethod(refund_with_a_new_key)


def release_by_ledger(key, widget):
    """Writes a release to a ledger each call: not idempotent."""
    Widget.objects.create(name=f"{RELEASED}{widget}")


class LedgerReleaseView(ChargesAndReservesView):
    idempotency_operation = "broken.ledger-release"
    reserve_undo = staticmethod(release_by_ledger)


def release_the_charged_widget(key, charge):
    """Registered on the charge step, it undoes the reservation."""
    Widget.objects.filter(name=RESERVED + charge["id"]).delete()


def refund_the_reserved_charge(key, widget):
    """Registered on the reservation step, it refunds the charge."""
    charge = Widget.objects.get(pk=widget).name.removeprefix(RESERVED)
    return services.refund(key, charge)


class SwappedUndosView(ChargesAndReservesView):
    """Each step carries the other's undo: the charge is refunded while the
    widget is still reserved, the undos out of order."""

    idempotency_operation = "broken.swapped-undos"
    charge_undo = staticmethod(release_the_charged_widget)
    reserve_undo = staticmethod(refund_the_reserved_charge)


def refuses_to_release(key, widget):
    raise RuntimeError("the warehouse refuses to release it")


class RaisingUndoView(ChargesAndReservesView):
    """An undo that raises every time: the unit stays compensating."""

    idempotency_operation = "broken.raising-undo"
    reserve_undo = staticmethod(refuses_to_release)


@consumer("broken.charges-without-refund", steps=True)
def charges_without_refund(delivery, *, payload, **kwargs):
    charge_and_reserve(delivery, payload["amount"], charge_undo=None)


@consumer("broken.refunds-unkeyed", steps=True)
def refunds_unkeyed(delivery, *, payload, **kwargs):
    charge_and_reserve(delivery, payload["amount"], charge_undo=refund_with_a_new_key)


# A database error taken for a duplicate: ``except IntegrityError`` (or
# ``DatabaseError``) around the work, as teams write to dedupe by hand.


class SwallowsIntegrityErrorView(IdempotencyMixin, APIView):
    """Creates its widget in a savepoint and answers an ``IntegrityError`` as
    "already done": any failure the database reports there (a constraint of
    another row, a foreign key gone) is stored as a 200 with the write rolled
    back, and every retry replays it: the widget is never made."""

    idempotency_operation = "broken.swallows-integrity-error"

    def post(self, request):
        try:
            with transaction.atomic():
                widget = Widget.objects.create(name=request.data["name"])
        except IntegrityError:
            return Response({"status": "already done"}, status=200)
        return Response({"id": widget.pk}, status=201)


def reserves_swallowing_integrity_errors(*, payload, headers, **kwargs):
    """Under the inbox, reserves stock and notes it in a savepoint taking an
    ``IntegrityError`` for a duplicate: the inbox row commits without the
    work, and the message is acked."""
    with receive("broken.swallows-integrity", headers["once-message-id"]) as delivery:
        if delivery.duplicate:
            return
        try:
            with transaction.atomic():
                Stock.objects.filter(sku=payload["sku"]).update(
                    reserved=F("reserved") + 1
                )
                Widget.objects.create(name=payload["name"])
        except IntegrityError:
            return  # "noted already"


def pays_swallowing_integrity_errors(event):
    """Marks the order paid and notes it in a savepoint taking an
    ``IntegrityError`` for a duplicate: the receipt is marked processed
    without the payment."""
    try:
        with transaction.atomic():
            order = Order.objects.select_for_update().get(pk=event.data["order"])
            order.status = "paid"
            order.save(update_fields=["status"])
            Widget.objects.create(name=f"paid {order.pk}")
    except IntegrityError:
        return  # "paid already"


# A step named anew on each attempt: the retry cannot find its recovery
# point, and runs it again under another derived key.


def charge_at(unit, amount):
    """Charges in a step whose name holds the time of the attempt."""
    charge = unit.step(
        f"charge-{time.time_ns()}", lambda key: services.charge(key, amount)
    )
    unit.step("note", lambda key: charge["id"])


class ChargesUnderATimedStepView(IdempotencyMixin, APIView):
    idempotency_mode = "steps"
    idempotency_operation = "broken.timed-step"

    def post(self, request):
        charge_at(request.idempotency, request.data["amount"])
        return Response({"charged": True}, status=201)


@consumer("broken.timed-step", steps=True)
def charges_under_a_timed_step(delivery, *, payload, **kwargs):
    charge_at(delivery, payload["amount"])


def charges_under_a_timed_step_handler(event):
    charge_at(event, 500)


class ChargesUnderItsOwnKeyView(ChargesAndReservesView):
    """Steps mode with keyed, idempotent undos, but the charge step calls the
    provider under a key of its own, not the ``key`` it is given: a process
    dying between the charge and its recovery point has the retry, resuming
    at that step, charge a second time."""

    idempotency_operation = "broken.charges-under-its-own-key"

    def post(self, request):
        unit = request.idempotency
        amount = request.data["amount"]
        charge = unit.step(
            "charge",
            lambda key: services.charge(uuid.uuid4().hex, amount),
            undo=refund_charge,
        )
        widget = unit.step(
            "reserve",
            lambda key: Widget.objects.create(name=RESERVED + charge["id"]).pk,
            atomic=True,
            undo=release_reservation,
        )
        return Response({"charge": charge["id"], "widget": widget}, status=201)


# Mistakes the kit caught already, kept as proof it goes on catching them.


class ShipsByTaskView(IdempotencyMixin, APIView):
    """Writes its widget and sends the shipping task at once, from inside
    the claim's transaction: a failure or a death before the commit rolls
    the widget back, but the task is out, and the retry sends it again."""

    idempotency_operation = "broken.ships-by-task-at-once"

    def post(self, request):
        widget = Widget.objects.create(name=request.data["name"])
        ship_widget.delay(widget.name)
        return Response({"id": widget.pk}, status=201)


class ChargesUnderANewKeyView(IdempotencyMixin, APIView):
    """Charges under a key made per attempt (``uuid4()``), then writes: the
    charge is outside the transaction, so a failed attempt keeps it, and
    its retry charges again under another key. No ``downstream`` is given:
    the failure cases see it through ``effects()``."""

    idempotency_operation = "broken.charges-under-a-new-key"

    def post(self, request):
        charge = services.charge(uuid.uuid4().hex, 500)
        widget = Widget.objects.create(name=charge["id"])
        return Response({"id": widget.pk}, status=201)


@consumer("broken.ships-by-task-on-commit")
def ships_by_task_on_commit(*, payload, **kwargs):
    """Under the inbox, writes its widget and sends the task once the inbox
    row commits: a death between that commit and the send loses it."""
    Widget.objects.create(name=payload["name"])
    transaction.on_commit(lambda: ship_widget.delay(payload["name"]))


def charges_under_a_new_key(*, payload, headers, **kwargs):
    """Under the inbox, charges under a key made per call, in its
    transaction: a death before the inbox's commit has the redelivery
    charge again under another key."""
    with receive("broken.new-key", headers["once-message-id"]) as delivery:
        if delivery.duplicate:
            return
        Widget.objects.create(name=payload["name"])
        services.charge(uuid.uuid4().hex, 500)


def ships_the_widget_by_task_on_commit(event):
    """Writes its widget and sends the task once the handler's transaction
    commits: the receipt is processed by then, so a worker dying before the
    send loses the shipping."""
    widget = Widget.objects.create(name=event.delivery_id[:100])
    transaction.on_commit(lambda: ship_widget.delay(widget.name))
