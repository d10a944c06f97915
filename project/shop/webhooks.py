"""Webhook handlers of the demo shop: payment events mark orders; a GitHub
star is logged."""

import logging

from webhooks.handlers import on

from .models import Order

logger = logging.getLogger(__name__)


@on("stripe", "payment_intent.succeeded")
def stripe_payment_succeeded(event):
    _set_payment(event, _stripe_order_id(event), Order.Status.PAID)


@on("stripe", "payment_intent.payment_failed")
def stripe_payment_failed(event):
    _set_payment(event, _stripe_order_id(event), Order.Status.PAYMENT_FAILED)


@on("standard", "order.paid")
def standard_order_paid(event):
    data = event.data.get("data") if isinstance(event.data, dict) else None
    order_id = data.get("order_id") if isinstance(data, dict) else None
    _set_payment(event, order_id, Order.Status.PAID)


@on("github", "star")
def github_starred(event):
    # Nothing to change in the shop: the delivery is only logged.
    sender = event.data.get("sender") if isinstance(event.data, dict) else None
    login = sender.get("login") if isinstance(sender, dict) else None
    logger.info("The repository was starred or unstarred by %s", login)


def _stripe_order_id(event):
    try:
        return event.data["data"]["object"]["metadata"]["order_id"]
    except (KeyError, TypeError):
        return None


def _set_payment(event, order_id, status):
    if order_id is None:
        # Not one of ours (a payment made outside the shop): nothing to do.
        logger.info("%s %s has no order id", event.source, event.delivery_id)
        return
    # Lock the order: two payment events for it apply one after the other.
    order = Order.objects.select_for_update().get(pk=order_id)
    if event.is_stale(order.payment_updated_at):
        # An older event arriving late must not undo a newer state.
        return
    order.status = status
    # Keep the last known time when the provider gave none.
    order.payment_updated_at = event.occurred_at or order.payment_updated_at
    order.save(update_fields=["status", "payment_updated_at"])
