"""The test app's inbox consumers: each ``order.created`` reserves stock once;
the payment flow's ship and email its receipt."""

import functools

from django.db.models import F

from inbox.api import consumer_task
from outbox.api import record

from . import services
from .crashes import crash_point
from .models import Stock


@consumer_task("testapp.reserve-stock", name="testapp.reserve_stock")
def reserve_stock(*, event_type, aggregate_type, aggregate_id, payload, headers):
    stock, _ = Stock.objects.get_or_create(sku=payload["sku"])
    # F(): concurrent reservations of one SKU never lose an update.
    Stock.objects.filter(pk=stock.pk).update(
        on_hand=F("on_hand") - payload["quantity"],
        reserved=F("reserved") + payload["quantity"],
    )


# The payment flow's consumers (payments.py): each outside call is a step of
# the delivery, so a redelivery resumes at the first unfinished one.


@consumer_task("testapp.ship", name="testapp.ship_payment", steps=True)
def ship_payment(
    delivery, *, event_type, aggregate_type, aggregate_id, payload, headers
):
    crash_point("before:ship")
    book = functools.partial(book_shipment, payload["payment"])
    shipment = delivery.step("ship", book)
    crash_point("after:ship")
    crash_point("before:shipped")
    booked = functools.partial(record_shipped, payload, shipment["id"])
    delivery.step("shipped", booked, atomic=True)
    crash_point("after:shipped")


@consumer_task("testapp.receipt", name="testapp.email_receipt", steps=True)
def email_receipt(
    delivery, *, event_type, aggregate_type, aggregate_id, payload, headers
):
    crash_point("before:mail")
    delivery.step("mail", functools.partial(mail_receipt, payload["email"]))
    crash_point("after:mail")


def book_shipment(payment, key):
    shipment = services.book_shipment(key, payment)
    crash_point("call:ship")
    return shipment


def record_shipped(payload, shipment, key):
    record(
        "payment",
        payload["payment"],
        "shipment.booked",
        {**payload, "shipment": shipment},
    )
    crash_point("call:shipped")


def mail_receipt(email, key):
    # The mailer takes no key: only this step's recovery point keeps the
    # receipt from going twice.
    mail = services.send_mail(email, "Your receipt")
    crash_point("call:mail")
    return mail
