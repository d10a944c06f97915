"""Queries on idempotency records, named by intent."""

from django.db import connections, models


class IdempotencyRecordQuerySet(models.QuerySet):
    def for_key(self, scope, operation, key):
        return self.filter(scope=scope, operation=operation, key=key)

    def expired(self, now):
        return self.filter(expires_at__lte=now)

    def stuck(self, now):
        """Pending claims whose lease ran out: their worker died or hangs."""
        return self.filter(state="pending", locked_until__lt=now)

    def insert_pending(
        self,
        *,
        scope,
        operation,
        key,
        request_hash,
        now,
        expires_at,
        locked_until=None,
        lock_timeout_ms=None,
    ):
        """Insert a pending record unless the key exists; return its id or None.

        ``INSERT ... ON CONFLICT DO NOTHING`` waits on a concurrent insert of
        the same key until that transaction ends, so on PostgreSQL the same
        statement first sets a transaction-local ``lock_timeout`` to bound it.
        """
        connection = connections[self.db]
        table = connection.ops.quote_name(self.model._meta.db_table)
        adapt = connection.ops.adapt_datetimefield_value
        values = [
            scope,
            operation,
            key,
            request_hash,
            adapt(locked_until),
            adapt(now),
            adapt(expires_at),
        ]
        columns = (
            "scope, operation, key, request_hash, locked_until, created_at, "
            "expires_at, state, response_headers, resource_type, resource_id, "
            "attempts"
        )
        if connection.vendor == "postgresql" and lock_timeout_ms:
            # One round trip: the row source sets the timeout before the insert
            # can meet a conflicting row (typed casts: it is a SELECT list).
            sql = (
                f"INSERT INTO {table} ({columns}) "
                "SELECT %s, %s, %s, %s, %s::timestamptz, %s::timestamptz, "
                "%s::timestamptz, 'pending', '{}'::jsonb, '', '', 1 "
                "FROM (SELECT set_config('lock_timeout', %s, true)) AS guard "
                "ON CONFLICT (scope, operation, key) DO NOTHING RETURNING id"
            )
            values.append(f"{lock_timeout_ms}ms")
        else:
            sql = (
                f"INSERT INTO {table} ({columns}) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, 'pending', '{}', '', '', 1) "
                "ON CONFLICT (scope, operation, key) DO NOTHING RETURNING id"
            )
        with connection.cursor() as cursor:
            cursor.execute(sql, values)
            row = cursor.fetchone()
        return row[0] if row else None

    def reset_lock_timeout(self):
        connection = connections[self.db]
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")

    def upsert_failed(self, *, scope, operation, key, request_hash, now, expires_at):
        """Record a failed attempt after its transaction rolled back.

        The rollback may have removed the row (first attempt) or restored it
        (a retry), so insert-or-increment; never touch a completed record.
        """
        connection = connections[self.db]
        table = connection.ops.quote_name(self.model._meta.db_table)
        adapt = connection.ops.adapt_datetimefield_value
        sql = (
            f"INSERT INTO {table} (scope, operation, key, request_hash, created_at, "
            "expires_at, state, response_headers, resource_type, resource_id, "
            "attempts) VALUES (%s, %s, %s, %s, %s, %s, 'failed', '{}', '', '', 1) "
            "ON CONFLICT (scope, operation, key) DO UPDATE SET state = 'failed', "
            f"attempts = {table}.attempts + 1, locked_until = NULL, "
            "request_hash = excluded.request_hash, expires_at = excluded.expires_at "
            f"WHERE {table}.state <> 'completed'"
        )
        with connection.cursor() as cursor:
            cursor.execute(
                sql,
                [scope, operation, key, request_hash, adapt(now), adapt(expires_at)],
            )
