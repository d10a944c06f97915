"""Queries on inbox messages, named by intent."""

from typing import TYPE_CHECKING

from django.db import connections, models

if TYPE_CHECKING:  # the models import these querysets
    from .models import InboxMessage  # noqa: F401 (named in QuerySet[...])

# The claim statement per database vendor, and the field that prepares its
# timestamp: built from _meta once, since receive() runs it for every delivery.
_claims: dict[str, tuple[str, models.Field]] = {}


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
        sql, received_at = _claims.get(connection.vendor) or _claim(
            self.model, connection
        )
        with connection.cursor() as cursor:
            cursor.execute(
                sql,
                [
                    subscriber,
                    message_id,
                    received_at.get_db_prep_save(now, connection),
                ],
            )
            (duplicates,) = cursor.fetchone()
        # A new row starts at 0; a conflict has just raised it to 1 or more.
        return duplicates == 0


def _claim(model, connection) -> tuple[str, models.Field]:
    opts = model._meta
    quote = connection.ops.quote_name
    table = quote(opts.db_table)
    columns = [
        quote(opts.get_field(name).column)
        for name in ("subscriber", "message_id", "received_at", "duplicates")
    ]
    unique = next(c for c in opts.constraints if c.name == "inbox_unique_message")
    target = ", ".join(quote(opts.get_field(name).column) for name in unique.fields)
    duplicates = columns[3]
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES (%s, %s, %s, 0) "
        f"ON CONFLICT ({target}) "
        f"DO UPDATE SET {duplicates} = {table}.{duplicates} + 1 "
        f"RETURNING {duplicates}"
    )
    claim = _claims[connection.vendor] = (sql, opts.get_field("received_at"))
    return claim
