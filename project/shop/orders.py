"""Placing an order: the business write and its event, one commit."""

from django.db import transaction

from outbox.api import record


def place(serializer, owner, *, idempotency_key=None):
    """Save the order and record ``order.created`` in the same transaction."""
    # savepoint=False: inside a claim's transaction this adds no round trips;
    # outside one it still makes the order and its event a single commit.
    with transaction.atomic(savepoint=False):
        order = serializer.save(owner=owner)
        headers = {"idempotency-key": idempotency_key} if idempotency_key else None
        record(
            "order",
            order.pk,
            "order.created",
            {"order": order.pk, "sku": order.sku, "quantity": order.quantity},
            headers=headers,
        )
    return order
