"""Queries on inbox messages, named by intent."""

from typing import TYPE_CHECKING

from django.db import connections, models

from idempotency.shared.inserts import insert_shape

if TYPE_CHECKING:  # the models import these querysets
    from .models import InboxMessage  # noqa: F401 (named in QuerySet[...])

# The claim statement by database alias: built once, since receive() runs it
# for every delivery.
_claims: dict[str, str] = {}
_CLAIMED = ("subscriber", "message_id", "received_at", "duplicates", "state")
_BURIED = (
    "subscriber",
    "message_id",
    "duplicates",
    "received_at",
    "state",
    "attempts",
    "last_error",
    "redrive",
)
# States as the SQL below spells them (InboxMessage.State; the models import
# this module, so it cannot import them).
APPLIED, DEAD = "applied", "dead"


class InboxMessageQuerySet(models.QuerySet["InboxMessage"]):
    def for_message(self, subscriber, message_id):
        return self.filter(subscriber=subscriber, message_id=message_id)

    def purgeable(self, now, retention):
        # A dead row is the only trace of a message nothing applied: it stays
        # until a replay applies it.
        return self.filter(received_at__lt=now - retention).exclude(state=DEAD)

    def dead(self):
        return self.filter(state=DEAD)

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
            "state": APPLIED,
        }
        with connection.cursor() as cursor:
            cursor.execute(sql, insert.params(values, connection))
            (duplicates,) = cursor.fetchone()
        # A new row starts at 0, a dead one is taken over at 0 (nothing was
        # applied, so nothing was dropped); an applied one has just gone to 1+.
        return duplicates == 0

    def bury(self, subscriber, message_id, now, *, attempts, error, redrive, using):
        """Record that every attempt at ``message_id`` raised: a dead row.

        One statement, in its own transaction (the attempts' rolled back). A
        row some other delivery applied meanwhile is left applied.
        """
        connection = connections[using]
        insert = insert_shape(self.model, connection, _BURIED)
        values = {
            "subscriber": subscriber,
            "message_id": message_id,
            "received_at": now,
            "duplicates": 0,
            "state": DEAD,
            "attempts": attempts,
            "last_error": error,
            "redrive": redrive,
        }
        with connection.cursor() as cursor:
            cursor.execute(
                _bury_sql(insert, connection), insert.params(values, connection)
            )


def _on_conflict(insert, connection) -> str:
    unique = next(
        constraint
        for constraint in insert.fields[0].model._meta.constraints
        if constraint.name == "inbox_unique_message"
    )
    return f"ON CONFLICT ({insert.conflict_target(connection, unique.fields)})"


def _claim_sql(insert, connection) -> str:
    column = _columns(insert, connection)
    duplicates, received, state = (
        column("duplicates"),
        column("received_at"),
        column("state"),
    )
    # Every right-hand side reads the row as it was: a dead row is taken
    # over (applied from now on, remembered from now on), an applied one
    # counts a duplicate.
    was_dead = f"{insert.table}.{state} = '{DEAD}'"
    sql = _claims[connection.alias] = (
        f"{insert.sql} {_on_conflict(insert, connection)} DO UPDATE SET "
        f"{duplicates} = {insert.table}.{duplicates} "
        f"+ CASE WHEN {was_dead} THEN 0 ELSE 1 END, "
        f"{received} = CASE WHEN {was_dead} THEN excluded.{received} "
        f"ELSE {insert.table}.{received} END, "
        f"{state} = '{APPLIED}' "
        f"RETURNING {duplicates}"
    )
    return sql


def _bury_sql(insert, connection) -> str:
    column = _columns(insert, connection)
    updated = ", ".join(
        f"{column(name)} = excluded.{column(name)}" for name in _BURIED[3:]
    )
    return (
        f"{insert.sql} {_on_conflict(insert, connection)} DO UPDATE SET {updated} "
        f"WHERE {insert.table}.{column('state')} = '{DEAD}'"
    )


def _columns(insert, connection):
    opts = insert.fields[0].model._meta

    def column(name):
        return connection.ops.quote_name(opts.get_field(name).column)

    return column
