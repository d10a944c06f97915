"""The keyed request's record statements written with the ORM, for comparison.

``bench.idempotency`` runs the same requests through this queryset and through
``idempotency.querysets`` (hand-written statements built once per connection),
alternately, and writes what the hand-written ones buy to docs/benchmarks.md.
"""

from django.db import connections

from idempotency.querysets import (
    _BOUND_LOCK_TIMEOUT,
    IdempotencyRecordQuerySet,
    bounded_lock_timeout,
)
from idempotency.shared.inserts import insert_shape


def _claim_sql(model, connection) -> str:
    """Insert the key, or read its record, in one statement (PostgreSQL).

    ``guard`` bounds how long the INSERT may wait on a concurrent insert of
    the same key (the insert selects from it, so the bound is set first);
    each branch puts the previous timeout back once its row comes back, as
    bounded_lock_timeout() does. The second branch reads the existing row
    from the statement's snapshot, without locking it. Its columns are named
    after the fields, so ``raw()`` converts them as any query's.
    """
    opts = model._meta
    quote = connection.ops.quote_name
    insert = insert_shape(model, connection)
    columns = [quote(f.column) for f in opts.concrete_fields if not f.primary_key]
    restore = (
        "set_config('lock_timeout', (SELECT previous FROM guard), true) AS lock_timeout"
    )
    nulls = ", ".join(f"NULL AS {column}" for column in columns)
    return (
        "WITH guard AS (SELECT current_setting('lock_timeout') AS previous, "
        f"{_BOUND_LOCK_TIMEOUT} AS bounded), "
        f"inserted AS (INSERT INTO {insert.table} ({insert.columns}) "
        f"SELECT {insert.placeholders} FROM guard "
        f"ON CONFLICT DO NOTHING RETURNING {insert.pk_column}) "
        f"SELECT TRUE AS inserted, {insert.pk_column}, {nulls}, {restore} "
        "FROM inserted UNION ALL "
        f"SELECT FALSE, {insert.pk_column}, {', '.join(columns)}, {restore} "
        f"FROM {insert.table} "
        f"WHERE {quote('scope')} = %s AND {quote('operation')} = %s "
        f"AND {quote('key')} = %s"
    )


class OrmRecordQuerySet(IdempotencyRecordQuerySet):
    """The same claim, completion and lock through ``raw()``, ``update()`` and
    ``select_for_update()``: the same statements per request."""

    def claim(
        self,
        *,
        scope,
        operation,
        key,
        request_hash,
        now,
        expires_at,
        locked_until=None,
        lock_timeout_ms=0,
    ) -> tuple:
        """Insert a pending record unless the key exists.

        Return ``(id, None)`` when this call inserted it, ``(None, record)``
        with the existing record as last committed (not locked), or
        ``(None, None)`` when a concurrent insert committed while this one
        waited (the row is newer than the statement's snapshot).
        """
        connection = connections[self.db]
        insert = insert_shape(self.model, connection)
        values = {
            "scope": scope,
            "operation": operation,
            "key": key,
            "request_hash": request_hash,
            "state": self.model.State.PENDING,
            "attempts": 1,
            "locked_until": locked_until,
            "created_at": now,
            "expires_at": expires_at,
        }
        params = insert.params(values, connection)
        if connection.vendor == "postgresql":
            # One round trip for a first request and for a replay alike.
            found = self.raw(
                _claim_sql(self.model, connection),
                [f"{lock_timeout_ms}ms", *params, scope, operation, key],
                using=self.db,
            )
            record = next(iter(found), None)
            if record is None:
                return None, None
            if record.inserted:
                return record.pk, None
            return None, record
        with connection.cursor() as cursor:
            cursor.execute(
                f"{insert.sql} ON CONFLICT DO NOTHING RETURNING {insert.pk_column}",
                params,
            )
            row = cursor.fetchone()
        if row:
            return row[0], None
        return None, self.for_key(scope, operation, key).first()

    def complete(
        self,
        pk,
        attempt,
        *,
        status_code,
        body,
        headers,
        session_digest,
        resource_type,
        resource_id,
        now,
    ) -> bool:
        """Store the answer of the attempt holding the claim; False if fenced out."""
        State = self.model.State
        # Fenced: only the attempt holding the claim may complete it.
        updated = self.filter(pk=pk, attempts=attempt, state=State.PENDING).update(
            state=State.COMPLETED,
            status_code=status_code,
            response_body=body,
            response_headers=headers,
            session_digest=session_digest,
            resource_type=resource_type,
            resource_id=resource_id,
            locked_until=None,
            completed_at=now,
        )
        return updated == 1

    def lock_key(self, scope, operation, key, *, lock_timeout_ms) -> object:
        """Lock the record of a key (None if gone), waiting at most the timeout."""
        connection = connections[self.db]
        with bounded_lock_timeout(connection, lock_timeout_ms):
            return self.select_for_update().for_key(scope, operation, key).first()
