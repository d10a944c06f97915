"""Placing an order: the business write and its event, one commit."""

from django.db import transaction

from outbox.api import record


def place(serializer, owner):
    """Save the order and record ``order.created`` in the same transaction.

    Inside a keyed request the event carries the request's intent
    (``once-intent``), never its client key.
    """
    # savepoint=False: inside a claim's transaction this adds no round trips;
    # outside one it still makes the order and its event a single commit.
    with transaction.atomic(savepoint=False):
        order = serializer.save(owner=owner)
        record(
            "order",
            order.pk,
            "order.created",
            {"order": order.pk, "sku": order.sku, "quantity": order.quantity},
        )
    return order
