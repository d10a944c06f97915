"""Webhook handlers that break an ordering guarantee on purpose: the kit must
say which. Tests register them on their own source."""

from datetime import timedelta

from idempotency.shared import clock
from tests.testapp.models import Order


def pay_stamped_on_arrival(event):
    """Orders by staleness, but stamps the state with the arrival time: an
    event that happened before the last one arrived looks stale, so a newer
    event delivered after an older one is ignored."""
    order = Order.objects.select_for_update().get(pk=event.data["data"]["order"])
    if event.is_stale(order.payment_updated_at):
        return
    order.status = event.data["data"]["status"]
    order.payment_updated_at = clock.now()
    order.save()


# An event older than this is taken for stale, whatever the state's stamp.
TOO_OLD = timedelta(minutes=45)


def pay_unless_old(event):
    """Drops an event by its age, not by the state's stamp, and applies the
    others in arrival order: an event a minute older than the state
    overwrites it."""
    if clock.now() - event.occurred_at > TOO_OLD:
        return
    order = Order.objects.select_for_update().get(pk=event.data["data"]["order"])
    order.status = event.data["data"]["status"]
    order.payment_updated_at = event.occurred_at
    order.save()


def pay_checking_a_stamp_it_never_saves(event):
    """Asks ``event.is_stale()`` of the state's stamp, but never saves the
    stamp: the state has none, every event looks new, and an older one
    arriving late overwrites the newer state."""
    order = Order.objects.select_for_update().get(pk=event.data["data"]["order"])
    if event.is_stale(order.payment_updated_at):
        return
    order.status = event.data["data"]["status"]
    order.save()
