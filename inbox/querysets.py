"""Queries on inbox messages, named by intent."""

from typing import TYPE_CHECKING

from django.db import models

from idempotency.shared.inserts import insert_unless_exists

if TYPE_CHECKING:  # the models import these querysets
    from .models import InboxMessage  # noqa: F401 (named in QuerySet[...])


class InboxMessageQuerySet(models.QuerySet["InboxMessage"]):
    def for_message(self, subscriber, message_id):
        return self.filter(subscriber=subscriber, message_id=message_id)

    def purgeable(self, now, retention):
        return self.filter(received_at__lt=now - retention)

    def with_duplicates(self):
        return self.filter(duplicates__gt=0)

    def insert_once(self, *, subscriber, message_id, now) -> bool:
        """Insert the row unless it exists; return whether this call inserted it.

        A concurrent insert of the same id blocks on the unique index until its
        transaction ends, then this one does nothing: no check-then-insert.
        """
        inserted = insert_unless_exists(
            self, subscriber=subscriber, message_id=message_id, received_at=now
        )
        return inserted is not None

    def count_duplicate(self, subscriber, message_id) -> None:
        self.for_message(subscriber, message_id).update(
            duplicates=models.F("duplicates") + 1
        )
