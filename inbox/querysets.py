"""Queries on inbox messages, named by intent."""

from django.db import connections, models


class InboxMessageQuerySet(models.QuerySet):
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
        connection = connections[self.db]
        table = connection.ops.quote_name(self.model._meta.db_table)
        sql = (
            f"INSERT INTO {table} (subscriber, message_id, received_at, duplicates) "
            "VALUES (%s, %s, %s, 0) "
            "ON CONFLICT (subscriber, message_id) DO NOTHING RETURNING id"
        )
        params = [
            subscriber,
            message_id,
            connection.ops.adapt_datetimefield_value(now),
        ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone() is not None

    def count_duplicate(self, subscriber, message_id) -> None:
        self.for_message(subscriber, message_id).update(
            duplicates=models.F("duplicates") + 1
        )
