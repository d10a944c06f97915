"""An outbox backlog for the relay fault tests, and what of it is published."""

from django.db import transaction

from outbox.api import record
from outbox.models import OutboxMessage


def record_events(count) -> set[str]:
    """Record ``count`` order events in one transaction; return their ids."""
    with transaction.atomic():
        for i in range(count):
            record("order", str(i), "order.created", {"n": i})
    return {str(pk) for pk in OutboxMessage.objects.values_list("pk", flat=True)}


def published_ids() -> set[str]:
    published = OutboxMessage.objects.filter(state=OutboxMessage.State.PUBLISHED)
    return {str(pk) for pk in published.values_list("pk", flat=True)}
