"""Queries on inbox messages, named by intent."""

from typing import TYPE_CHECKING

from django.db import connections, models

from idempotency.shared.inserts import insert_shape

if TYPE_CHECKING:  # the models import these querysets
    from .models import InboxMessage  # noqa: F401 (named in QuerySet[...])

# The claim statement by database alias: built once, since receive() runs it
# for every delivery.
_claims: dict[str, str] = {}
_CLAIMED = ("subscriber", "message_id", "received_at", "duplicates")


class InboxMessageQuerySet(models.QuerySet["InboxMessage"]):
    def for_message(self, subscriber, message_id):
        return self.filter(subscriber=subscriber, message_id=message_id)

    def purgeable(self, now, retention):
        return self.filter(received_at__lt=now - retention)

    def with_duplicates(self):
        return self.filter(duplicates__gt=0)


_BaseManager = models.Manager.from_queryset(InboxMessageQuerySet)


class InboxMessageManager(_BaseManager):
    # On the manager, not the queryset: receive() runs it for every delivery,
    # and an INSERT needs no QuerySet built first.
    def claim(self, subscriber, message_id, now, *, using) -> bool:
        """Insert the row, or count a duplicate on it; return whether inserted.

        One statement either way: ``INSERT … ON CONFLICT DO UPDATE`` never
        aborts the caller's transaction. A concurrent insert of the same id
        blocks on the unique index until its transaction ends, then this one
        counts a duplicate (or inserts, if that one rolled back): no
        check-then-insert.
        """
        connection = connections[using]
        insert = insert_shape(self.model, connection, _CLAIMED)
        sql = _claims.get(using) or _claim_sql(insert, connection)
        values = {
            "subscriber": subscriber,
            "message_id": message_id,
            "received_at": now,
            "duplicates": 0,
        }
        with connection.cursor() as cursor:
            cursor.execute(sql, insert.params(values, connection))
            (duplicates,) = cursor.fetchone()
        # A new row starts at 0; a conflict has just raised it to 1 or more.
        return duplicates == 0


def _claim_sql(insert, connection) -> str:
    unique = next(
        constraint
        for constraint in insert.fields[0].model._meta.constraints
        if constraint.name == "inbox_unique_message"
    )
    duplicates = connection.ops.quote_name(insert.fields[-1].column)
    sql = _claims[connection.alias] = (
        f"{insert.sql} "
        f"ON CONFLICT ({insert.conflict_target(connection, unique.fields)}) "
        f"DO UPDATE SET {duplicates} = {insert.table}.{duplicates} + 1 "
        f"RETURNING {duplicates}"
    )
    return sql
